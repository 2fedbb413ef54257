"""Judge the planner over several cycles on many random clusters (issue 11).

    .venv/bin/python bench/cycles.py                    # 500 clusters x 10 cycles
    .venv/bin/python bench/cycles.py --clusters 2000 --seed 7 --show 3
    .venv/bin/python bench/cycles.py --smoke            # 10 clusters, seconds (the test suite)

Each random (desired, observed) of `tests/plan/generators.py` runs the harness of
`tests/plan/cycles_support.py` (plan -> `reconciler.sim.effects.step`, 10 cycles) and every check
of that file; the table counts the clusters where each check found something:

  crashes         a cycle raised
  over-commits    a card held beyond its partition, or a repartition under a running pod
  oscillations    an action undone (a card changed back, a node re-cordoned for the same
                  change, a workload moved back, a scale-down within the cooldown of a scale-up)
  non-converged   still cordoning / evicting / repartitioning / scaling after 6 cycles of an
                  hour (every wait over: a stable input)
  eviction-rules  an eviction of a non-preemptible class, before minRuntime, or over budget
  preempt-prio    a preemption with nothing pending of higher priority
  order           a plan that changes when the snapshot lists things in another order

The issue's done criterion: 500 clusters, no crash, no over-commit, no oscillation.
`--seed` draws other clusters (hypothesis' seed; without it the draw is derandomized).
`--show N` prints up to N findings of each kind, with the case of the first one.
`--smoke` judges 10 clusters (the same draw, harness and table) in seconds:
tests/test_bench_smoke.py runs it so that the benchmark cannot rot. Like any run it exits 1
when a cluster crashed, over-committed or oscillated.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402

from tests.plan.cycles_support import CYCLES, faults_of  # noqa: E402
from tests.plan.generators import cases  # noqa: E402

COLUMNS = {
    "crashes": "crash",
    "over-commits": "crash/over-commit",
    "oscillations": "undone",
    "non-converged": "unsettled",
    "eviction-rules": "evictions",
    "preempt-prio": "preempt-priority",
    "order": "order",
}
SMOKE = {"clusters": 10}  # what --smoke changes (flags given explicitly win)


def run(clusters: int, seed_value: int | None, show: int) -> int:
    counts = dict.fromkeys(COLUMNS, 0)
    first: dict[str, tuple[object, list[str]]] = {}
    seen = [0]

    @settings(
        max_examples=clusters,
        deadline=None,
        derandomize=seed_value is None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def one(case):
        seen[0] += 1
        faults, error = faults_of(case)
        if error is not None:
            faults = {**faults, "crash": [f"{type(error).__name__}: {error}"]}
        for column, name in COLUMNS.items():
            found = faults.get(name, [])
            if name == "crash/over-commit":
                found = [f for f in found if " raised " not in f]
            if found:
                counts[column] += 1
                first.setdefault(column, (case, found))

    if seed_value is not None:
        one = seed(seed_value)(one)
    start = time.perf_counter()
    one()
    seconds = time.perf_counter() - start
    header = ["clusters", "cycles", *COLUMNS, "seconds"]
    row = [seen[0], CYCLES, *counts.values(), f"{seconds:.1f}"]
    widths = [max(len(h), len(str(v))) for h, v in zip(header, row, strict=True)]
    print("  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print("  ".join(str(v).rjust(w) for v, w in zip(row, widths, strict=True)))
    if show:
        for column, (case, found) in first.items():
            print(f"\n== {column}: {counts[column]} cluster(s); the first:")
            for line in found[:show]:
                print(f"   {line}")
            print(case)
    bad = counts["crashes"] + counts["over-commits"] + counts["oscillations"]
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clusters", type=int, default=500, help="random clusters (default 500)")
    ap.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: fixed)")
    ap.add_argument("--show", type=int, default=0, help="print N findings of each kind")
    ap.add_argument(
        "--smoke", action="store_true", help="10 clusters, seconds (the test suite runs it)"
    )
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke sizes become the defaults; flags given explicitly still win
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    return run(args.clusters, args.seed, args.show)


if __name__ == "__main__":
    sys.exit(main())
