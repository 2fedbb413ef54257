"""The observed state: one immutable snapshot of nodes, GPUs, workloads and demand.

Adapters (NVML, Kubernetes, snapshot files) produce it; the planner reads only this, so a
what-if needs no API calls. It serialises to YAML/JSON (`kind: ObservedState`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from reconciler.conventions import API_VERSION
from reconciler.policy.models import yaml_name

OBSERVED_API_VERSION = API_VERSION


class Obs(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=yaml_name, populate_by_name=True
    )


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
    idle_since: datetime | None = None
    """Since when utilization has stayed below the idle threshold (published by the node agent)."""
    mig_enabled: bool = False
    mig_instances: list[MigInstance] = []
    shared_slices: int | None = None
    """Set when the card is shared (time-slicing/MPS): how many slices it offers."""
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
    gpus: list[Gpu] = []


class Allocation(Obs):
    """What a running workload holds on its node."""

    gpu: int = Field(ge=0)
    mig_start: int | None = None
    """For a MIG request: the start slot of the instance it uses."""
    mig_profile: str | None = None
    slices: int = 0
    """For a shared request: slices of this card it holds."""


class PodGpus(Obs):
    """Which cards one pod holds on its node: the node agent's `GpuNodeState` `status.pods`,
    mapped from the kubelet's PodResources device IDs through NVML UUIDs."""

    namespace: str
    name: str
    allocations: list[Allocation] = []

    @property
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
    created_at: datetime | None = None
    started_at: datetime | None = None
    last_checkpoint_at: datetime | None = None
    owner_kind: str = ""
    owner_name: str = ""
    checkpointable: bool = False
    migratable: bool = False
    """Can be checkpointed and restarted elsewhere (defragmentation may move it)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


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
    queue_length: float | None = None
    """Requests waiting (exported by the serving stack), all replicas together."""
    pending_seconds_p99: float | None = None
    last_scale_at: datetime | None = None

    @property
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


class ObservedState(Obs):
    api_version: Literal[API_VERSION] = OBSERVED_API_VERSION
    kind: Literal["ObservedState"] = "ObservedState"
    observed_at: datetime
    """The snapshot's time; the planner's notion of 'now' unless told otherwise."""
    nodes: list[Node] = []
    workloads: list[Workload] = []
    services: list[InferenceService] = []
    quotas: list[QuotaObject] = []
    priority_classes: list[PriorityClassObject] = []
    recent_preemptions: list[datetime] = []
    """When gpupool preempted workloads lately (the rolling-hour budget counts these)."""


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
