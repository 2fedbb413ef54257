"""What the lists an observation still makes every cycle cost at a given round trip to the API
server, one after another (as before 2026-12-06) and at once (`observe/kube.py`,
`LIST_WORKERS`).

    .venv/bin/python bench/observe_lists.py                        # RTT 0, 2, 5, 20 ms
    .venv/bin/python bench/observe_lists.py --rtt 1,10 --rounds 21
    .venv/bin/python bench/observe_lists.py --smoke                # RTT 0 and 2 ms, 3 rounds

The controller reads everything from its watch cache since 2026-12-06 (`ClusterCache.listed`):
these lists are what an observation without the cache makes (`gpupool plan`, a lone cycle, a
cycle whose cache is behind on nodes or pods; a resource whose watch has not delivered
gpupool's own last write there is listed alone). Nodes, pods and the node agents'
GpuNodeStates come from the cache here; the rest is listed: Jobs, PodGroups of both kinds,
inference Deployments and StatefulSets, HPAs and KEDA ScaledObjects, ResourceQuotas,
PriorityClasses, the gated namespaces and Kueue's three kinds. Here they are answered from memory
(tests/observe/fake_cluster.py's small cluster, Kueue installed, DRA off), each answer after
`--rtt` ms of sleep: a round trip to a remote API server, with its server side and transfer,
that this process waits on without using a CPU. "one at a time" is `LIST_WORKERS` 1 (a
single pool thread: the lists in sequence, as `_observe` made them before); "at once" is the
shipped value. Median wall ms of `observe_cluster` over `--rounds`. On the suite's 2-core
machine the API server shares the CPUs with the controller, so there the lists cost CPU, which
concurrency does not save (bench/README.md, admission_openb at 100 nodes). Exit 0 always.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.observe import kube  # noqa: E402
from reconciler.observe.kube import observe_cluster  # noqa: E402
from tests.observe import fake_cluster  # noqa: E402
from tests.observe.fake_cluster import NOW, base, serving  # noqa: E402

SMOKE = "--rtt 0,2 --rounds 3"


class Cache:
    """The controller's watch cache as `observe_cluster` reads it: nodes, pods and node states
    (listed once, before the rounds)."""

    def __init__(self, c: fake_cluster.Cluster) -> None:
        self._nodes = fake_cluster._listing(c, "nodes", "V1Node").items
        self._pods = fake_cluster._listing(c, "pods", "V1Pod").items
        self._states = fake_cluster._answer(c, "node_states", c.node_states, None)

    def nodes(self) -> list[Any]:
        return self._nodes

    def pods(self) -> list[Any]:
        return self._pods

    def node_states(self) -> list[Any]:
        return self._states


def row(rtt_ms: float, workers: int, rounds: int) -> tuple[float, int]:
    """Median wall ms of one observation, and the lists it made."""
    c = base()
    c.kueue = {"resourceflavors": [], "clusterqueues": [], "localqueues": []}
    answer = fake_cluster._answer
    made = [0]
    lock = threading.Lock()
    with serving(c):
        cache = Cache(c)

        def slow(*a: Any, **kw: Any) -> list:
            with lock:
                made[0] += 1
            time.sleep(rtt_ms / 1000)
            return answer(*a, **kw)

        times = []
        with (
            mock.patch.object(fake_cluster, "_answer", slow),
            mock.patch.object(kube, "LIST_WORKERS", workers),
        ):
            for _ in range(rounds):
                made[0] = 0
                t = time.perf_counter()
                observed = observe_cluster(object(), now=NOW, cache=cache, dra=False)
                times.append(time.perf_counter() - t)
    assert observed.unreadable == [] and observed.workloads
    return statistics.median(times) * 1000, made[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rtt", default="0,2,5,20", help="ms of round trip per list (comma-separated)")
    ap.add_argument("--rounds", type=int, default=11, help="observations per row, the median")
    ap.add_argument("--smoke", action="store_true", help=f"tiny sizes: {SMOKE}")
    args = ap.parse_args(argv)
    if args.smoke:
        args = ap.parse_args(SMOKE.split())
    shipped = kube.LIST_WORKERS
    print("| RTT ms | lists | one at a time, ms | at once, ms |")
    print("|---:|---:|---:|---:|")
    for rtt in (float(x) for x in args.rtt.split(",")):
        one, lists = row(rtt, 1, args.rounds)
        many, _ = row(rtt, shipped, args.rounds)
        print(f"| {rtt:g} | {lists} | {one:.1f} | {many:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
