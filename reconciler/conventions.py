"""Every name gpupool shares with the cluster: label, annotation and resource keys, API groups.

The lowest layer: observe, plan, apply and loop import these; no other module spells a
`gpupool.io/…` or `nvidia.com/…` key (tests/test_conventions.py greps for them).
NVIDIA's names are the ones their components read and write; where each was confirmed is in
../shared/notes/nvidia-stack.md and next to the code that uses it. Also here: the controller's
default cycle, which the digital twin (a lower layer than the command) must share.
"""

from __future__ import annotations

# ---------------------------------------------------------------- gpupool's API group
GROUP = "gpupool.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
NODE_STATE_KIND, NODE_STATE_PLURAL = "GpuNodeState", "gpunodestates"
STATUS_KIND, STATUS_PLURAL = "ReconcilerStatus", "reconcilerstatuses"
PREFIX = GROUP + "/"

# ---------------------------------------------------------------- annotations on the status object
RECONCILE_REQUESTED_ANN = PREFIX + "reconcile-requested-at"
"""On the ReconcilerStatus object: ask for a cycle now. The value is an opaque token (a time,
by habit: `kubectl annotate --overwrite reconcilerstatus gpupool
gpupool.io/reconcile-requested-at="$(date -Is)"`); a value that differs from
`status.lastHandledReconcileAt` wakes the loop, and the cycle then records it there. The
semantics of Flux's `reconcile.fluxcd.io/requestedAt` (fluxcd/pkg apis/meta annotations.go: "The
value is interpreted as a token, and any change in value SHOULD trigger a reconciliation";
the handled value is copied to `status.lastHandledReconcileAt`)."""

# ---------------------------------------------------------------- labels gpupool reads or writes
POOL_LABEL = PREFIX + "pool"
"""Pool membership of a node (written by apply, read by pods' node selectors)."""
DRA_PARTITION_LABEL = PREFIX + "dra-partition"
"""On the DeviceClasses gpupool renders for a DRA pool (with `POOL_LABEL`): which partition the
class selects, `gpu` (whole cards) or `mig-<profile with '.' and '+' as '-'>`; the profile itself
is in `DRA_PROFILE_ANN`. Read back, only on gpupool's classes, to know what a claim asks for."""
DRA_PROFILE_ANN = PREFIX + "mig-profile"
"""On a MIG DeviceClass gpupool renders: the MIG profile it selects (e.g. `3g.40gb`)."""
DRA_PLANNED_ANN = PREFIX + "planned-devices"
"""On a ResourceClaim gpupool rewrote at admission (exact admission on DRA): the `uuid`s of the
devices the plan chose for it, comma-separated, which its requests' CEL selectors list; read
back so the claim is written once."""
DRA_REPLACES_ANN = PREFIX + "replaces-claims"
"""On a ResourceClaim gpupool pinned at admission: the claims it replaced (the one made from the
pod's template, and those an earlier pinned claim replaced), comma-separated, so that one whose
delete failed after the pinned claim was named in the pod's status is deleted in a later cycle
(apply/handlers/dra_admit.py)."""
DRA_POD_CLAIM_ANN = "resource.kubernetes.io/pod-claim-name"
"""Kubernetes' annotation on a claim made from a pod's template: which of the pod's
`spec.resourceClaims` it is (pkg/controller/resourceclaim/controller.go); kept on the claim
gpupool writes in its place."""
DRA_DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
"""Kubernetes' finalizer on an allocated ResourceClaim (resourceapi.Finalizer): kube-scheduler
adds it, in an update of its own, before it writes an allocation, and skips that update when the
claim carries it already (k8s.io/kubernetes v1.37.2 pkg/scheduler/framework/plugins/
dynamicresources/dynamicresources.go `bindClaim`); the resourceclaim controller removes it once
the claim is deallocated, or once it is deleted unreserved, allocated or not
(pkg/controller/resourceclaim/controller.go `syncClaim`). gpupool's pinned claims are made with
it (apply/handlers/dra_admit.py `_replace`)."""
DRA_DRIVER = "gpu.nvidia.com"
"""NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 cmd/gpu-kubelet-plugin/
main.go `DriverName`)."""
DRA_DRAIN_TAINT = PREFIX + "drain"
"""The key of the device taint (NoSchedule, value `repartition`) gpupool puts, through a
DeviceTaintRule with its managed-by label, on each device of a DRA card about to be repartitioned:
kube-scheduler's allocator gives a tainted device to no claim that does not tolerate it
(reconciler/plan/stages/drain_taints.py)."""
DRA_RESERVED_TAINT = PREFIX + "reserved-for-gang"
"""The key of the device taint (NoSchedule, value `gang`) gpupool puts, through a DeviceTaintRule,
on each device of the cards it frees for a waiting gated gang on a DRA pool: a pod that bypasses
gpupool's gate cannot be allocated them; the claims gpupool pins at exact admission tolerate it
(reconciler/plan/stages/drain_taints.py, apply/handlers/dra_admit.py)."""
DRA_GUARD_TAINT = PREFIX + "guarded"
"""The key of the device taint (NoSchedule, value `pinned-only`) gpupool puts, through one
DeviceTaintRule per node (selector: NVIDIA's driver and the node's pool, no device: every device
the driver publishes there, DynamicMIG partitions included), on the nodes of a DRA pool whose
claims it pins (`spec.dra.guard`): kube-scheduler's allocator then gives the pool's devices only
to claims that tolerate it, which only the claims gpupool pins at exact admission do
(reconciler/plan/stages/drain_taints.py, apply/handlers/dra_admit.py). A claim allocated
already is not touched (NoSchedule, not NoExecute)."""
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"
"""GPU feature discovery's label of a node in a multi-node NVLink domain (GB200 NVL72 and the
like): `<fabric cluster UUID>.<clique ID>` (NVIDIA/k8s-device-plugin internal/lm/fabric.go
`newImexLabeler`). Nodes with the same value share one NVLink domain; a gang's pods are placed
within one where it fits (plan/stages/whole_cards.py). NVIDIA's DRA driver v0.4.1 publishes no
such device attribute, so DRA pools read it here too."""
DRA_GROUP = "resource.k8s.io"
DRA_VERSION = "v1"
DRA_PLURALS = {
    "ResourceSlice": "resourceslices",
    "DeviceClass": "deviceclasses",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "DeviceTaintRule": "devicetaintrules",
}
INFERENCE_LABEL = PREFIX + "inference"
"""`true` on a Deployment/StatefulSet that is an inference service."""
INFERENCE_SELECTOR = f"{INFERENCE_LABEL}=true"
"""The label selector of the inference workloads (observe's reads, the watch cache's and the
signal wake's watches)."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpupool"
FIELD_MANAGER = "gpupool"
"""The field manager every write of the controller names (`?fieldManager=gpupool`)."""
AGENT_FIELD_MANAGER = "gpupool-agent"
"""The field manager under which gpupool's node agent writes a pod's `gpupool.io/gpus` (the
only writer trusted for it: `reconciler/observe/trust.py`)."""

# ---------------------------------------------------------------- annotations on pods
GPUS_ANN = PREFIX + "gpus"
"""Which cards a pod holds: "0,1", or "2:4" (GPU 2, MIG instance at start 4). The fallback for a
node whose agent publishes no `status.pods`; believed only where the node agent's field manager
(`AGENT_FIELD_MANAGER`) wrote it (`reconciler/observe/trust.py`)."""
CHECKPOINTABLE_ANN = PREFIX + "checkpointable"
MIGRATABLE_ANN = PREFIX + "migratable"
GPU_MEMORY_ANN = PREFIX + "gpu-memory"
"""On a pod (or a Deployment's pod template): the GPU memory it will use, a quantity (`20Gi`).
Time-slicing isolates no memory, so shared work declares what it needs here."""
LAST_CHECKPOINT_ANN = PREFIX + "last-checkpoint"
CHECKPOINT_REQUESTED_ANN = PREFIX + "checkpoint-requested-at"
"""Written by apply: the workload should checkpoint now (its grace period runs from here)."""
CHECKPOINT_DONE_ANN = PREFIX + "checkpoint-done"
"""Written by the workload: the checkpoint asked for is on disk; evict without waiting."""
MOVE_TO_ANN = PREFIX + "move-to"

# ---------------------------------------------------------------- admission (scheduling gates)
ADMISSION_GATE = PREFIX + "admission"
"""The scheduling gate gpupool's admission policy (deploy/admission-gate.yaml) puts on every
GPU pod created in a gated namespace: kube-scheduler ignores the pod until gpupool admits it
(sets its node and removes the gate)."""
ADMISSION_NAMESPACE_LABEL = PREFIX + "admission"
ADMISSION_NAMESPACE_VALUE = "gated"
"""A namespace labelled `gpupool.io/admission=gated` gets the gate on its GPU pods."""
GATED_NAMESPACE_SELECTOR = f"{ADMISSION_NAMESPACE_LABEL}={ADMISSION_NAMESPACE_VALUE}"
"""The label selector of those namespaces (observe's read and the watch cache's)."""
ADMITTED_ANN = PREFIX + "admitted"
"""Written with the admission (one patch with the node affinity and the gate's removal): the
node gpupool admitted the pod to."""
RESERVED_ANN = PREFIX + "reserved"
"""On a gated pod: `<node>:<gpus>` ("node-a:0,1,2,3"), the cards gpupool is freeing for it
(written before the evictions that free them; read back by the next cycles until admitted)."""
NEXT_POD_RESERVED_ANN = PREFIX + "next-pod-reserved"
"""On a Job: `<node>:<gpus>@<time>` (RFC 3339), written by a defragmentation move before it
evicts the Job's pod: the pod the Job creates next (gated) is reserved on those cards, so the
move lands where the plan meant. Honoured for pods created within `NEXT_POD_RESERVATION_TTL`
of `<time>`."""
NEXT_POD_RESERVATION_TTL_SECONDS = 600
SUSPENDED_BY_ANN = PREFIX + "suspended-at"
# On a Job: how many times in a row gpupool stopped its gang soon after a (re)start because a
# member was lost (its node failed, it was evicted); written with the suspension, believed only
# from gpupool's field manager. At RECOVERY_ATTEMPTS the Job stays suspended, with a finding.
RECOVERIES_ANN = PREFIX + "recoveries"
RECOVERY_ATTEMPTS = 3
# A gang that lost a member within this many seconds of its start failed "right after a
# resume": the count goes on; later, it starts again at 1.
QUICK_FAILURE_SECONDS = 600
MAX_RECOVERIES_READ = 1000  # a larger count is read as unreadable (absent)
"""On a Job gpupool suspended (`spec.suspend: true`) to stop its gang: when. gpupool resumes
only Jobs that carry it (a Job suspended by its owner or by Kueue is theirs)."""
INTENDED_GPUS_ANN = PREFIX + "intended-gpus"
"""On an admitted pod: the cards the plan meant for it (the `gpupool.io/gpus` format), a hint
the node agent can compare with what the device plugin allocated."""
GANG_ANN = PREFIX + "gang"
GANG_SIZE_ANN = PREFIX + "gang-size"
"""An explicit gang: pods with the same `gpupool.io/gang` in a namespace are admitted and
stopped together, once `gpupool.io/gang-size` of them exist."""
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""The coscheduling plugin's pod-group label (kubernetes-sigs/scheduler-plugins); the group's
size is its PodGroup's `spec.minMember`."""
POD_GROUP_GROUP, POD_GROUP_VERSION, POD_GROUP_PLURAL = (
    "scheduling.x-k8s.io",
    "v1alpha1",
    "podgroups",
)
WORKLOAD_API_GROUP, WORKLOAD_API_VERSION, WORKLOAD_POD_GROUP_PLURAL = (
    "scheduling.k8s.io",
    "v1beta1",
    "podgroups",
)
"""The Workload API's PodGroup (Kubernetes 1.37, beta behind the `GenericWorkload` feature gate
and `--runtime-config=scheduling.k8s.io/v1beta1=true`): a pod names its group in
`spec.schedulingGroup.podGroupName`; a group with `spec.schedulingPolicy.gang.minCount` is
scheduled all or nothing by kube-scheduler's GangScheduling plugin."""
WORKLOAD_GANG_PREFIX = "podgroup:"
"""`Workload.gang` of a pod in a Workload-API PodGroup gang: `podgroup:<name>` (a coscheduling
pod group's is `pod-group:<name>`, an explicit `gpupool.io/gang` its own value)."""
ADMITTED_CONDITION = PREFIX + "Admitted"
"""Pod condition `gpupool.io/Admitted`: gpupool sets it False on a gated pod it holds, with the
reason (`kubectl describe pod` lists it); the pod is admitted when the gate goes."""

# ---------------------------------------------------------------- annotations on workloads
QUEUE_LENGTH_ANN = PREFIX + "queue-length"
PENDING_P99_ANN = PREFIX + "pending-p99-seconds"
LAST_SCALE_ANN = PREFIX + "last-scale"

# ---------------------------------------------------------------- annotations on nodes
CORDONED_FOR_ANN = PREFIX + "cordoned-for"
"""Set with a cordon gpupool made (so it never uncordons a node an SRE cordoned)."""
RECONFIGURE_SINCE_ANN = PREFIX + "reconfigure-since"
PARTITION_ANN = PREFIX + "partition"
MIG_CONFIG_WRITTEN_ANN = PREFIX + "mig-config-written"
"""`<config name>@<time>`: when apply first saw that config in mig-manager's ConfigMap."""
SHARING_CONFIG_WRITTEN_ANN = PREFIX + "sharing-config-written"
"""`<config name>@<time>`: when apply first saw that config in the device plugin's ConfigMap."""
# ---------------------------------------------------------------- NVIDIA's names
NVIDIA = "nvidia.com/"
GPU_RESOURCE = NVIDIA + "gpu"
"""Whole cards, as the device plugin advertises them."""
SHARED_RESOURCE = NVIDIA + "gpu.shared"
"""Time-sliced (or MPS) replicas with `renameByDefault: true` in the device plugin's sharing
config: `replicas` per card not in MIG mode, on every such card of the node."""
MIG_RESOURCE_PREFIX = NVIDIA + "mig-"
"""`nvidia.com/mig-<profile>` per MIG profile (the device plugin's mixed strategy)."""
PRODUCT_LABEL = NVIDIA + "gpu.product"
"""GPU product name, set by GPU feature discovery."""
MIG_CONFIG_LABEL = NVIDIA + "mig.config"
"""mig-manager applies the named entry of its mounted config when this label changes."""
MIG_STATE_LABEL = NVIDIA + "mig.config.state"
"""mig-manager's progress: pending | success | failed."""
CONFIG_NAME_PREFIX = "gpupool-"
"""How the mig-parted and device-plugin configs gpupool writes are named (`MIG_CONFIG_LABEL`
names one while gpupool repartitions a node)."""
DEVICE_PLUGIN_CONFIG_LABEL = NVIDIA + "device-plugin.config"
"""Selects the named config of the device plugin's ConfigMap for this node."""


def mig_resource(profile: str) -> str:
    """The device plugin's resource for a MIG profile under the `mixed` strategy (`+` of a
    media-extension profile becomes `.`)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


def resource_version(value: object) -> int | None:
    """A `metadata.resourceVersion` as the integer Kubernetes defines it for comparison since
    1.35 (KEP-5504, Comparable Resource Version: a decimal without leading zeros; a greater
    value of one resource is a later state), or None if it is not one (an aggregated API
    server may serve opaque versions: nothing is compared then)."""
    text = str(value or "")
    return int(text) if text.isdigit() and not text.startswith("0") else None


def raw_resource_version(obj: object) -> object:
    """An object's `metadata.resourceVersion` as the client gives it: from a model object, or
    from a dict (custom objects, and the watch's BOOKMARK events, which it does not
    deserialize); None when it has none. `resource_version` reads it."""
    if isinstance(obj, dict):
        return (obj.get("metadata") or {}).get("resourceVersion")
    return getattr(getattr(obj, "metadata", None), "resource_version", None)


# ---------------------------------------------------------------- autoscalers (HPA, KEDA)
HPA_KIND = "HorizontalPodAutoscaler"
SCALED_OBJECT_KIND = "ScaledObject"
KEDA_GROUP, KEDA_VERSION, SCALED_OBJECT_PLURAL = "keda.sh", "v1alpha1", "scaledobjects"
"""KEDA's ScaledObject (github.com/kedacore/keda/v2 v2.19.0,
config/crd/bases/keda.sh_scaledobjects.yaml)."""
HPA_DEFAULT_MIN = 1
"""An HPA without `spec.minReplicas` keeps at least 1 (kubernetes v1.37.2
pkg/controller/podautoscaler/horizontal.go, reconcileAutoscaler: "Default value")."""
KEDA_DEFAULT_MIN, KEDA_DEFAULT_MAX = 0, 100
"""A ScaledObject without `spec.minReplicaCount` scales its idle target to 0 (keda v2.19.0
pkg/scaling/executor/scale_scaledobjects.go: "if scaledObject.Spec.MinReplicaCount is not
set, then set the default value (0)"); without `spec.maxReplicaCount` its HPA's max is 100
(apis/keda/v1alpha1/scaledobject_types.go, defaultHPAMaxReplicas, GetHPAMaxReplicas)."""


# -------------------------------------------------------------------------- Kueue's names
# Confirmed in kubernetes-sigs/kueue v0.17.0 (the Go module sigs.k8s.io/kueue@v0.17.0):
# config/components/crd/bases/kueue.x-k8s.io_{clusterqueues,resourceflavors,localqueues}.yaml
# serve v1beta1 and v1beta2, and store v1beta2 (`storage: true`); the queue label is
# pkg/controller/constants/constants.go `QueueLabel = "kueue.x-k8s.io/queue-name"`.
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE_API_VERSION = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
KUEUE_PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
}
KUEUE_QUEUE_LABEL = KUEUE_GROUP + "/queue-name"
"""The label a Job (or pod) carries to be queued in the LocalQueue of that name; Kueue
suspends such a Job until its ClusterQueue admits it."""

KUEUE_LOCAL_QUEUE = "gpupool"
"""The LocalQueue gpupool makes in every team namespace: teams label their Jobs
`kueue.x-k8s.io/queue-name: gpupool`."""
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
"""The label the API server sets on every namespace to its own name (immutable), which a
ClusterQueue's namespaceSelector matches."""

# The resources an observation lists besides nodes, pods, GpuNodeStates and resource.k8s.io,
# by kubectl's `resource.group` name. The controller's watch cache keeps each
# (reconciler/loop/informer.py, `ClusterCache.listed`); gpupool's own writes of them are
# recorded under the same names (`KubeOps.written` / `deleted`), so a cycle reads them from the
# cache only once it has seen those writes.
JOBS = "jobs.batch"
DEPLOYMENTS = "deployments.apps"
STATEFUL_SETS = "statefulsets.apps"
HPAS = "horizontalpodautoscalers.autoscaling"
SCALED_OBJECTS = f"{SCALED_OBJECT_PLURAL}.{KEDA_GROUP}"
RESOURCE_QUOTAS = "resourcequotas"
PRIORITY_CLASSES = "priorityclasses.scheduling.k8s.io"
GATED_NAMESPACES = "namespaces"
"""Only the namespaces labelled for gpupool's admission."""
COSCHEDULING_POD_GROUPS = f"{POD_GROUP_PLURAL}.{POD_GROUP_GROUP}"
WORKLOAD_POD_GROUPS = f"{WORKLOAD_POD_GROUP_PLURAL}.{WORKLOAD_API_GROUP}"
KUEUE_RESOURCES = {kind: f"{plural}.{KUEUE_GROUP}" for kind, plural in KUEUE_PLURALS.items()}

# ---------------------------------------------------------------- the controller's cycle
RECONCILE_INTERVAL_SECONDS = 30
"""`gpupool reconcile --interval`'s default; the digital twin (`simulate --mode twin
--period`, `plan --twin-period`, `TwinConfig.period`) cycles at the same pace by default."""


# ---------------------------------------------------------------- what the cluster can mean
# Every count, size and time gpupool reads from the cluster or a snapshot file is bounded by
# what the object can really mean. The planner makes lists and loops as long as some of these
# numbers (a suspended Job's pods, a shared card's free-slice buckets, a node's cards), so one
# tenant's absurd value would stall the plan for everyone. Beyond a bound, a snapshot file is
# bad input (a located error, exit 1) and the Kubernetes adapter reads the object (or that
# field) as unreadable: a finding `unreadable-object` and an Event on the object, while the
# rest of the cycle goes on (reconciler/observe/model.py, kube_common.py).

MAX_GPUS_PER_NODE = 32
"""GPUs one node carries. NVIDIA's driver supports at most 32 GPUs in one system
(NVIDIA/open-gpu-kernel-modules src/common/sdk/nvidia/inc/nvlimits.h, `NV_MAX_DEVICES 32`:
"the maximum number of GPUs supported in a single system"), so NVML, the device plugin and
the node agent never see more; the largest servers built carry 8 to 16 (DGX/HGX: 8; 16-card
PCIe servers), and a Pool's `capacity.gpusPerNode` is at most 16. A node that advertises more
(`nvidia.com/gpu` capacity, a GpuNodeState's `status.gpus`) is unreadable: the adapter would
otherwise make one card per unit of a number anyone with node-status rights can write."""

MAX_SHARED_SLICES_PER_GPU = 64
"""Shared slices (device-plugin replicas) of one card. MPS serves at most 48 clients per card
(`reconciler/apply/configs.py` MPS_MAX_REPLICAS, the MPS control daemon's limit), and
gpupool's own policy never asks for more than 48 (`SharedInference.slicesPerGPU`).
Time-slicing has no limit in the device plugin (NVIDIA/k8s-device-plugin
api/config/v1/replicas.go refuses only `replicas <= 0`), so the bound leaves room above 48
for a configuration made by hand, and stops where a slice stops meaning anything: each
replica is a process with its own CUDA context (a few hundred MiB of the card's memory), so at
64 an 80 GB card leaves about 1.25 GB per slice and a 24 GB one about 375 MiB, no more than the
context itself. The planner keeps one bucket per free-slice count, so the count must be small."""

MAX_GANG_SIZE = 100_000
"""Pods of one gang: a Job's `parallelism` (the demand of a Job gpupool suspended is one unit
per pod), a coscheduling PodGroup's `minMember`, `gpupool.io/gang-size`. The API server
refuses an Indexed Job with a larger `parallelism` (kubernetes pkg/apis/batch/validation
validation.go, `maxParallelismForIndexedJob = 100000`), and a gang is all or nothing: every
pod of it holds its GPU (or slice) at once, on one cluster, whose supported envelope is 5,000
nodes and 150,000 pods (kubernetes.io, "Considerations for large clusters"). A larger gang is a
typo or an attack, and the planner would make a list as long as it (planning 100,000 units of
one suspended Job takes well under a second)."""

MIN_TIME_YEAR, MAX_TIME_YEAR = 2000, 2199
"""The years a time read from the cluster or a snapshot may have (in its own offset): every
`creationTimestamp`, `startTime`, idle time, checkpoint, suspension and scaling time, and the
snapshot's `observedAt`. Kubernetes is from 2014 and gpupool from 2026, so an earlier time is a
broken clock (a node whose clock reset to 1970) or a forgery, and a later one a typo. Outside
these years datetime arithmetic with gpupool's durations (at most a year,
`reconciler/policy/models.py` MAX_DURATION) could leave Python's range (years 1 to 9999):
the planner's hour window before `observedAt` at year 1, the twin's next cycle after it at
year 9999, both OverflowError."""

# ---------------------------------------------------------------- files read whole
MAX_SNAPSHOT_BYTES = 256 * 2**20
"""An observed-state snapshot file: a 10,000-node cluster (80,000 GPUs, 180,000 pods) writes
about 110 MiB (bench/plan_scale.py); 256 MiB leaves room for twice that, and a file past it is
refused by its size before it is read."""
MAX_SAVED_PLAN_BYTES = 64 * 2**20
"""A saved plan (`gpupool plan --out`): a plan of that 10,000-node cluster is a few MiB of
actions; 64 MiB is far beyond what a plan can hold, and a file past it is refused unread."""
