"""What Kubernetes Dynamic Resource Allocation (resource.k8s.io/v1) says about the GPUs: the
ResourceSlices drivers publish, the DeviceClasses, the ResourceClaims (and templates) with their
allocations, and which pod holds which device. Read by `kube_dra.py`, carried by snapshot files
(`ObservedState.dra`), planned from by `reconciler/plan/partition/dra.py` and
`reconciler/plan/objects/dra_objects.py`.

The names NVIDIA's DRA driver publishes (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1; read, not
copied): driver `gpu.nvidia.com` (cmd/gpu-kubelet-plugin/main.go `DriverName`), one pool per node
named after the node (driver.go `publishResources`); whole cards `gpu-<minor>` (deviceinfo.go
`GpuInfo.CanonicalName`) and static MIG devices `gpu-<minor>-mig-<profile without dots>-<profile
id>-<placement start>` (mig.go `MigSpecTuple.ToCanonicalName`); attributes `type` (`gpu` |
`mig`, types.go), `uuid`, `productName`, `brand`, `architecture`, `cudaComputeCapability`,
`driverVersion`, `cudaDriverVersion` (deviceinfo.go `GpuInfo.Attributes`), MIG devices also
`parentUUID` and `profile` (mig.go `CommonAttributesMig`), and Kubernetes' standard
`resource.kubernetes.io/pciBusID` / `pcieRoot` (nvlib.go, via k8s.io/dynamic-resource-allocation
deviceattribute). Capacity `memory` (bytes) on cards (partitions.go `fullGpuCapacity`), MIG
devices `multiprocessors`, `copyEngines`, `decoders`, `encoders`, `jpegEngines`, `ofaEngines`,
`memory` and one `memorySlice<i>` per memory slice they occupy (mig.go `CommonCapacitiesMig`,
deviceinfo.go `MigDeviceInfo.GetDevice`). Under the alpha `DynamicMIG` gate one counter set per
card, `gpu-<minor>-counter-set`, with `memory-slice-<i>` counters (partitions.go). The driver
publishes no NUMA node and no NVLink clique attribute for a GPU in v0.4.1 (only its VFIO
devices carry `numa`): gpupool keeps reading NVLink domains from node labels.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from reconciler import conventions as C
from reconciler.policy.models import yaml_name

NVIDIA_DRIVER = C.DRA_DRIVER


class Obs(BaseModel):
    """observe/model.py's `Obs` (model.py imports this module for `ObservedState.dra`)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=yaml_name, populate_by_name=True
    )


AttributeValue = bool | int | str
"""A device attribute's value: a string, an int, a bool, or a version (read as its string)."""


class DeviceTaint(Obs):
    key: str
    value: str = ""
    effect: Literal["NoSchedule", "NoExecute", "None"] = "NoSchedule"


class CounterConsumption(Obs):
    counter_set: str
    counters: dict[str, str] = {}
    """Counter name -> quantity (e.g. `memory-slice-0: "1"`)."""


class CounterSet(Obs):
    name: str
    counters: dict[str, str] = {}


class DraDevice(Obs):
    """One device of a ResourceSlice."""

    name: str
    attributes: dict[str, AttributeValue] = {}
    """Attribute name -> value; a name without a domain is the driver's (`type`, `uuid`, ...)."""
    capacity: dict[str, str] = {}
    """Capacity name -> quantity (`memory: 80Gi`, `memorySlice0: "1"`)."""
    consumes_counters: list[CounterConsumption] = []
    taints: list[DeviceTaint] = []

    def attr(self, name: str) -> AttributeValue | None:
        return self.attributes.get(name)

    @property
    def type(self) -> str:
        """`gpu`, `mig` (NVIDIA's driver's `type` attribute), or '' when not published."""
        t = self.attributes.get("type")
        return t if isinstance(t, str) else ""


class ResourceSlice(Obs):
    name: str
    driver: str
    pool: str
    """`spec.pool.name` (NVIDIA's driver: the node name)."""
    generation: int = 0
    """`spec.pool.generation`: a pool's slices of an older generation are outdated."""
    node: str = ""
    """`spec.nodeName` ('' for slices not bound to one node)."""
    devices: list[DraDevice] = []
    shared_counters: list[CounterSet] = []


class DeviceClassObject(Obs):
    name: str
    selectors: list[str] = []
    """Its CEL selector expressions."""
    extended_resource_name: str = ""
    managed_by: str = ""
    pool: str = ""
    """gpupool's classes only: the Pool it selects for (label `gpupool.io/pool`)."""
    profile: str = ""
    """gpupool's classes only: '' for whole cards, else the MIG profile it selects."""


class DeviceResult(Obs):
    """One allocated device of a claim (`status.allocation.devices.results[]`)."""

    request: str
    driver: str
    pool: str
    device: str

    @property
    def ref(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


class ResourceClaimObject(Obs):
    namespace: str
    name: str
    devices: dict[str, int] = {}
    """DeviceClass -> how many devices its requests ask of it (exactly, or the first of its
    first-available subrequests; `allocationMode: All` counts 1)."""
    allocated: list[DeviceResult] | None = None
    """None: not allocated yet."""
    node: str = ""
    """Where an allocation is usable (the node its nodeSelector names), '' when not known."""
    reserved_for: list[str] = []
    """Pod names in `status.reservedFor` (the claim's namespace)."""
    managed_by: str = ""
    replaces: list[str] = []
    """A claim exact admission pinned: the claims it replaced (its `gpupool.io/replaces-claims`
    annotation, apply/handlers/dra_admit.py), deleted after the pod's gate went; one still
    there is swept (plan/objects/dra_objects.py `sweep_replaced_claims`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


class ClaimTemplateObject(Obs):
    namespace: str
    name: str
    devices: dict[str, int] = {}
    managed_by: str = ""


class PodClaims(Obs):
    """A pod's resource claims: its `spec.resourceClaims` and, for templates, the claim the
    controller made (`status.resourceClaimStatuses`)."""

    namespace: str
    pod: str
    claims: list[str] = []
    """The names of the ResourceClaims it uses (made from a template, or named)."""
    templates: list[str] = []
    """The ResourceClaimTemplates it names whose claim is not made yet."""
    made_from: dict[str, str] = {}
    """Claim name (of `claims`) -> the template it was made from: what the pod asks for while
    that claim is gone (deleted before gpupool's exact admission wrote it again)."""


class DeviceTaintRuleObject(Obs):
    """A DeviceTaintRule (resource.k8s.io/v1): one taint on the devices its selector names
    (`spec.deviceSelector`: driver, pool, device; each '' when not set: any)."""

    name: str
    driver: str = ""
    pool: str = ""
    device: str = ""
    taint: DeviceTaint
    managed_by: str = ""


class DraState(Obs):
    """Everything DRA says (resource.k8s.io/v1). `ObservedState.dra` is None where the API
    server does not serve it (or a snapshot does not say)."""

    slices: list[ResourceSlice] = []
    device_classes: list[DeviceClassObject] = []
    claims: list[ResourceClaimObject] = []
    claim_templates: list[ClaimTemplateObject] = []
    taint_rules: list[DeviceTaintRuleObject] = []
    taint_rules_served: bool = True
    """Whether the API server serves DeviceTaintRules (resource.k8s.io/v1 `devicetaintrules`:
    Kubernetes' `DRADeviceTaintRules` gate, on by default from 1.37); False: none can be made."""
    pods: list[PodClaims] = []

    def gpupool_objects(self) -> bool:
        """Whether any DeviceClass, ResourceClaimTemplate or DeviceTaintRule here is gpupool's
        (its managed-by label)."""
        mine = [*self.device_classes, *self.claim_templates, *self.taint_rules]
        return any(o.managed_by == C.MANAGED_BY for o in mine)

    def devices(self, node: str, driver: str = NVIDIA_DRIVER) -> list[DraDevice]:
        """The current devices `driver` publishes for `node` (its pool's newest generation)."""
        return self.devices_by_node(driver, node).get(node, [])

    def devices_by_node(
        self, driver: str = NVIDIA_DRIVER, only: str | None = None
    ) -> dict[str, list[DraDevice]]:
        """`devices` of every node `driver` publishes for (of `only` alone, when given), in
        one pass over the slices: for a caller that asks it of every node."""
        return {
            node: [d for s in slices for d in s.devices]
            for node, slices in self.slices_by_node(driver, only).items()
        }

    def slices_by_node(
        self, driver: str = NVIDIA_DRIVER, only: str | None = None
    ) -> dict[str, list[ResourceSlice]]:
        """The current slices `driver` publishes for each node (its pool's newest generation,
        as listed; of `only` alone, when given): what `devices_by_node` takes the devices of."""
        mine: dict[str, list[ResourceSlice]] = {}
        for s in self.slices:
            node = s.node or s.pool
            if s.driver == driver and (only is None or node == only):
                mine.setdefault(node, []).append(s)
        out = {}
        for node, slices in mine.items():
            newest = max(s.generation for s in slices)
            out[node] = [s for s in slices if s.generation == newest]
        return out

    def driver_pools(self, driver: str = NVIDIA_DRIVER) -> dict[str, str]:
        """Node -> the pool `driver` publishes its devices in (NVIDIA's driver names it after
        the node), from the first of the node's slices as listed; a node without a slice of
        `driver` is not in it (callers take the node's own name then)."""
        out: dict[str, str] = {}
        for s in self.slices:
            if s.driver == driver:
                out.setdefault(s.node or s.pool, s.pool)
        return out

    def holders(self) -> dict[str, list[str]]:
        """Device ref (`driver/pool/device`) -> the pods (`ns/name`) its claims are reserved
        for: who holds which device."""
        out: dict[str, list[str]] = {}
        for c in self.claims:
            for r in c.allocated or []:
                out.setdefault(r.ref, []).extend(f"{c.namespace}/{p}" for p in c.reserved_for)
        return {k: sorted(set(v)) for k, v in sorted(out.items())}
