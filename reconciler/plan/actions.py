"""The contract between planner and executor: one frozen type per kind of action.

Every action has a stable `id` (the same change gets the same id in every plan), a `kind`
(the discriminator), a `target` (node, namespace/name or name: what a person looks for), a
one-line `reason`, its `pool` when it has one and the ids it `depends_on`. The rest is typed
per kind; nothing is carried in an untyped bag.

Adding a kind touches four findable places: its type here (and in `Action`), one planner step
that emits it, one handler in `reconciler/apply/handlers/`, one line in `SYMBOL` of
`reconciler/plan/render.py`.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_serializer, model_validator


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActionBase(Frozen):
    id: str
    """Stable identity: the same change gets the same id in every plan."""
    target: str
    """What it acts on: a node, namespace/name, or a cluster-scoped object's name."""
    reason: str
    """One line a human can check."""
    pool: str | None = None
    depends_on: tuple[str, ...] = ()

    DISRUPTIVE: ClassVar[bool] = False
    """Stops or drains work (listed first, and each one an Event when it writes)."""

    @model_validator(mode="before")
    @classmethod
    def _drop_computed(cls, data: object) -> object:
        # `disruptive` is written into plan.json for readers; it is derived, never read back.
        if isinstance(data, dict) and "disruptive" in data:
            data = {k: v for k, v in data.items() if k != "disruptive"}
        return data

    @computed_field  # type: ignore[prop-decorator]
    @property
    def disruptive(self) -> bool:
        return self.DISRUPTIVE


# ----------------------------------------------------------------------------- nodes
class Cordon(ActionBase):
    """Stop new pods landing on a node about to be repartitioned (target: the node)."""

    kind: Literal["cordon"] = "cordon"
    DISRUPTIVE: ClassVar[bool] = True


class Uncordon(ActionBase):
    """Schedule on a node gpupool cordoned again (never one someone else cordoned)."""

    kind: Literal["uncordon"] = "uncordon"


class LabelNode(ActionBase):
    """Pool membership labels on a node (a None value removes the label)."""

    kind: Literal["label-node"] = "label-node"
    labels: dict[str, str | None]


class CardChange(Frozen):
    """One card of a repartition: its partition before and after, as a person reads it."""

    gpu: int = Field(ge=0)
    before: str
    after: str


class CardLayout(Frozen):
    """A card's MIG layout after the change; `profiles` None: MIG off (a whole card)."""

    gpu: int = Field(ge=0)
    profiles: tuple[str, ...] | None


class CardSlices(Frozen):
    """A card shared in time slices after the change."""

    gpu: int = Field(ge=0)
    slices: int = Field(ge=1)


class Repartition(ActionBase):
    DISRUPTIVE: ClassVar[bool] = True
    cards: tuple[CardChange, ...]
    """The cards that change (the only ones that must be idle)."""
    shared_slices: tuple[CardSlices, ...] = ()
    """Every card of the node that is shared after the change."""

    @property
    def changed_gpus(self) -> frozenset[int]:
        return frozenset(c.gpu for c in self.cards)


class MigReconfigure(Repartition):
    """A new MIG layout on emptied cards (mig-manager's config + node label)."""

    kind: Literal["mig-reconfigure"] = "mig-reconfigure"
    layout: tuple[CardLayout, ...]
    """Every card of the node: mig-manager applies one config per node."""


class SetSharing(Repartition):
    """A node's whole cards <-> shared slices. The device plugin shares per node: the config
    the node label selects applies to every card of the node not in MIG mode (it ignores a
    `devices` list), so a node is shared as a whole or not at all."""

    kind: Literal["set-sharing"] = "set-sharing"
    slices: int | None = Field(default=None, ge=2)
    """Replicas of every non-MIG card of the node after the change; None: no sharing (the
    plugin's `default` config; `replicas: 1` is not "no sharing", the plugin rejects it)."""
    strategy: Literal["time-slicing", "mps"] = "time-slicing"
    """How the cards are shared: time-slicing isolates no memory; MPS caps each client's
    memory at the card's divided by `slices`."""
    plain_cards: int = Field(default=0, ge=0)
    """Cards of the node not in MIG mode after the change: the plugin advertises each as one
    `nvidia.com/gpu`, or as `slices` `nvidia.com/gpu.shared` (what allocatable must show)."""


class PartitionChange(Repartition):
    """A repartition through a partition backend other than the device plugin's
    (reconciler/plan/partition): `settings` are the backend's own, carried out by the handler
    the backend registers in apply (`handles_partition`)."""

    kind: Literal["partition-change"] = "partition-change"
    backend: str
    settings: dict[str, str] = {}


# ----------------------------------------------------------------------------- workloads
class Checkpoint(ActionBase):
    """Ask a workload to checkpoint (an annotation it watches), then wait its grace period."""

    kind: Literal["checkpoint"] = "checkpoint"
    DISRUPTIVE: ClassVar[bool] = True
    grace_period_seconds: int = Field(ge=0)
    checkpointable: bool


class Eviction(ActionBase):
    """Evict a pod through the Eviction API (PodDisruptionBudgets honoured)."""

    DISRUPTIVE: ClassVar[bool] = True
    node: str | None
    gpus: tuple[int, ...]
    """The cards it held on `node`."""
    priority_class: str | None = None
    suspend_job: str | None = None
    """The Job that owns it, suspended instead of evicting the pod (the Job controller then
    deletes its pods and creates none until gpupool resumes it); None: evicted."""
    lost: bool = False
    """Stopped because its gang lost a member or its node failed (recovery,
    `stages/recovery.py`): no class, minRuntime or budget rule holds it back (the gang cannot
    progress); it still counts in the hour's preemptions once done."""
    recoveries: int | None = Field(default=None, ge=1)
    """Set when it is stopped because its gang lost a member and `suspend_job` is set: the
    Job's `gpupool.io/recoveries` count, written with the suspension (the no-flapping rule)."""


class Preempt(Eviction):
    kind: Literal["preempt"] = "preempt"
    preemptor: str | None = None
    """The pending demand it makes room for; None when it enforces its team's maxGPUs."""


class Reclaim(Eviction):
    """A workload whose cards have been idle too long, or one stopped because its gang lost a
    member or its node failed (recovery: re-admitted whole elsewhere)."""

    kind: Literal["reclaim"] = "reclaim"


class Move(Eviction):
    """Defragmentation: checkpoint, evict, let it restart on `to_node`: the owning Job gets
    `gpupool.io/next-pod-reserved` first, so its recreated (gated) pod is admitted there."""

    kind: Literal["move"] = "move"
    to_node: str
    to_gpus: tuple[int, ...] = ()
    """The cards on `to_node` kept for it: its owner's next pod is reserved there."""


class SignalValue(Frozen):
    """A reading a scaling decision used: which signal, the PromQL sent, and its value."""

    name: str
    """queueLength, waitTime, forecast/<d>d (a forecast day's reading), forecast-down/<d>d
    (one of the scale-down window, forecast.scaleDownLookahead) or forecast-level/<d>d (the
    queue level d days back, 0d now: forecast.model scaled)."""
    query: str
    value: float


class Scale(ActionBase):
    """Replicas of an inference Deployment or StatefulSet."""

    kind: Literal["scale"] = "scale"
    workload_kind: Literal["Deployment", "StatefulSet"]
    from_replicas: int = Field(ge=0)
    to_replicas: int = Field(ge=0)
    policy: str
    signals: tuple[SignalValue, ...] = ()
    """The Prometheus readings the decision used (ScalingPolicy signals.source prometheus)."""

    @property
    def up(self) -> bool:
        return self.to_replicas > self.from_replicas


class SetScaleEnvelope(ActionBase):
    """The envelope of the autoscaler (an HPA or a KEDA ScaledObject) that scales an inference
    workload, instead of its replicas (target: the autoscaler, namespace/name). `to_max` is
    the capacity gpupool planned for the service; the autoscaler picks replicas within
    [`to_min`, `to_max`] on its own metrics. HPA: spec.minReplicas/maxReplicas; ScaledObject:
    spec.minReplicaCount/maxReplicaCount."""

    kind: Literal["scale-envelope"] = "scale-envelope"
    autoscaler_kind: Literal["HorizontalPodAutoscaler", "ScaledObject"]
    workload_kind: Literal["Deployment", "StatefulSet"]
    workload: str
    """The name of the workload it scales (in the autoscaler's namespace)."""
    from_min: int = Field(ge=0)
    to_min: int = Field(ge=0)
    from_max: int = Field(ge=0)
    to_max: int = Field(ge=1)
    policy: str
    signals: tuple[SignalValue, ...] = ()
    """The Prometheus readings the decision used (as `Scale.signals`)."""


# ----------------------------------------------------------------------------- admission
def _without_empty(out: Any, field: str) -> Any:
    """A serialised action without `field` where it is empty: a field added later, left out
    where it says nothing, so the plans that do not use it are written as before."""
    if isinstance(out, dict) and not out.get(field):
        out.pop(field, None)
    return out


class PodAdmission(Frozen):
    """One pod of an admitted gang: the node it goes to and the cards the plan means for it
    (a hint: the device plugin chooses the devices; the node agent reports what it chose)."""

    name: str
    node: str
    gpus: tuple[int, ...] = ()
    devices: tuple[str, ...] = ()
    """DRA pools only: the `uuid` attributes of the devices the plan chose (whole cards and MIG
    devices, as NVIDIA's driver publishes them; a DynamicMIG partition, which has no uuid
    before it is made, as `<driver>/<pool>/<device>`, its placement); the executor writes the
    pod's claims so the allocator can pick only these (the partitions: it writes their
    allocation; exact admission)."""
    refs: tuple[str, ...] = ()
    """DRA pools with `dra.admission: allocate` whose guard is in place on the node: the same
    devices as `<driver>/<pool>/<device>`, which the executor writes as the allocation of the
    pod's own claims made from gpupool's templates (a claim of another kind is pinned to
    `devices` instead)."""

    @model_serializer(mode="wrap")
    def _without_empty_devices(self, handler: Any) -> Any:
        """A device plugin pool's admission is written as before (no `devices`), and a pinned
        one without `refs`."""
        return _without_empty(_without_empty(handler(self), "devices"), "refs")


class Admit(ActionBase):
    """Let a gated gang run where the plan placed it (target: its first pod, namespace/name;
    the id `admit:<that key>` is stable while the gang's pods exist).

    The executor first records the reservation on every pod (`gpupool.io/reserved`), then
    waits until every pod of `after` is gone (the pods evicted to free these cards, or
    terminating on them: while they terminate, kube-scheduler still counts their cards and
    might preempt others) and, on DRA, every claim of `after_claims` deallocated, then, per
    pod, sets required node affinity to its node and removes gpupool's scheduling gate in one
    patch (the API server allows the affinity only while the pod is gated). All pods of the
    gang or, if interrupted, the rest of them in the next cycle."""

    kind: Literal["admit"] = "admit"
    namespace: str
    pods: tuple[PodAdmission, ...]
    after: tuple[str, ...] = ()
    """Pods (namespace/name) that must be gone first: evicted for these cards, or terminating
    on them."""
    after_claims: tuple[str, ...] = ()
    """DRA pools: the ResourceClaims (namespace/name) allocated for the pods of `after`. After
    those pods are gone, each must be deallocated or gone too: kube-scheduler's allocator
    counts a device as taken while a claim's allocation names it."""

    @model_serializer(mode="wrap")
    def _without_empty_claims(self, handler: Any) -> Any:
        """An admission waiting for no claim is written as before (no `after_claims`)."""
        return _without_empty(handler(self), "after_claims")


class Resume(ActionBase):
    """Resume a Job gpupool suspended (target: namespace/name): the plan found room for its
    pods, which are created gated and admitted like any gated gang."""

    kind: Literal["resume"] = "resume"


class Hold(ActionBase):
    """Tell a gated pod's owner why it stays gated: a pod condition `gpupool.io/Admitted`
    False with the reason (target: namespace/name)."""

    kind: Literal["hold"] = "hold"
    code: str
    message: str


# ----------------------------------------------------------------------------- objects
class ApplyQuota(ActionBase):
    """Create or update a team's ResourceQuota (target: namespace/name)."""

    kind: Literal["quota"] = "quota"
    verb: Literal["create", "update"]
    hard: dict[str, str]
    previous: dict[str, str] | None = None


class ApplyPriorityClass(ActionBase):
    """Create or update a PriorityClass (replaced when its immutable fields change)."""

    kind: Literal["priority-class"] = "priority-class"
    value: int
    preemption_policy: Literal["Never", "PreemptLowerPriority"]
    global_default: bool = False
    """Given to pods created without a class (PriorityPolicy `defaultClass`)."""


class PruneQuota(ActionBase):
    """Delete a ResourceQuota gpupool made (target: namespace/name) that the desired state no
    longer has; the executor deletes it only while it still carries gpupool's label."""

    kind: Literal["prune-quota"] = "prune-quota"


class PrunePriorityClass(ActionBase):
    """Delete a PriorityClass gpupool made that the policy no longer names and no pod uses;
    deleted only while it still carries gpupool's label."""

    kind: Literal["prune-priority-class"] = "prune-priority-class"


# ------------------------------------------------------------------------------------------ Kueue
class ApplyKueueObject(ActionBase):
    """Create or update (JSON merge patch of `spec`) a Kueue object gpupool renders in kueue
    mode (target: name, or namespace/name for a LocalQueue); the executor changes it only
    while it carries gpupool's label."""

    kind: Literal["kueue-object"] = "kueue-object"
    object_kind: Literal["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    namespace: str = ""
    name: str
    verb: Literal["create", "update"]
    spec: dict[str, Any]
    """The object's whole `spec`, in Kueue's v1beta2 JSON (reconciler/plan/kueue.py)."""


class PruneKueueObject(ActionBase):
    """Delete a Kueue object gpupool made that the desired state no longer has (or that must be
    made again: a LocalQueue's clusterQueue is immutable); deleted only while it still carries
    gpupool's label."""

    kind: Literal["prune-kueue-object"] = "prune-kueue-object"
    object_kind: Literal["ResourceFlavor", "ClusterQueue", "LocalQueue"]
    namespace: str = ""
    name: str


# ------------------------------------------------------------------------------------------ DRA
class ApplyDraObject(ActionBase):
    """Create or update (JSON merge patch of labels, annotations and `spec`) a DeviceClass or a
    ResourceClaimTemplate gpupool renders for a DRA pool (reconciler/plan/dra.py; target:
    name, or namespace/name for a template); changed only while it carries gpupool's label."""

    kind: Literal["dra-object"] = "dra-object"
    object_kind: Literal["DeviceClass", "ResourceClaimTemplate"]
    namespace: str = ""
    name: str
    verb: Literal["create", "update"]
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    spec: dict[str, Any]
    """The object's whole `spec`, in resource.k8s.io/v1 JSON."""


class TaintDevice(ActionBase):
    """Create a DeviceTaintRule (resource.k8s.io/v1; NoSchedule, key `gpupool.io/drain`) on one
    device of a DRA pool's card about to be repartitioned (target: node/device), so that
    kube-scheduler's allocator gives it to no new claim while the card drains; ordered before
    the node's cordon (reconciler/plan/stages/drain_taints.py). Removed by a PruneDraObject once
    the driver republished the node's new layout; created only while no one else owns the
    name."""

    kind: Literal["taint-device"] = "taint-device"
    object_kind: Literal["DeviceTaintRule"] = "DeviceTaintRule"
    namespace: Literal[""] = ""
    name: str
    verb: Literal["create", "update"]
    labels: dict[str, str] = {}
    spec: dict[str, Any]
    """The rule's whole `spec`: `deviceSelector` (driver, pool, device) and `taint`."""


class PruneDraObject(ActionBase):
    """Delete a DeviceClass, ResourceClaimTemplate or DeviceTaintRule gpupool made that the
    desired state no longer has (never a template a pod still names; a drain's taint rule once
    the repartition it guarded is over); deleted only while it carries gpupool's label.

    Or a ResourceClaim that a claim exact admission pinned replaces (its
    `gpupool.io/replaces-claims`), left when its delete after the gate failed: deleted only
    while it is unallocated, reserved for nobody and its owning pod's status does not name it
    (apply/handlers/dra.py `sweep_claim`; it carries no gpupool label: the pod's template
    made it)."""

    kind: Literal["prune-dra-object"] = "prune-dra-object"
    object_kind: Literal["DeviceClass", "ResourceClaimTemplate", "DeviceTaintRule", "ResourceClaim"]
    namespace: str = ""
    name: str


Action = Annotated[
    Cordon
    | Uncordon
    | LabelNode
    | MigReconfigure
    | SetSharing
    | PartitionChange
    | Checkpoint
    | Preempt
    | Reclaim
    | Move
    | Scale
    | SetScaleEnvelope
    | Admit
    | Resume
    | Hold
    | ApplyQuota
    | ApplyPriorityClass
    | PruneQuota
    | PrunePriorityClass
    | ApplyKueueObject
    | PruneKueueObject
    | ApplyDraObject
    | PruneDraObject
    | TaintDevice,
    Field(discriminator="kind"),
]

EVICTION_KINDS = frozenset({"preempt", "reclaim", "move"})

# Order of kinds in a plan when dependencies leave a choice: disruptive first, as they would run.
KIND_ORDER: tuple[str, ...] = (
    "taint-device",  # the allocator stops placing on a card before its node is drained
    "cordon",
    "admit",  # its reservation is written before the evictions that free its cards
    "checkpoint",
    "preempt",
    "reclaim",
    "move",
    "mig-reconfigure",
    "set-sharing",
    "partition-change",
    "uncordon",
    "scale",
    "scale-envelope",
    "resume",
    "hold",
    "quota",
    "priority-class",
    "prune-quota",
    "prune-priority-class",
    "kueue-object",  # flavors, then cluster queues, then local queues (depends_on)
    "prune-kueue-object",  # local queues, then cluster queues, then flavors (depends_on)
    "dra-object",  # device classes, then the claim templates that name them (depends_on)
    "prune-dra-object",  # templates, then classes (depends_on)
    "label-node",
)
