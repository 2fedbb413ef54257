"""One hostile object in the cluster against none: a cycle costs the same whatever one tenant
writes (issue "Tenant-proof", item 1; the bounds: reconciler/conventions.py).

    .venv/bin/python bench/hostile_object.py                    # 100 and 1,000 nodes
    .venv/bin/python bench/hostile_object.py --sizes 1000 --repeat 3
    .venv/bin/python bench/hostile_object.py --kinds job-parallelism,shared-slices
    .venv/bin/python bench/hostile_object.py --smoke            # 16 nodes, seconds (the test suite)

Per size N it generates bench/plan_scale.py's cluster (N nodes x 8 GPUs over the bundled pools,
scaled; seeded). Then per hostile kind, one object as a tenant (or anyone with write access to
it) could write it:

* `job-parallelism`: a Job gpupool suspended, `spec.parallelism: 1000000000`;
* `shared-slices`: a node sharing its cards, with pods on them, whose allocatable says
  `nvidia.com/gpu.shared: 1E`;
* `gpu-capacity`: a new node whose capacity says `nvidia.com/gpu: 10000000`;
* `agent-gpu-list`: a new node whose GpuNodeState publishes 200,000 cards;
* `time-year-1`: an inference Deployment whose `gpupool.io/last-scale` is 0001-01-01;
* `signal-nan`: an inference Deployment whose `gpupool.io/queue-length` is NaN.

The object goes through the Kubernetes adapter's own conversion for its kind (`_node`,
`read_owners` over a fake Job list, `_service`), collecting unreadable entries as
`observe_cluster` does ("read s"); the result joins the generated snapshot (`ObservedState`,
checked as the adapter's is). `plan_with_facts(desired, observed)` is then timed without the
object and with it, alternately (`--repeat` rounds, the best of each), so that both see the
same load on the machine: "plan s without", "plan s with", ratio = with / without. The target
is a ratio near 1 (within the noise of a shared machine). "unreadable" counts the entries the
object left (each a finding in the plan).

Each kind runs in a forked child (after an untimed plan there, and `gc.freeze()` in the
parent, so that neither side pays the fork's copy-on-write alone) with a time limit
(`--timeout`, default 120 s) and a memory limit (4 GiB over the parent's): before the bounds,
`job-parallelism`, `shared-slices` and `gpu-capacity` never finished (a list as long as the
number) and their rows said `> 120 (stopped)` or `failed: MemoryError`. Exits 1 when any
measurement stopped or failed.

`--smoke` is `--sizes 16` (the bundled pools' own size), every kind, in seconds:
tests/test_bench_smoke.py runs it so that the benchmark cannot rot.
"""

from __future__ import annotations

import argparse
import gc
import os
import pickle
import resource
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from kubernetes import client  # noqa: E402
from plan_scale import NOW, generate, scaled_desired  # noqa: E402

from reconciler import conventions as C  # noqa: E402
from reconciler.observe.kube_common import _UNREADABLE, _each  # noqa: E402
from reconciler.observe.kube_nodes import _node  # noqa: E402
from reconciler.observe.kube_owners import read_owners  # noqa: E402
from reconciler.observe.kube_services import _service  # noqa: E402
from reconciler.observe.model import Node, ObservedState, UnreadableObject  # noqa: E402
from reconciler.plan.planner import plan_with_facts  # noqa: E402

SMOKE = {"sizes": "16"}  # what --smoke changes (flags given explicitly win)
MEMORY = 4 * 2**30
"""Bytes a measurement may allocate beyond the parent's (a list as long as 10^9 fails)."""


# --------------------------------------------------------------------------- the objects


def _meta(name: str, namespace: str | None = None, **kw: Any) -> client.V1ObjectMeta:
    return client.V1ObjectMeta(name=name, namespace=namespace, **kw)


def _containers(limits: dict[str, str]) -> list[client.V1Container]:
    res = client.V1ResourceRequirements(limits=limits)
    return [client.V1Container(name="main", resources=res)]


def _k8s_node(name: str, labels: dict, capacity: dict, allocatable: dict) -> client.V1Node:
    return client.V1Node(
        metadata=_meta(name, labels=labels),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(
            capacity=capacity,
            allocatable=allocatable,
            conditions=[client.V1NodeCondition(type="Ready", status="True")],
        ),
    )


def _agent_state(n: Node) -> dict:
    """The GpuNodeState the node agent would publish for `n` (its cards, without the slices
    the device plugin advertises)."""
    gpus = [
        g.model_dump(mode="json", by_alias=True, exclude_defaults=True, exclude={"shared_slices"})
        for g in n.gpus
    ]
    return {"metadata": {"name": n.name}, "status": {"gpus": gpus}}


def _deployment(annotations: dict) -> client.V1Deployment:
    return client.V1Deployment(
        metadata=_meta("hostile", "assistant", annotations=annotations),
        spec=client.V1DeploymentSpec(
            replicas=1,
            selector=client.V1LabelSelector(match_labels={"app": "hostile"}),
            template=client.V1PodTemplateSpec(
                metadata=_meta("hostile"),
                spec=client.V1PodSpec(
                    containers=_containers({C.SHARED_RESOURCE: "1"}),
                    priority_class_name="serving",
                    node_selector={C.POOL_LABEL: "h100"},
                ),
            ),
        ),
        status=client.V1DeploymentStatus(ready_replicas=1),
    )


@contextmanager
def _fake_jobs(jobs: list):
    """`read_owners` lists `jobs` (and no PodGroup CRD) instead of asking an API server."""

    class Batch:
        def __init__(self, _api: Any = None):
            pass

        def list_job_for_all_namespaces(self):
            return SimpleNamespace(items=jobs)

    class Custom:
        def __init__(self, _api: Any = None):
            pass

        def list_cluster_custom_object(self, *_: str):
            raise client.ApiException(status=404, reason="NotFound")

    saved = client.BatchV1Api, client.CustomObjectsApi
    client.BatchV1Api, client.CustomObjectsApi = Batch, Custom
    try:
        yield
    finally:
        client.BatchV1Api, client.CustomObjectsApi = saved


def _suspended_job(parallelism: int) -> client.V1Job:
    """A Job gpupool suspended: its annotation, and its field manager owns `spec.suspend`."""
    return client.V1Job(
        metadata=_meta(
            "hostile",
            "llm-research",
            annotations={C.SUSPENDED_BY_ANN: NOW.isoformat()},
            managed_fields=[
                client.V1ManagedFieldsEntry(
                    manager=C.FIELD_MANAGER,
                    operation="Apply",
                    fields_v1={"f:spec": {"f:suspend": {}}},
                )
            ],
        ),
        spec=client.V1JobSpec(
            parallelism=parallelism,
            suspend=True,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    containers=_containers({C.GPU_RESOURCE: "1"}),
                    priority_class_name="training-low",
                    node_selector={C.POOL_LABEL: "a100"},
                )
            ),
        ),
    )


def _shared_node(observed: ObservedState) -> Node:
    """The first node with shared cards that pods hold slices of (so its cards stay shared
    and are not simply repartitioned), in a pool with pending shared demand (so the planner
    looks for free slices there), if there is one."""
    holding = {w.node for w in observed.workloads if any(a.slices for a in w.allocations)}
    wanted = {
        w.pool
        for w in observed.workloads
        if w.phase == "Pending" and w.request.shared_slices and w.pool
    }
    found = [
        n for n in observed.nodes if n.name in holding and any(g.shared_slices for g in n.gpus)
    ]
    if not found:
        raise SystemExit("the generated cluster has no shared card in use: nothing to make hostile")
    return next((n for n in found if n.labels.get(C.POOL_LABEL) in wanted), found[0])


# Each kind: what it is; how the object is made (untimed: the client's models, as the API
# server's answer would arrive); how the adapter reads it into the snapshot (timed, "read s").


def _make_job(observed: ObservedState) -> list:
    return [_suspended_job(10**9)]


def _read_job(observed: ObservedState, jobs: list) -> dict:
    with _fake_jobs(jobs):
        owners = read_owners(object())
    return {"suspended_jobs": [*observed.suspended_jobs, *owners.suspended]}


def _make_shared(observed: ObservedState) -> tuple[Any, dict]:
    n = _shared_node(observed)
    capacity = {C.GPU_RESOURCE: str(len(n.gpus))}
    return _k8s_node(n.name, n.labels, capacity, {C.SHARED_RESOURCE: "1E"}), _agent_state(n)


def _read_node(observed: ObservedState, made: tuple[Any, dict | None]) -> dict:
    """The node read as `observe_cluster` reads it: in place of the one of its name, else
    added."""
    k8s, state = made
    read = _each("Node", [k8s], lambda x: _node(x, state))
    name = k8s.metadata.name
    kept = [m for m in observed.nodes if m.name != name]
    if len(kept) == len(observed.nodes):
        return {"nodes": [*kept, *read]}
    return {"nodes": [read[0] if m.name == name and read else m for m in observed.nodes]}


def _new_node(name: str, gpus: str, state: dict | None) -> Callable[[ObservedState], tuple]:
    def make(observed: ObservedState) -> tuple[Any, dict | None]:
        labels = {
            C.POOL_LABEL: "a100",
            C.PRODUCT_LABEL: observed.nodes[0].labels[C.PRODUCT_LABEL],
        }
        return _k8s_node(name, labels, {C.GPU_RESOURCE: gpus}, {C.GPU_RESOURCE: gpus}), state

    return make


def _make_service(annotations: dict) -> Callable[[ObservedState], Any]:
    return lambda observed: _deployment(annotations)


def _read_service(observed: ObservedState, d: Any) -> dict:
    svc = _each("Deployment", [d], lambda x: _service(x, "Deployment"))
    return {"services": [*observed.services, *svc]}


AGENT_CARDS = 200_000
KINDS: dict[str, tuple[str, Callable[[ObservedState], Any], Callable[[ObservedState, Any], dict]]]
KINDS = {
    "job-parallelism": ("a suspended Job of 10^9 pods", _make_job, _read_job),
    "shared-slices": ("nvidia.com/gpu.shared: 1E", _make_shared, _read_node),
    "gpu-capacity": (
        "nvidia.com/gpu: 10^7",
        _new_node("hostile-capacity", "10000000", None),
        _read_node,
    ),
    "agent-gpu-list": (
        "a GpuNodeState of 200,000 cards",
        _new_node(
            "hostile-agent",
            "8",
            {
                "metadata": {"name": "hostile-agent"},
                "status": {"gpus": [{"index": 0}] * AGENT_CARDS},
            },
        ),
        _read_node,
    ),
    "time-year-1": (
        "last-scale 0001-01-01",
        _make_service({C.LAST_SCALE_ANN: "0001-01-01T00:00:00Z"}),
        _read_service,
    ),
    "signal-nan": (
        "queue-length NaN",
        _make_service({C.QUEUE_LENGTH_ANN: "NaN"}),
        _read_service,
    ),
}


def with_hostile(observed: ObservedState, kind: str, made: Any) -> tuple[ObservedState, int]:
    """`observed` with the hostile object `made` (`KINDS[kind]`'s maker) read in, assembled as
    `observe_cluster` assembles a snapshot; and how many unreadable entries it left."""
    found: list[UnreadableObject] = []
    token = _UNREADABLE.set(found)
    try:
        update = KINDS[kind][2](observed, made)
    finally:
        _UNREADABLE.reset(token)
    fields = {name: getattr(observed, name) for name in ObservedState.model_fields}
    fields.update(update, unreadable=[*observed.unreadable, *found])
    return ObservedState(**fields), len(found)


# --------------------------------------------------------------------------- measuring


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def isolated(fn: Callable[[], Any], timeout: float) -> tuple[str, Any]:
    """("ok", fn()) run in a forked child; ("stopped", None) past `timeout` seconds;
    ("failed", the traceback's last line) when it raised (a MemoryError past `MEMORY`)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            soft = _vm_bytes() + MEMORY
            resource.setrlimit(
                resource.RLIMIT_AS,
                (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard),
            )
            try:
                out: tuple[str, Any] = ("ok", fn())
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = ("failed", traceback.format_exception_only(exc)[-1].strip()[:200])
            with os.fdopen(w, "wb") as f:
                f.write(pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                return "stopped", None
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not chunks:
        return "failed", "the measuring process died without an answer"
    return pickle.loads(b"".join(chunks))


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def measure(
    desired: Any, observed: ObservedState, kind: str, repeat: int, timeout: float
) -> tuple[str, Any]:
    """In one child: the hostile object read in ("read s"), then `repeat` rounds of planning
    the cluster without it and with it, alternately, so that both see the same load on the
    machine; (read s, best plan s without, best plan s with, unreadable entries)."""

    def run() -> tuple[float, float, float, int]:
        plan_with_facts(desired, observed)  # untimed: the child's first touch of the heap
        made = KINDS[kind][1](observed)
        read_s, (hostile, entries) = _timed(lambda: with_hostile(observed, kind, made))
        without = with_ = float("inf")
        for _ in range(repeat):
            without = min(without, _timed(lambda: plan_with_facts(desired, observed))[0])
            with_ = min(with_, _timed(lambda: plan_with_facts(desired, hostile))[0])
        return read_s, without, with_, entries

    return isolated(run, timeout)


def _cell(status: str, value: Any, timeout: float) -> str:
    return f"> {timeout:g} (stopped)" if status == "stopped" else f"failed: {value}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sizes", default="100,1000", help="comma-separated node counts (default 100,1000)"
    )
    ap.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"comma-separated hostile kinds (default all: {', '.join(KINDS)})",
    )
    ap.add_argument(
        "--repeat", type=int, default=1, help="best of N plans without and with (default 1)"
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=120,
        help="stop a measurement after this many seconds (default 120)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny and quick: --sizes 16, seconds (the test suite runs it)",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke sizes become the defaults; flags given explicitly still win
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    kinds = [k for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        ap.error(f"unknown kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    rows = []
    bad = 0
    for n in sizes:
        t0 = time.perf_counter()
        desired = scaled_desired(n)
        observed = generate(n, desired)
        print(
            f"generated {n} nodes: {sum(len(x.gpus) for x in observed.nodes)} GPUs, "
            f"{len(observed.workloads)} pods in {time.perf_counter() - t0:.1f}s",
            file=sys.stderr,
            flush=True,
        )
        # warm, untimed, before the children fork: the planner's and the readers' first-call
        # costs (imports, caches, the client's models) would otherwise count in every row
        plan_with_facts(desired, observed)
        with_hostile(observed, "signal-nan", KINDS["signal-nan"][1](observed))
        _ = client.BatchV1Api, client.CustomObjectsApi  # the client imports its APIs lazily
        gc.collect()
        gc.freeze()  # the children's collector leaves the parent's objects (and pages) alone
        for kind in kinds:
            status, got = measure(desired, observed, kind, args.repeat, args.timeout)
            bad += status != "ok"
            print(f"  {kind}: {status} {got}", file=sys.stderr, flush=True)
            rows.append((n, kind, status, got))
        del desired, observed
        gc.unfreeze()
    print()
    print("| nodes | hostile object | plan s without | plan s with | ratio | read s | unreadable |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n, kind, status, got in rows:
        if status == "ok":
            read_s, without, with_, entries = got
            cells = [f"{without:.3f}", f"{with_:.3f}", f"{with_ / without:.2f}"]
            cells += [f"{read_s:.3f}", str(entries)]
        else:
            cells = ["—", _cell(status, got, args.timeout), "—", "—", "—"]
        print(f"| {n:,} | `{kind}`: {KINDS[kind][0]} | {' | '.join(cells)} |")
    print()
    print("Target: ratio near 1 for every kind (one tenant's object costs the cycle nothing).")
    if bad:
        print(f"{bad} measurement(s) stopped or failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
