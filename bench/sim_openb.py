"""Placement benchmark on the openb trace (FGD, USENIX ATC '23) and the unified-vs-static report.

    .venv/bin/python bench/sim_openb.py [--seeds 42-51] [--jobs 2] [--plot]
    .venv/bin/python bench/sim_openb.py --smoke     # a tenth of the trace, one seed: seconds

Prints, per policy and trace variant, the mean GPU allocation (%) at 130% arrived
load over the seeds, the paper repo's own mean beside it (expected_results/
analysis_allo_discrete.csv), the difference, and the mean time per run; then the
timeline comparison of a static train/infer split with the unified pool.
Writes JSON (and with --plot, PNGs) to bench/out/, or to --out DIR.

`--sample F` cuts the trace to a share F: a seeded sample of F of the nodes, and the last F of
each pod list (a stretch of consecutive arrivals, which the timeline replays with their
departures); the paper's column stays the whole trace's, so the difference then means little.
`--smoke` is `--seeds 42 --jobs 1 --sample 0.1 --out bench/out/smoke`, every policy and
variant and the timeline: seconds, and tests/test_bench_smoke.py runs it so that the
benchmark cannot rot. Without the trace (../shared/data/openb, or $GPUPOOL_OPENB_DIR) it skips
with a message and exits 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from reconciler.plan.placement import POLICIES
from reconciler.sim.replay import replay
from reconciler.sim.trace import DEFAULT_NODES, openb_dir, read_nodes, read_pods

VARIANTS = ("default", "gpushare100", "multigpu50")
PAPER = {
    "random": "01-Random",
    "dotprod": "02-DotProd",
    "clustering": "03-GpuClustering",
    "packing": "04-GpuPacking",
    "bestfit": "05-BestFit",
    "fgd": "06-FGD",
}
OUT = Path(__file__).resolve().parent / "out"
# what --smoke changes (flags given explicitly win)
SMOKE = {"seeds": "42", "jobs": 1, "sample": 0.1, "out": OUT / "smoke"}

_cache: dict = {}


def cut(nodes: list, pods: list, sample: float) -> tuple[list, list]:
    """The trace cut to the share `sample` (--sample): a seeded sample of that share of the
    nodes, and the last that share of the pods (consecutive arrivals)."""
    if sample >= 1:
        return nodes, pods
    keep = random.Random(0).sample(range(len(nodes)), max(1, round(len(nodes) * sample)))
    return [nodes[i] for i in sorted(keep)], pods[-max(2, round(len(pods) * sample)) :]


def _load(variant: str, sample: float = 1.0):
    if (variant, sample) not in _cache:
        d = openb_dir()
        _cache[(variant, sample)] = cut(
            read_nodes(d / DEFAULT_NODES),
            read_pods(d / f"openb_pod_list_{variant}.csv"),
            sample,
        )
    return _cache[(variant, sample)]


def _one(task):
    variant, policy, seed, sample = task
    nodes, pods = _load(variant, sample)
    return variant, replay(nodes, pods, policy, seed, 1.3).record()


def paper_means(seeds) -> dict:
    path = openb_dir() / "expected_results" / "analysis_allo_discrete.csv"
    acc: dict = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if int(row["seed"]) in seeds:
                acc.setdefault((row["workload"], row["sc_policy"]), []).append(float(row["130"]))
    return {k: sum(v) / len(v) for k, v in acc.items()}


def parse_seeds(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in text.split(",")]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--no-timeline", action="store_true")
    ap.add_argument(
        "--sample",
        type=float,
        default=1.0,
        metavar="F",
        help="a share F of the nodes and of each pod list (default 1: the whole trace)",
    )
    ap.add_argument(
        "--out", type=Path, default=OUT, help="where the JSON and PNGs go (default bench/out)"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="--seeds 42 --jobs 1 --sample 0.1 --out bench/out/smoke: seconds (the test suite)",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke sizes become the defaults; flags given explicitly still win
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    if not 0 < args.sample <= 1:
        ap.error("--sample must be in (0, 1]")
    if not (openb_dir() / DEFAULT_NODES).is_file():
        print(f"skipped: the openb trace is not in {openb_dir()} (set $GPUPOOL_OPENB_DIR)")
        return 0
    out = args.out
    seeds = parse_seeds(args.seeds)
    policies = args.policies.split(",")
    variants = args.variants.split(",")
    tasks = [(v, p, s, args.sample) for v in variants for p in policies for s in seeds]
    started = time.perf_counter()
    results: dict = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for i, (variant, rec) in enumerate(pool.map(_one, tasks), 1):
            results.setdefault((variant, rec["policy"]), []).append(rec)
            print(f"\r{i}/{len(tasks)} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    wall = time.perf_counter() - started
    paper = paper_means(set(seeds))

    if args.sample < 1:
        nodes, _ = _load("default", args.sample)
        print(
            f"A sample of the trace (--sample {args.sample:g}): {len(nodes)} nodes, the last "
            f"{args.sample:.0%} of each pod list; the paper's figures are the whole trace's"
        )
    print(
        "GPU allocation (%) at 130% arrived load, "
        f"mean over seeds {seeds[0]}..{seeds[-1]} ({len(seeds)} seeds)"
    )
    print(f"{'policy':<11}" + "".join(f"{v:>30}" for v in variants))
    print(f"{'':<11}" + "".join(f"{'ours-sim  paper  delta  s/run':>30}" for _ in variants))
    table = []
    for p in policies:
        line = f"{p:<11}"
        row = {"policy": p}
        for v in variants:
            recs = results[(v, p)]
            mean = sum(r["gpu_allocation_ratio"] for r in recs) / len(recs) * 100
            secs = sum(r["seconds"] for r in recs) / len(recs)
            ref = paper.get((f"openb_pod_list_{v}", PAPER.get(p, "")))
            delta = f"{mean - ref:+.2f}" if ref is not None else "-"
            ref_s = f"{ref:.2f}" if ref is not None else "-"
            line += f"{mean:>12.2f}{ref_s:>7}{delta:>7}{secs:>6.1f}"
            row[v] = {
                "mean": round(mean, 2),
                "paper": ref,
                "seconds": round(secs, 2),
                "per_seed": [round(r["gpu_allocation_ratio"] * 100, 2) for r in recs],
            }
        table.append(row)
        print(line)
    print(f"{len(tasks)} runs in {wall:.0f}s wall on {args.jobs} processes")
    for v in variants:
        f = [r["gpu_allocation_ratio"] for r in results.get((v, "fgd"), [])]
        o = [r["gpu_allocation_ratio"] for r in results.get((v, "ours"), [])]
        if f and o:
            wins = sum(1 for a, b in zip(o, f, strict=True) if a >= b)
            print(f"  {v}: ours >= fgd on {wins}/{len(f)} seeds")

    out.mkdir(parents=True, exist_ok=True)
    (out / "sim_openb.json").write_text(json.dumps(table, indent=2))
    if args.plot:
        from reconciler.sim.report import plot_replay

        for v in variants:
            recs = [r for p in policies for r in results[(v, p)]]
            plot_replay(
                recs,
                str(out / f"sim_alloc_{v}.png"),
                title=f"openb {v}, {len(seeds)} seeds, inflation 1.3",
            )

    if not args.no_timeline:
        from reconciler.sim.report import (
            TIMELINE_COLUMNS,
            plot_timeline,
            text_table,
            with_percentages,
        )
        from reconciler.sim.timeline import timeline

        nodes, pods = _load("default", args.sample)
        recs = []
        for s in seeds[:3]:
            recs.extend(timeline(nodes, pods, seed=s))
        print()
        print("Unified pool vs static train/infer split (default trace, arrivals and departures)")
        print(text_table(with_percentages(recs), TIMELINE_COLUMNS))
        (out / "sim_timeline.json").write_text(
            json.dumps([{k: v for k, v in r.items() if k != "series"} for r in recs], indent=2)
        )
        if args.plot:
            plot_timeline(
                recs,
                str(out / "sim_timeline.png"),
                title="default trace: static split vs unified pool",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
