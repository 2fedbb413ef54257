"""A faithful fake of the pynvml functions gpupool uses, for hosts without a GPU.

Its limit, since issue 30: this fake is kept for MIG (GPU instances, placements, MIG devices,
mode changes), which nothing NVIDIA ships can emulate here. Cards not in MIG mode are read
through NVML's real C ABI instead: real pynvml loading the simulated `libnvidia-ml.so.1`
(tests/nvidia/nvmlsim/, tests/nvidia/test_nvmlsim.py). New non-MIG NVML tests belong there;
the older ones still using this fake for whole cards stay as a second check of the adapter.

`FakeNvml` stands in for the `pynvml` module (inject it: `NvmlReader(nvml=FakeNvml(...))`).
It is built from a declarative list of `FakeGpu`s and takes the same arguments, returns the
same types (pynvml's own ctypes structs and handle pointers, `nvmlFriendlyObject` processes)
and raises the *real* `pynvml.NVMLError_*` classes with the real codes.

MIG rules are enforced on every GPU-instance creation, including the instances a `FakeGpu`
declares (an illegal declaration fails just like the API call would). Profile data - which
profiles a model offers, their memory slices, placement starts and max counts - comes from
the gpupool MIG catalog (`reconciler/policy/mig_catalog.yaml`), not from a second copy.

Error codes follow the NVML API reference's return-value lists:

- any call before `nvmlInit` (or after the last `nvmlShutdown`): UNINITIALIZED
- device index out of range, stale or foreign handle, malformed argument: INVALID_ARGUMENT
- MIG calls on a GPU without MIG: NOT_SUPPORTED (`nvmlDeviceGetMigMode` included)
- GPU-instance calls while MIG is disabled, or for a profile this GPU does not offer:
  NOT_SUPPORTED
- profile index >= NVML_GPU_INSTANCE_PROFILE_COUNT, or a profile *id* this GPU does not
  know in placement queries: INVALID_ARGUMENT
- create with a placement whose start is not one of the profile's placements, or whose size
  is not the profile's size: INVALID_ARGUMENT (the reference lists "placement invalid" under
  INVALID_ARGUMENT). *Choice:* a well-formed placement that cannot be honoured now - overlap
  with an existing instance, the profile's max count, the 7-instance limit, a second `+me`
  instance - is INSUFFICIENT_RESOURCES ("the requested GPU instance could not be created").
- destroying an instance that still has a compute instance or processes: IN_USE
- result buffer smaller than the answer: INSUFFICIENT_SIZE (*choice*; the reference only
  says the buffer "must be large enough")
- `nvmlDeviceSetMigMode` while instances or processes exist: IN_USE; otherwise the new mode
  applies at once (no pending-reset modelling).
- utilization on a MIG-enabled GPU: NOT_SUPPORTED (as the driver answers for the parent).

Choices where no source settled it, documented in docs/nvml.md: GPU-instance ids are the lowest
free id from 1; `nvmlDeviceCreateGpuInstance` (no placement) takes the lowest legal start;
`nvmlDeviceGetMaxMigDeviceCount` answers 0 while MIG is off; MIG device handles answer only
`nvmlDeviceGetUUID` and `nvmlDeviceGetGpuInstanceId`.
"""

from __future__ import annotations

import ctypes
import functools
import uuid as uuidlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from reconciler.policy.catalog import Catalog, GpuModel, MigProfile, default_catalog

MIB = 1024 * 1024

# NVML profile *ids* (GpuInstanceProfileInfo.id, what nvidia-smi prints as "ID") by
# GPU_INSTANCE_PROFILE_* index. Not catalog data: the catalog records the index; these are
# the ids seen in `nvidia-smi mig -lgip` on A100/H100 (see shared/data/mig/README.md).
PROFILE_IDS = {0: 19, 1: 14, 2: 9, 3: 5, 4: 0, 7: 20, 9: 15}

MUTATING_CALLS = frozenset(
    {
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstance",
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceDestroy",
    }
)
_NS = uuidlib.UUID("6a1e43b8-2f0e-4c53-9d55-6f3c7a0b9e21")


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml maps the code to its NVMLError_* subclass


@dataclass(frozen=True)
class FakeProcess:
    pid: int
    used_memory_mib: int | None = 0
    """None: NVML reports the value as not available."""
    instance_start: int | None = None
    """On a MIG GPU: the start slot of the GPU instance the process runs in."""


@dataclass(frozen=True)
class FakeInstance:
    profile: str
    start: int
    compute_instance: bool = True
    """A GI made with a compute instance (`nvidia-smi mig -cgi ... -C`) is a MIG device."""


@dataclass(frozen=True)
class FakeGpu:
    model: str
    """A catalog model name, e.g. A100-SXM4-40GB."""
    mig: bool = False
    instances: Sequence[FakeInstance | tuple[str, int]] = ()
    processes: Sequence[FakeProcess | tuple[int, int]] = ()
    utilization: int = 0
    memory_used_mib: int | None = None
    """None: the sum of the processes' memory."""
    numa_node: int | None = 0
    """None: NVML answers NOT_SUPPORTED."""
    name: str | None = None
    """NVML device name; default: the model's first NVML name."""
    uuid: str | None = None
    failures: Mapping[str, int] = field(default_factory=dict)
    """NVML call name -> error code that call raises for this GPU (fault injection)."""


class _GpuInstance:
    def __init__(
        self, addr: int, gi_id: int, profile: MigProfile, start: int, ci: bool, dev: _Device
    ):
        self.addr, self.id, self.profile, self.start, self.dev = addr, gi_id, profile, start, dev
        self.mig_addr = addr + 1 if ci else None
        self.mig_uuid = f"MIG-{uuidlib.uuid5(_NS, f'{dev.uuid}/{gi_id}/{addr}')}" if ci else ""

    def span(self) -> set[int]:
        return set(range(self.start, self.start + self.profile.memory_slices))


class _Device:
    def __init__(self, index: int, addr: int, spec: FakeGpu, model: GpuModel):
        self.index, self.addr, self.spec, self.model = index, addr, spec, model
        self.name = spec.name or (model.nvml_names[0] if model.nvml_names else model.name)
        self.uuid = spec.uuid or f"GPU-{uuidlib.uuid5(_NS, f'{index}/{self.name}')}"
        self.mig = pynvml.NVML_DEVICE_MIG_DISABLE
        self.gis: dict[int, _GpuInstance] = {}  # by GI id
        self.processes: list[FakeProcess] = []

    @property
    def mig_capable(self) -> bool:
        return self.model.mig_capable

    @property
    def mig_enabled(self) -> bool:
        return self.mig == pynvml.NVML_DEVICE_MIG_ENABLE

    def profile_by_index(self, index: int) -> MigProfile | None:
        return next((p for p in self.model.profiles.values() if p.nvml_index == index), None)

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        return next(
            (p for p in self.model.profiles.values() if PROFILE_IDS[p.nvml_index] == profile_id),
            None,
        )


def _api(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Records the call, then applies the init check and any injected failure."""

    @functools.wraps(fn)
    def wrapper(self: FakeNvml, *args: Any, **kwargs: Any) -> Any:
        name = fn.__name__
        self.calls.append((name, args))
        if name != "nvmlInit" and self._refcount == 0:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        self._maybe_fail(name, args)
        return fn(self, *args, **kwargs)

    return wrapper


class FakeNvml:
    """Module-shaped fake of pynvml: `fake.nvmlDeviceGetCount()` etc."""

    def __init__(
        self,
        gpus: Sequence[FakeGpu] = (),
        catalog: Catalog | None = None,
        failures: Mapping[str, int] | None = None,
    ):
        # The real module's constants, error classes and ctypes structs.
        for attr in dir(pynvml):
            if attr.startswith(("NVML_", "NVMLError", "c_nvml", "nvmlFriendlyObject")):
                setattr(self, attr, getattr(pynvml, attr))
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.failures = dict(failures or {})
        self.catalog = catalog or default_catalog()
        self._refcount = 0
        self._next_addr = 0x10000
        self._handles: dict[int, Any] = {}  # address -> _Device | _GpuInstance (GI or MIG device)
        self._mig_devices: dict[int, _GpuInstance] = {}
        self.devices: list[_Device] = []
        for i, spec in enumerate(gpus):
            model = self.catalog.model(spec.model)
            if model is None:
                raise ValueError(f"FakeGpu {i}: unknown catalog model {spec.model!r}")
            dev = _Device(i, self._alloc(), spec, model)
            self._handles[dev.addr] = dev
            self.devices.append(dev)
            if spec.mig:
                if not dev.mig_capable:
                    raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
                dev.mig = pynvml.NVML_DEVICE_MIG_ENABLE
            for inst in spec.instances:
                inst = inst if isinstance(inst, FakeInstance) else FakeInstance(*inst)
                if not dev.mig_enabled:
                    raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
                p = dev.model.profiles.get(inst.profile)
                if p is None:
                    raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
                self._create(dev, p, inst.start, inst.compute_instance)
            dev.processes = [
                p if isinstance(p, FakeProcess) else FakeProcess(*p) for p in spec.processes
            ]

    # --- test helpers (not pynvml) ---------------------------------------------------------

    def called(self) -> list[str]:
        return [name for name, _ in self.calls]

    def instances(self, index: int) -> list[tuple[str, int]]:
        """Ground truth: (profile, start) of every GPU instance on GPU `index`."""
        return sorted((gi.profile.name, gi.start) for gi in self.devices[index].gis.values())

    # --- plumbing --------------------------------------------------------------------------

    def _alloc(self) -> int:
        self._next_addr += 0x10
        return self._next_addr

    def _maybe_fail(self, name: str, args: tuple[Any, ...]) -> None:
        code = self.failures.get(name)
        if code is None and args:
            obj = self._handles.get(_address(args[0]) or 0)
            dev = obj.dev if isinstance(obj, _GpuInstance) else obj
            if isinstance(dev, _Device):
                code = dev.spec.failures.get(name)
        if code is not None:
            raise _err(code)

    def _resolve(self, handle: Any) -> Any:
        obj = self._handles.get(_address(handle) or 0)
        if obj is None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return obj

    def _device(self, handle: Any) -> _Device:
        obj = self._resolve(handle)
        if not isinstance(obj, _Device):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return obj

    def _gpu_instance(self, handle: Any) -> _GpuInstance:
        obj = self._resolve(handle)
        if not isinstance(obj, _GpuInstance) or _address(handle) != obj.addr:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return obj

    def _mig_dev(self, dev: _Device) -> None:
        if not dev.mig_capable:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _mig_on(self, dev: _Device) -> None:
        if not dev.mig_enabled:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _create(self, dev: _Device, p: MigProfile, start: int, ci: bool = False) -> _GpuInstance:
        """The placement rules. Raises the NVML error the real create would."""
        if start not in p.starts:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        existing = list(dev.gis.values())
        span = set(range(start, start + p.memory_slices))
        if (
            len(existing) >= self.catalog.max_instances
            or sum(gi.profile.name == p.name for gi in existing) >= p.max_count
            or (p.media_extensions and any(gi.profile.media_extensions for gi in existing))
            or any(span & gi.span() for gi in existing)
        ):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi_id = next(i for i in range(1, 64) if i not in dev.gis)
        addr = self._alloc()
        gi = _GpuInstance(addr, gi_id, p, start, ci, dev)
        dev.gis[gi_id] = gi
        self._handles[addr] = gi
        if gi.mig_addr is not None:
            self._handles[gi.mig_addr] = gi
            self._mig_devices[gi.mig_addr] = gi
        return gi

    # --- init ------------------------------------------------------------------------------

    @_api
    def nvmlInit(self) -> None:
        self._refcount += 1

    @_api
    def nvmlShutdown(self) -> None:
        self._refcount -= 1

    # --- device queries --------------------------------------------------------------------

    @_api
    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    @_api
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not isinstance(index, int) or not 0 <= index < len(self.devices):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _pointer(self.devices[index].addr, pynvml.c_nvmlDevice_t)

    @_api
    def nvmlDeviceGetName(self, handle: Any) -> str:
        return self._device(handle).name

    @_api
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        obj = self._resolve(handle)
        if isinstance(obj, _GpuInstance):
            if _address(handle) != obj.mig_addr:  # a GI handle is not a device handle
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return obj.mig_uuid
        return obj.uuid

    @_api
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        dev = self._device(handle)
        total = dev.model.memory_gib * 1024 * MIB
        used = dev.spec.memory_used_mib
        if used is None:
            used = sum(p.used_memory_mib or 0 for p in dev.processes)
        used *= MIB
        if version:
            mem = pynvml.c_nvmlMemory_v2_t()
            mem.version, mem.total, mem.reserved, mem.free, mem.used = (
                version,
                total,
                0,
                total - used,
                used,
            )
            return mem
        return pynvml.c_nvmlMemory_t(total, total - used, used)

    @_api
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        dev = self._device(handle)
        if dev.mig_enabled:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.c_nvmlUtilization_t(dev.spec.utilization, 0)

    @_api
    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        dev = self._device(handle)
        if dev.spec.numa_node is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return dev.spec.numa_node

    @_api
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        dev = self._device(handle)
        out = []
        none = 0xFFFFFFFF
        by_start = {gi.start: gi.id for gi in dev.gis.values()}
        for p in dev.processes:
            gi_id = by_start.get(p.instance_start, none) if p.instance_start is not None else none
            info = pynvml.c_nvmlProcessInfo_v2_t(
                p.pid,
                0 if p.used_memory_mib is None else p.used_memory_mib * MIB,
                gi_id,
                0 if gi_id != none else none,
            )
            obj = pynvml.nvmlStructToFriendlyObject(info)
            if p.used_memory_mib is None:
                obj.usedGpuMemory = None  # what pynvml does for NVML_VALUE_NOT_AVAILABLE
            out.append(obj)
        return out

    # --- MIG: mode ---------------------------------------------------------------------------

    @_api
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        dev = self._device(handle)
        self._mig_dev(dev)
        return [dev.mig, dev.mig]

    @_api
    def nvmlDeviceSetMigMode(self, handle: Any, mode: int) -> int:
        dev = self._device(handle)
        self._mig_dev(dev)
        if mode not in (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_ENABLE):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if mode != dev.mig and (dev.gis or dev.processes):
            raise _err(pynvml.NVML_ERROR_IN_USE)
        dev.mig = mode
        return pynvml.NVML_SUCCESS

    # --- MIG: GPU-instance profiles and placements --------------------------------------------

    @_api
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, handle: Any, profile: int, version: int = 2
    ) -> Any:
        dev = self._device(handle)
        self._mig_dev(dev)
        if (
            not isinstance(profile, int)
            or not 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
        ):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._mig_on(dev)
        p = dev.profile_by_index(profile)
        if p is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if version == 2:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {p.name}".encode()
        elif version == 1:
            info = pynvml.c_nvmlGpuInstanceProfileInfo_t()
        else:
            raise _err(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        info.id = PROFILE_IDS[p.nvml_index]
        info.sliceCount = p.compute_slices
        info.instanceCount = p.max_count
        info.memorySizeMB = (
            dev.model.memory_gib * 1024 * p.memory_slices // self.catalog.memory_slices
        )
        return info

    def _profile_for_id(self, dev: _Device, profile_id: int) -> MigProfile:
        if not isinstance(profile_id, int) or profile_id not in PROFILE_IDS.values():
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        p = dev.profile_by_id(profile_id)
        if p is None:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return p

    @_api
    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, handle: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        """All placements of the profile, whatever exists already (as the _v2 call does)."""
        dev = self._device(handle)
        self._mig_dev(dev)
        p = self._profile_for_id(dev, profileId)
        count = _uint_target(countRef)
        if placementsRef is None:
            count.value = len(p.starts)
            return pynvml.NVML_SUCCESS
        array = _target(placementsRef)
        if len(array) < len(p.starts):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, s in enumerate(p.starts):
            array[i].start, array[i].size = s, p.memory_slices
        count.value = len(p.starts)
        return pynvml.NVML_SUCCESS

    # --- MIG: GPU instances --------------------------------------------------------------------

    @_api
    def nvmlDeviceCreateGpuInstance(self, handle: Any, profileId: int) -> Any:
        dev = self._device(handle)
        self._mig_dev(dev)
        self._mig_on(dev)
        p = self._profile_for_id(dev, profileId)
        for s in p.starts:
            try:
                gi = self._create(dev, p, s)
            except pynvml.NVMLError_InsufficientResources:
                continue
            return _pointer(gi.addr, pynvml.c_nvmlGpuInstance_t)
        raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)

    @_api
    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, handle: Any, profileId: int, placement: Any
    ) -> Any:
        dev = self._device(handle)
        self._mig_dev(dev)
        self._mig_on(dev)
        p = self._profile_for_id(dev, profileId)
        pl = _target(placement)
        if not isinstance(pl, pynvml.c_nvmlGpuInstancePlacement_t) or pl.size != p.memory_slices:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gi = self._create(dev, p, pl.start)
        return _pointer(gi.addr, pynvml.c_nvmlGpuInstance_t)

    @_api
    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        gi = self._gpu_instance(gpuInstance)
        self._mig_on(gi.dev)
        if gi.mig_addr is not None or any(p.instance_start == gi.start for p in gi.dev.processes):
            raise _err(pynvml.NVML_ERROR_IN_USE)
        del gi.dev.gis[gi.id]
        del self._handles[gi.addr]
        return pynvml.NVML_SUCCESS

    @_api
    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        dev = self._device(handle)
        self._mig_dev(dev)
        self._mig_on(dev)
        p = self._profile_for_id(dev, profileId)
        if gpuInstancesRef is None or countRef is None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        count = _uint_target(countRef)
        array = _target(gpuInstancesRef)
        found = sorted((gi for gi in dev.gis.values() if gi.profile is p), key=lambda g: g.id)
        if len(array) < len(found):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, gi in enumerate(found):
            array[i] = _pointer(gi.addr, pynvml.c_nvmlGpuInstance_t)
        count.value = len(found)
        return pynvml.NVML_SUCCESS

    @_api
    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        gi = self._gpu_instance(gpuInstance)
        info = pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = _pointer(gi.dev.addr, pynvml.c_nvmlDevice_t)
        info.id = gi.id
        info.profileId = PROFILE_IDS[gi.profile.nvml_index]
        info.placement.start, info.placement.size = gi.start, gi.profile.memory_slices
        return info

    # --- MIG devices -----------------------------------------------------------------------------

    @_api
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        dev = self._device(handle)
        return self.catalog.max_instances if dev.mig_enabled else 0

    @_api
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        dev = self._device(handle)
        self._mig_dev(dev)
        self._mig_on(dev)
        if not isinstance(index, int) or not 0 <= index < self.catalog.max_instances:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        migs = sorted(
            (gi for gi in dev.gis.values() if gi.mig_addr is not None), key=lambda g: g.id
        )
        if index >= len(migs):
            raise _err(pynvml.NVML_ERROR_NOT_FOUND)
        return _pointer(migs[index].mig_addr, pynvml.c_nvmlDevice_t)

    @_api
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        obj = self._resolve(handle)
        if not isinstance(obj, _GpuInstance) or _address(handle) != obj.mig_addr:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # not a MIG device handle
        return obj.id


# --- ctypes helpers ------------------------------------------------------------------------


def _pointer(addr: int, ptr_type: Any) -> Any:
    """An opaque handle like the real library's: a typed pointer that is never dereferenced."""
    return ctypes.cast(ctypes.c_void_p(addr), ptr_type)


def _address(handle: Any) -> int | None:
    if not isinstance(handle, ctypes._Pointer) or not handle:
        return None
    return ctypes.cast(handle, ctypes.c_void_p).value


def _target(ref: Any) -> Any:
    """What a by-reference argument points at: byref(x), pointer(x) or x itself."""
    if ref is None:
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    if type(ref).__name__ == "CArgObject":
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def _uint_target(ref: Any) -> ctypes.c_uint:
    obj = _target(ref)
    if not isinstance(obj, ctypes.c_uint):
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return obj
