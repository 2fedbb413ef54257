"""The policy language: pydantic models of every kind of desired-state document.

Documents look like Kubernetes objects (`apiVersion`, `kind`, `metadata`, `spec`). Fields are
camelCase in YAML; models are strict (no type coercion) and forbid unknown fields, so a typo
is an error with a file:line, never a silently ignored setting.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from reconciler.conventions import API_VERSION
from reconciler.policy.quantity import (
    DURATION_PATTERN,
    QUANTITY_PATTERN,
    format_duration,
    parse_duration,
    quantity_bytes,
)

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
Name = Annotated[str, Field(pattern=DNS_LABEL, min_length=1, max_length=63)]


# Upper bounds. Every number below that sizes work the planner does (a loop, a list it builds,
# a search it runs) has one, so a typo such as `maxMigrationsPerCycle: 1000000000` is a
# validation error with file:line, not a plan that hangs or runs out of memory. Each bound is
# far above any real setting; the reason is written beside it.

MAX_DURATION = timedelta(days=365)
"""Durations (grace periods, minimum runtimes, cooldowns, idle times) stay within a year:
longer is a typo, and datetime arithmetic with such values overflows."""
MAX_REPLICAS = 10_000
"""Replicas of one scaled service: the planner makes one pending replica per missing one."""
MAX_NODES = 10_000
"""Nodes of one pool: twice the largest cluster Kubernetes supports (5,000 nodes)."""
MAX_MIGRATIONS_PER_CYCLE = 64
"""Each migration checkpoints and restarts a running job, and the defragmenter tries a
candidate set per move count: more than 64 in one cycle is a storm, not maintenance."""
MAX_PREEMPTIONS_PER_HOUR = 10_000
"""A budget larger than this is no budget; gpupool counts every preemption of the hour."""


def _to_timedelta(value: object) -> object:
    """YAML text such as `1h30m` becomes a timedelta at load; anything else is left to pydantic
    (which rejects it: the models are strict)."""
    if isinstance(value, str):
        seconds = parse_duration(value)
        if not seconds <= MAX_DURATION.total_seconds():  # also catches inf and nan
            raise ValueError(f"a duration may be at most {MAX_DURATION.days}d")
        return timedelta(seconds=seconds)
    return value


Duration = Annotated[
    timedelta,
    BeforeValidator(_to_timedelta),
    PlainSerializer(lambda d: format_duration(d.total_seconds()), return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "description": "Duration in Kubernetes/Go notation: 30s, 10m, 1h, 1h30m; at most 365d.",
        }
    ),
]
"""Parsed once, at load: the planner works with `timedelta`, never with the text."""
Quantity = Annotated[
    str,
    Field(
        pattern=QUANTITY_PATTERN, description="Quantity in Kubernetes notation, e.g. 4Gi, 512Mi."
    ),
]
Count = Annotated[int, Field(ge=0)]
TIME_OF_DAY = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
Percent = Annotated[float, Field(ge=0, le=100)]


def yaml_name(field: str) -> str:
    """snake_case -> the camelCase name in YAML, with Kubernetes-style acronyms (maxGPUs)."""
    return re.sub(r"Gpu(s?)(?=[A-Z]|$)", r"GPU\1", to_camel(field))


class Model(BaseModel):
    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        alias_generator=yaml_name,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )


# --------------------------------------------------------------------------- common


class Metadata(Model):
    name: Name
    """Unique among documents of the same kind (DNS label: lower case, digits, '-')."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class LabelSelectorRequirement(Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] = []

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(Model):
    """A Kubernetes label selector over node labels."""

    match_labels: dict[str, str] = {}
    match_expressions: list[LabelSelectorRequirement] = []


# --------------------------------------------------------------------------- Pool


class WholeCards(Model):
    """Whole cards for training (the device plugin's `nvidia.com/gpu`)."""

    min_gpus: Count = 0
    """Reservation: at least this many cards stay whole for training, never repartitioned."""
    max_gpus: Count | None = None
    """Training never holds more than this many whole cards of the pool (demand beyond it
    is held); the rest stays for inference."""
    topology: Literal["nvlink", "numa", "node", "none"] = "node"
    """Gang placement preference for multi-card jobs: same NVLink island, same NUMA node,
    same node, or no preference."""


class MigLayout(Model):
    name: Name
    """Name of the layout; used as the mig-parted config name on nodes that get it."""
    profiles: list[str] = Field(min_length=1, max_length=7)
    """GPU-instance profiles on one GPU, e.g. [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]."""


class MigInference(Model):
    layouts: list[MigLayout] = Field(min_length=1)
    """Layouts a GPU may be partitioned into, most preferred first."""


class SharedInference(Model):
    """Shared slices (time-slicing / MPS): several inference pods share one card."""

    slices_per_gpu: int = Field(ge=2, le=48)
    memory_per_slice: Quantity
    """GPU memory each slice may use, e.g. 10Gi. slicesPerGPU x memoryPerSlice must fit the card."""
    strategy: Literal["time-slicing", "mps"] = "time-slicing"
    """time-slicing isolates no memory (memoryPerSlice is a promise the pods keep); mps caps each
    client's memory at the card's divided by slicesPerGPU. Either applies to every card of a
    node not in MIG mode: the device plugin shares per node. mps never runs on a node with MIG
    cards, and needs `devicePlugin.migStrategy: per-node` (NVIDIA's plugin refuses MPS with the
    mixed MIG strategy)."""

    @field_validator("memory_per_slice")
    @classmethod
    def _at_least_a_mebibyte(cls, v: str) -> str:
        # the planner divides memory by it: `0` or `1m` (a thousandth of a byte) would divide
        # by zero in every plan
        if quantity_bytes(v) < 2**20:
            raise ValueError("must be at least 1Mi")
        return v


class Inference(Model):
    min_gpus: Count = 0
    """Cards kept partitioned for inference even without demand (warm capacity)."""
    max_gpus: Count | None = None
    """Inference never takes more than this many cards of the pool."""
    mig: MigInference | None = None
    shared: SharedInference | None = None
    prefer: Literal["mig", "shared"] = "mig"
    """Which partitioning new inference cards get when demand fits both."""


class PoolCapacity(Model):
    """The size the pool is expected to have (validation and drift reports)."""

    nodes: int = Field(ge=1, le=MAX_NODES)
    gpus_per_node: int = Field(ge=1, le=16)


class DevicePluginSetup(Model):
    """How the cluster runs NVIDIA's device plugin on the pool's nodes."""

    mig_strategy: Literal["per-node", "mixed"] = "per-node"
    """`per-node`: the GPU operator leaves `mig.strategy` unset (deploy/gpu-operator/values.yaml),
    so each node's config decides and gpupool can run MPS. `mixed`: the operator sets
    MIG_STRATEGY=mixed on every node, which overrides the config and makes the plugin refuse MPS
    (k8s-device-plugin cmd/nvidia-device-plugin/main.go `validateFlags`): MPS is refused here."""


class DraSetup(Model):
    """How NVIDIA's DRA driver partitions a DRA pool's cards."""

    mig: Literal["static", "dynamic"] = "static"
    """`static`: the driver publishes the MIG devices that exist and mig-manager changes the
    layouts gpupool chooses. `dynamic`: the driver's alpha `DynamicMIG` gate
    (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1) publishes every possible MIG partition of a
    card, counted by the card's shared counters, and creates an instance when a claim on it is
    prepared: gpupool writes no mig-manager label on the pool's nodes and shapes what may be
    allocated instead (Hopper and later: the driver turns MIG mode on and off without a reset)."""
    guard: bool = True
    """Keep the pool's devices for the claims gpupool pins: one DeviceTaintRule per node of the
    pool (NoSchedule `gpupool.io/guarded`, every device NVIDIA's driver publishes there), which
    only the claims gpupool writes at exact admission tolerate, so no claim outside gpupool's
    gate (one on the driver's own DeviceClass, or one kube-scheduler allocates at the instant
    gpupool writes a DynamicMIG allocation) can take a device the plan counts on. Claims
    allocated already keep their devices. Only while every namespace of the Quotas naming the
    pool is gated (`gpupool.io/admission=gated`: pods elsewhere are placed by kube-scheduler,
    and would get no device) and the cluster serves DeviceTaintRules (Kubernetes 1.37's
    `DRADeviceTaintRules`, on by default); else a finding says why not. `false`: no guard."""
    admission: Literal["pin", "allocate"] = "pin"
    """How exact admission makes a pod's claims the plan's devices. `pin`: gpupool writes a
    claim of the pod's own whose requests select only the planned devices (CEL on their
    `uuid`), and kube-scheduler's allocator allocates it, checking the devices as for any
    claim. `allocate`: in a guarded pool (`guard`, in place on the node), gpupool writes the
    planned devices as the allocation of the pod's own claim itself (as it does for a DynamicMIG
    partition, which no selector can pick), with Kubernetes' delete-protection finalizer and
    the claim's reservation for its pod, and kube-scheduler only nominates and binds: no claim
    made beside the pod's, no delete after the gate, no claim write by kube-scheduler, the
    cards taken before the gate goes; but nothing besides
    gpupool's plan checks the devices (the guard keeps every other claim off them). A claim
    that is not a plain one of gpupool's templates (another class, a selector, a constraint,
    a config), or a node whose guard is not in place, is pinned as with `pin`."""


class PoolSpec(Model):
    gpu_model: str
    """A model from the MIG catalog, e.g. A100-SXM4-80GB, H100-SXM5-80GB, L40S-48GB."""
    node_selector: LabelSelector = LabelSelector()
    """Which nodes belong to the pool. The model's `nvidia.com/gpu.product` values are
    implied, so pools of different models never overlap."""
    capacity: PoolCapacity
    training: WholeCards = WholeCards()
    inference: Inference = Inference()
    device_plugin: DevicePluginSetup = DevicePluginSetup()
    """How the GPU operator runs NVIDIA's device plugin on the pool's nodes (MPS needs the
    install's `per-node`)."""
    backend: Literal["devicePlugin", "dra"] = "devicePlugin"
    """How the pool's cards reach pods. `devicePlugin`: NVIDIA's device plugin (`nvidia.com/gpu`,
    `nvidia.com/mig-*`, shared replicas) and mig-manager. `dra`: Kubernetes Dynamic Resource
    Allocation with NVIDIA's DRA driver (`gpu.nvidia.com`, kubernetes-sigs/dra-driver-nvidia-gpu
    v0.4.1): whole cards and static MIG devices as ResourceSlice devices, claimed through the
    DeviceClasses and ResourceClaimTemplates gpupool renders per pool; MIG layouts still change
    through mig-manager. A DRA pool offers no shared slices and takes no `devicePlugin`."""
    dra: DraSetup = DraSetup()
    """DRA pools only: static MIG (mig-manager) or the driver's dynamic MIG."""
    node_settle_time: Duration = Field("5m", validate_default=True)
    """How long a node that failed (NotReady) and came back stays Ready before gpupool places
    work on it again: a flapping node does not take a gang down twice, and its agent has
    republished the real partition by then. 0s: at once."""

    @property
    def dynamic_mig(self) -> bool:
        """On DRA with the driver's dynamic MIG: partitions made when claims are prepared."""
        return self.backend == "dra" and self.dra.mig == "dynamic"


class Pool(Model):
    api_version: Literal[API_VERSION]
    kind: Literal["Pool"]
    metadata: Metadata
    spec: PoolSpec


# --------------------------------------------------------------------------- Quota


class Allotment(Model):
    guaranteed: Count = 0
    """Always available to the team (others borrow it only while the team does not use it)."""
    borrowing_limit: Count | None = None
    """How much beyond the guarantee the team may borrow from idle capacity (None: no limit)."""
    lending_limit: Count | None = None
    """How much of the guarantee others may borrow while unused (None: all of it); the rest
    stays free for the team."""


class MemoryAllotment(Model):
    guaranteed: Quantity = "0"
    borrowing_limit: Quantity | None = None
    lending_limit: Quantity | None = None
    """How much of the guaranteed memory others may borrow while unused (None: all of it), in
    the pool's slices rounded up; the rest stays free for the team."""


class PoolQuota(Model):
    pool: Name
    """The Pool whose capacity this allotment draws on."""
    whole: Allotment = Allotment()
    """Whole cards (`nvidia.com/gpu`)."""
    mig: dict[str, Allotment] = {}
    """Per MIG profile, e.g. {3g.40gb: {guaranteed: 2}}."""
    shared_memory: MemoryAllotment | None = None
    """GPU memory on shared slices."""


class QuotaSpec(Model):
    team: Name | None = None
    """The team's name in reports (default: the document's name)."""
    namespaces: list[Name] = Field(min_length=1)
    """Namespaces whose workloads count against this quota."""
    max_gpus: Count | None = None
    """Hard cap over all pools, in card equivalents (a MIG instance counts its share of the
    card's memory slices, a shared slice 1/slicesPerGPU)."""
    pools: list[PoolQuota] = []
    reclaim_within_cohort: Literal["Any", "LowerPriority", "Never"] | None = None
    """How the team takes back guaranteed whole cards it lent while idle, when its own job
    asks for them (after Kueue's ClusterQueue `preemption.reclaimWithinCohort`). `Any`: work
    of teams holding more than their guarantee in the pool is preempted for it whatever its
    priority, cheapest first, at most what each such team borrows; work of equal or higher
    priority only where its stopped pods cannot take the cards straight back (gpupool gates
    its namespace, or suspends its Job). `LowerPriority`: only borrowed work of lower
    priority. `Never`: no preemption gives a guarantee back. Never a non-preemptible class,
    work younger than minRuntime, nor beyond the hourly budget. Unset: `Any` when gpupool
    gates every namespace of the team (`gpupool.io/admission=gated`), else `LowerPriority`.
    In kueue mode it is the team's ClusterQueue's (unset: `Any`)."""


class Quota(Model):
    api_version: Literal[API_VERSION]
    kind: Literal["Quota"]
    metadata: Metadata
    spec: QuotaSpec

    @property
    def team(self) -> str:
        return self.spec.team or self.metadata.name


# --------------------------------------------------------------------------- PriorityPolicy


class PriorityClassSpec(Model):
    name: Name
    """The Kubernetes PriorityClass name workloads use (`priorityClassName`)."""
    value: int = Field(ge=-2147483648, le=1000000000)
    workload: Literal["training", "inference", "any"] = "any"
    preemptible: bool = True
    """False: never preempted by gpupool, whatever asks."""
    spot: bool = False
    """Non-critical capacity: first victim, no checkpoint wait, no minimum runtime."""
    description: str = ""


class PreemptionRule(Model):
    preemptor: Name
    """Class whose pending workloads may preempt..."""
    victims: list[Name] = Field(min_length=1)
    """...running workloads of these classes (each of lower value)."""
    when: Literal["always", "noSharedCapacity"] = "noSharedCapacity"
    """`noSharedCapacity`: only when no free or reclaimable capacity is left (empty inference
    cards go back to training first). `always`: the victims are displaced first and idle
    inference capacity is kept warm."""


class Preemption(Model):
    rules: list[PreemptionRule] = []
    checkpoint_grace_period: Duration = Field("5m", validate_default=True)
    """Time between the checkpoint request and the eviction."""
    min_runtime: Duration = Field("10m", validate_default=True)
    """A workload that started less than this long ago is not preempted, reclaimed or moved
    (spot classes excepted)."""
    budget_per_hour: int = Field(default=10, ge=0, le=MAX_PREEMPTIONS_PER_HOUR)
    """At most this many evictions (preemptions, idle reclaims and moves) in any rolling hour
    (cluster-wide)."""


# --- admission mode (Kueue mode) ---------------------------------------------------------


class Admission(Model):
    """Which system admits training work, and so what the Quotas become in the cluster."""

    controller: Literal["gpupool", "kueue"] = "gpupool"
    """`gpupool`: Quotas become ResourceQuotas and gpupool admits gated pods (admit, hold,
    resume). `kueue`: Quotas become Kueue ClusterQueues (one cohort), ResourceFlavors (one per
    pool) and LocalQueues (one per team namespace); Kueue admits and suspends Jobs, gpupool
    keeps partitioning, scaling and placement."""
    cohort: Name = "gpupool"
    """kueue only: the cohort every ClusterQueue gpupool renders belongs to (its teams borrow
    and lend within it)."""


class PriorityPolicySpec(Model):
    classes: list[PriorityClassSpec] = Field(min_length=1)
    default_class: Name | None = None
    preemption: Preemption = Preemption()
    admission: Admission = Admission()
    """Who admits training: gpupool (scheduling gates, ResourceQuotas) or Kueue (gpupool
    renders the Quotas as Kueue queues and leaves admission to it)."""


class PriorityPolicy(Model):
    api_version: Literal[API_VERSION]
    kind: Literal["PriorityPolicy"]
    metadata: Metadata
    spec: PriorityPolicySpec


# --------------------------------------------------------------------------- ScalingPolicy


class ScaleTarget(Model):
    namespace: Name
    name: Name
    kind: Literal["Deployment", "StatefulSet"] = "Deployment"
    min_replicas: int = Field(default=1, ge=0, le=MAX_REPLICAS)
    max_replicas: int = Field(ge=1, le=MAX_REPLICAS)

    @model_validator(mode="after")
    def _bounds(self) -> ScaleTarget:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"minReplicas {self.min_replicas} > maxReplicas {self.max_replicas}")
        return self


class ScaleUp(Model):
    queue_length_per_replica: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Grow when the exported queue length per replica exceeds this."""
    pending_time: Duration | None = None
    """...or when requests wait longer than this (p99)."""
    step: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    """Replicas added per scale-up (mode `step`)."""
    mode: Literal["step", "proportional"] = "step"
    """`step`: add `step` replicas. `proportional`: grow to ceil(queue / queueLengthPerReplica)
    replicas at once (as a HorizontalPodAutoscaler does), at least one more, at most
    `maxStep` more; needs queueLengthPerReplica."""
    max_step: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    """The most replicas one proportional scale-up adds (absent: up to the target's maximum)."""
    cooldown: Duration = Field("2m", validate_default=True)

    @field_validator("pending_time")
    @classmethod
    def _pending_time_above_zero(cls, v: timedelta | None) -> timedelta | None:
        # A p99 wait above 0s is any request that waited at all (with Prometheus' histogram,
        # any request served in the window): the service would grow with any traffic and
        # never shrink while it has some. The cooldowns may be 0s: each cycle may then act.
        if v is not None and v <= timedelta(0):
            raise ValueError(
                "must be more than 0s: a p99 wait above 0s is any request waiting at all, so "
                "the service would grow with any traffic and never shrink; to keep replicas "
                "up, raise the targets' minReplicas"
            )
        return v

    @model_validator(mode="after")
    def _mode(self) -> ScaleUp:
        _check_mode(self)
        return self


def _check_mode(section: ScaleUp | ScaleDown) -> None:
    """`step` belongs to mode step, `maxStep` to mode proportional."""
    given = section.model_fields_set
    if section.mode == "step" and "max_step" in given:
        raise ValueError("maxStep is read only with mode: proportional (mode step adds `step`)")
    if section.mode == "proportional" and "step" in given:
        raise ValueError(
            "step is read only with mode: step; a proportional scale is bounded by maxStep"
        )


class ScaleDown(Model):
    queue_length_per_replica: float = Field(ge=0, allow_inf_nan=False)
    """Shrink when the queue per replica stays below this..."""
    step: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    """Replicas removed per scale-down (mode `step`)."""
    mode: Literal["step", "proportional"] = "step"
    """`step`: remove `step` replicas. `proportional`: shrink to ceil(queue /
    queueLengthPerReplica) replicas (this section's threshold: the fewest that keep the queue
    per replica at or under it), at least one fewer, at most `maxStep` fewer."""
    max_step: int | None = Field(default=None, ge=1, le=MAX_REPLICAS)
    """The most replicas one proportional scale-down removes (absent: down to the minimum)."""
    cooldown: Duration = Field("10m", validate_default=True)
    """...and the last scale change is at least this old."""

    @model_validator(mode="after")
    def _mode(self) -> ScaleDown:
        _check_mode(self)
        return self


# ------------------------------------------------ signals from Prometheus (ScalingPolicy)

PLACEHOLDER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
"""A placeholder in a PromQL template: `$namespace`, `$name`, `$window`. Substituted as plain
text before the query is sent (PromQL's braces rule out str.format). A `$` followed by a digit
(label_replace's `$1`) is not a placeholder and is left as it is."""
MAX_QUERY_LENGTH = 4000
"""A query longer than this is a paste accident; Prometheus reads queries from the URL."""

# vLLM's own metric names (vllm-project/vllm, vllm/v1/metrics/loggers.py, PrometheusStatLogger):
# the gauge `vllm:num_requests_waiting` ("Number of requests waiting to be processed") and the
# histogram `vllm:request_queue_time_seconds` ("time spent in WAITING phase for request",
# observed when a request finishes), both labelled model_name and engine. The `namespace` and
# `pod` labels are not vLLM's: Prometheus' Kubernetes service discovery gives them through
# relabelling (`__meta_kubernetes_namespace` -> namespace, `__meta_kubernetes_pod_name` -> pod,
# which the Prometheus Operator generates for every PodMonitor and ServiceMonitor:
# prometheus-operator pkg/prometheus/promcfg.go, generatePodMonitorConfig and the ServiceMonitor
# equivalent); a setup with other label names overrides the query. A Deployment's pods are
# named `<deployment>-<replicaset hash>-<suffix>`, a StatefulSet's `<name>-<ordinal>`:
# `pod=~"$name-.*"` matches both.
DEFAULT_QUEUE_LENGTH_QUERY = (
    'sum(vllm:num_requests_waiting{namespace="$namespace",pod=~"$name-.*"})'
)
DEFAULT_WAIT_TIME_QUERY = (
    "(histogram_quantile(0.99, sum by (le) (rate(vllm:request_queue_time_seconds_bucket"
    '{namespace="$namespace",pod=~"$name-.*"}[5m]))) >= 0)'
    " or (sum(rate(vllm:request_queue_time_seconds_count"
    '{namespace="$namespace",pod=~"$name-.*"}[5m])) == 0)'
)
"""p99 of the time requests spent waiting, over the last 5 minutes. With no request finished in
the window, histogram_quantile gives NaN (dropped by `>= 0`) and the right side gives 0 (no
wait seen); a series that does not exist at all gives an empty result, which is a finding."""


def _check_placeholders(text: str, known: tuple[str, ...]) -> str:
    unknown = sorted({m.group(1) for m in PLACEHOLDER.finditer(text)} - set(known))
    if unknown:
        raise ValueError(
            f"unknown placeholder {', '.join('$' + u for u in unknown)} in the query; "
            f"known here: {', '.join('$' + k for k in known)}"
        )
    return text


SCALING_PLACEHOLDERS = ("namespace", "name")
UTILIZATION_PLACEHOLDERS = ("window",)

PromQuery = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_LENGTH)]


class ScalingSignals(Model):
    """Where a ScalingPolicy reads each target's queue length and wait time."""

    source: Literal["annotations", "prometheus"] = "annotations"
    """`annotations`: the workload's `gpupool.io/queue-length` and `gpupool.io/pending-p99-seconds`
    annotations. `prometheus`: the two queries below, through the Prometheus HTTP API (the
    controller's `--prometheus-url`); a failed, empty or non-finite reading is a finding and
    never a scale-down."""
    queue_length: PromQuery = DEFAULT_QUEUE_LENGTH_QUERY
    """PromQL giving the requests waiting, all replicas together (one sample, or several that
    are summed). `$namespace` and `$name` are the target's. Default: vLLM's
    `vllm:num_requests_waiting`, selected by the `namespace` and `pod` labels that Prometheus'
    Kubernetes service discovery relabelling adds (override the query where yours differ)."""
    wait_time: PromQuery = DEFAULT_WAIT_TIME_QUERY
    """PromQL giving the p99 wait in seconds (read only when scaleUp.pendingTime is set; the
    largest sample counts). Default: vLLM's `vllm:request_queue_time_seconds` histogram."""

    @field_validator("queue_length", "wait_time")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        return _check_placeholders(v, SCALING_PLACEHOLDERS)

    @model_validator(mode="after")
    def _queries_need_prometheus(self) -> ScalingSignals:
        given = self.model_fields_set & {"queue_length", "wait_time"}
        if self.source != "prometheus" and given:
            names = ", ".join(sorted(yaml_name(f) for f in given))
            raise ValueError(f"{names} is read only with source: prometheus")
        return self


MAX_FORECAST_DAYS = 28
MAX_LOOKAHEAD = timedelta(hours=12)
FORECAST_PLACEHOLDERS = ("namespace", "name", "window", "offset")


class Forecast(Model):
    """Pre-warm replicas ahead of the daily curve: the queue the target's signal recorded over
    the coming `lookahead` on each of the last `days` days (same time of day), combined by
    `aggregate`, times `headroom`, divided by scaleUp.queueLengthPerReplica, is a floor under
    the replicas (within the target's bounds and the scale-up cooldown; admission still
    applies the pool's and the quotas' lending limits). With `model: scaled` each day's
    reading is first scaled to today's level. The history is a Prometheus range read
    (`query`), whatever `signals.source` is."""

    days: int = Field(default=3, ge=1, le=MAX_FORECAST_DAYS)
    """Previous days read, one query each (a day without history is left out)."""
    lookahead: Duration = Field("10m", validate_default=True)
    """How far ahead replicas are warmed: at least the model load plus a cycle."""
    scale_down_lookahead: Duration | None = None
    """How long the forecast must say a card stays free before a scale-down lends it back to
    training: a scale-down stops at the forecast over this window (absent: `lookahead`). A
    lend shorter than a training job's checkpoint interval plus its restart is work lost, so
    this is at least `lookahead`, typically that interval."""
    statistic: Literal["max", "avg"] = "max"
    """How the default query sums up one day's window: its highest queue (`max_over_time`:
    covers the bursts) or its mean (`avg_over_time`: the level, bursts left to the reactive
    thresholds). Not read with a query of your own."""
    aggregate: Literal["max", "median"] = "max"
    """How the days' readings combine: the highest, or the median (robust to one odd day)."""
    headroom: float = Field(default=1.0, ge=0.5, le=4, allow_inf_nan=False)
    """The combined queue is multiplied by this before it is turned into replicas."""
    query: PromQuery | None = None
    """PromQL of one day's reading; `$namespace`, `$name` as in the signals, `$window` the
    lookahead and `$offset` one day's distance minus it, in seconds (e.g. `600s`, `85800s`).
    Default: `<statistic>_over_time((<signals.queueLength>)[$window:30s] offset $offset)`."""
    model: Literal["seasonal", "scaled"] = "seasonal"
    """How a day's reading becomes the expected queue: as it was (`seasonal`: same time of day
    on previous days), or scaled by how busy today is against that day (`scaled`: the reading
    times the mean queue over the last `levelWindow` now, over the same window that day,
    the ratio bounded by `maxLevelRatio` both ways; no correction for a day whose level is 0
    or unread). The levels are read with
    `avg_over_time((<signals.queueLength>)[<levelWindow>:30s] offset <d days>)`."""
    level_window: Duration = Field("1h", validate_default=True)
    """With model `scaled`: how far back the level of today and of each previous day is read."""
    max_level_ratio: float = Field(default=4.0, ge=1, le=100, allow_inf_nan=False)
    """With model `scaled`: the level ratio is kept within [1 / this, this]."""

    @model_validator(mode="after")
    def _statistic_needs_the_default_query(self) -> Forecast:
        if self.query is not None and "statistic" in self.model_fields_set:
            raise ValueError("statistic shapes the default query only: give one or the other")
        return self

    @model_validator(mode="after")
    def _level_fields_need_the_scaled_model(self) -> Forecast:
        given = [f for f in ("level_window", "max_level_ratio") if f in self.model_fields_set]
        if given and self.model != "scaled":
            names = " and ".join(yaml_name(f) for f in given)
            verb = "are" if len(given) > 1 else "is"
            raise ValueError(f"{names} {verb} read by model: scaled only")
        return self

    @model_validator(mode="after")
    def _scale_down_lookahead_covers_the_lookahead(self) -> Forecast:
        down = self.scale_down_lookahead
        if down is not None and down < self.lookahead:
            raise ValueError(
                f"scaleDownLookahead ({format_duration(down.total_seconds())}) is shorter than "
                f"lookahead ({format_duration(self.lookahead.total_seconds())}): a scale-down "
                "would drop replicas the pre-warm asks for again"
            )
        return self

    @field_validator("level_window")
    @classmethod
    def _level_window(cls, v: timedelta) -> timedelta:
        if not timedelta(0) < v <= MAX_LOOKAHEAD:
            raise ValueError(
                f"must be more than 0s and at most {format_duration(MAX_LOOKAHEAD.total_seconds())}"
            )
        return v

    @field_validator("lookahead", "scale_down_lookahead")
    @classmethod
    def _lookahead(cls, v: timedelta | None) -> timedelta | None:
        if v is None:
            return v
        if not timedelta(0) < v <= MAX_LOOKAHEAD:
            raise ValueError(
                f"must be more than 0s and at most {format_duration(MAX_LOOKAHEAD.total_seconds())}"
                " (a window of the day ahead, read from the days before)"
            )
        return v

    @field_validator("query")
    @classmethod
    def _placeholders(cls, v: str | None) -> str | None:
        return None if v is None else _check_placeholders(v, FORECAST_PLACEHOLDERS)


class ScalingPolicySpec(Model):
    pool: Name
    targets: list[ScaleTarget] = Field(min_length=1)
    scale_up: ScaleUp
    scale_down: ScaleDown
    borrow_from: list[Name] = []
    """Priority classes whose running training may be preempted to make room for scale-up."""
    signals: ScalingSignals = ScalingSignals()
    """Where the queue length and wait time come from (default: workload annotations)."""
    forecast: Forecast | None = None
    """Pre-warm replicas from the same time of day on previous days (absent: reactive only)."""


class ScalingPolicy(Model):
    api_version: Literal[API_VERSION]
    kind: Literal["ScalingPolicy"]
    metadata: Metadata
    spec: ScalingPolicySpec


# --------------------------------------------------------------------------- MaintenancePolicy


class Window(Model):
    start: str = Field(pattern=TIME_OF_DAY)
    end: str = Field(pattern=TIME_OF_DAY)
    """Times of day in UTC (HH:MM); a window may wrap midnight."""

    @field_validator("end")
    @classmethod
    def _not_empty(cls, v: str, info: ValidationInfo) -> str:
        # [start, end): the planner's window test is start <= now < end, never true when they
        # are equal (and a whole day is `when: always`)
        if v == info.data.get("start"):
            raise ValueError(
                f"the window {v}-{v} is empty (it starts where it ends) and would never open; "
                "for all day, use when: always"
            )
        return v


class Defragmentation(Model):
    enabled: bool = True
    when: Literal["always", "pendingDemand", "window"] = "pendingDemand"
    """`pendingDemand`: only when a pending multi-card job fits nowhere whole."""
    window: Window | None = None
    max_migrations_per_cycle: int = Field(default=2, ge=0, le=MAX_MIGRATIONS_PER_CYCLE)
    only_migratable: bool = True
    """Move only workloads marked migratable (checkpoint + restart elsewhere is safe)."""

    @model_validator(mode="after")
    def _window(self) -> Defragmentation:
        if self.when == "window" and self.window is None:
            raise ValueError("when: window needs a window")
        return self


# ------------------------------------------- utilization from Prometheus (MaintenancePolicy)

# The DCGM exporter's utilization gauge (NVIDIA/dcgm-exporter docs/metrics.md:
# `DCGM_FI_DEV_GPU_UTIL`, "GPU utilization over the sample period", percent), one series per
# card, labelled (internal/pkg/rendermetrics/render_metrics.go) gpu (the index), UUID (`uuid`
# with --use-old-namespace), pci_bus_id, device, modelName, GPU_I_PROFILE/GPU_I_ID for MIG
# instances, and the node as `Hostname` (renamed `hostname` after release 4.5.3-4.8.2; the
# value is NODE_NAME when set, else the host name: internal/pkg/hostname/hostname.go).
DEFAULT_UTILIZATION_QUERY = "max_over_time(DCGM_FI_DEV_GPU_UTIL[$window])"
"""The highest utilization of each card over the last idleFor: below utilizationBelow means
below it the whole time."""


class UtilizationSignal(Model):
    """Where idle reclaim reads each card's utilization."""

    source: Literal["agent", "prometheus"] = "agent"
    """`agent`: gpupool's node agent (NVML, `GpuNodeState`). `prometheus`: the query below
    through the Prometheus HTTP API; a card is idle only when its sample exists and is below
    utilizationBelow (a missing or failed reading is a finding, and nothing is reclaimed)."""
    query: PromQuery = DEFAULT_UTILIZATION_QUERY
    """PromQL giving one sample per card; `$window` is idleFor in seconds (e.g. `3600s`).
    Samples are matched to cards by their `UUID` label, else by node (`Hostname` or
    `hostname`) and `gpu` index, as the DCGM exporter labels them."""

    @field_validator("query")
    @classmethod
    def _placeholders(cls, v: str) -> str:
        return _check_placeholders(v, UTILIZATION_PLACEHOLDERS)

    @model_validator(mode="after")
    def _query_needs_prometheus(self) -> UtilizationSignal:
        if self.source != "prometheus" and "query" in self.model_fields_set:
            raise ValueError("query is read only with source: prometheus")
        return self


class IdleReclaim(Model):
    enabled: bool = True
    utilization_below: Percent = 5
    """A GPU counts as idle while its utilization is below this percentage..."""
    idle_for: Duration = Field("1h", validate_default=True)
    """...for at least this long."""
    action: Literal["evict", "report"] = "evict"
    exclude_classes: list[Name] = []
    utilization: UtilizationSignal = UtilizationSignal()
    """Where the cards' utilization comes from (default: gpupool's node agent)."""

    @field_validator("idle_for")
    @classmethod
    def _idle_for_above_zero(cls, v: timedelta) -> timedelta:
        # 0s would make a card idle the moment one reading is under the threshold (a job
        # loading its data, between two steps). The other durations may be 0s:
        # checkpointGracePeriod (evict right after asking for the checkpoint), minRuntime (no
        # protection for young work) and the scaling cooldowns (act every cycle) each mean
        # something.
        if v <= timedelta(0):
            raise ValueError(
                "must be more than 0s: a card would count as idle at its first reading under "
                "utilizationBelow (a job loading data, or between two steps) and its workload "
                "would be reclaimed"
            )
        return v


class MaintenancePolicySpec(Model):
    pools: list[Name] = []
    """Pools this applies to (empty: all)."""
    defragmentation: Defragmentation | None = None
    idle_reclaim: IdleReclaim | None = None


class MaintenancePolicy(Model):
    api_version: Literal[API_VERSION]
    kind: Literal["MaintenancePolicy"]
    metadata: Metadata
    spec: MaintenancePolicySpec


# --------------------------------------------------------------------------- ChangePolicy


class ChangeGates(Model):
    max_preemptions: Count | None = None
    max_repartitions: Count | None = None
    max_drained_nodes: Count | None = None


class ChangePolicySpec(Model):
    """Safety gates for a single change of the desired state (checked by `plan --base`)."""

    gates: ChangeGates = ChangeGates()
    allow_empty_pool: bool = False
    """A change that leaves a pool without capacity is refused unless this is true."""
    allow_delete_all_quotas: bool = False
    """A change that deletes every quota is refused unless this is true. The controller also
    prunes every ResourceQuota it made, when no Quota is left, only if this is true."""
    allow_delete_all_priority_classes: bool = False
    """When the policy names no PriorityClass any more, the controller prunes every
    PriorityClass it made only if this is true (else finding prune-everything-refused)."""


class ChangePolicy(Model):
    api_version: Literal[API_VERSION]
    kind: Literal["ChangePolicy"]
    metadata: Metadata
    spec: ChangePolicySpec


KINDS: dict[str, type[Model]] = {
    "Pool": Pool,
    "Quota": Quota,
    "PriorityPolicy": PriorityPolicy,
    "ScalingPolicy": ScalingPolicy,
    "MaintenancePolicy": MaintenancePolicy,
    "ChangePolicy": ChangePolicy,
}
