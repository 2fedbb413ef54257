"""`gpupool simulate`: replay a workload trace through the planner's placement code."""

from __future__ import annotations

import sys
from pathlib import Path

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
    openb_dir,
    read_nodes,
    read_pods,
)

MODES = ("fgd-replay", "timeline")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a GPU workload trace through the placement policies",
        description=(
            "Replay a trace (openb CSV schema) through the planner's placement code. "
            "fgd-replay: fill an empty cluster with the shuffled trace inflated to "
            "--inflation x GPU capacity, as in the FGD paper. timeline: arrivals and "
            "departures from the trace, static train/infer split versus the unified pool."
        ),
    )
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
    p.add_argument("--mode", choices=MODES, default="fgd-replay")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--plot", metavar="PNG", help="write a plot (matplotlib) to this file")
    p.add_argument(
        "--migrate",
        action="store_true",
        help="fgd-replay: let a pod that fits nowhere migrate one running pod",
    )
    p.set_defaults(func=run)


def _fail(msg: str) -> int:
    print(f"gpupool simulate: error: {msg}", file=sys.stderr)
    return 1


def _parse(args) -> tuple[list[str], list[int]]:
    policies = [p.strip() for p in str(args.policy).split(",") if p.strip()]
    if not policies:
        raise ValueError("--policy is empty")
    for p in policies:
        if p not in POLICIES:
            raise ValueError(f"unknown policy {p!r} (known: {', '.join(POLICIES)})")
    try:
        seeds = [int(s) for s in str(args.seed).split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--seed must be comma-separated integers, got {args.seed!r}") from None
    if not seeds:
        raise ValueError("--seed is empty")
    return policies, seeds


def run(args) -> int:
    try:
        policies, seeds = _parse(args)
        base = openb_dir()
        nodes_path = Path(args.nodes) if args.nodes else base / DEFAULT_NODES
        pods_path = Path(args.pods) if args.pods else base / DEFAULT_PODS
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
