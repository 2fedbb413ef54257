"""NVIDIA's own config parsers on a batch of configs: runs tests/nvidia/nvparse (Go, built and
cached by scripts/build-nvparse.sh) once per batch and returns its verdicts.

A verdict is {name, ok, error, unknown[, configs]}: `ok`/`error` are what
k8s-device-plugin v0.19.3 (api/config/v1 `NewConfig`, plus the config checks of
cmd/nvidia-device-plugin/main.go `validateFlags`) or mig-parted v0.14.4 (api/spec/v1) say;
`unknown` lists the keys of a device-plugin config that NVIDIA's structs lack (the plugin drops
them silently). Without Go and without a cached binary, `binary()` fails the calling test with
the build script's message (GPUPOOL_SKIP_NVPARSE=1 makes that an explicit skip instead).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-nvparse.sh"
OPERATOR_ENV = {"MPS_ROOT": "/run/nvidia/mps"}
"""The device plugin's environment as the GPU operator sets it with gpupool's Helm values:
NVIDIA/gpu-operator assets/state-device-plugin/0500_daemonset.yaml sets MPS_ROOT; no
MIG_STRATEGY, as deploy/gpu-operator/values.yaml leaves `mig.strategy` unset."""


@functools.cache
def _build() -> tuple[int, str, str]:
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def binary() -> Path:
    """The nvparse binary ($NVPARSE_BINARY, else the build script's cached one; the first build
    takes minutes, docs/development.md)."""
    override = os.environ.get("NVPARSE_BINARY")
    if override:
        return Path(override)
    rc, out, err = _build()
    if rc == 3:
        msg = f"NVIDIA's config parsers (tests/nvidia/nvparse) cannot be built: {err.strip()}"
        if os.environ.get("GPUPOOL_SKIP_NVPARSE"):
            pytest.skip(msg + " (GPUPOOL_SKIP_NVPARSE is set)")
        pytest.fail(msg + "; install Go >= 1.26 or set GPUPOOL_SKIP_NVPARSE=1 to skip")
    if rc != 0:
        pytest.fail(f"scripts/build-nvparse.sh failed ({rc}):\n{err[-8000:]}")
    return Path(out.strip().splitlines()[-1])


def device_plugin(name: str, text: str, env: dict[str, str] | None = None) -> dict:
    """A batch item: a device-plugin config as the plugin reads it, in `env` (default: the GPU
    operator's environment)."""
    return {
        "name": name,
        "kind": "device-plugin",
        "text": text,
        "env": OPERATOR_ENV if env is None else env,
    }


def mig_parted(name: str, text: str) -> dict:
    """A batch item: mig-manager's config.yaml."""
    return {"name": name, "kind": "mig-parted", "text": text}


def verdicts(items: list[dict]) -> list[dict]:
    """NVIDIA's verdict on each item, in order, from one nvparse process."""
    proc = subprocess.run(
        [str(binary())], input=json.dumps(items), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"nvparse failed ({proc.returncode}): {proc.stderr[-4000:]}"
    out = json.loads(proc.stdout)
    assert [v["name"] for v in out] == [i["name"] for i in items]
    return out


def refused(items: list[dict]) -> list[str]:
    """One line per item NVIDIA refuses or that has keys NVIDIA's structs lack (empty: all
    accepted, none misspelt), with the config's text."""
    bad = []
    for item, v in zip(items, verdicts(items), strict=True):
        if not v["ok"] or v["unknown"]:
            why = v.get("error") or f"unknown keys {v['unknown']}"
            bad.append(f"{item['kind']} {item['name']}: {why}\n{item['text']}")
    return bad
