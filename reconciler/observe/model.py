"""The observed state: one immutable snapshot of nodes, GPUs, workloads and demand.

Adapters (NVML, Kubernetes, snapshot files) produce it; the planner reads only this, so a
what-if needs no API calls. It serialises to YAML/JSON (`kind: ObservedState`).

Load-time checks (a snapshot file that breaks one is bad input: `gpupool plan` names file, line
and field and exits 1): every time carries a timezone and falls in the years
`conventions.MIN_TIME_YEAR`..`MAX_TIME_YEAR`, demand signals are finite and not negative,
counts stay within what the object can mean (`conventions.MAX_GPUS_PER_NODE` cards per node,
`MAX_SHARED_SLICES_PER_GPU` slices per card, `MAX_GANG_SIZE` pods per gang), and
`ObservedState` refuses duplicate nodes, GPU indices and workloads and MIG instances that
collide on a card (`snapshot_problems`). None of these can come from a live cluster: the
Kubernetes adapter normalises times and signals, reads what is out of bounds as unreadable and
leaves out cards that fail `node_problems` (see `reconciler/observe/kube.py` and
`kube_nodes.py`). What a live cluster
can produce (drift, races: a pod on a card that no longer has its MIG instance, two pods on one
whole card) is not refused here; the planner reports it (`reconciler/plan/consistency.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import cached_property
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from reconciler import conventions as C
from reconciler.conventions import API_VERSION, PRODUCT_LABEL
from reconciler.observe.model_dra import DraState
from reconciler.policy.catalog import Catalog, GpuModel, default_catalog
from reconciler.policy.models import yaml_name

OBSERVED_API_VERSION = API_VERSION

UTILIZATION_LEVELS: tuple[int, ...] = (1, 2, 5, 10, 15, 20, 25, 30, 40, 50)
"""The utilization thresholds (percent) the node agent tracks on every card (`Gpu.below_since`).
The agent does not read policy: each MaintenancePolicy may set its own `utilizationBelow`, so
the agent publishes a fixed ladder and the planner reads the level that fits
(`Gpu.idle_since_below`)."""


def time_problem(t: datetime) -> str:
    """Why `t` cannot be a time the cluster means ('' when it can): a year outside
    `conventions.MIN_TIME_YEAR`..`MAX_TIME_YEAR` (read as written, in its own offset, so no
    conversion can overflow)."""
    if C.MIN_TIME_YEAR <= t.year <= C.MAX_TIME_YEAR:
        return ""
    return (
        f"time {t.isoformat()} is outside the years {C.MIN_TIME_YEAR}-{C.MAX_TIME_YEAR} "
        "(conventions.MIN_TIME_YEAR, MAX_TIME_YEAR)"
    )


def _in_time_bounds(t: datetime) -> datetime:
    why = time_problem(t)
    if why:
        raise ValueError(why)
    return t


Time = Annotated[AwareDatetime, AfterValidator(_in_time_bounds)]
"""A time with a timezone, within the years the cluster can mean (`time_problem`)."""


def count_problem(value: int, bound: int, what: str, name: str) -> str:
    """Why `value` cannot be a count of `what` ('' when it can): more than `bound`, which
    `conventions.<name>` sets."""
    if value <= bound:
        return ""
    return f"{value} {what} is beyond the {bound} gpupool reads (conventions.{name})"


def _at_most(bound: int, what: str, name: str) -> AfterValidator:
    def check(v: int | None) -> int | None:
        why = count_problem(v, bound, what, name) if v is not None else ""
        if why:
            raise ValueError(why)
        return v

    return AfterValidator(check)


SliceCount = Annotated[
    int,
    Field(ge=0),
    _at_most(C.MAX_SHARED_SLICES_PER_GPU, "shared slices of one card", "MAX_SHARED_SLICES_PER_GPU"),
]
GangSize = Annotated[
    int, Field(ge=1), _at_most(C.MAX_GANG_SIZE, "pods in one gang", "MAX_GANG_SIZE")
]


class Obs(BaseModel):
    """An observed object: frozen, so what is derived from its fields alone (a workload's
    `key`) is computed once, on first read (`functools.cached_property`, kept in the instance's
    `__dict__` beside the fields). Pydantic's `==`, hash, `model_dump` and JSON read the fields
    only; `model_copy(update=...)` drops the cached values, which the changed fields may no
    longer give (tests/observe/test_cached_keys.py)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=yaml_name, populate_by_name=True
    )
    cached_names: ClassVar[tuple[str, ...]] = ()
    """The class's cached properties, which `model_copy` with an update drops."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls.cached_names = tuple(
            sorted(
                {
                    n
                    for c in cls.__mro__
                    for n, v in vars(c).items()
                    if isinstance(v, cached_property)
                }
            )
        )

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copied = super().model_copy(update=update, deep=deep)
        if update:
            for name in self.cached_names:
                copied.__dict__.pop(name, None)
        return copied


class GpuProcess(Obs):
    pid: int
    used_memory_mib: int = 0
    name: str = ""


class MigInstance(Obs):
    profile: str
    """GPU-instance profile, e.g. 3g.40gb."""
    start: int = Field(ge=0, le=7)
    """First memory slice of the placement."""
    uuid: str = ""


class Gpu(Obs):
    index: int = Field(ge=0)
    uuid: str = ""
    model: str = ""
    """Catalog model name or NVML name; empty: the node's model."""
    memory_mib: int = 0
    memory_used_mib: int = 0
    utilization: float = Field(default=0, ge=0, le=100)
    """Recent GPU utilization, percent."""
    idle_since: Time | None = None
    """Since when utilization has stayed below 1 % (the lowest of `UTILIZATION_LEVELS`),
    processes or not: `below_since[1]` (published by the node agent). Kept for readers that
    predate `below_since`; an agent from before it set this only with no process and 0 %.
    Idle reclaim reads `idle_since_below`, which uses this when `below_since` is empty."""
    below_since: dict[Annotated[int, Field(ge=1, le=100)], Time] = {}
    """Level (percent, one of `UTILIZATION_LEVELS`) -> since when every utilization sample the
    agent published has been below that level, processes or not. A level is absent while the
    latest sample is at or above it."""
    mig_enabled: bool = False
    mig_instances: list[MigInstance] = []
    shared_slices: SliceCount | None = None
    """Set when the card is shared (time-slicing/MPS): how many slices it offers (at most
    `conventions.MAX_SHARED_SLICES_PER_GPU`)."""
    numa_node: int = 0
    nvlink_island: int = 0
    processes: list[GpuProcess] = []

    @property
    def mode(self) -> Literal["whole", "mig", "shared"]:
        if self.mig_enabled:
            return "mig"
        if self.shared_slices:
            return "shared"
        return "whole"

    def idle_since_below(self, percent: float) -> datetime | None:
        """Since when this card's utilization has stayed below `percent` (a policy's
        `utilizationBelow`); None when it is not known to be. See `idle_since_below`."""
        return idle_since_below(self.below_since, self.idle_since, percent)

    def with_sample(
        self,
        utilization: float,
        now: datetime,
        before: Mapping[int, datetime] | None = None,
    ) -> Gpu:
        """This card after a utilization sample taken at `now`: `utilization`, and for each of
        `UTILIZATION_LEVELS` above it the stretch carried over from `before` (default: this
        card's own `below_since`, or its legacy `idle_since` when that is empty), else
        starting `now`; levels at or below the sample end their stretch. `idle_since` follows
        the lowest level."""
        if before is None:
            before = known_below(self)
        below = below_since_after(before, utilization, now)
        return self.model_copy(
            update={
                "utilization": utilization,
                "below_since": below,
                "idle_since": below.get(UTILIZATION_LEVELS[0]),
            }
        )


def below_since_after(
    before: Mapping[int, datetime], utilization: float, now: datetime
) -> dict[int, datetime]:
    """`below_since` after one sample: every level the sample is under keeps its start from
    `before` (else starts `now`); a level the sample reaches is dropped, so one sample at or
    above a level restarts that level's stretch, and only that level's and those below it."""
    return {lvl: before.get(lvl, now) for lvl in UTILIZATION_LEVELS if utilization < lvl}


def known_below(gpu: Gpu) -> dict[int, datetime]:
    """What `gpu` says about its stretches below each level: its `below_since`, or, from an
    agent that predates it (only `idle_since`: no process and 0 %, under every level), that
    time for every level."""
    if gpu.below_since:
        return dict(gpu.below_since)
    if gpu.idle_since is not None:
        return dict.fromkeys(UTILIZATION_LEVELS, gpu.idle_since)
    return {}


def idle_since_below(
    below_since: Mapping[int, datetime], idle_since: datetime | None, percent: float
) -> datetime | None:
    """Since when utilization has stayed below `percent`, read conservatively from the levels
    the agent tracks: the start of the stretch below the largest level <= `percent` (below a
    lower level is below `percent` too). A threshold between two levels (7 %) is read as the
    level under it (5 %), so the idle time may be under-counted, never over-counted; one
    under the lowest level (0.5 %) is never known to hold: None. None as well when no such
    level is published (the card is at or above it now).

    `below_since` empty and `idle_since` set (a snapshot file, or an agent from before
    `below_since`): `idle_since`, for any `percent` > 0."""
    if percent <= 0:
        return None  # nothing is below 0 %
    if not below_since:
        return idle_since
    fits = [lvl for lvl in below_since if lvl <= percent]
    return below_since[max(fits)] if fits else None


class Taint(Obs):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class Node(Obs):
    name: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    allocatable: dict[str, str] = {}
    """What the kubelet offers for scheduling (cpu, memory, nvidia.com/gpu, ...)."""
    unschedulable: bool = False
    taints: list[Taint] = []
    ready: bool = True
    ready_changed_at: Time | None = None
    """When the node's Ready condition last changed (its `lastTransitionTime`): since when it
    is Ready, or NotReady/Unknown; None: not known. A node back Ready for less than its pool's
    `nodeSettleTime` is not capacity yet (`reconciler/plan/stages/recovery.py`)."""
    created_at: Time | None = None
    """The Node object's creation time: a node Ready within `nodeSettleTime` of it is new,
    not back from a failure."""
    agent_reported_at: Time | None = None
    """When its node agent last published the node's `GpuNodeState` (`status.updatedAt`);
    None: no agent publishes, or not known. Earlier than `ready_changed_at` on a Ready node:
    the cards were not read since the node came back, and it is not capacity yet."""
    gpus: list[Gpu] = []
    """At most `conventions.MAX_GPUS_PER_NODE`."""

    @field_validator("gpus", mode="before")
    @classmethod
    def _not_more_cards_than_a_node_has(cls, v: Any) -> Any:
        # before the cards are validated one by one: 10^7 of them would take minutes
        if isinstance(v, list):
            why = count_problem(
                len(v), C.MAX_GPUS_PER_NODE, "GPUs on one node", "MAX_GPUS_PER_NODE"
            )
            if why:
                raise ValueError(why)
        return v


class Allocation(Obs):
    """What a running workload holds on its node."""

    gpu: int = Field(ge=0)
    mig_start: int | None = Field(default=None, ge=0, le=7)
    """For a MIG request: the start slot of the instance it uses."""
    mig_profile: str | None = None
    slices: SliceCount = 0
    """For a shared request: slices of this card it holds."""


class PodGpus(Obs):
    """Which cards one pod holds on its node: the node agent's `GpuNodeState` `status.pods`,
    mapped from the kubelet's PodResources device IDs through NVML UUIDs."""

    namespace: str
    name: str
    allocations: list[Allocation] = []

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class Request(Obs):
    """GPU resources a workload (or one replica) asks for."""

    gpus: int = Field(default=0, ge=0)
    """Whole cards (nvidia.com/gpu)."""
    mig: dict[str, int] = {}
    """MIG instances by profile (nvidia.com/mig-<profile>)."""
    shared_slices: int = Field(default=0, ge=0)
    """Shared slices (nvidia.com/gpu.shared)."""
    gpu_memory_mib: int = Field(default=0, ge=0)
    """GPU memory it declares it will use (annotation gpupool.io/gpu-memory); 0: undeclared."""

    @property
    def kind(self) -> Literal["whole", "mig", "shared", "none"]:
        if self.gpus:
            return "whole"
        if self.mig:
            return "mig"
        if self.shared_slices:
            return "shared"
        return "none"


class Workload(Obs):
    namespace: str
    name: str
    priority_class: str | None = None
    phase: Literal["Pending", "Running"] = "Running"
    request: Request
    pool: str | None = None
    """Pool a pending workload asks for (its gpupool.io/pool node selector), if any."""
    node: str | None = None
    allocations: list[Allocation] = []
    created_at: Time | None = None
    started_at: Time | None = None
    last_checkpoint_at: Time | None = None
    owner_kind: str = ""
    owner_name: str = ""
    checkpointable: bool = False
    migratable: bool = False
    """Can be checkpointed and restarted elsewhere (defragmentation may move it)."""
    admission: Literal["gpupool", "admitted", "scheduler", "other"] = "gpupool"
    """Who decides where a Pending pod goes:
    `gpupool`: it carries gpupool's scheduling gate (`gpupool.io/admission`) and no other:
    gpupool's demand, to be admitted (snapshot files: the default);
    `admitted`: gpupool removed its gate and pinned it to `node`, and kube-scheduler has not
    bound it yet: it holds `allocations` (whole cards of its node the adapter assigns it,
    `reconciler.observe.kube_pods.admitted_allocations`) like a running pod;
    `scheduler`: no gate: kube-scheduler places it as it comes (gpupool plans around it, its
    placement a prediction, and never admits it);
    `other`: another admission system's gate (Kueue's) is still on, or kube-scheduler would not
    schedule its Workload-API PodGroup yet (`kube_podgroups.held_for_group`): not demand until
    that is gone. A Running pod's value means nothing."""
    terminating: bool = False
    """The pod is being deleted (evicted, preempted, scaled down): it holds its cards until
    the kubelet has stopped it, and is never stopped again."""
    reserved_node: str | None = None
    reserved_gpus: list[int] = []
    """A gated pod's reservation (`gpupool.io/reserved`): the cards gpupool is freeing for it."""
    gang: str = ""
    """Its gang's identity when not its owner: a Workload-API PodGroup (`podgroup:<name>`), an
    explicit `gpupool.io/gang` or a coscheduling pod group (`pod-group:<name>`)."""
    gang_size: GangSize | None = None
    """How many pods its gang has when complete (Job parallelism, PodGroup minCount or
    minMember, `gpupool.io/gang-size`); None: the pods that exist are the gang."""
    held: str = ""
    """The message of the `gpupool.io/Admitted` False condition gpupool last set on it."""
    failed_at: Time | None = None
    """Only in `ObservedState.failed_members`: when the pod Failed (its containers' last
    finish, else its last condition change, else its creation)."""
    queue_name: str = ""
    """Its Kueue queue: the `kueue.x-k8s.io/queue-name` label of the pod or of its Job."""

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @cached_property
    def placed(self) -> bool:
        """It holds cards on `node`: running, or admitted and about to be bound there."""
        return bool(self.node) and (self.phase == "Running" or self.admission == "admitted")


AutoscalerKind = Literal["HorizontalPodAutoscaler", "ScaledObject"]


class Autoscaler(Obs):
    """An autoscaler that scales an inference workload: an autoscaling/v2
    HorizontalPodAutoscaler or a KEDA ScaledObject (keda.sh/v1alpha1) whose scaleTargetRef
    names it. gpupool sets its envelope (min/max) instead of the workload's replicas."""

    kind: AutoscalerKind
    namespace: str
    name: str
    min_replicas: int = Field(ge=0)
    """HPA `spec.minReplicas` (1 when absent, the HPA controller's default); ScaledObject
    `spec.minReplicaCount` (0 when absent: KEDA scales an idle workload to zero)."""
    max_replicas: int = Field(ge=0)
    """HPA `spec.maxReplicas`; ScaledObject `spec.maxReplicaCount` (100 when absent)."""
    idle_replicas: int | None = Field(default=None, ge=0)
    """ScaledObject `spec.idleReplicaCount` (None when absent; HPAs have none): KEDA scales an
    inactive target to it, and refuses a ScaledObject whose minReplicaCount is not above it."""
    owner: str = ""
    """`ScaledObject/<name>` for the HPA KEDA made for a ScaledObject (its controller
    ownerReference): KEDA owns it and would revert a change, so gpupool never plans for it;
    the ScaledObject's own envelope is what gpupool sets."""
    last_change_at: Time | None = None
    """When gpupool last changed this envelope (its `gpupool.io/last-scale` annotation): the
    ScalingPolicy's cooldowns count from here."""

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.key}"


class InferenceService(Obs):
    """A scalable inference Deployment/StatefulSet and its exported demand signals."""

    namespace: str
    name: str
    kind: Literal["Deployment", "StatefulSet"] = "Deployment"
    replicas: int = Field(ge=0)
    ready_replicas: int = 0
    replica_request: Request
    priority_class: str | None = None
    pool: str | None = None
    queue_length: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Requests waiting (exported by the serving stack), all replicas together."""
    pending_seconds_p99: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    last_scale_at: Time | None = None
    autoscalers: list[Autoscaler] = []
    """The HPAs and ScaledObjects whose scaleTargetRef names this workload (including the HPA
    KEDA made for a ScaledObject, marked by its `owner`). With one, gpupool sets that
    autoscaler's min/max instead of `replicas`; with two that are not KEDA's pair, neither."""

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pod_owner_kind(self) -> str:
        """What owns its pods: a Deployment's are owned by its ReplicaSet."""
        return "ReplicaSet" if self.kind == "Deployment" else self.kind

    def owns(self, w: Workload) -> bool:
        """`w` is one of this service's pods: owned by the StatefulSet, or by a ReplicaSet of
        the Deployment, which the deployment controller names `<deployment>-<template hash>`
        (kubernetes pkg/controller/deployment/sync.go, getNewReplicaSet); the bare name is
        accepted too (snapshot files and the effect model name it after the service)."""
        if w.namespace != self.namespace:
            return False
        if w.owner_kind != self.pod_owner_kind:
            return False
        if self.kind == "StatefulSet":
            return w.owner_name == self.name
        return self.name in (
            w.owner_name,
            w.owner_name.rsplit("-", 1)[0],
        )


def scale_down_order(w: Workload) -> tuple:
    """Which pods of a service a scale-down deletes first: unscheduled before scheduled, then
    the newest (the ReplicaSet controller's ranking, kubernetes pkg/controller/replicaset
    getPodsToDelete and pkg/controller controller_utils.go ActivePodsWithRanks)."""
    created = w.created_at.timestamp() if w.created_at else 0.0
    return (w.phase != "Pending", -created, w.name)


class SuspendedJob(Obs):
    """A Job gpupool suspended to stop its gang (`gpupool.io/suspended-at`): demand for
    `parallelism` pods asking `request` each, resumed when they fit."""

    namespace: str
    name: str
    parallelism: GangSize
    request: Request
    priority_class: str | None = None
    pool: str | None = None
    suspended_at: Time | None = None

    @cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class QuotaObject(Obs):
    """A ResourceQuota that exists in the cluster."""

    namespace: str
    name: str
    hard: dict[str, str] = {}
    managed_by: str = ""


class PriorityClassObject(Obs):
    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False
    """The class the API server gives pods created without a priorityClassName (Kubernetes'
    Priority admission, plugin/pkg/admission/priority/admission.go: on create only; a pod
    created while no class is globalDefault keeps priority 0 for good)."""
    managed_by: str = ""
    """Its `app.kubernetes.io/managed-by` label: gpupool changes only classes it manages."""


class KueueObject(Obs):
    """A Kueue ResourceFlavor, ClusterQueue or LocalQueue that exists in the cluster."""

    kind: Literal["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    namespace: str = ""
    """LocalQueues only (the others are cluster-scoped)."""
    name: str
    spec: dict[str, Any] = {}
    """Its `spec` as the API server returns it (with the CRD's defaults filled in)."""
    managed_by: str = ""
    terminating: bool = False
    """Deleted, and still there: Kueue's finalizer `kueue.x-k8s.io/resource-in-use` keeps it
    while workloads use it (kubernetes-sigs/kueue v0.17.0 apis/kueue/v1beta2/constants.go,
    pkg/controller/core/clusterqueue_controller.go)."""

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


class UnreadableObject(Obs):
    """Something read from the cluster that does not parse (a pod's annotation, an agent's
    entry, a foreign object): left out of the snapshot, or read without the bad part, and
    reported (a finding; the controller also writes an Event on the object). One tenant's
    malformed object never stops the cycle for everyone else."""

    kind: str
    """Pod, Node, GpuNodeState, Job, Deployment, ..."""
    namespace: str = ""
    name: str
    message: str

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"


# --------------------------------------------------------------- signals read from Prometheus


class SignalSample(Obs):
    """One sample of a query's result: its series' labels and a finite value."""

    labels: dict[str, str] = {}
    value: float = Field(allow_inf_nan=False)


class SignalReading(Obs):
    """What one PromQL query returned this cycle (`reconciler/observe/prometheus.py`), kept in
    the snapshot so that a plan made from the file sees what the controller saw. `id` names
    what it is for (`reconciler/plan/signals.py`); `query` is the text sent, after placeholder
    substitution. Either `samples` or `error` (timeout, HTTP error, Prometheus' own error, empty
    result, a non-finite value, a result of the wrong type, no Prometheus configured)."""

    id: str
    query: str
    samples: list[SignalSample] = []
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.samples)


class ObservedState(Obs):
    api_version: Literal[API_VERSION] = OBSERVED_API_VERSION
    kind: Literal["ObservedState"] = "ObservedState"
    observed_at: Time
    """The snapshot's time; the planner's notion of 'now' unless told otherwise."""
    nodes: list[Node] = []
    workloads: list[Workload] = []
    services: list[InferenceService] = []
    quotas: list[QuotaObject] = []
    priority_classes: list[PriorityClassObject] = []
    suspended_jobs: list[SuspendedJob] = []
    gated_namespaces: list[str] | None = None
    """Namespaces labelled for gpupool's admission (their new GPU pods are gated); None: not
    known (a snapshot file that does not say)."""
    recent_preemptions: list[Time] = []
    """When gpupool preempted workloads lately (the rolling-hour budget counts these)."""
    unreadable: list[UnreadableObject] = []
    """What the adapter could not read and left out (or read in part): each is a finding."""
    signals: list[SignalReading] = []
    """Readings of the PromQL queries the policies ask for (ScalingPolicy/MaintenancePolicy
    with source prometheus); empty when none does or no Prometheus was asked."""
    kueue: list[KueueObject] | None = None
    """Kueue's ResourceFlavors, ClusterQueues and LocalQueues; None: Kueue's CRDs are not
    served (or the snapshot does not say)."""
    dra: DraState | None = None
    """What Dynamic Resource Allocation says (resource.k8s.io/v1: ResourceSlices, DeviceClasses,
    ResourceClaims, which pod holds which device; observe/model_dra.py); None: not served (or
    the snapshot does not say)."""
    failed_members: list[Workload] = []
    """Bound pods of gangs (a Job's, a pod group's, an explicit `gpupool.io/gang`) in phase
    Failed, with `failed_at`: they hold nothing and are no demand; a gang whose member failed
    while the others run is stopped whole (`reconciler/plan/stages/recovery.py`)."""
    job_recoveries: dict[str, Annotated[int, Field(ge=0, le=C.MAX_RECOVERIES_READ)]] = {}
    """Job (namespace/name) -> how many times in a row gpupool stopped its gang soon after it
    started because a member was lost (the Job's `gpupool.io/recoveries`, believed only when
    gpupool's field manager wrote it). At `conventions.RECOVERY_ATTEMPTS` it is held."""

    @model_validator(mode="after")
    def _consistent(self) -> ObservedState:
        problems = snapshot_problems(self)
        if problems:
            raise Inconsistent(problems)
        return self


# --------------------------------------------------------------------------- load-time checks

ItemPath = tuple[str | int, ...]
"""Where a problem is, in YAML names, relative to the object checked: ("gpus", 2, "index")."""


class Inconsistent(ValueError):
    """Items of one snapshot contradict each other. Carries every problem with the path of the
    offending item, so a file's reader can point at its line (`reconciler/observe/snapshot.py`
    finds it in pydantic's error context)."""

    def __init__(self, problems: Iterable[tuple[ItemPath, str]]):
        self.problems: tuple[tuple[ItemPath, str], ...] = tuple(problems)
        super().__init__("; ".join(f"{_dotted(p)}: {m}" for p, m in self.problems))


def _dotted(path: ItemPath) -> str:
    return "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in path).lstrip(".")


def card_model(gpu: Gpu, node: Node, catalog: Catalog | None = None) -> GpuModel | None:
    """The catalog model of a card: its own model name (catalog or NVML name), else the
    node's `nvidia.com/gpu.product` label; None when the catalog knows neither."""
    catalog = catalog or default_catalog()
    for name in (gpu.model, node.labels.get(PRODUCT_LABEL, "")):
        if name:
            found = catalog.model_for_product(name)
            if found is not None:
                return found
    return None


def card_problems(gpu: Gpu, model: GpuModel | None) -> list[tuple[ItemPath, str]]:
    """MIG instances that cannot all exist on the card: any while MIG is off, two at one start,
    or (with the catalog's profile sizes, when the model and profile are known) two whose
    memory slices overlap. NVML never reports these: they mean a corrupt record."""
    out: list[tuple[ItemPath, str]] = []
    if gpu.mig_instances and not gpu.mig_enabled:
        out.append(
            (
                ("migInstances",),
                f"{len(gpu.mig_instances)} MIG instance(s) on a card whose migEnabled is false",
            )
        )
    first_at: dict[int, int] = {}
    spans: list[tuple[int, int, MigInstance]] = []  # (position, mask, instance)
    for j, inst in enumerate(gpu.mig_instances):
        where: ItemPath = ("migInstances", j, "start")
        if inst.start in first_at:
            out.append(
                (
                    where,
                    f"two MIG instances start at slice {inst.start} "
                    f"(migInstances[{first_at[inst.start]}] is the other)",
                )
            )
            continue
        first_at[inst.start] = j
        prof = model.profiles.get(inst.profile) if model is not None else None
        if prof is None:
            continue  # size unknown: only the start can be compared
        mask = ((1 << prof.memory_slices) - 1) << inst.start
        hit = next((other for other in spans if other[1] & mask), None)
        if hit is not None:
            k, _, other = hit
            out.append(
                (
                    where,
                    f"MIG instance {inst.profile} at slice {inst.start} overlaps "
                    f"{other.profile} at slice {other.start} (migInstances[{k}]) on {model.name}",
                )
            )
        spans.append((j, mask, inst))
    return out


def node_problems(node: Node, catalog: Catalog | None = None) -> list[tuple[ItemPath, str]]:
    """A node's cards that contradict each other or themselves: a GPU index listed twice, and
    `card_problems` of each card. Paths are relative to the node."""
    out: list[tuple[ItemPath, str]] = []
    first_at: dict[int, int] = {}
    for j, g in enumerate(node.gpus):
        if g.index in first_at:
            out.append(
                (
                    ("gpus", j, "index"),
                    f"GPU index {g.index} is listed twice on node {node.name} "
                    f"(gpus[{first_at[g.index]}] is the other)",
                )
            )
        else:
            first_at[g.index] = j
        if g.mig_instances:
            out += [(("gpus", j, *p), m) for p, m in card_problems(g, card_model(g, node, catalog))]
    return out


def snapshot_problems(
    state: ObservedState, catalog: Catalog | None = None
) -> list[tuple[ItemPath, str]]:
    """Everything `ObservedState` refuses beyond single fields: duplicate node names and
    workload keys, and `node_problems` of every node. Paths are relative to the snapshot."""
    out: list[tuple[ItemPath, str]] = []
    nodes: dict[str, int] = {}
    for i, n in enumerate(state.nodes):
        if n.name in nodes:
            out.append(
                (("nodes", i, "name"), f"node {n.name} is listed twice (nodes[{nodes[n.name]}])")
            )
        else:
            nodes[n.name] = i
        out += [(("nodes", i, *p), m) for p, m in node_problems(n, catalog)]
    keys: dict[str, int] = {}
    for i, w in enumerate(state.workloads):
        if w.key in keys:
            out.append(
                (
                    ("workloads", i, "name"),
                    f"workload {w.key} is listed twice (workloads[{keys[w.key]}])",
                )
            )
        else:
            keys[w.key] = i
    return out


def parse_allocation(text: str) -> list[Allocation]:
    """`gpupool.io/gpus`: "0,1" whole cards; "2:4" MIG instance at start 4;
    "3/2" 2 shared slices. (Observation reads the node agent's `status.pods` first.)"""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if ":" in part:
            g, start = part.split(":", 1)
            out.append(Allocation(gpu=int(g), mig_start=int(start)))
        elif "/" in part:
            g, n = part.split("/", 1)
            out.append(Allocation(gpu=int(g), slices=int(n)))
        else:
            out.append(Allocation(gpu=int(part)))
    return out
