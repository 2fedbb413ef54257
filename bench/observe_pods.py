"""The pod part of the controller's observation, with and without the workload memo (issue 28
item 2: reconciler/observe/kube_pods.py, `WorkloadMemo`).

    .venv/bin/python bench/observe_pods.py                    # 1,000 nodes
    .venv/bin/python bench/observe_pods.py --sizes 1000,10000 --rounds 5
    .venv/bin/python bench/observe_pods.py --smoke            # 16 nodes, seconds (the test suite)

Per size N it generates bench/plan_scale.py's cluster (N nodes x 8 GPUs over the bundled pools,
seeded, about 18 GPU pods per node) and turns each of its workloads into the Pod the API server
would hand over (a `V1Pod` with a uid and a resourceVersion: bound pods with their GPU limits,
pending ones behind gpupool's gate, Jobs' and ReplicaSets' owner references), and each node's
GpuNodeState `status.pods` (what its agent publishes the bound pods hold). Then, per cycle
(median of `--rounds`), what `observe_cluster` does with the pods (`read_pods`: what the
agents publish the pods hold, which pods hold or want cards, what they hold, each as a
`Workload`, the gangs' failed members), in CPU milliseconds of this process (wall time on a
shared machine says more about the neighbours):

* `convert, every pod`: every pod converted, as every cycle did before the memo;
* `convert, memo, none changed`: through a warm `WorkloadMemo`, nothing changed since the last
  cycle;
* `convert, memo, 1 pod changed`: the same with one pod changed (a new resourceVersion and a
  new annotation) since the last cycle, as a cycle woken by one pod event sees it;
* `convert, memo, every pod a new object (relist)`: every pod handed over as a new object of
  the same version, as after the pod informer's relist (or without the watch cache): the
  memo's whole pass (reconciler/observe/kube_pod_delta.py: more than `SPLICE_MAX` changed).

Through the memo, the pods are read by `kube_pod_delta.read_pods` as `_observe` reads them:
only what changed since the last cycle is read again (`PodDelta`).

The workloads made through the memo are checked equal to the ones made without it, and the
unchanged ones identical (`is`) to the last cycle's. Also printed: the CPU seconds of this
process over the whole run and the load average (the machine may be shared). No API server:
the cluster's own cost of a cycle is bench/reaction.py's. `--smoke` is `--sizes 16 --rounds 2`:
tests/test_bench_smoke.py runs it so that the benchmark cannot rot. `--paused-collector`
times each cycle with the cyclic garbage collector paused (reconciler/loop/collector.py, as
the controller runs its plan), to tell its share apart.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kubernetes import client  # noqa: E402
from plan_scale import generate, scaled_desired  # noqa: E402

from reconciler import conventions as C  # noqa: E402
from reconciler.loop.collector import paused_collector  # noqa: E402
from reconciler.observe.kube_common import _UNREADABLE  # noqa: E402
from reconciler.observe.kube_owners import Owners  # noqa: E402
from reconciler.observe.kube_pod_delta import read_pods as observe_pods  # noqa: E402
from reconciler.observe.kube_pods import WorkloadMemo, published_pods  # noqa: E402
from reconciler.observe.model import Workload  # noqa: E402

SMOKE = {"sizes": "16", "rounds": 2}
PAUSED = {"collector": False}
"""`--paused-collector`: each timed cycle runs with the cyclic garbage collector paused."""
CREATED = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)


def k8s_pod(w: Workload, i: int) -> client.V1Pod:
    """The Pod the API server would hand over for workload `w`."""
    limits: dict[str, str] = {}
    if w.request.gpus:
        limits[C.GPU_RESOURCE] = str(w.request.gpus)
    for profile, n in w.request.mig.items():
        limits[C.mig_resource(profile)] = str(n)
    if w.request.shared_slices:
        limits[C.SHARED_RESOURCE] = str(w.request.shared_slices)
    owner = (
        [client.V1OwnerReference(api_version="v1", kind=w.owner_kind, name=w.owner_name, uid="o")]
        if w.owner_kind and w.owner_name
        else None
    )
    ann = {C.CHECKPOINTABLE_ANN: "true"} if w.checkpointable else {}
    running = w.phase == "Running"
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=w.name,
            namespace=w.namespace,
            uid=f"uid-{i}",
            resource_version=str(1000 + i),
            creation_timestamp=w.created_at or CREATED,
            annotations=ann,
            labels={"app": w.owner_name or w.name},
            owner_references=owner,
        ),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main", image="x", resources=client.V1ResourceRequirements(limits=limits)
                )
            ],
            node_name=w.node if running else None,
            priority_class_name=w.priority_class,
            node_selector={C.POOL_LABEL: w.pool} if w.pool else None,
            scheduling_gates=None
            if running
            else [client.V1PodSchedulingGate(name=C.ADMISSION_GATE)],
        ),
        status=client.V1PodStatus(
            phase="Running" if running else "Pending", start_time=w.started_at if running else None
        ),
    )


def published(workloads: list[Workload]) -> dict[str, dict]:
    """Node -> the GpuNodeState its agent would publish: the cards each bound pod holds."""
    out: dict[str, dict] = {}
    for w in workloads:
        if w.phase != "Running" or not w.node:
            continue
        state = out.setdefault(
            w.node,
            {
                "metadata": {"name": w.node, "resourceVersion": str(len(out) + 1)},
                "status": {"pods": []},
            },
        )
        state["status"]["pods"].append(
            {
                "namespace": w.namespace,
                "name": w.name,
                "allocations": [a.model_dump(mode="json", by_alias=True) for a in w.allocations],
            }
        )
    return out


def read_pods(
    pods: list, states: dict, by_name: dict, owners: Owners, memo: WorkloadMemo | None
) -> list[Workload]:
    """What `observe_cluster` does with the pods (`_observe`), given the nodes, the agents'
    GpuNodeStates and the owners it read."""
    token = _UNREADABLE.set([])
    if memo is not None:
        memo.begin()
    try:
        held = {
            name: published_pods(s) if memo is None else memo.published(name, s)
            for name, s in states.items()
        }
        made, _ = observe_pods(pods, held, by_name, owners, None, memo)
    finally:
        _UNREADABLE.reset(token)
    if memo is not None:
        memo.end()
    return made


def median_ms(fn: Callable[[], Any], rounds: int, before: Callable[[], Any] = lambda: None):
    """Median CPU milliseconds of this process in `fn` over `rounds` calls (CPU time, not wall
    time: the machine may be shared), `before` (untimed) ahead of each."""
    times = []
    for _ in range(rounds):
        before()
        with paused_collector() if PAUSED["collector"] else nullcontext():
            t0 = time.process_time()
            fn()
            times.append(time.process_time() - t0)
    return statistics.median(times) * 1000


def changed(pod: client.V1Pod, rv: int) -> client.V1Pod:
    """`pod` as a watch's MODIFIED event hands it over after a write: a new object, a new
    resourceVersion, a new annotation."""
    meta = copy.copy(pod.metadata)
    meta.resource_version = str(rv)
    meta.annotations = {**(meta.annotations or {}), "bench/touched": str(rv)}
    out = copy.copy(pod)
    out.metadata = meta
    return out


def measure(size: int, rounds: int) -> tuple[int, int, list[tuple[str, float]]]:
    """(pods, workloads the same objects as the cycle before's, (step, ms per cycle))."""
    observed = generate(size, scaled_desired(size))
    pods = [k8s_pod(w, i) for i, w in enumerate(observed.workloads)]
    states = published(observed.workloads)
    by_name = {n.name: n for n in observed.nodes}
    owners = Owners(sizes={(w.namespace, "Job", w.owner_name): 1 for w in observed.workloads})

    agents = states
    plain = read_pods(pods, agents, by_name, owners, None)
    memo = WorkloadMemo()
    last = read_pods(pods, agents, by_name, owners, memo)
    assert last == plain and len(plain) == len(pods)  # every pod asks for cards
    rv = [5_000_000]

    def touch() -> None:  # one pod written since the last cycle (untimed)
        rv[0] += 1
        i = rv[0] % len(pods)
        pods[i] = changed(pods[i], rv[0])

    rows = [
        (
            "convert, every pod",
            median_ms(lambda: read_pods(pods, agents, by_name, owners, None), rounds),
        ),
        (
            "convert, memo, none changed",
            median_ms(lambda: read_pods(pods, agents, by_name, owners, memo), rounds),
        ),
    ]
    made: list[list[Workload]] = []
    rows.append(
        (
            "convert, memo, 1 pod changed",
            median_ms(
                lambda: made.append(read_pods(pods, agents, by_name, owners, memo)), rounds, touch
            ),
        )
    )
    assert made[-1] == read_pods(pods, agents, by_name, owners, None)

    def relist() -> None:  # every pod a new object of the same version (untimed)
        pods[:] = [copy.copy(p) for p in pods]

    rows.append(
        (
            "convert, memo, every pod a new object (relist)",
            median_ms(lambda: read_pods(pods, agents, by_name, owners, memo), rounds, relist),
        )
    )
    assert read_pods(pods, agents, by_name, owners, memo) == made[-1]
    same = sum(a is b for a, b in zip(made[-2], made[-1], strict=True)) if rounds > 1 else 0
    return len(pods), same, rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000", help="comma-separated node counts (default 1000)")
    ap.add_argument("--rounds", type=int, default=5, help="median of N cycles (default 5)")
    ap.add_argument("--smoke", action="store_true", help="--sizes 16 --rounds 2, seconds")
    ap.add_argument(
        "--paused-collector",
        action="store_true",
        help="time each cycle with the cyclic garbage collector paused (as the controller plans)",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke sizes become the defaults; flags given explicitly still win
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    PAUSED["collector"] = args.paused_collector
    cpu0 = time.process_time()
    print("| nodes | pods | step | CPU ms per cycle |")
    print("|---:|---:|---|---:|")
    summary = []
    for size in [int(s) for s in args.sizes.split(",") if s.strip()]:
        pods, same, rows = measure(size, args.rounds)
        for step, ms in rows:
            print(f"| {size} | {pods} | {step} | {ms:.1f} |", flush=True)
        table = dict(rows)
        summary.append(
            f"{size} nodes: every pod {table['convert, every pod']:.1f} ms, memo with one pod "
            f"changed {table['convert, memo, 1 pod changed']:.1f} ms per cycle; "
            f"{same} workloads the same objects as the cycle before"
        )
    print()
    print("\n".join(summary))
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"CPU {time.process_time() - cpu0:.1f} s (this process, whole run); load average {load}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
