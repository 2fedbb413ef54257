"""`gpupool simulate --mode twin`: the digital twin, unified pool against static splits."""

from __future__ import annotations

import sys
from pathlib import Path

from reconciler.policy.files import DEFAULT_DIRS, SourceError, files_from_paths
from reconciler.policy.loader import load as load_desired
from reconciler.policy.problems import InvalidInput
from reconciler.policy.quantity import parse_duration
from reconciler.sim.load import openb_jobs, read_jobs, read_load
from reconciler.sim.report import TWIN_COLUMNS, ProgressBar, dumps, plot_twin, text_table
from reconciler.sim.trace import DEFAULT_PODS, TraceError, openb_dir, read_pods
from reconciler.sim.twin import TwinConfig, compare


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
        paths = args.desired or [d for d in DEFAULT_DIRS if Path(d).exists()]
        if not paths:
            raise ValueError("no policy files: give --desired DIR (pools/ and policies/)")
        desired = load_desired(files_from_paths(paths))
        curve = read_load(args.load)
        ckpt = seconds(args.checkpoint_period, "--checkpoint-period")
        if args.training == "openb":
            pods_path = Path(args.pods) if args.pods else openb_dir() / DEFAULT_PODS
            jobs = openb_jobs(read_pods(pods_path), checkpoint_period=ckpt)
        else:
            jobs = read_jobs(args.training)
        cfg = TwinConfig(
            service_rate=args.service_rate,
            period=seconds(args.period, "--period"),
            horizon=args.days * 86400 if args.days else None,
            warmup=seconds(args.warmup, "--warmup"),
            replica_gpus=args.replica_gpus,
            concurrency=args.concurrency,
            load_time=seconds(args.load_time, "--load-time"),
            restart_cost=seconds(args.restart_cost, "--restart-cost"),
            service=args.service,
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
    except (SourceError, TraceError, ValueError) as exc:
        return _fail(str(exc))
    except InvalidInput as exc:
        for problem in exc.problems:
            print(f"error: {problem}", file=sys.stderr)
        return 1
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
        print(text_table(records, TWIN_COLUMNS))
    if args.plot:
        try:
            plot_twin(result, args.plot, title=Path(curve.path).name)
        except ImportError:
            return _fail("--plot needs matplotlib (pip install 'gpupool[sim]')")
        except OSError as exc:
            return _fail(f"{args.plot}: cannot write plot: {exc.strerror or exc}")
    return 0
