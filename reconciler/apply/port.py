"""The narrow port between apply and a cluster: the operations the handlers really need.

Like gitops-engine's resource operations or httpx's transport: handlers speak only this
Protocol, so they are table-tested against an in-memory implementation
(tests/apply/memory.py) and run in production against `reconciler.apply.kube.KubeOps`, the only
module of apply that imports the Kubernetes client. Errors come back as `ApiError` with the
HTTP status the API server answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
class PodInfo:
    namespace: str
    name: str
    phase: str = "Running"
    annotations: dict[str, str] = field(default_factory=dict)
    deleting: bool = False
    """The pod has a deletionTimestamp: it is already on its way out."""
    gpu_resources: bool = False
    """Some container asks for a GPU resource (whole, MIG or shared)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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

    def pods_on_node(self, node: str) -> list[PodInfo]: ...

    def annotate_pod(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None: ...

    def evict_pod(self, namespace: str, name: str) -> None:
        """Through the Eviction API: ApiError 429 when a PodDisruptionBudget refuses."""

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

    def delete_priority_class(self, name: str) -> None: ...

    def create_event(self, namespace: str, body: dict) -> None: ...
