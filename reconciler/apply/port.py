"""The narrow port between apply and a cluster: the operations the handlers really need.

Like gitops-engine's resource operations or httpx's transport: handlers speak only this
Protocol, so they are table-tested against an in-memory implementation
(tests/apply/memory.py) and run in production against `reconciler.apply.kube.KubeOps`, the only
module of apply that imports the Kubernetes client. Errors come back as `ApiError` with the
HTTP status the API server answered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

WorkloadKind = Literal["Deployment", "StatefulSet"]


class ApiError(Exception):
    """An API request failed; `status` is the HTTP status (404 missing, 409 conflict, 429 a
    PodDisruptionBudget or throttling, 5xx server trouble), 0 when no answer came (connection
    refused or reset, timed out): the request may or may not have been carried out."""

    def __init__(self, status: int, reason: str = "", message: str = ""):
        self.status, self.reason, self.message = status, reason, message
        super().__init__(f"API {status} {reason}: {message}".rstrip(": "))


@dataclass(frozen=True)
class NodeInfo:
    name: str
    unschedulable: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    """`status.allocatable` as the kubelet posts it: what the device plugin advertises now."""


@dataclass(frozen=True)
class PodCondition:
    """One entry of a pod's `status.conditions`."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str = ""
    """RFC 3339, as the API server returns it ("" when unset)."""


@dataclass(frozen=True)
class PodInfo:
    namespace: str
    name: str
    phase: str = "Running"
    annotations: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    """The pod has a deletionTimestamp: it is already on its way out."""
    gpu_resources: bool = False
    """Some container asks for a GPU resource (whole, MIG or shared)."""
    node: str | None = None
    """`spec.nodeName`: the node it is bound to, None while unscheduled."""
    gates: tuple[str, ...] = ()
    """The names of its `spec.schedulingGates`, in order: kube-scheduler leaves it alone while
    there is any."""
    conditions: tuple[PodCondition, ...] = ()
    """Its `status.conditions`."""
    owner_kind: str = ""
    owner_name: str = ""
    """Its owner: the ownerReference marked `controller`, else the first one ("" when it has
    none): `Job` for a batch/v1 Job's pod, `ReplicaSet` for a Deployment's."""
    uid: str = ""
    """`metadata.uid`: tells this pod from a later one of the same name."""
    claims: tuple[tuple[str, str], ...] = ()
    """Its `spec.resourceClaims` (DRA) in order: (entry name, the ResourceClaim's name), the
    name it references or the one made from its template (`status.resourceClaimStatuses`), ""
    while the claim is not made yet."""
    claim_templates: Mapping[str, str] = field(default_factory=dict)
    """Entry -> the ResourceClaimTemplate it names (`spec.resourceClaims[].
    resourceClaimTemplateName`), for the entries made from one."""
    annotation_writers: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Annotation key -> the field managers that own it in `metadata.managedFields` (who set it
    last, as the API server records it); a key not here has none on record. What
    `reconciler.observe.trust` judges a value by."""
    nominated: str = ""
    """`status.nominatedNodeName` ("" when unset): where kube-scheduler expects the pod to go,
    or a component that decided it (gpupool's exact admission on DRA, `set_pod_claim`)."""
    delete_asked: datetime | None = None
    """When its deletion was asked for (the API server's clock: `deletionTimestamp` less
    `deletionGracePeriodSeconds`); None when it is not being deleted or either is unset."""
    created: datetime | None = None
    """`metadata.creationTimestamp` (the API server's clock, whole seconds); None when unset."""
    resource_version: str = ""
    """`metadata.resourceVersion` of the copy this was read from ("" when unknown): what a
    write made from it is conditional on (`set_pod_condition`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def condition(self, type: str) -> PodCondition | None:
        return next((c for c in self.conditions if c.type == type), None)


@dataclass(frozen=True)
class JobInfo:
    """A batch/v1 Job, as much as apply reads of it."""

    annotations: dict[str, str] = field(default_factory=dict)
    suspended: bool = False
    """`spec.suspend` is true: the Job controller keeps none of its pods running."""


@dataclass(frozen=True)
class ConfigMapInfo:
    data: dict[str, str]
    resource_version: str


@dataclass(frozen=True)
class WorkloadInfo:
    replicas: int
    resource_version: str


@dataclass(frozen=True)
class PriorityClassInfo:
    value: int
    preemption_policy: str
    global_default: bool = False
    managed_by: str = ""
    """Its `app.kubernetes.io/managed-by` label ("" when it has none)."""


AutoscalerKind = Literal["HorizontalPodAutoscaler", "ScaledObject"]


@dataclass(frozen=True)
class AutoscalerInfo:
    """An HPA or a KEDA ScaledObject, as much as the envelope step reads of it."""

    min_replicas: int
    """HPA spec.minReplicas (1 when absent); ScaledObject spec.minReplicaCount (0 when absent)."""
    max_replicas: int
    """HPA spec.maxReplicas; ScaledObject spec.maxReplicaCount (100 when absent)."""
    target_kind: str
    target_name: str
    """Its scaleTargetRef's kind and name (a ScaledObject's kind defaults to Deployment)."""
    resource_version: str
    owner: str = ""
    """`ScaledObject/<name>` for an HPA KEDA made (its controller ownerReference)."""


Unset = object()  # `patch_node(unschedulable=...)` left out: not changed


class ClusterOps(Protocol):
    # nodes
    def read_node(self, name: str) -> NodeInfo | None: ...

    def patch_node(
        self,
        name: str,
        *,
        unschedulable: bool | None | object = Unset,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> None:
        """One merge patch; a None value removes that label/annotation (or the cordon)."""

    def read_node_state(self, node: str) -> dict | None:
        """The node agent's GpuNodeState object, None when it has none."""

    # pods
    def read_pod(self, namespace: str, name: str) -> PodInfo | None: ...

    def peek_pod(self, namespace: str, name: str) -> PodInfo | None:
        """The pod as the controller's watch cache holds it (the cache this cycle observed
        through, once it had seen gpupool's own last pod writes), without a request; None when
        the cache does not hold it or there is none (read it then). It may lag the server by
        what others wrote since: a write made from it must be conditional on its version
        (`admit_pod` is), and a 409 then means "read it and decide again"."""

    def pods_on_node(self, node: str) -> list[PodInfo]: ...

    def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None: ...

    def evict_pod(self, namespace: str, name: str) -> None:
        """Through the Eviction API: ApiError 429 when a PodDisruptionBudget refuses."""

    def admit_pod(
        self, namespace: str, name: str, *, node: str, annotations: dict[str, str]
    ) -> None:
        """Let a gated pod be scheduled, on `node` only: ONE strategic-merge patch that
        * requires the node: `spec.affinity.nodeAffinity.requiredDuringScheduling...
          .nodeSelectorTerms` = `[{matchFields: [{key: metadata.name, operator: In, values:
          [node]}]}]`; a pod that already has required terms of its own keeps them, with this
          requirement added to each (terms are ORed, a term's requirements ANDed), because the
          API server allows only additions to a gated pod's non-empty terms;
        * removes gpupool's gate: `{"$patch": "delete", "name": ADMISSION_GATE}` in
          `spec.schedulingGates` (a list merged by `name`: other gates stay);
        * sets `annotations`.
        The API server accepts a change of node affinity only while the pod is gated, i.e. when
        the pod it patches still has a scheduling gate (k8s.io/kubernetes v1.37.2
        pkg/apis/core/validation/validation.go, ValidatePodUpdate: "Handle validations
        specific to gated pods", `podIsGated := len(oldPod.Spec.SchedulingGates) > 0`, then
        validateNodeAffinityMutation; the affinity of an ungated pod falls under "pod updates
        may not change fields other than ..."). So the gate's removal and the affinity go in
        one request: a pod with no gate left is refused with ApiError 422 (Invalid), a missing
        pod with 404; a pod that changed since it was read (the terms are read first) with
        409."""

    def set_pod_condition(
        self,
        namespace: str,
        name: str,
        *,
        type: str,
        status: str,
        reason: str,
        message: str,
        last_transition_time: str,
        clear_nominated: bool = False,
        resource_version: str = "",
    ) -> None:
        """Set one condition in the pod's `status.conditions` (a strategic-merge patch of the
        pods/status subresource, merged by condition `type`: the others stay); with
        `clear_nominated`, remove its `status.nominatedNodeName` in the same patch. With
        `resource_version` (`PodInfo.resource_version` of the copy it was decided from: a
        watch cache's), only if the pod is still that version: ApiError 409 when it changed
        since (read it and decide again), 404 when it is gone."""

    def set_pod_claim(
        self, namespace: str, name: str, entry: str, claim: str, *, node: str = ""
    ) -> None:
        """Name `claim` as the ResourceClaim of the pod's claim `entry` in its
        `status.resourceClaimStatuses` (a strategic-merge patch of the pods/status
        subresource, merged by `name`: the other entries stay), and with `node` the node the
        plan chose as its `status.nominatedNodeName` in the same patch. Exact admission points
        a gated pod at the pinned claim it made before it deletes the claim it replaces
        (handlers/dra_admit.py)."""

    # jobs
    def read_job(self, namespace: str, name: str) -> JobInfo | None:
        """A batch/v1 Job, None when it is missing. Read through a `list` with the field
        selector `metadata.name=<name>`: the controller may list Jobs (it observes them) but not
        get one, and needs no more."""

    def annotate_job(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        """One merge patch of a batch/v1 Job's annotations (a None value removes that key);
        ApiError 404 when the Job is missing."""

    def set_job_suspend(
        self, namespace: str, name: str, *, suspend: bool, annotations: dict[str, str | None]
    ) -> None:
        """ONE merge patch of a batch/v1 Job's `spec.suspend` and its annotations (a None value
        removes that key), so the suspension and gpupool's mark on it cannot be parted by a
        crash; ApiError 404 when the Job is missing."""

    # workloads
    def read_workload(self, kind: WorkloadKind, namespace: str, name: str) -> WorkloadInfo: ...

    def scale_workload(
        self,
        kind: WorkloadKind,
        namespace: str,
        name: str,
        *,
        replicas: int,
        resource_version: str,
        annotations: dict[str, str],
    ) -> None:
        """Replicas and annotations in one patch, refused (409) if the object changed since."""

    # autoscalers (HPA, KEDA ScaledObject)
    def read_autoscaler(
        self, kind: AutoscalerKind, namespace: str, name: str
    ) -> AutoscalerInfo | None:
        """An HPA (autoscaling/v2) or a ScaledObject (keda.sh/v1alpha1), None when it is
        missing (or, for a ScaledObject, when KEDA's CRD is not installed)."""

    def set_autoscaler_bounds(
        self,
        kind: AutoscalerKind,
        namespace: str,
        name: str,
        *,
        min_replicas: int,
        max_replicas: int,
        resource_version: str,
        annotations: dict[str, str],
    ) -> None:
        """ONE merge patch of the envelope (HPA spec.minReplicas/maxReplicas, ScaledObject
        spec.minReplicaCount/maxReplicaCount) and annotations, refused (409) if the object
        changed since `resource_version`; 404 when it is missing."""

    # objects
    def read_config_map(self, namespace: str, name: str) -> ConfigMapInfo | None: ...

    def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], *, resource_version: str | None
    ) -> None:
        """Create (resource_version None) or merge `data` keys, guarded by the version read."""

    def namespace_exists(self, name: str) -> bool: ...

    def server_side_apply(self, body: dict) -> None:
        """Server-side apply of a ResourceQuota or PriorityClass as gpupool's field manager."""

    def read_priority_class(self, name: str) -> PriorityClassInfo | None: ...

    def quota_manager(self, namespace: str, name: str) -> str | None:
        """A ResourceQuota's `app.kubernetes.io/managed-by` label ("" without one); None when
        there is no such quota."""

    def delete_priority_class(self, name: str) -> None: ...

    def delete_resource_quota(self, namespace: str, name: str) -> None:
        """Delete a ResourceQuota (ApiError 404 when it is gone already)."""

    def create_event(self, namespace: str, body: dict) -> None: ...

    # -- Kueue: kueue.x-k8s.io ResourceFlavor, ClusterQueue, LocalQueue ---------
    def kueue_manager(self, kind: str, namespace: str, name: str) -> str | None:
        """A Kueue object's `app.kubernetes.io/managed-by` label ("" without one); None when
        there is no such object. `namespace` is "" for the cluster-scoped kinds."""

    def create_kueue_object(self, body: dict) -> None:
        """Create a Kueue object (`body` a whole object: apiVersion, kind, metadata, spec)."""

    def patch_kueue_object(self, kind: str, namespace: str, name: str, patch: dict) -> None:
        """JSON merge patch (RFC 7386) of a Kueue object: lists in it replace whole."""

    def delete_kueue_object(self, kind: str, namespace: str, name: str) -> None:
        """Delete a Kueue object (ApiError 404 when it is gone already)."""

    # -- DRA: resource.k8s.io/v1 DeviceClass, ResourceClaimTemplate ---------------
    def dra_manager(self, kind: str, namespace: str, name: str) -> str | None:
        """A DeviceClass's or ResourceClaimTemplate's managed-by label ("" without one); None
        when there is no such object. `namespace` is "" for a DeviceClass."""

    def read_dra_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """A DRA object as the API serves it (a ResourceClaim with its status); None when
        there is no such object."""

    def peek_dra_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """A DRA object as the controller's watch cache holds it, read-only, when that cache
        had seen gpupool's own last writes of its kind at this cycle's observation; None when
        it does not hold the object, is behind, or there is no cache (read it then). It may
        lag the server: exact admission takes only what cannot have changed from it (a
        claim's spec and owner, a DeviceClass being gpupool's; handlers/dra_admit.py)."""

    def create_dra_object(self, body: dict) -> None:
        """Create a DRA object (`body` a whole object: apiVersion, kind, metadata, spec)."""

    def patch_dra_object(self, kind: str, namespace: str, name: str, patch: dict) -> dict | None:
        """JSON merge patch (RFC 7386) of a DRA object: lists in it replace whole; a
        `metadata.resourceVersion` in it makes it conditional (409 when the object changed
        since). -> the object as the server answered (None where a port does not say)."""

    def replace_dra_status(self, kind: str, namespace: str, name: str, body: dict) -> None:
        """Replace a DRA object's status (`body`: the object as read, its status changed; the
        API server refuses it when the object changed since: 409)."""

    def delete_dra_object(self, kind: str, namespace: str, name: str) -> None:
        """Delete a DRA object (ApiError 404 when it is gone already)."""
