"""The NVML adapter: reads GPUs, MIG instances and processes through `pynvml`. Read-only.

The pynvml module is injected (`NvmlReader(nvml=...)`), the way httpx takes a transport:
production passes nothing and gets the real `pynvml`, imported lazily so that hosts without
a driver can still import this module; tests pass `tests.fakes.fake_pynvml.FakeNvml`. The
adapter only calls the functions in `READ_CALLS`; it never sets a mode or creates/destroys
an instance, and it decides nothing: it turns NVML answers into `Gpu` objects.

Error mapping:
- `NVMLError_NotSupported` from `nvmlDeviceGetMigMode` means the GPU has no MIG: the card is
  reported whole. From a profile query it means the driver lacks that profile (skipped).
  From utilization (MIG mode) or the NUMA node it means "not available": the model default.
- Any other NVML error raises `NvmlReadError`, which names the call and the GPU.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from reconciler.observe.model import Gpu, GpuProcess, MigInstance
from reconciler.policy.catalog import Catalog, GpuModel, default_catalog

MIB = 1024 * 1024

READ_CALLS = frozenset(
    {
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetGpuInstanceProfileInfo",
        "nvmlDeviceGetGpuInstances",
        "nvmlGpuInstanceGetInfo",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
    }
)
"""Every NVML function the adapter may call. None of them changes the GPU."""


class NvmlApi(Protocol):
    """The part of the `pynvml` module surface this adapter uses."""

    NVMLError: type[Exception]
    NVMLError_NotSupported: type[Exception]
    NVMLError_NotFound: type[Exception]
    NVMLError_FunctionNotFound: type[Exception]
    NVML_DEVICE_MIG_ENABLE: int
    NVML_GPU_INSTANCE_PROFILE_COUNT: int
    c_nvmlGpuInstance_t: Any

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...
    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]: ...
    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int) -> Any: ...
    def nvmlDeviceGetGpuInstances(
        self, handle: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int: ...
    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any: ...
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int: ...


class NvmlReadError(RuntimeError):
    """An NVML call failed for a reason other than "not supported"."""

    def __init__(self, call: str, gpu: int | None, error: Exception):
        self.call = call
        self.gpu = gpu
        self.code: int | None = getattr(error, "value", None)
        where = "" if gpu is None else f" on GPU {gpu}"
        super().__init__(f"NVML {call}{where} failed: {error} (NVML error {self.code})")


def _real_pynvml() -> NvmlApi:
    import pynvml

    return pynvml  # type: ignore[return-value]


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class NvmlReader:
    """Reads every GPU of this host. Use as a context manager (nvmlInit/nvmlShutdown)."""

    def __init__(self, nvml: NvmlApi | None = None, catalog: Catalog | None = None):
        self.nvml: NvmlApi = nvml if nvml is not None else _real_pynvml()
        self.catalog = catalog or default_catalog()

    def __enter__(self) -> NvmlReader:
        self._call("nvmlInit", None)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._call("nvmlShutdown", None)
        except NvmlReadError:
            if exc is None:
                raise  # a failed shutdown must not hide the error that ended the read

    # --- one place where NVML errors become adapter errors -------------------------------

    def _call(self, name: str, gpu: int | None, *args: Any) -> Any:
        fn: Callable[..., Any] = getattr(self.nvml, name)
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            raise NvmlReadError(name, gpu, exc) from exc

    def _optional(
        self, name: str, gpu: int, *args: Any, absent: tuple[type[Exception], ...] = ()
    ) -> Any:
        """Like `_call`, but "not supported" (and `absent`) answers None."""
        try:
            return self._call(name, gpu, *args)
        except NvmlReadError as err:
            cause = err.__cause__
            if isinstance(cause, (self.nvml.NVMLError_NotSupported, *absent)):
                return None
            raise

    # --- reading ---------------------------------------------------------------------------

    def gpus(self) -> list[Gpu]:
        count = self._call("nvmlDeviceGetCount", None)
        return [self.gpu(i) for i in range(count)]

    def gpu(self, index: int) -> Gpu:
        h = self._call("nvmlDeviceGetHandleByIndex", index, index)
        name = _text(self._call("nvmlDeviceGetName", index, h))
        model = self.catalog.model_for_product(name)
        memory = self._call("nvmlDeviceGetMemoryInfo", index, h)
        mig_mode = self._optional("nvmlDeviceGetMigMode", index, h)
        mig_enabled = bool(mig_mode) and mig_mode[0] == self.nvml.NVML_DEVICE_MIG_ENABLE
        util = self._optional("nvmlDeviceGetUtilizationRates", index, h)
        numa = self._optional(
            "nvmlDeviceGetNumaNodeId", index, h, absent=(self.nvml.NVMLError_FunctionNotFound,)
        )
        return Gpu(
            index=index,
            uuid=_text(self._call("nvmlDeviceGetUUID", index, h)),
            model=model.name if model else name,
            memory_mib=int(memory.total) // MIB,
            memory_used_mib=int(memory.used) // MIB,
            utilization=float(util.gpu) if util is not None else 0.0,
            mig_enabled=mig_enabled,
            mig_instances=self._mig_instances(index, h, model) if mig_enabled else [],
            numa_node=numa if numa is not None and numa >= 0 else 0,
            processes=self._processes(index, h),
        )

    def _processes(self, index: int, h: Any) -> list[GpuProcess]:
        procs = self._call("nvmlDeviceGetComputeRunningProcesses", index, h)
        return [
            GpuProcess(pid=int(p.pid), used_memory_mib=int(p.usedGpuMemory or 0) // MIB)
            for p in procs
        ]

    def _profile_names(
        self, index: int, h: Any, model: GpuModel | None
    ) -> dict[int, tuple[str, int]]:
        """NVML profile id -> (profile name, max instances) for every profile the GPU offers."""
        by_index = {p.nvml_index: p.name for p in model.profiles.values()} if model else {}
        out: dict[int, tuple[str, int]] = {}
        for pidx in range(self.nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = self._optional("nvmlDeviceGetGpuInstanceProfileInfo", index, h, pidx)
            if info is None:
                continue
            name = by_index.get(pidx) or _text(info.name).removeprefix("MIG ")
            out[int(info.id)] = (name, int(info.instanceCount))
        return out

    def _mig_instances(self, index: int, h: Any, model: GpuModel | None) -> list[MigInstance]:
        uuids = self._mig_uuids(index, h)
        found: list[MigInstance] = []
        for profile_id, (name, max_count) in self._profile_names(index, h, model).items():
            handles = (self.nvml.c_nvmlGpuInstance_t * max(max_count, 1))()
            count = ctypes.c_uint(0)
            self._call(
                "nvmlDeviceGetGpuInstances", index, h, profile_id, handles, ctypes.byref(count)
            )
            for i in range(count.value):
                info = self._call("nvmlGpuInstanceGetInfo", index, handles[i])
                found.append(
                    MigInstance(
                        profile=name,
                        start=int(info.placement.start),
                        uuid=uuids.get(int(info.id), ""),
                    )
                )
        return sorted(found, key=lambda m: (m.start, m.profile))

    def _mig_uuids(self, index: int, h: Any) -> dict[int, str]:
        """GPU-instance id -> UUID of its MIG device (a GI without a compute instance has none)."""
        out: dict[int, str] = {}
        for i in range(self._call("nvmlDeviceGetMaxMigDeviceCount", index, h)):
            try:
                mig = self._call("nvmlDeviceGetMigDeviceHandleByIndex", index, h, i)
            except NvmlReadError as err:
                if isinstance(err.__cause__, self.nvml.NVMLError_NotFound):
                    continue
                raise
            gi = int(self._call("nvmlDeviceGetGpuInstanceId", index, mig))
            out.setdefault(gi, _text(self._call("nvmlDeviceGetUUID", index, mig)))
        return out


def read_gpus(nvml: NvmlApi | None = None, catalog: Catalog | None = None) -> list[Gpu]:
    """Every GPU of this host, between one nvmlInit and nvmlShutdown."""
    with NvmlReader(nvml, catalog) as reader:
        return reader.gpus()
