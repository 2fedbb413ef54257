"""Bounds on every count, size and time read from the cluster or a snapshot file (issue
"Tenant-proof", item 1; the bounds and why: reconciler/conventions.py).

Through the Kubernetes adapter (`observe_cluster` over fake API objects, the official client's
models): a hostile value becomes an `unreadable` entry naming the object, the field, the value
and the bound, the rest of the cycle is read and planned as before. Through a snapshot file
(`gpupool plan --observed`): a located error (file, line, field) and exit 1.

Before the bounds, the values marked HANG stalled the plan or the observation (a list as long
as the number: one demand unit per pod of a suspended Job, one bucket per free slice of a
shared card, one card per unit of a node's capacity), and CRASH ones ended in OverflowError;
each case runs in a forked child with a time and a memory limit (`bounded`), so such code fails
in seconds instead of hanging the suite or eating the machine. The others were taken silently
(no entry, no error) and fail on their assertions.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import resource
import select
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.cli import main
from reconciler.observe.builders import PRODUCT, gpu, node, shared_pod, training
from reconciler.observe.kube import observe_cluster
from reconciler.observe.model import (
    Autoscaler,
    InferenceService,
    ObservedState,
    Request,
    SuspendedJob,
)
from reconciler.observe.snapshot import dump_snapshot, parse_snapshot
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import files_from_paths
from reconciler.policy.loader import load
from reconciler.sim.effects import step

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
LIMIT_S = 10.0
"""Seconds a case may take: each takes well under one on a quiet machine."""
MEMORY = 2 * 2**30
"""Bytes a case may allocate beyond what the test process holds already."""
H100 = PRODUCT["H100-SXM5-80GB"]


# --------------------------------------------------------------------------- the guard


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def bounded(fn: Callable[[], Any], seconds: float = LIMIT_S) -> Any:
    """`fn()` in a forked child limited to `seconds` and `MEMORY`; its result (pickled back).
    A hang, a MemoryError or any exception fails the test, with the child's traceback."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        try:
            os.close(r)
            _, hard = resource.getrlimit(resource.RLIMIT_AS)
            soft = _vm_bytes() + MEMORY
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
            try:
                out = (True, fn())
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = (False, "".join(traceback.format_exception(exc))[-4000:])
            with os.fdopen(w, "wb") as f:
                f.write(pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + seconds
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"no answer within {seconds:g} s: the value stalls gpupool")
            chunk = os.read(r, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not chunks:
        pytest.fail("the child died without an answer (killed for memory?)")
    ok, value = pickle.loads(b"".join(chunks))
    if not ok:
        pytest.fail(f"raised:\n{value}")
    return value


@cache
def desired():
    return load(files_from_paths([str(ROOT / "pools"), str(ROOT / "policies")]))


def planned(observed: ObservedState) -> list[tuple[str, str, str]]:
    """The plan's findings (code, subject, message) for `observed`, one twin cycle after it."""
    p, _ = plan_with_facts(desired(), observed)
    step(desired(), observed, p, now=observed.observed_at, period=timedelta(seconds=60))
    return [(f.code, f.subject, f.message) for f in p.findings]


# --------------------------------------------------------------------------- a fake API


def meta(name: str, namespace: str | None = None, **kw: Any) -> client.V1ObjectMeta:
    return client.V1ObjectMeta(name=name, namespace=namespace, **kw)


def containers(limits: dict[str, str]) -> list[client.V1Container]:
    return [client.V1Container(name="main", resources=client.V1ResourceRequirements(limits=limits))]


def k8s_node(name: str, gpus: str = "8", allocatable: dict | None = None) -> client.V1Node:
    return client.V1Node(
        metadata=meta(name, labels={C.POOL_LABEL: "h100", C.PRODUCT_LABEL: H100}),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(
            capacity={C.GPU_RESOURCE: gpus},
            allocatable=allocatable if allocatable is not None else {C.GPU_RESOURCE: gpus},
            conditions=[client.V1NodeCondition(type="Ready", status="True")],
        ),
    )


def agent_wrote_gpus(annotations: dict | None) -> list | None:
    """The managedFields entry of the node agent's `gpupool.io/gpus` (the one writer gpupool
    believes, reconciler/observe/trust.py), where the pod carries one."""
    if C.GPUS_ANN not in (annotations or {}):
        return None
    return [
        client.V1ManagedFieldsEntry(
            manager=C.AGENT_FIELD_MANAGER,
            operation="Update",
            api_version="v1",
            fields_type="FieldsV1",
            fields_v1={"f:metadata": {"f:annotations": {f"f:{C.GPUS_ANN}": {}}}},
        )
    ]


def k8s_pod(
    namespace: str,
    name: str,
    limits: dict[str, str],
    *,
    node_name: str | None = None,
    cls: str = "serving",
    annotations: dict | None = None,
    labels: dict | None = None,
    owner: tuple[str, str] | None = None,
    created: datetime = NOW - timedelta(hours=2),
    started: datetime | None = NOW - timedelta(hours=1),
) -> client.V1Pod:
    refs = (
        [client.V1OwnerReference(api_version="v1", kind=owner[0], name=owner[1], uid="u")]
        if owner
        else None
    )
    return client.V1Pod(
        metadata=meta(
            name,
            namespace,
            annotations=annotations,
            labels=labels,
            owner_references=refs,
            creation_timestamp=created,
            managed_fields=agent_wrote_gpus(annotations),
        ),
        spec=client.V1PodSpec(
            containers=containers(limits),
            node_name=node_name,
            priority_class_name=cls,
            node_selector={C.POOL_LABEL: "h100"},
            scheduling_gates=None
            if node_name
            else [client.V1PodSchedulingGate(name=C.ADMISSION_GATE)],
        ),
        status=client.V1PodStatus(
            phase="Running" if node_name else "Pending",
            start_time=started if node_name else None,
        ),
    )


def k8s_job(
    namespace: str, name: str, parallelism: int, suspended_at: str | None = None
) -> client.V1Job:
    """A Job; with `suspended_at`, one gpupool suspended (its annotation, and its field
    manager owns `spec.suspend`)."""
    managed = [
        client.V1ManagedFieldsEntry(
            manager=C.FIELD_MANAGER, operation="Apply", fields_v1={"f:spec": {"f:suspend": {}}}
        )
    ]
    return client.V1Job(
        metadata=meta(
            name,
            namespace,
            annotations={C.SUSPENDED_BY_ANN: suspended_at} if suspended_at else None,
            managed_fields=managed if suspended_at else None,
        ),
        spec=client.V1JobSpec(
            parallelism=parallelism,
            suspend=suspended_at is not None,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    containers=containers({C.GPU_RESOURCE: "1"}),
                    priority_class_name="training-low",
                    node_selector={C.POOL_LABEL: "h100"},
                )
            ),
        ),
    )


def k8s_deployment(namespace: str, name: str, annotations: dict) -> client.V1Deployment:
    return client.V1Deployment(
        metadata=meta(name, namespace, annotations=annotations, labels={C.INFERENCE_LABEL: "true"}),
        spec=client.V1DeploymentSpec(
            replicas=2,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=meta(name),
                spec=client.V1PodSpec(
                    containers=containers({C.SHARED_RESOURCE: "1"}),
                    priority_class_name="serving",
                    node_selector={C.POOL_LABEL: "h100"},
                ),
            ),
        ),
        status=client.V1DeploymentStatus(ready_replicas=2),
    )


@dataclass
class Cluster:
    """What the fake API server lists: two H100 nodes (one shared 8 ways), a training pod, a
    shared pod running and one pending, a Job gpupool suspended, an inference Deployment. Each
    test makes one object hostile, or adds one."""

    nodes: list = field(
        default_factory=lambda: [
            k8s_node("h100-a", allocatable={C.SHARED_RESOURCE: "64"}),
            k8s_node("h100-b"),
        ]
    )
    node_states: list[dict] = field(default_factory=list)
    pods: list = field(
        default_factory=lambda: [
            k8s_pod(
                "llm-research",
                "train-0",
                {C.GPU_RESOURCE: "2"},
                node_name="h100-b",
                cls="training-low",
                owner=("Job", "train"),
                annotations={C.GPUS_ANN: "0,1"},
            ),
            k8s_pod(
                "assistant",
                "chat-0",
                {C.SHARED_RESOURCE: "1"},
                node_name="h100-a",
                owner=("ReplicaSet", "chat-llm-5d9f"),
                annotations={C.GPUS_ANN: "0/1"},
            ),
            k8s_pod("assistant", "chat-extra", {C.SHARED_RESOURCE: "1"}),
        ]
    )
    jobs: list = field(
        default_factory=lambda: [
            k8s_job("llm-research", "train", 1),
            k8s_job("llm-research", "resume-me", 2, NOW.isoformat()),
        ]
    )
    deployments: list = field(
        default_factory=lambda: [
            k8s_deployment("assistant", "chat-llm", {C.QUEUE_LENGTH_ANN: "3"}),
        ]
    )
    pod_groups: list[dict] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        c = self

        def listed(items: list) -> SimpleNamespace:
            return SimpleNamespace(items=list(items))

        class Core:
            def __init__(self, _api: Any = None):
                pass

            def list_node(self):
                return listed(c.nodes)

            def list_pod_for_all_namespaces(self):
                return listed(c.pods)

            def list_resource_quota_for_all_namespaces(self):
                return listed([])

            def list_namespace(self, label_selector: str = ""):
                return listed([])

        class Batch:
            def __init__(self, _api: Any = None):
                pass

            def list_job_for_all_namespaces(self):
                return listed(c.jobs)

        class Apps:
            def __init__(self, _api: Any = None):
                pass

            def list_deployment_for_all_namespaces(self, label_selector: str = ""):
                return listed(c.deployments)

            def list_stateful_set_for_all_namespaces(self, label_selector: str = ""):
                return listed([])

        class Autoscaling:
            def __init__(self, _api: Any = None):
                pass

            def list_horizontal_pod_autoscaler_for_all_namespaces(self):
                return listed([])

        class Scheduling:
            def __init__(self, _api: Any = None):
                pass

            def list_priority_class(self):
                return listed([])

        class Custom:
            def __init__(self, _api: Any = None):
                pass

            def list_cluster_custom_object(self, group: str, version: str, plural: str):
                if plural == C.NODE_STATE_PLURAL:
                    return {"items": c.node_states}
                if (group, plural) == (C.POD_GROUP_GROUP, C.POD_GROUP_PLURAL):
                    return {"items": c.pod_groups}
                # KEDA, Kueue, the Workload API
                raise client.ApiException(status=404, reason="NotFound")

        for name, fake in {
            "CoreV1Api": Core,
            "BatchV1Api": Batch,
            "AppsV1Api": Apps,
            "AutoscalingV2Api": Autoscaling,
            "SchedulingV1Api": Scheduling,
            "CustomObjectsApi": Custom,
        }.items():
            monkeypatch.setattr(client, name, fake)


@dataclass
class Cycle:
    observed: ObservedState
    findings: list[tuple[str, str, str]]

    def unreadable(self) -> list[tuple[str, str]]:
        return [(u.ref, u.message) for u in self.observed.unreadable]

    def one(self, ref: str) -> str:
        """The message of the one entry about `ref`, which must also be a plan finding."""
        found = [m for r, m in self.unreadable() if r == ref]
        assert len(found) == 1, self.unreadable()
        assert ("unreadable-object", ref, found[0]) in self.findings
        return found[0]


def cycle(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Cycle:
    """Observe the fake cluster and plan it (and one twin cycle), bounded; the snapshot must
    load again once dumped, as `gpupool observe`'s output does."""
    cluster.install(monkeypatch)
    desired()  # loaded here, once, not in every child

    def run() -> Cycle:
        observed = observe_cluster(object(), now=NOW)
        assert parse_snapshot(dump_snapshot(observed)) == observed
        return Cycle(observed, planned(observed))

    return bounded(run)


def intact(c: Cycle, *, nodes: tuple[str, ...] = ("h100-a", "h100-b")) -> None:
    """The objects no test makes hostile are all there, as they are without it."""
    o = c.observed
    assert [n.name for n in o.nodes] == list(nodes)
    assert {w.key for w in o.workloads} >= {
        "llm-research/train-0",
        "assistant/chat-0",
        "assistant/chat-extra",
    }
    assert [j.key for j in o.suspended_jobs] == ["llm-research/resume-me"]
    assert [(s.key, s.queue_length) for s in o.services] == [("assistant/chat-llm", 3.0)]


def test_the_fake_cluster_reads_and_plans_without_an_unreadable_entry(monkeypatch):
    c = cycle(Cluster(), monkeypatch)
    intact(c)
    assert c.unreadable() == []
    assert [g.shared_slices for g in c.observed.nodes[0].gpus] == [8] * 8


# ------------------------------------------------------------------ the adapter: GPUs per node


def test_a_node_advertising_more_gpus_than_a_node_carries_is_left_out(monkeypatch):
    # HANG: one Gpu per unit of capacity (10^7 of them: minutes, gigabytes), then the planner
    cluster = Cluster()
    cluster.nodes.append(k8s_node("hostile", gpus="10000000"))
    c = cycle(cluster, monkeypatch)
    msg = c.one("Node hostile")
    assert "status.capacity[nvidia.com/gpu]='10000000'" in msg
    assert "32" in msg and "MAX_GPUS_PER_NODE" in msg
    intact(c)


def test_a_node_whose_agent_publishes_more_gpus_than_a_node_carries_is_left_out(monkeypatch):
    # HANG: 200,000 cards validated one by one, then planned (tens of seconds)
    cluster = Cluster()
    cluster.nodes.append(k8s_node("hostile"))
    cluster.node_states.append(
        {"metadata": {"name": "hostile"}, "status": {"gpus": [{"index": 0}] * 200_000}}
    )
    c = cycle(cluster, monkeypatch)
    msg = c.one("Node hostile")
    assert "status.gpus has 200000 entries" in msg and "MAX_GPUS_PER_NODE" in msg
    intact(c)


# ------------------------------------------------------------------ the adapter: shared slices


@pytest.mark.parametrize(
    "value",
    [
        # HANG (with a pod on the node, so its cards are not simply repartitioned): one bucket
        # per free-slice count, 1.25 x 10^17 of them
        "1E",
        "1000000000",  # HANG
    ],
)
def test_shared_slices_beyond_a_card_read_as_not_shared(monkeypatch, value):
    cluster = Cluster()
    cluster.nodes[0].status.allocatable = {C.SHARED_RESOURCE: value}
    c = cycle(cluster, monkeypatch)
    msg = c.one("Node h100-a")
    assert f"status.allocatable[nvidia.com/gpu.shared]={value!r}" in msg
    assert "MAX_SHARED_SLICES_PER_GPU" in msg
    assert [g.shared_slices for g in c.observed.nodes[0].gpus] == [None] * 8
    intact(c)


# ------------------------------------------------------------------ the adapter: gang sizes


def test_a_suspended_job_with_a_gang_beyond_any_cluster_is_not_demand(monkeypatch):
    # HANG: one demand unit per pod, a tuple of 10^9 member names
    cluster = Cluster()
    cluster.jobs.append(k8s_job("llm-research", "hostile", 10**9, NOW.isoformat()))
    c = cycle(cluster, monkeypatch)
    msg = c.one("Job llm-research/hostile")
    assert "spec.parallelism=1000000000" in msg and "100000" in msg and "MAX_GANG_SIZE" in msg
    intact(c)


def test_a_pod_group_beyond_any_cluster_has_no_size(monkeypatch):
    # taken silently: the group's pods waited for 10^9 members
    cluster = Cluster()
    cluster.pod_groups.append(
        {"metadata": {"namespace": "llm-research", "name": "g"}, "spec": {"minMember": 10**9}}
    )
    c = cycle(cluster, monkeypatch)
    msg = c.one("PodGroup llm-research/g")
    assert "spec.minMember" in msg and "1000000000" in msg and "MAX_GANG_SIZE" in msg
    intact(c)


def test_a_gang_size_annotation_beyond_any_cluster_is_absent(monkeypatch):
    # taken silently
    cluster = Cluster()
    cluster.pods.append(
        k8s_pod(
            "llm-research",
            "gang-0",
            {C.GPU_RESOURCE: "1"},
            cls="training-low",
            annotations={C.GANG_ANN: "g", C.GANG_SIZE_ANN: "1000000000"},
        )
    )
    c = cycle(cluster, monkeypatch)
    msg = c.one("Pod llm-research/gang-0")
    assert "1000000000" in msg and "MAX_GANG_SIZE" in msg
    [w] = [w for w in c.observed.workloads if w.name == "gang-0"]
    assert (w.gang, w.gang_size) == ("g", None)
    intact(c)


def test_a_pod_holding_more_slices_than_a_card_has_is_read_without_them(monkeypatch):
    # taken silently: an allocation of 10^9 slices
    cluster = Cluster()
    cluster.pods.append(
        k8s_pod(
            "assistant",
            "chat-1",
            {C.SHARED_RESOURCE: "1"},
            node_name="h100-a",
            annotations={C.GPUS_ANN: "1/1000000000"},
        )
    )
    c = cycle(cluster, monkeypatch)
    msg = c.one("Pod assistant/chat-1")
    assert "1/1000000000" in msg
    intact(c)


# ------------------------------------------------------------------ the adapter: times


def _with_time(cluster: Cluster, where: str, value: Any) -> str:
    """Put `value` where `where` says; the ref of the object it is on."""
    if where == "pod creationTimestamp":
        cluster.pods[2].metadata.creation_timestamp = value
        return "Pod assistant/chat-extra"
    if where == "pod startTime":
        cluster.pods[0].status.start_time = value
        return "Pod llm-research/train-0"
    if where == "pod last-checkpoint":
        cluster.pods[0].metadata.annotations[C.LAST_CHECKPOINT_ANN] = value
        return "Pod llm-research/train-0"
    if where == "job suspended-at":
        cluster.jobs[1].metadata.annotations[C.SUSPENDED_BY_ANN] = value
        return "Job llm-research/resume-me"
    if where == "deployment last-scale":
        cluster.deployments[0].metadata.annotations[C.LAST_SCALE_ANN] = value
        return "Deployment assistant/chat-llm"
    if where == "agent idleSince":
        cluster.node_states.append(
            {
                "metadata": {"name": "h100-b"},
                "status": {"gpus": [{"index": i, "idleSince": value} for i in range(8)]},
            }
        )
        return "GpuNodeState h100-b"
    raise AssertionError(where)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("pod creationTimestamp", datetime(1, 1, 1, tzinfo=UTC)),
        ("pod startTime", datetime(1970, 1, 1, tzinfo=UTC)),  # a node whose clock reset
        ("pod last-checkpoint", "0001-01-01T00:00:00Z"),
        ("job suspended-at", "9999-12-31T23:59:59Z"),
        ("deployment last-scale", "0001-01-01T00:30:00+01:00"),
        ("agent idleSince", "1970-01-01T00:00:00Z"),
    ],
)
def test_a_time_outside_the_years_the_cluster_can_mean_reads_as_absent(monkeypatch, where, value):
    # taken silently: these times never crashed the planner or the twin, but a snapshot
    # dumped from the adapter must load, and the snapshot refuses them
    cluster = Cluster()
    ref = _with_time(cluster, where, value)
    c = cycle(cluster, monkeypatch)
    found = [m for r, m in c.unreadable() if r == ref]
    assert found, c.unreadable()
    assert all(
        "outside the years 2000-2199" in m and "MIN_TIME_YEAR" in m and "read as absent" in m
        for m in found
    )
    assert str(value)[:4] in " ".join(found)
    nodes = ("h100-a", "h100-b")
    intact(c, nodes=nodes)


# ------------------------------------------------------------------ the adapter: demand signals


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (C.QUEUE_LENGTH_ANN, "NaN"),
        (C.QUEUE_LENGTH_ANN, "-3"),
        (C.QUEUE_LENGTH_ANN, "inf"),
        (C.QUEUE_LENGTH_ANN, "lots"),
        (C.PENDING_P99_ANN, "-1"),
    ],
)
def test_a_demand_signal_that_is_not_a_finite_count_is_reported(monkeypatch, annotation, value):
    # dropped silently before: the service read as calm, its owner never told
    cluster = Cluster()
    cluster.deployments.append(k8s_deployment("assistant", "other", {annotation: value}))
    c = cycle(cluster, monkeypatch)
    msg = c.one("Deployment assistant/other")
    assert f"annotation {annotation} {value!r} is not a finite number >= 0" in msg
    [other] = [s for s in c.observed.services if s.name == "other"]
    assert (other.queue_length, other.pending_seconds_p99) == (None, None)
    assert [(s.key, s.queue_length) for s in c.observed.services if s.name != "other"] == [
        ("assistant/chat-llm", 3.0)
    ]


# --------------------------------------------------------------------------- snapshot files


def base_snapshot() -> dict:
    """A snapshot as a JSON-able dict: the same small cluster as `Cluster`, written directly."""
    h100 = "H100-SXM5-80GB"
    observed = ObservedState(
        observed_at=NOW,
        nodes=[
            node("h100-a", "h100", h100, [gpu(i, shared=8) for i in range(8)]),
            node("h100-b", "h100", h100),
        ],
        workloads=[
            training("llm-research", "train", "h100-b", [0, 1], started=NOW - timedelta(hours=1)),
            shared_pod("assistant", "chat-extra", None, pool="h100"),
            shared_pod("assistant", "chat-0", "h100-a", started=NOW - timedelta(hours=1)),
        ],
        services=[
            InferenceService(
                namespace="assistant",
                name="chat-llm",
                replicas=2,
                replica_request=Request(shared_slices=1),
                priority_class="serving",
                pool="h100",
                queue_length=3,
                last_scale_at=NOW - timedelta(hours=1),
                autoscalers=[
                    Autoscaler(
                        kind="HorizontalPodAutoscaler",
                        namespace="assistant",
                        name="chat-llm",
                        min_replicas=1,
                        max_replicas=4,
                        last_change_at=NOW - timedelta(hours=1),
                    )
                ],
            )
        ],
        suspended_jobs=[
            SuspendedJob(
                namespace="llm-research",
                name="resume-me",
                parallelism=2,
                request=Request(gpus=1),
                priority_class="training-low",
                pool="h100",
                suspended_at=NOW - timedelta(minutes=5),
            )
        ],
        recent_preemptions=[NOW - timedelta(minutes=30)],
    )
    return json.loads(dump_snapshot(observed, "json"))


def _set(data: dict, path: str, value: Any) -> None:
    """`data` at the dotted `path` (`nodes.0.gpus.1.sharedSlices`) set to `value`."""
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    for p in parents:
        data = data[p]
    data[last] = value


def consume(path: Path) -> tuple[int, str, str]:
    """What gpupool does with a snapshot file: `gpupool plan --observed`, and when it plans, a
    twin cycle over it (`plan --twin-load` steps the effect model from the snapshot's time)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(
            [
                "plan",
                "--observed",
                str(path),
                "--format",
                "json",
                str(ROOT / "pools"),
                str(ROOT / "policies"),
            ]
        )
    if rc == 0:
        from reconciler.observe.snapshot import load_snapshot

        planned(load_snapshot(path))
    return rc, out.getvalue(), err.getvalue()


def refused(tmp_path: Path, edit: Callable[[dict], None]) -> list[str]:
    """The error lines `gpupool plan` prints for the base snapshot after `edit`, which must
    refuse it: exit 1, each line located in the file, nothing else printed."""
    data = base_snapshot()
    edit(data)
    path = tmp_path / "observed.json"
    path.write_text(json.dumps(data, indent=1))
    rc, out, err = bounded(lambda: consume(path))
    assert rc == 1 and out == "", (rc, out[-500:], err[-2000:])
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[-1].endswith("nothing was changed."), err
    assert all(line.startswith(f"error: {path}:") for line in lines[:-1]), err
    return lines[:-1]


def test_the_base_snapshot_plans(tmp_path):
    path = tmp_path / "observed.json"
    path.write_text(json.dumps(base_snapshot()))
    rc, out, err = bounded(lambda: consume(path))
    assert rc == 0, err


@pytest.mark.parametrize(
    ("path", "value", "fragment"),
    [
        # HANG: a bucket per free slice, with shared demand in the pool
        ("nodes.0.gpus.3.sharedSlices", 10**9, "MAX_SHARED_SLICES_PER_GPU"),
        # taken silently: a pod holding 10^9 slices of one card
        ("workloads.2.allocations.0.slices", 10**9, "MAX_SHARED_SLICES_PER_GPU"),
        # HANG: one demand unit per pod
        ("suspendedJobs.0.parallelism", 10**9, "MAX_GANG_SIZE"),
        # taken silently
        ("workloads.0.gangSize", 10**9, "MAX_GANG_SIZE"),
        # CRASH: OverflowError, the planner's hour window before `observedAt`
        ("observedAt", "0001-01-01T00:00:00Z", "MIN_TIME_YEAR"),
        # CRASH: OverflowError, the twin's next cycle after `observedAt`
        ("observedAt", "9999-12-31T23:59:59Z", "MIN_TIME_YEAR"),
        # taken silently: every other time of a snapshot
        ("workloads.0.createdAt", "0001-01-01T00:00:00Z", "MIN_TIME_YEAR"),
        ("workloads.0.startedAt", "1970-01-01T00:00:00Z", "MIN_TIME_YEAR"),
        ("workloads.0.lastCheckpointAt", "9999-12-31T23:59:59Z", "MIN_TIME_YEAR"),
        ("nodes.1.gpus.0.idleSince", "0001-01-01T00:00:00+14:00", "MIN_TIME_YEAR"),
        ("nodes.1.gpus.0.belowSince", {"5": "0001-01-01T00:00:00Z"}, "MIN_TIME_YEAR"),
        ("services.0.lastScaleAt", "2200-01-01T00:00:00Z", "MIN_TIME_YEAR"),
        ("services.0.autoscalers.0.lastChangeAt", "1999-12-31T23:59:59Z", "MIN_TIME_YEAR"),
        ("suspendedJobs.0.suspendedAt", "0001-01-01T00:00:00Z", "MIN_TIME_YEAR"),
        ("recentPreemptions.0", "0001-01-01T00:00:00Z", "MIN_TIME_YEAR"),
    ],
)
def test_a_snapshot_value_beyond_its_bound_is_a_located_error(tmp_path, path, value, fragment):
    [line] = refused(tmp_path, lambda d: _set(d, path, value))
    where = path.split(".")
    written = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in where).lstrip(".")
    if isinstance(value, dict):
        written += f".{next(iter(value))}"  # the level whose time it is
    assert f"ObservedState {written}: " in line and fragment in line, line
    assert str(value if not isinstance(value, dict) else next(iter(value.values())))[:4] in line


def test_a_snapshot_node_with_more_gpus_than_a_node_carries_is_a_located_error(tmp_path):
    # HANG: 100,000 cards validated, then planned (tens of seconds)
    lines = refused(
        tmp_path,
        lambda d: _set(d, "nodes.1.gpus", [{"index": i} for i in range(100_000)]),
    )
    assert len(lines) == 1
    assert "ObservedState nodes[1].gpus: 100000 GPUs on one node" in lines[0]
    assert "MAX_GPUS_PER_NODE" in lines[0]
