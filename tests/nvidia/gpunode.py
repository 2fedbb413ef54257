"""The GPUs of one simulated node, as NVIDIA's node components see them.

* The hardware is `tests.fakes.fake_pynvml.FakeNvml` (MIG placement rules, IN_USE errors), so
  gpupool's real node agent (`reconciler.loop.agent.run_once`) publishes it unchanged.
* Which pod holds which device is the kubelet's device manager: it calls the device plugin's
  Allocate with device IDs and reports them through the PodResources API (`v1.PodResourcesLister`
  List: per pod and container, resource name and device IDs), which dcgm-exporter reads
  (../shared/notes/nvidia-stack.md, "Which pod holds which card"). `pod_resources()` is that List.
* What the node advertises is the device plugin's job (`advertised()`), given the sharing config
  its config-manager selected (device_plugin.py). On a node with no card in MIG mode that is
  NVIDIA's own plugin (`real_plugin`, tests/nvidia/real_plugin.py): the device IDs come from its
  ListAndWatch, and admission asks it for GetPreferredAllocation and Allocate, as the kubelet's
  device manager does. The stand-in inventory below serves MIG nodes (the simulated NVML
  library models no MIG) and the time before the plugin first starts.

Device IDs, as the device plugin names them: a whole card is its GPU UUID; a MIG device is its
MIG UUID; a time-sliced replica is `<GPU UUID>::<n>` (k8s-device-plugin
internal/rm/device_map.go builds replicas as AnnotatedID `uuid::n`).
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass, field
from typing import Any

import pynvml

from reconciler.conventions import GPU_RESOURCE, SHARED_RESOURCE, mig_resource
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml, FakeProcess
from tests.nvidia import nvmlsim

BUSY_UTILIZATION = 90
"""Percent a card with a running container reports in the stand-in."""


class Unschedulable(Exception):
    """The kubelet's admission refuses the pod: not enough free devices of a resource
    (a real kubelet fails such a pod with reason UnexpectedAdmissionError)."""


@dataclass
class Sharing:
    """The device plugin's sharing of `nvidia.com/gpu`: every whole card of the node."""

    replicas: int
    rename: bool = True  # renameByDefault: advertised as nvidia.com/gpu.shared
    strategy: str = "time-slicing"  # or "mps": advertised the same way


@dataclass
class SimulatedGpuNode:
    name: str
    model: str
    count: int = 8
    mig: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    """Card index -> MIG instances (profile, start) at boot; those cards are in MIG mode."""
    sharing: Sharing | None = None
    plugin_healthy: bool = True
    """False: the device plugin failed to start (e.g. replicas < 2): nothing is advertised."""
    real_plugin: Any = None
    """tests.nvidia.real_plugin.RealDevicePlugin while NVIDIA's plugin serves this node."""

    def __post_init__(self) -> None:
        self.nvml = FakeNvml(
            [
                FakeGpu(self.model, mig=i in self.mig, instances=self.mig.get(i, ()))
                for i in range(self.count)
            ]
        )
        self.nvml.nvmlInit()
        self.assigned: dict[str, list[str]] = {}  # pod key -> device ids

    # ------------------------------------------------------------------ hardware views
    @property
    def family(self) -> str:
        """ampere | hopper: decides what a MIG mode change costs (mig_manager.py)."""
        return "hopper" if self.model.startswith(("H100", "H200", "GH")) else "ampere"

    def _devices(self):
        return self.nvml.devices

    def mig_cards(self) -> set[int]:
        return {d.index for d in self._devices() if d.mig_enabled}

    def busy_cards(self) -> set[int]:
        return {d.index for d in self._devices() if d.processes}

    def layout(self, index: int) -> list[tuple[str, int]]:
        return self.nvml.instances(index)

    # ---------------------------------------------------------------- the device plugin's inventory
    def nvml_devices(self) -> list[dict[str, Any]]:
        """These cards as the simulated NVML library's JSON describes them (same UUIDs)."""
        return [
            nvmlsim.device(
                self.model,
                self.name,
                d.index,
                uuid=d.uuid,
                numaNode=-1 if d.spec.numa_node is None else d.spec.numa_node,
            )
            for d in self._devices()
        ]

    def inventory(self) -> dict[str, list[str]]:
        """Resource name -> every device ID the plugin advertises (healthy plugin only)."""
        if not self.plugin_healthy:
            return {}
        if self.real_plugin is not None:
            return self.real_plugin.advertised()
        out: dict[str, list[str]] = {}
        for d in self._devices():
            if d.mig_enabled:
                for gi in sorted(d.gis.values(), key=lambda g: g.start):
                    if gi.mig_uuid:
                        out.setdefault(mig_resource(gi.profile.name), []).append(gi.mig_uuid)
            elif self.sharing is not None:
                name = SHARED_RESOURCE if self.sharing.rename else GPU_RESOURCE
                out.setdefault(name, []).extend(
                    f"{d.uuid}::{k}" for k in range(self.sharing.replicas)
                )
            else:
                out.setdefault(GPU_RESOURCE, []).append(d.uuid)
        return out

    def advertised(self) -> dict[str, str]:
        """What the kubelet puts in the Node's capacity/allocatable for the GPU resources."""
        return {name: str(len(ids)) for name, ids in self.inventory().items()}

    # ---------------------------------------------------------------- the kubelet's device manager
    def allocate(self, pod: str, requests: dict[str, int]) -> list[str]:
        """Devices for a pod being admitted: the lowest free ones of each resource. Running
        work shows in NVML as a process on the card (in its MIG instance)."""
        taken = {i for ids in self.assigned.values() for i in ids}
        inv = self.inventory()
        got: list[str] = []
        for resource, n in sorted(requests.items()):
            free = [i for i in inv.get(resource, []) if i not in taken and i not in got]
            if len(free) < n:
                raise Unschedulable(
                    f"{pod}: {n} {resource} requested, {len(free)} free on {self.name}"
                )
            got += self._choose(pod, resource, free, n)
        self.assigned[pod] = got
        for dev_id in got:
            self._process(pod, dev_id, add=True)
        return got

    def hold(self, pod: str, index: int) -> str:
        """Card `index`, whole, for `pod` (a test that needs a given card busy, whatever the
        plugin would prefer): Allocate'd by the real plugin when it serves the node."""
        dev_id = self._devices()[index].uuid
        taken = {i for ids in self.assigned.values() for i in ids}
        if dev_id in taken or dev_id not in self.inventory().get(GPU_RESOURCE, []):
            raise Unschedulable(f"{pod}: card {index} of {self.name} is not a free {GPU_RESOURCE}")
        if self.real_plugin is not None:
            answer = self.real_plugin.allocate(GPU_RESOURCE, [dev_id])
            if answer.get("error"):
                raise Unschedulable(f"{pod}: Allocate failed: {answer['error']}")
        self.assigned[pod] = [dev_id]
        self._process(pod, dev_id, add=True)
        return dev_id

    def _choose(self, pod: str, resource: str, free: list[str], n: int) -> list[str]:
        """The kubelet's device manager: the plugin's preferred devices when it offers a
        preference (a valid one), else the first free ones; then the plugin's Allocate."""
        plugin = self.real_plugin
        if plugin is None:
            return free[:n]
        chosen = free[:n]
        if plugin.registered().get(resource, {}).get("preferred") and len(free) > n:
            pref = plugin.preferred(resource, free, n)
            if len(pref) == n and set(pref) <= set(free):
                chosen = pref
        answer = plugin.allocate(resource, chosen)
        if answer.get("error"):
            raise Unschedulable(f"{pod}: Allocate of {chosen} failed: {answer['error']}")
        return chosen

    def release(self, pod: str) -> None:
        for dev_id in self.assigned.pop(pod, []):
            self._process(pod, dev_id, add=False)

    def pod_resources(self) -> dict[str, list[str]]:
        """PodResources `List`: pod -> device IDs (one container per pod here)."""
        return {k: list(v) for k, v in sorted(self.assigned.items())}

    def card_of(self, dev_id: str) -> tuple[int, int | None, int]:
        """(card index, MIG start or None, shared slices) of a device ID."""
        uuid = dev_id.split("::")[0]
        for d in self._devices():
            if d.uuid == uuid:
                return d.index, None, 1 if "::" in dev_id else 0
            for gi in d.gis.values():
                if gi.mig_uuid == dev_id:
                    return d.index, gi.start, 0
        raise KeyError(dev_id)

    def _process(self, pod: str, dev_id: str, *, add: bool) -> None:
        index, start, _ = self.card_of(dev_id)
        dev = self._devices()[index]
        pid = zlib.crc32(f"{pod}/{dev_id}".encode()) & 0x7FFFFFFF
        proc = FakeProcess(pid, 1024, start)
        if add:
            dev.processes.append(proc)
        else:
            dev.processes = [p for p in dev.processes if p.pid != pid]
        # a started container computes on its card; the last one gone leaves it at 0%
        # (idle is judged by utilization, processes or not: `Gpu.below_since`)
        dev.spec = dataclasses.replace(
            dev.spec, utilization=BUSY_UTILIZATION if dev.processes else 0
        )

    # ------------------------------------------------------------------ mig-parted's apply
    def clear_mig(self, index: int) -> None:
        """mig-parted's `ClearMigConfig` (NVIDIA/mig-parted pkg/mig/config/config.go): destroy
        every compute and GPU instance of the card; NVML refuses (IN_USE) while a process runs
        in one. (The fake has no compute-instance destroy call, so the teardown is done on its
        state directly.)"""
        n = self.nvml
        dev = self._devices()[index]
        if dev.processes:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        for gi_id, gi in list(dev.gis.items()):
            del dev.gis[gi_id]
            n._handles.pop(gi.addr, None)
            if gi.mig_addr is not None:
                n._handles.pop(gi.mig_addr, None)
                n._mig_devices.pop(gi.mig_addr, None)

    def set_mig_mode(self, index: int, enabled: bool) -> None:
        """`nvmlDeviceSetMigMode`: a change is refused (IN_USE) while the card has instances or
        processes; setting the mode it has changes nothing."""
        n = self.nvml
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        n.nvmlDeviceSetMigMode(n.nvmlDeviceGetHandleByIndex(index), mode)

    def create_mig(self, index: int, profiles: list[str]) -> None:
        """mig-parted's `SetMigConfig`: clear the card, then create `profiles` (placed as the
        catalog places them)."""
        self.clear_mig(index)
        n = self.nvml
        dev = self._devices()[index]
        placed = n.catalog.place(n.catalog.model(self.model), list(profiles)) or []
        if len(placed) != len(profiles):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        for prof, start in placed:
            n._create(dev, dev.model.profiles[prof], start, True)

    def set_instances(self, index: int, instances: list[tuple[str, int]]) -> None:
        """Card `index` with exactly these MIG instances (profile, start), MIG mode on while
        it has any: what NVIDIA's DRA driver leaves under DynamicMIG after preparing (or
        unpreparing) claims on the card's partitions."""
        self.clear_mig(index)
        self.set_mig_mode(index, bool(instances))
        dev = self._devices()[index]
        for prof, start in instances:
            self.nvml._create(dev, dev.model.profiles[prof], start, True)

    def set_mig(self, index: int, enabled: bool, profiles: list[str]) -> None:
        """Make card `index` MIG-enabled with `profiles` or a whole card, as mig-parted does on
        one card: tear down the old instances, switch the mode through NVML, create the new
        instances. Refused (NVML IN_USE) while a process runs on the card."""
        self.clear_mig(index)
        self.set_mig_mode(index, enabled)
        if enabled:
            self.create_mig(index, profiles)
