"""Placement benchmark on the openb trace (FGD, USENIX ATC '23) and the unified-vs-static report.

    .venv/bin/python bench/sim_openb.py [--seeds 42-51] [--jobs 2] [--plot]

Prints, per policy and trace variant, the mean GPU allocation (%) at 130% arrived
load over the seeds, the paper repo's own mean beside it (expected_results/
analysis_allo_discrete.csv), the difference, and the mean time per run; then the
timeline comparison of a static train/infer split with the unified pool.
--plot writes PNGs to bench/out/.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
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

_cache: dict = {}


def _load(variant: str):
    if variant not in _cache:
        d = openb_dir()
        _cache[variant] = (
            read_nodes(d / DEFAULT_NODES),
            read_pods(d / f"openb_pod_list_{variant}.csv"),
        )
    return _cache[variant]


def _one(task):
    variant, policy, seed = task
    nodes, pods = _load(variant)
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


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--plot", action="store_true")
    ap.add_argument("--no-timeline", action="store_true")
    args = ap.parse_args()
    if not (openb_dir() / DEFAULT_NODES).is_file():
        print(f"skipped: the openb trace is not in {openb_dir()} (set $GPUPOOL_OPENB_DIR)")
        return 0
    seeds = parse_seeds(args.seeds)
    policies = args.policies.split(",")
    variants = args.variants.split(",")
    tasks = [(v, p, s) for v in variants for p in policies for s in seeds]
    started = time.perf_counter()
    results: dict = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for i, (variant, rec) in enumerate(pool.map(_one, tasks), 1):
            results.setdefault((variant, rec["policy"]), []).append(rec)
            print(f"\r{i}/{len(tasks)} runs", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    wall = time.perf_counter() - started
    paper = paper_means(set(seeds))

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

    OUT.mkdir(exist_ok=True)
    (OUT / "sim_openb.json").write_text(json.dumps(table, indent=2))
    if args.plot:
        from reconciler.sim.report import plot_replay

        for v in variants:
            recs = [r for p in policies for r in results[(v, p)]]
            plot_replay(
                recs,
                str(OUT / f"sim_alloc_{v}.png"),
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

        nodes, pods = _load("default")
        recs = []
        for s in seeds[:3]:
            recs.extend(timeline(nodes, pods, seed=s))
        print()
        print("Unified pool vs static train/infer split (default trace, arrivals and departures)")
        print(text_table(with_percentages(recs), TIMELINE_COLUMNS))
        (OUT / "sim_timeline.json").write_text(
            json.dumps([{k: v for k, v in r.items() if k != "series"} for r in recs], indent=2)
        )
        if args.plot:
            plot_timeline(
                recs,
                str(OUT / "sim_timeline.png"),
                title="default trace: static split vs unified pool",
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
