"""The simulated NVML library (tests/nvidia/nvmlsim/nvmlsim.c): building it, describing a node's
GPUs for it, and running code that loads it the way production does.

The library is `libnvidia-ml.so.1`-compatible (NVML's C ABI, its soname): real pynvml
(nvidia-ml-py) loads it with `CDLL("libnvidia-ml.so.1")`, so a process started with
`LD_LIBRARY_PATH=<library_dir()>` and `GPUPOOL_NVML_DEVICES=<json>` reads those GPUs through
NVML's ABI; NVIDIA's device plugin finds it under its `--driver-root`. It models cards not in
MIG mode only (MIG stays with tests/fakes/fake_pynvml.py). Without a C compiler and without a
cached build, `library_dir()` fails the calling test with the build script's message
(GPUPOOL_SKIP_NVMLSIM=1 makes that a skip).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from reconciler.policy.catalog import default_catalog

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-nvmlsim.sh"
ENV_VAR = "GPUPOOL_NVML_DEVICES"
DRIVER_VERSION = "580.95.05"

COMPUTE_CAPABILITY = {
    "A100": (8, 0),
    "H100": (9, 0),
    "H200": (9, 0),
    "L40S": (8, 9),
    "A10-": (8, 6),
    "T4-": (7, 5),
}
"""CUDA compute capability by model prefix (NVIDIA's CUDA GPUs table)."""

_NS = uuidlib.UUID("0c1d6a52-6f0e-4f39-9d1a-2b1e7f3c9a11")


@functools.cache
def _build() -> tuple[int, str, str]:
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def library_dir() -> Path:
    """The directory holding the built libnvidia-ml.so.1 (the build script's cache)."""
    rc, out, err = _build()
    if rc == 3:
        msg = f"the simulated NVML library cannot be built: {err.strip()}"
        if os.environ.get("GPUPOOL_SKIP_NVMLSIM"):
            pytest.skip(msg + " (GPUPOOL_SKIP_NVMLSIM is set)")
        pytest.fail(msg + "; install a C compiler or set GPUPOOL_SKIP_NVMLSIM=1 to skip")
    if rc != 0:
        pytest.fail(f"scripts/build-nvmlsim.sh failed ({rc}):\n{err[-4000:]}")
    return Path(out.strip().splitlines()[-1])


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{uuidlib.uuid5(_NS, f'{node}/{index}')}"


def device(model: str, node: str = "node", index: int = 0, **extra: Any) -> dict[str, Any]:
    """One card of catalog `model` as the library's JSON describes it; `extra` overrides keys
    (utilization, memoryUsedMiB, numaNode, processes=[{pid, usedMemoryMiB}], xid, ...)."""
    m = default_catalog().model(model)
    assert m is not None, f"{model} is not in the MIG catalog"
    cc = next(v for k, v in COMPUTE_CAPABILITY.items() if model.startswith(k))
    out: dict[str, Any] = {
        "name": m.nvml_names[0],
        "uuid": gpu_uuid(node, index),
        "memoryMiB": m.memory_gib * 1024,
        "memoryUsedMiB": 0,
        "utilization": 0,
        "numaNode": 0,
        "minor": index,
        "pciBusId": f"00000000:{0x10 + index:02X}:00.0",
        "computeCapability": list(cc),
        "migCapable": m.mig_capable,
        "processes": [],
    }
    if m.pci_device_ids:
        out["pciDeviceId"] = m.pci_device_ids[0]
    out.update(extra)
    return out


def write_devices(path: Path, devices: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"driverVersion": DRIVER_VERSION, "devices": devices}, indent=1))
    return path


def environment(devices_file: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """A process environment in which `libnvidia-ml.so.1` is the simulated library serving
    `devices_file`."""
    env = dict(os.environ if base is None else base)
    lib = str(library_dir())
    env["LD_LIBRARY_PATH"] = lib + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else ""
    )
    env[ENV_VAR] = str(devices_file)
    env["PYTHONPATH"] = str(ROOT) + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_python(code: str, devices_file: Path, timeout: float = 60) -> Any:
    """Runs `code` in a fresh interpreter whose NVML is the simulated library; the code prints
    one JSON value last, which is returned."""
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env=environment(devices_file),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"python exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])
