"""The shape of a handler table row, and running one against any `ClusterOps`.

A row is a starting cluster state (`seed`: the objects below, all namespaced ones in the test
namespace `NS`), an action, the clock, and what must come of it: the Outcome's status and a
fragment of its message, the port's mutating operations in order (`writes`), and an optional
`check` that reads the cluster afterwards through a `Probe`. The rows themselves are rows.py's;
they run against `MemoryCluster` (test_handlers.py) and against `KubeOps` over an API server
(test_handlers_api.py), which seeds the objects through the client instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from reconciler.apply.configs import yaml_load
from reconciler.apply.handlers import HANDLERS, ApplyConfig, Context
from reconciler.apply.port import (
    ApiError,
    ClusterOps,
    NodeInfo,
    PodCondition,
    PodInfo,
    PriorityClassInfo,
    WorkloadKind,
)
from reconciler.observe.builders import gpu
from reconciler.plan.actions import Action
from tests.apply.memory import MUTATING, MemoryCluster

NS = "team-a"
"""The namespace of the rows' namespaced objects and targets (the test namespace on a server)."""
NODE = "gpu-1"
NOW = datetime(2026, 3, 2, 12, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).isoformat()


def gpu_status(index: int, mig: list[str] | None = None, model: str = "A100-SXM4-80GB") -> dict:
    """One card as the node agent lists it in its GpuNodeState's status."""
    g = gpu(index, mig=mig, model=model).model_copy(update={"model": model})
    return g.model_dump(mode="json", by_alias=True, exclude_defaults=True)


# ---------------------------------------------------------------------- what a row seeds
@dataclass(frozen=True)
class Node:
    name: str = NODE
    cordoned: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)
    """status.allocatable, as the kubelet posts what the device plugin advertises."""


@dataclass(frozen=True)
class NodeState:
    """The node agent's GpuNodeState: `gpus` as its status lists them."""

    node: str
    gpus: tuple[dict, ...]


@dataclass(frozen=True)
class Job:
    """A batch/v1 Job, seeded before the pods it owns. On a server it is managed by no one
    (`spec.managedBy` names no real controller), so the Job controller neither creates pods for
    it nor touches the pods the rows give it."""

    name: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    suspended: bool = False
    """`spec.suspend`: true from its creation."""


@dataclass(frozen=True)
class ReplicaSet:
    """An apps/v1 ReplicaSet to own pods (MemoryCluster keeps none: nothing reads them). On a
    server: zero replicas, and a selector no row's pod matches."""

    name: str


@dataclass(frozen=True)
class Owner:
    """One ownerReference of a pod: a `Job` or `ReplicaSet` seeded before the pod (on a server
    the garbage collector deletes a pod whose owners are all missing).

    A server's ReplicaSet controller releases a pod it controls that its selector does not
    match, and deletes one it does beyond its replicas, so rows give a ReplicaSet's pod a
    reference with `controller` False: its owner is then its first reference (see PodInfo)."""

    kind: str
    name: str
    controller: bool = True


@dataclass(frozen=True)
class Pod:
    name: str
    node: str | None = NODE
    phase: str | None = None
    """None: Running when bound to a node, else Pending."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    gpus: bool = True
    """A container asks for `nvidia.com/gpu`."""
    deleting: bool = False
    delete_asked: datetime | None = None
    """When its deletion was asked for (a terminating pod; in memory only: on a server the
    deletion is stamped by its clock)."""
    pdb: bool = False
    """A PodDisruptionBudget protects it and allows no disruption now."""
    gates: tuple[str, ...] = ()
    """Scheduling gates, set at creation (the API server allows them only on an unbound pod,
    and afterwards only their removal)."""
    affinity: tuple[Mapping[str, Any], ...] = ()
    """Its own required node affinity terms (nodeSelectorTerms, as the API's JSON)."""
    conditions: tuple[PodCondition, ...] = ()
    """status.conditions besides what the kubelet or the scheduler would post."""
    owners: tuple[Owner, ...] = ()
    """Its ownerReferences, in order."""
    annotated_by: str | None = None
    """The field manager that wrote its annotations: None, the test client's own (on a server
    `OpenAPI-Generator`; in memory none on record), which gpupool trusts for nothing."""
    claims: tuple[tuple[str, str], ...] = ()
    """Its DRA claims (entry, ResourceClaim name or "" while not made; MemoryCluster only):
    then its uid is `uid-<name>`."""
    templates: Mapping[str, str] = field(default_factory=dict)
    """Entry -> the ResourceClaimTemplate it names (MemoryCluster only)."""

    @property
    def owner(self) -> tuple[str, str] | None:
        """(kind, name) of its owner: the controller reference, else the first (as PodInfo)."""
        o = next((o for o in self.owners if o.controller), self.owners[0] if self.owners else None)
        return None if o is None else (o.kind, o.name)


@dataclass(frozen=True)
class Workload:
    name: str
    replicas: int
    kind: WorkloadKind = "Deployment"
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ConfigMap:
    name: str
    data: Mapping[str, str]


@dataclass(frozen=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False
    managed_by: str = "gpupool"
    """Its managed-by label ("": none): gpupool's own unless a row says otherwise."""


@dataclass(frozen=True)
class Quota:
    """A ResourceQuota in `NS` (MemoryCluster rows only)."""

    name: str
    managed_by: str = "gpupool"
    """Its managed-by label ("": none)."""


@dataclass(frozen=True)
class Kueue:
    """A Kueue object (MemoryCluster rows only); `namespace` "" for the cluster-scoped kinds."""

    kind: str
    name: str
    namespace: str = ""
    spec: Mapping[str, Any] = field(default_factory=dict)
    managed_by: str = "gpupool"


@dataclass(frozen=True)
class Dra:
    """A DeviceClass, ResourceClaimTemplate or ResourceClaim (MemoryCluster rows only);
    `namespace` "" for a DeviceClass."""

    kind: str
    name: str
    namespace: str = ""
    spec: Mapping[str, Any] = field(default_factory=dict)
    managed_by: str = "gpupool"
    meta: Mapping[str, Any] = field(default_factory=dict)
    """More metadata (a ResourceClaim's annotations, ownerReferences)."""
    status: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class AutoscalerSeed:
    """An HPA or a KEDA ScaledObject in `NS` (MemoryCluster rows only)."""

    kind: str
    name: str
    min_replicas: int
    max_replicas: int
    target: tuple[str, str] = ("Deployment", "serve")
    owner: str = ""


Seed = (
    Node
    | NodeState
    | Job
    | ReplicaSet
    | Pod
    | Workload
    | ConfigMap
    | PriorityClass
    | Quota
    | AutoscalerSeed
    | Kueue
    | Dra
)


# ---------------------------------------------------------------------- reading back
class Probe:
    """Reads the cluster after a row ran, the same way whatever is behind it."""

    def __init__(self, ops: ClusterOps, namespace: str, cfg: ApplyConfig):
        self.ops, self.namespace, self.cfg = ops, namespace, cfg

    def node(self, name: str = NODE) -> NodeInfo:
        n = self.ops.read_node(name)
        assert n is not None, f"node {name} is gone"
        return n

    def pod(self, name: str) -> PodInfo | None:
        return self.ops.read_pod(self.namespace, name)

    def pod_terms(self, name: str) -> list[dict]:
        """The pod's required node affinity terms (nodeSelectorTerms, as the API's JSON)."""
        raise NotImplementedError

    def job_annotations(self, name: str) -> dict[str, str] | None:
        """A Job's annotations, None when it is missing."""
        raise NotImplementedError

    def job_suspended(self, name: str) -> bool | None:
        """A Job's `spec.suspend`, None when it is missing."""
        raise NotImplementedError

    def evicted(self, name: str) -> bool:
        """Gone, or terminating (a kubelet finishes the deletion later)."""
        p = self.pod(name)
        return p is None or p.deleting

    def config_map(self, name: str) -> dict[str, str] | None:
        cm = self.ops.read_config_map(self.cfg.mig_config_namespace, name)
        return None if cm is None else cm.data

    def mig_configs(self) -> dict[str, Any]:
        """The `mig-configs` of mig-manager's config.yaml."""
        data = self.config_map(self.cfg.mig_config_map)
        assert data is not None, "no mig-parted ConfigMap"
        doc = yaml_load(data["config.yaml"])
        assert doc["version"] == "v1"
        return doc["mig-configs"]

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        return self.ops.read_priority_class(name)

    def workload(self, kind: WorkloadKind, name: str) -> dict[str, Any]:
        """replicas, annotations, resource_version."""
        raise NotImplementedError

    def quota(self, name: str) -> dict[str, Any] | None:
        """labels, hard."""
        raise NotImplementedError


class MemoryProbe(Probe):
    def __init__(self, cluster: MemoryCluster, namespace: str, cfg: ApplyConfig):
        super().__init__(cluster, namespace, cfg)
        self.cluster = cluster

    def workload(self, kind: WorkloadKind, name: str) -> dict[str, Any]:
        return self.cluster.workload(kind, self.namespace, name)

    def pod_terms(self, name: str) -> list[dict]:
        return self.cluster.pod_terms(self.namespace, name)

    def job_annotations(self, name: str) -> dict[str, str] | None:
        return self.cluster.job_annotations(self.namespace, name)

    def job_suspended(self, name: str) -> bool | None:
        return self.cluster.job_suspended(self.namespace, name)

    def quota(self, name: str) -> dict[str, Any] | None:
        q = self.cluster.quotas.get((self.namespace, name))
        return (
            None
            if q is None
            else {"labels": q["metadata"].get("labels") or {}, "hard": q["spec"]["hard"]}
        )


# ---------------------------------------------------------------------- a row
@dataclass(frozen=True)
class Row:
    id: str
    action: Action
    seed: tuple[Seed, ...] = ()
    status: str = "done"
    """The Outcome's status, or "error" when the handler raises ApiError (`message` then holds
    the status code)."""
    message: str = ""
    """A fragment of the Outcome's message."""
    writes: tuple[str, ...] = ()
    """The port's mutating operations that succeeded, in order."""
    now: datetime = NOW
    grace: Mapping[str, float] = field(default_factory=dict)
    """Checkpoint grace periods by checkpoint id (the executor takes them from the plan)."""
    fail: Mapping[str, ApiError] = field(default_factory=dict)
    """Injected errors per operation (MemoryCluster only)."""
    check: Callable[[Probe], None] | None = None
    changed: bool | None = None
    """Outcome.changed; None: whether anything was written."""
    budget: int | None = None
    """How often the handler called `Context.before_preempt` (the controller's write-ahead
    record in the hourly eviction budget); None: not checked."""
    bug: str | None = None
    """The row states what should happen and the handler does not do it yet (a strict xfail)."""

    def __str__(self) -> str:
        return self.id


@dataclass
class Result:
    status: str
    message: str
    changed: bool
    writes: list[str]
    budget: list[str] = field(default_factory=list)
    """The ids of the actions `before_preempt` was called for, in order."""
    stopped: bool = False
    """Outcome.stopped."""


class Recording:
    """Wraps a `ClusterOps`, recording the mutating operations that succeed."""

    def __init__(self, ops: ClusterOps):
        self._ops = ops
        self.writes: list[str] = []

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._ops, name)
        if name not in MUTATING:
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            self.writes.append(name)
            return out

        return call


def run(
    row: Row,
    ops: ClusterOps,
    cfg: ApplyConfig,
    action: Action | None = None,
    *,
    writes: Callable[[], list[str]],
) -> Result:
    """Run the row's handler once; `writes()` lists what it wrote."""
    a = action or row.action
    budget: list[str] = []
    ctx = Context(
        ops,
        cfg,
        clock=lambda: row.now,
        grace=dict(row.grace),
        before_preempt=lambda x, _pod: budget.append(x.id),
    )
    try:
        out = HANDLERS[type(a)](a, ctx)
    except ApiError as exc:
        return Result("error", f"{exc.status} {exc}", False, writes(), budget)
    assert out.action == a.id
    return Result(out.status, out.message, out.changed, writes(), budget, out.stopped)


def assert_result(row: Row, got: Result) -> None:
    assert (got.status, row.message in got.message) == (row.status, True), (
        f"expected {row.status} with {row.message!r}, got {got.status}: {got.message!r}"
    )
    assert got.writes == list(row.writes)
    if row.budget is not None:
        assert len(got.budget) == row.budget, f"before_preempt called for {got.budget}"
    if got.status != "error":
        assert got.changed == (bool(row.writes) if row.changed is None else row.changed)


# ---------------------------------------------------------------------- in memory
def memory_config() -> ApplyConfig:
    return ApplyConfig(mig_config_namespace=NS)


def seed_memory(row: Row) -> MemoryCluster:
    c = MemoryCluster(namespaces={NS}, fail=dict(row.fail))
    for s in row.seed:
        if isinstance(s, Node):
            c.add_node(
                s.name,
                unschedulable=s.cordoned,
                labels=dict(s.labels),
                annotations=dict(s.annotations),
                allocatable=dict(s.allocatable),
            )
        elif isinstance(s, NodeState):
            c.set_node_state(s.node, {"status": {"gpus": list(s.gpus)}})
        elif isinstance(s, Pod):
            c.add_pod(
                NS,
                s.name,
                node=s.node,
                phase=s.phase,
                annotations=dict(s.annotations),
                labels={"app": s.name},
                gpu_resources=s.gpus,
                deleting=s.deleting,
                gates=s.gates,
                terms=[dict(t) for t in s.affinity],
                conditions=s.conditions,
                owner=s.owner,
                annotated_by=s.annotated_by,
                claims=s.claims,
                templates=dict(s.templates),
                delete_asked=s.delete_asked,
            )
            if s.pdb:
                c.pdb_blocked.add(f"{NS}/{s.name}")
        elif isinstance(s, Job):
            c.add_job(NS, s.name, annotations=dict(s.annotations), suspend=s.suspended)
        elif isinstance(s, ReplicaSet):
            pass  # kept by no one: only its pods' ownerReferences name it
        elif isinstance(s, Workload):
            c.add_workload(s.kind, NS, s.name, replicas=s.replicas, annotations=dict(s.annotations))
        elif isinstance(s, ConfigMap):
            c.add_config_map(NS, s.name, dict(s.data))
        elif isinstance(s, AutoscalerSeed):
            c.add_autoscaler(
                s.kind,  # type: ignore[arg-type]
                NS,
                s.name,
                min_replicas=s.min_replicas,
                max_replicas=s.max_replicas,
                target=s.target,
                owner=s.owner,
            )
        elif isinstance(s, PriorityClass):
            c.add_priority_class(
                s.name,
                value=s.value,
                preemption_policy=s.preemption_policy,
                global_default=s.global_default,
                managed_by=s.managed_by,
            )
        elif isinstance(s, Quota):
            c.quotas[(NS, s.name)] = {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {
                    "name": s.name,
                    "namespace": NS,
                    "labels": {"app.kubernetes.io/managed-by": s.managed_by}
                    if s.managed_by
                    else {},
                },
                "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
            }
        elif isinstance(s, Kueue):
            md: dict[str, Any] = {"name": s.name}
            if s.namespace:
                md["namespace"] = s.namespace
            if s.managed_by:
                md["labels"] = {"app.kubernetes.io/managed-by": s.managed_by}
            c.kueue[(s.kind, s.namespace, s.name)] = {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": s.kind,
                "metadata": md,
                "spec": dict(s.spec),
            }
        elif isinstance(s, Dra):
            md = {"name": s.name, **({"namespace": s.namespace} if s.namespace else {})}
            if s.managed_by:
                md["labels"] = {"app.kubernetes.io/managed-by": s.managed_by}
            c.dra[(s.kind, s.namespace, s.name)] = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": s.kind,
                "metadata": {**md, **s.meta},
                "spec": dict(s.spec),
                **({"status": dict(s.status)} if s.status is not None else {}),
            }
        else:  # pragma: no cover
            raise TypeError(s)
    return c


def run_memory(row: Row) -> tuple[Result, MemoryCluster]:
    c = seed_memory(row)
    got = run(row, c, memory_config(), writes=c.write_ops)
    return got, c
