"""`gpupool simulate --mode twin`: the digital twin, unified pool against static splits."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from reconciler.conventions import RECONCILE_INTERVAL_SECONDS
from reconciler.policy.files import DEFAULT_DIRS, SourceError, files_from_paths
from reconciler.policy.loader import load as load_desired
from reconciler.policy.problems import InvalidInput
from reconciler.policy.quantity import parse_duration
from reconciler.sim.load import (
    DEFAULT_CHECKPOINT_PERIOD,
    JobSpec,
    openb_jobs,
    read_jobs,
    read_load,
)
from reconciler.sim.report import ProgressBar, dumps, plot_twin, text_table, twin_columns
from reconciler.sim.trace import DEFAULT_PODS, TraceError, openb_file, read_pods
from reconciler.sim.twin import OptionError, TwinConfig, compare, run_twin, training_jobs

SIMULATE_FLAGS = {
    "service": "--service",
    "service_rate": "--service-rate",
    "period": "--period",
    "warmup": "--warmup",
    "concurrency": "--concurrency",
    "replica_gpus": "--replica-gpus",
    "static": "--static",
    "failure_rate": "--failure-rate",
}
"""The twin's settings (`twin.OptionError.option`) -> `simulate --mode twin`'s options."""
PLAN_FLAGS = {
    "service": "--twin-service",
    "service_rate": "--twin-service-rate",
    "period": "--twin-period",
    "warmup": "--twin-warmup",
}
"""... -> `plan --base --twin-load`'s options (the others are fixed there)."""


def _fail(msg: str) -> int:
    print(f"gpupool simulate: error: {msg}", file=sys.stderr)
    return 1


def seconds(text: str, option: str) -> float:
    """A duration option: Go-style (30s, 10m, 1h30m) or whole days (1d, 0.5d)."""
    t = str(text).strip()
    try:
        if t.endswith("d"):
            v = float(t[:-1]) * 86400
            if v < 0 or v != v:
                raise ValueError
            return v
        return parse_duration(t)
    except ValueError:
        raise ValueError(f"{option} {text!r} is not a duration like 30s, 10m, 2h or 1d") from None


def _sizes(text: str) -> list[int] | None:
    """--static: None = every whole-node split; [] = none."""
    t = text.strip().lower()
    if t == "sweep":
        return None
    if t == "none":
        return []
    try:
        return [int(x) for x in t.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--static {text!r}: give sweep, none or card counts like 24,32") from None


def _openb_jobs(pods: str | None, instead: str, checkpoint_period: float) -> list[JobSpec]:
    """Jobs from the openb pod trace: the file `pods`, else the default one; `instead`: the
    command's options that give jobs (or pods) another way, for the messages."""
    path = Path(pods) if pods else openb_file(DEFAULT_PODS, instead)
    trace = read_pods(path)
    try:
        return openb_jobs(trace, checkpoint_period=checkpoint_period)
    except TraceError as exc:
        raise TraceError(f"{path}: {exc}: give {instead}") from None


def _policy_paths(args) -> list[str]:
    paths = args.desired or [d for d in DEFAULT_DIRS if Path(d).exists()]
    if not paths:
        raise ValueError(
            f"no policy files: no --desired given and neither "
            f"{' nor '.join(d + '/' for d in DEFAULT_DIRS)} in "
            f"{Path.cwd()}: give --desired DIR (a folder with pools/ and policies/, or files)"
        )
    return paths


def run_twin_mode(args) -> int:
    try:
        if not args.load:
            raise ValueError("--mode twin needs --load CSV (requests per interval)")
        if args.service_rate is None:
            raise ValueError("--mode twin needs --service-rate R (requests/s per replica)")
        if not args.service_rate > 0:
            raise ValueError(f"--service-rate must be positive, got {args.service_rate:g}")
        if not args.training_load > 0:
            raise ValueError(f"--training-load must be positive, got {args.training_load:g}")
        if args.days is not None and not args.days > 0:
            raise ValueError(f"--days must be positive, got {args.days:g} (default: the load file)")
        desired = load_desired(files_from_paths(_policy_paths(args)))
        curve = read_load(args.load)
        ckpt = seconds(args.checkpoint_period, "--checkpoint-period")
        if args.training == "openb":
            jobs = _openb_jobs(args.pods, "--pods CSV, or --training CSV (your own jobs)", ckpt)
        else:
            jobs = read_jobs(args.training)
        warmup = seconds(args.warmup, "--warmup")
        horizon = min(args.days * 86400 if args.days else curve.seconds, curve.seconds)
        if warmup >= horizon:
            span = f"--days {args.days:g}" if args.days else f"the whole of {args.load}"
            raise ValueError(
                f"--warmup {args.warmup} leaves nothing of the {horizon:g} s simulated ({span}):"
                " give a shorter --warmup"
            )
        cfg = TwinConfig(
            service_rate=args.service_rate,
            period=seconds(args.period, "--period"),
            horizon=args.days * 86400 if args.days else None,
            warmup=warmup,
            replica_gpus=args.replica_gpus,
            concurrency=args.concurrency,
            load_time=seconds(args.load_time, "--load-time"),
            restart_cost=seconds(args.restart_cost, "--restart-cost"),
            service=args.service,
            failure_rate=args.failure_rate,
            repair_time=seconds(args.repair_time, "--repair-time"),
            failure_seed=args.failure_seed,
        )
        result = compare(
            desired,
            curve,
            jobs,
            cfg,
            training_load=args.training_load,
            sizes=_sizes(args.static),
            progress=lambda label: ProgressBar(f"twin {label}"),
        )
    except OptionError as exc:
        return _fail(exc.worded(SIMULATE_FLAGS))
    except (SourceError, TraceError, ValueError) as exc:
        return _fail(str(exc))
    except InvalidInput as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1
    _print_comparison(args, curve, result)
    if args.plot:
        try:
            plot_twin(result, args.plot, title=Path(curve.path).name)
        except ImportError:
            return _fail("--plot needs matplotlib (pip install 'gpupool[sim]')")
        except OSError as exc:
            return _fail(f"{args.plot}: cannot write plot: {exc.strerror or exc}")
    return 0


def _print_comparison(args, curve, result) -> None:
    """The unified pool against the static splits, as JSON or a table."""
    records = result.records()
    if args.format == "json":
        print(
            dumps(
                [
                    {
                        "training_gpus": round(result.training_gpus, 2),
                        "jobs": result.jobs,
                        "best_static": result.best,
                        "runs": records,
                    }
                ]
            )
        )
    else:
        print(
            f"# {curve.path}: service rate {args.service_rate:g} req/s/replica, training load "
            f"{args.training_load:g} x {result.training_gpus:.1f} cards ({result.jobs} jobs), "
            f"best static split: {result.best if result.best is not None else 'none meets'} "
            "inference cards"
        )
        print(text_table(records, twin_columns(args.failure_rate > 0)))


# ----------------------------------------------------------------------------- plan --base
# `gpupool plan --base REV --twin-load CSV --twin-service-rate R`: the twin replayed over a
# recorded load for the base and for the head desired state, the same load, jobs and settings
# on both sides, so the difference is the policy's. The command (the shell) runs it and hands
# the numbers to the change report (reconciler/plan/change.py `Replay`), which stays pure.
REPLAY_METRICS = ("useful_utilisation", "slo_attainment", "preemptions_per_hour", "gpu_h_lost")


def add_replay_args(p) -> None:
    t = p.add_argument_group(
        "twin replay (with --base): what the change would have done over a recorded load"
    )
    t.add_argument(
        "--twin-load",
        metavar="CSV",
        help="inference load Time,TIMESTAMP per bin (as `simulate --mode twin --load`); "
        "adds one line to the change report: useful utilisation, inference SLO, preemptions "
        "and GPU-hours lost, base -> head",
    )
    t.add_argument(
        "--twin-service-rate",
        type=float,
        metavar="R",
        help="requests/s one replica serves within its latency target (needed with --twin-load)",
    )
    t.add_argument(
        "--twin-training",
        metavar="CSV",
        help="training jobs CSV arrival,gpus,duration[,checkpoint_period][,checkpointable], "
        "or 'openb' (default: none, the load alone)",
    )
    t.add_argument(
        "--twin-training-load",
        type=float,
        default=1.2,
        metavar="X",
        help="offered training work / (pool cards - mean inference need) (default 1.2)",
    )
    t.add_argument(
        "--twin-days",
        type=float,
        default=1.0,
        metavar="N",
        help="replay the load file's last N days (default 1)",
    )
    t.add_argument(
        "--twin-period",
        default=f"{RECONCILE_INTERVAL_SECONDS}s",
        metavar="DUR",
        help=f"controller cycle (default {RECONCILE_INTERVAL_SECONDS}s, reconcile's interval)",
    )
    t.add_argument(
        "--twin-warmup", default="1h", metavar="DUR", help="left out of the metrics (default 1h)"
    )
    t.add_argument(
        "--twin-service",
        metavar="NS/NAME",
        help="the ScalingPolicy target fed (default: the only one)",
    )


def _plan_words(exc: Exception) -> str:
    """The message, with `plan`'s flag where the twin names one of its settings."""
    return exc.worded(PLAN_FLAGS) if isinstance(exc, OptionError) else str(exc)


class ReplayInputError(ValueError):
    """Bad replay input (a file, an option): one line, exit 1."""


def _last(curve, seconds: float):
    """The curve's last `seconds` (whole bins), starting at that bin's time."""
    import dataclasses as dc
    from datetime import timedelta

    n = max(2, min(len(curve.counts), math.ceil(seconds / curve.bin_seconds)))
    skip = len(curve.counts) - n
    return dc.replace(
        curve,
        start=curve.start + timedelta(seconds=skip * curve.bin_seconds),
        counts=curve.counts[skip:],
    )


def replay_change(base, head, args):
    """The `Replay` of base and head, or None when no `--twin-load` is given. Bad files or
    options raise ReplayInputError (one line naming the file and line); a revision the twin
    cannot run (no ScalingPolicy to feed, say) gives a Replay that says why."""
    from reconciler.plan.change import Replay, ReplayMetrics

    if not getattr(args, "twin_load", None):
        return None
    try:
        if args.twin_service_rate is None:
            raise ValueError("--twin-load needs --twin-service-rate R (requests/s per replica)")
        if not args.twin_service_rate > 0:
            raise ValueError(
                f"--twin-service-rate must be positive, got {args.twin_service_rate:g}"
            )
        if not args.twin_days > 0:
            raise ValueError(f"--twin-days must be positive, got {args.twin_days:g}")
        if not args.twin_training_load > 0:
            raise ValueError(
                f"--twin-training-load must be positive, got {args.twin_training_load:g}"
            )
        curve = _last(read_load(args.twin_load), args.twin_days * 86400)
        jobs = []
        if args.twin_training == "openb":
            jobs = _openb_jobs(
                None, "--twin-training CSV (your own jobs)", DEFAULT_CHECKPOINT_PERIOD
            )
        elif args.twin_training:
            jobs = read_jobs(args.twin_training)
        cfg = TwinConfig(
            service_rate=args.twin_service_rate,
            period=seconds(args.twin_period, "--twin-period"),
            warmup=seconds(args.twin_warmup, "--twin-warmup"),
            service=args.twin_service,
        )
        if cfg.warmup >= curve.seconds:
            raise ValueError(
                f"--twin-warmup {args.twin_warmup} leaves nothing of the {curve.seconds:g} s "
                f"replayed from {args.twin_load}"
            )
    except (TraceError, ValueError) as exc:
        raise ReplayInputError(_plan_words(exc)) from None
    hours = round((curve.seconds - cfg.warmup) / 3600, 2)
    try:
        # the jobs once, scaled to the base's pool: both sides get the very same list
        if jobs:
            jobs, _ = training_jobs(base, curve, jobs, cfg, training_load=args.twin_training_load)
        sides = {}
        for name, desired in (("base", base), ("head", head)):
            try:
                r = run_twin(desired, curve, jobs, cfg, label=name).record()
            except ValueError as exc:
                raise ValueError(f"{name}: {_plan_words(exc)}") from None
            sides[name] = ReplayMetrics(**{k: r[k] for k in REPLAY_METRICS})
    except ValueError as exc:
        return Replay(load=str(args.twin_load), hours=hours, problem=_plan_words(exc))
    return Replay(load=str(args.twin_load), hours=hours, **sides)
