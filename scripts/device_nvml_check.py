#!/usr/bin/env python3
"""Read-only NVML check for a real GPU host: what gpupool's adapter reads, and the facts the
pynvml fake assumes, side by side. It never changes anything: every NVML call goes through a
guard that refuses set/create/destroy/reset functions.

    .venv/bin/python scripts/device_nvml_check.py            # JSON on stdout
    .venv/bin/python scripts/device_nvml_check.py --fake     # same, against tests/fakes (no GPU)

Output keys:
  node        the adapter's Node (as `gpupool agent` would publish it)
  gpus[]      per GPU: NVML name, the catalog model it maps to, MIG mode [current, pending],
              and per GPU_INSTANCE_PROFILE index: profile id/name/instanceCount and the
              `nvmlDeviceGetGpuInstancePossiblePlacements_v2` placements, or the NVML error
              the query gave (with MIG disabled these errors are the point: they show which
              codes the driver really returns, to compare with the fake's choices)
  mismatches  catalog vs. driver differences (starts, sizes, max counts, profile ids)
  calls       every NVML function this script called (all read-only)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.observe.agent import collect_node  # noqa: E402
from reconciler.observe.nvml import NvmlReadError  # noqa: E402
from reconciler.policy.catalog import default_catalog  # noqa: E402

FORBIDDEN = ("Set", "Create", "Destroy", "Reset", "Clear", "Register", "Modify")


class ReadOnly:
    """Forwards to the pynvml module, refusing anything that could change the GPU."""

    def __init__(self, module: Any):
        self._module = module
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._module, name)
        if not (name.startswith("nvml") and callable(attr)):
            return attr
        if any(word in name for word in FORBIDDEN):
            raise PermissionError(f"{name} is not allowed in a read-only check")

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return call


def _err(nvml: Any, exc: Exception) -> dict[str, Any]:
    code = getattr(exc, "value", None)
    return {"error": type(exc).__name__, "code": code}


def probe_gpu(nvml: Any, index: int, catalog: Any) -> tuple[dict[str, Any], list[str]]:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    name = nvml.nvmlDeviceGetName(h)
    name = name.decode() if isinstance(name, bytes) else name
    model = catalog.model_for_product(name)
    out: dict[str, Any] = {
        "index": index,
        "nvml_name": name,
        "catalog_model": model.name if model else None,
    }
    mismatches: list[str] = []
    for label, fn in (
        ("mig_mode", lambda: nvml.nvmlDeviceGetMigMode(h)),
        ("max_mig_device_count", lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(h)),
        ("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(h).gpu),
        ("numa_node", lambda: nvml.nvmlDeviceGetNumaNodeId(h)),
    ):
        try:
            out[label] = fn()
        except nvml.NVMLError as exc:
            out[label] = _err(nvml, exc)
    by_index = {p.nvml_index: p for p in model.profiles.values()} if model else {}
    profiles: dict[int, Any] = {}
    for pidx in range(nvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pidx)
        except nvml.NVMLError as exc:
            profiles[pidx] = _err(nvml, exc)
            continue
        pname = info.name.decode() if isinstance(info.name, bytes) else info.name
        entry: dict[str, Any] = {
            "id": info.id,
            "name": pname,
            "instanceCount": info.instanceCount,
            "sliceCount": info.sliceCount,
            "memorySizeMB": info.memorySizeMB,
        }
        try:
            count = ctypes.c_uint(0)
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, None, ctypes.byref(count))
            arr = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, arr, ctypes.byref(count))
            entry["placements"] = [[arr[i].start, arr[i].size] for i in range(count.value)]
        except nvml.NVMLError as exc:
            entry["placements"] = _err(nvml, exc)
        profiles[pidx] = entry
        want = by_index.get(pidx)
        if want is None:
            mismatches.append(f"GPU {index}: profile index {pidx} ({pname}) is not in the catalog")
            continue
        if pname.removeprefix("MIG ") != want.name:
            mismatches.append(f"GPU {index}: index {pidx} is {pname!r}, catalog says {want.name!r}")
        if info.instanceCount != want.max_count:
            mismatches.append(
                f"GPU {index}: {want.name} max count {info.instanceCount}, catalog {want.max_count}"
            )
        got = entry["placements"]
        expect = [[s, want.memory_slices] for s in want.starts]
        if isinstance(got, list) and got != expect:
            mismatches.append(f"GPU {index}: {want.name} placements {got}, catalog {expect}")
    out["profiles"] = profiles
    return out, mismatches


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--fake", action="store_true", help="run against the pynvml fake (self-test)")
    ap.add_argument("--node", default="this-host")
    args = ap.parse_args(argv)
    if args.fake:
        from tests.fakes.fake_pynvml import FakeGpu, FakeNvml

        module: Any = FakeNvml(
            [
                FakeGpu("H200-SXM5-141GB", mig=True, instances=[("3g.71gb", 4), ("2g.35gb", 0)]),
                FakeGpu("L40S-48GB", utilization=12, processes=[(4242, 1024)]),
            ]
        )
    else:
        import pynvml as module
    nvml = ReadOnly(module)
    catalog = default_catalog()
    try:
        node = collect_node(args.node, nvml=nvml)  # type: ignore[arg-type]
    except NvmlReadError as exc:
        print(f"device_nvml_check: {exc}", file=sys.stderr)
        return 2
    report: dict[str, Any] = {
        "node": node.model_dump(mode="json", by_alias=True),
        "gpus": [],
        "mismatches": [],
    }
    nvml.nvmlInit()
    try:
        for i in range(nvml.nvmlDeviceGetCount()):
            gpu, mism = probe_gpu(nvml, i, catalog)
            report["gpus"].append(gpu)
            report["mismatches"].extend(mism)
    finally:
        nvml.nvmlShutdown()
    report["calls"] = sorted(set(nvml.calls))
    json.dump(report, sys.stdout, indent=2, default=str)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
