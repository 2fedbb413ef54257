"""`gpupool simulate`: replay a workload trace through the planner's placement code."""

from __future__ import annotations

import sys
from pathlib import Path

from reconciler.conventions import RECONCILE_INTERVAL_SECONDS
from reconciler.plan.placement import POLICIES
from reconciler.sim.report import (
    REPLAY_COLUMNS,
    TIMELINE_COLUMNS,
    ProgressBar,
    dumps,
    plot_replay,
    plot_timeline,
    text_table,
    with_percentages,
)
from reconciler.sim.trace import (
    DEFAULT_NODES,
    DEFAULT_PODS,
    TraceError,
    openb_file,
    read_nodes,
    read_pods,
)

MODES = ("fgd-replay", "timeline", "twin")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a GPU workload trace through the placement policies",
        description=(
            "Replay a trace (openb CSV schema) through the planner's placement code. "
            "fgd-replay: fill an empty cluster with the shuffled trace inflated to "
            "--inflation x GPU capacity, as in the FGD paper. timeline: arrivals and "
            "departures from the trace, static train/infer split versus the unified pool. "
            "twin: the real planner, cycle by cycle, over an inference load file and training "
            "jobs, for the unified pool and static splits of it (docs/simulator.md)."
        ),
    )
    _add_trace_args(p)
    _add_twin_args(p)
    p.set_defaults(func=run)


def _add_trace_args(p) -> None:
    """The trace files, fgd-replay's and timeline's options, the mode and the output."""
    p.add_argument("--nodes", help=f"node CSV (default: {DEFAULT_NODES} in the openb folder)")
    p.add_argument("--pods", help=f"pod CSV (default: {DEFAULT_PODS} in the openb folder)")
    p.add_argument(
        "--policy",
        default="fgd,ours",
        help=f"comma-separated, from: {', '.join(POLICIES)} (default fgd,ours)",
    )
    p.add_argument("--seed", default="42", help="comma-separated integer seeds (default 42)")
    p.add_argument(
        "--inflation", type=float, default=1.3, help="target GPU demand / capacity (default 1.3)"
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default="fgd-replay",
        help="what to replay, as above (default fgd-replay)",
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="a table, or one JSON record per run (default text)",
    )
    p.add_argument(
        "--plot", metavar="PNG", help="write a plot (matplotlib) to this file (default: none)"
    )
    p.add_argument(
        "--migrate",
        action="store_true",
        help="fgd-replay: let a pod that fits nowhere migrate one running pod",
    )


def _add_twin_args(p) -> None:
    """--mode twin's options, in their own group."""
    t = p.add_argument_group("twin mode (--mode twin)")
    t.add_argument(
        "--desired",
        action="append",
        metavar="PATH",
        help="policy files or directories (pools/ and policies/; repeatable; default: both)",
    )
    t.add_argument("--load", metavar="CSV", help="inference load: Time,TIMESTAMP per bin (needed)")
    t.add_argument(
        "--service-rate",
        type=float,
        metavar="R",
        help="requests/s one replica serves within its latency target (needed)",
    )
    t.add_argument(
        "--training",
        default="openb",
        metavar="CSV",
        help="jobs CSV arrival,gpus,duration[,checkpoint_period][,checkpointable], or "
        "'openb' (the trace's whole-card training pods; --pods picks the file; default openb)",
    )
    t.add_argument(
        "--training-load",
        type=float,
        default=1.2,
        metavar="X",
        help="offered training work / (pool cards - mean inference need) (default 1.2)",
    )
    t.add_argument(
        "--period",
        default=f"{RECONCILE_INTERVAL_SECONDS}s",
        help=f"controller cycle (default {RECONCILE_INTERVAL_SECONDS}s, reconcile's interval)",
    )
    t.add_argument("--days", type=float, help="days simulated (default: the load file)")
    t.add_argument("--warmup", default="1d", help="left out of the metrics (default 1d)")
    t.add_argument(
        "--service",
        metavar="NS/NAME",
        help="the ScalingPolicy target fed the load (default: the only one)",
    )
    t.add_argument("--replica-gpus", type=int, default=1, help="cards per replica (default 1)")
    t.add_argument(
        "--concurrency",
        type=float,
        default=10.0,
        help="requests a replica serves at once (default 10)",
    )
    t.add_argument("--load-time", default="2m", help="a new replica serves after (default 2m)")
    t.add_argument("--restart-cost", default="5m", help="a preempted job restarts for (default 5m)")
    t.add_argument(
        "--checkpoint-period",
        default="30m",
        help="openb jobs' own checkpoint interval (default 30m)",
    )
    t.add_argument(
        "--failure-rate",
        type=float,
        default=0.0,
        metavar="X",
        help="node failures per node-day (default 0: none); the table gains lost GPU-hours "
        "and recovery times",
    )
    t.add_argument("--repair-time", default="4h", help="a failed node returns after (default 4h)")
    t.add_argument("--failure-seed", type=int, default=0, help="failure schedule seed (default 0)")
    t.add_argument(
        "--static",
        default="sweep",
        metavar="N,N|sweep|none",
        help="static inference partitions to compare (default sweep: every whole-node split)",
    )


def _fail(msg: str) -> int:
    print(f"gpupool simulate: error: {msg}", file=sys.stderr)
    return 1


def _parse(args) -> tuple[list[str], list[int]]:
    policies = [p.strip() for p in str(args.policy).split(",") if p.strip()]
    if not policies:
        raise ValueError(f"--policy is empty: give one or more of {', '.join(POLICIES)}")
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"--policy: unknown policy {p!r} (known: {', '.join(POLICIES)})")
    try:
        seeds = [int(s) for s in str(args.seed).split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seed must be comma-separated integers, got {args.seed!r}") from None
    if not seeds:
        raise ValueError("--seed is empty: give comma-separated integers, like 42 or 42,43")
    return policies, seeds


def _trace_paths(args) -> tuple[Path, Path]:
    """--nodes and --pods, each defaulting to the openb trace's file; where one is missing
    from the default folder, the message asks for the options not given."""
    instead = " and ".join(
        f"{flag} CSV"
        for flag, given in (("--nodes", args.nodes), ("--pods", args.pods))
        if not given
    )
    nodes = Path(args.nodes) if args.nodes else openb_file(DEFAULT_NODES, instead)
    pods = Path(args.pods) if args.pods else openb_file(DEFAULT_PODS, instead)
    return nodes, pods


def run(args) -> int:
    if args.mode == "twin":
        from reconciler.sim.twin_cli import run_twin_mode

        return run_twin_mode(args)
    try:
        policies, seeds = _parse(args)
        nodes_path, pods_path = _trace_paths(args)
        nodes = read_nodes(nodes_path)
        pods = read_pods(pods_path)
        if args.mode == "timeline":
            from reconciler.sim.timeline import timeline

            records = []
            for seed in seeds:
                for rec in timeline(
                    nodes,
                    pods,
                    seed=seed,
                    policy=policies[-1],
                    progress=ProgressBar(f"timeline seed {seed}"),
                ):
                    records.append(rec)
            columns = TIMELINE_COLUMNS
        else:
            from reconciler.sim.replay import replay

            records = []
            for policy in policies:
                for seed in seeds:
                    res = replay(
                        nodes,
                        pods,
                        policy,
                        seed,
                        args.inflation,
                        progress=ProgressBar(f"{policy} seed {seed}"),
                        migrate=args.migrate,
                    )
                    records.append(res.record())
            columns = REPLAY_COLUMNS
    except TraceError as exc:
        return _fail(str(exc))
    except ValueError as exc:
        return _fail(str(exc))
    if args.format == "json":
        print(dumps(records))
    else:
        print(text_table(with_percentages(records), columns))
    if args.plot:
        try:
            if args.mode == "timeline":
                plot_timeline(records, args.plot, title=pods_path.name)
            else:
                plot_replay(
                    records, args.plot, title=f"{pods_path.name}, inflation {args.inflation}"
                )
        except ImportError:
            return _fail("--plot needs matplotlib (pip install 'gpupool[sim]')")
        except OSError as exc:
            return _fail(f"{args.plot}: cannot write plot: {exc.strerror or exc}")
    return 0
