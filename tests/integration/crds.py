"""Other projects' CRDs, from their own published Go modules, installed into the test API server.

Nothing of theirs is copied into this repository: scripts/fetch-crds.sh (`go mod download -json
MODULE@VERSION`) puts the module in Go's module cache (verified against sum.golang.org, as any
Go build does) and prints a path inside it; the CRD YAML is read from there: Kueue's
(`kueue_crd_paths`) and KEDA's ScaledObject (`keda_scaled_object_crd`). Tests skip when no Go
toolchain is available (the control plane itself needs one to be built).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
KUEUE_CRDS = ("resourceflavors", "clusterqueues", "localqueues", "cohorts")
"""config/components/crd/bases/kueue.x-k8s.io_<plural>.yaml in the module."""
KEDA_MODULE = "github.com/kedacore/keda/v2"
KEDA_VERSION = "v2.19.0"
"""The newest KEDA release whose go.mod Go 1.26 builds (newer ones need a newer Go)."""
PINNED = (f"{KUEUE_MODULE}@{KUEUE_VERSION}", f"{KEDA_MODULE}@{KEDA_VERSION}")
"""What scripts/test.sh fetches before the tests run (so the time shows, and a failed download
stops the run there)."""


SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fetch-crds.sh"


def module_dir(module: str, version: str) -> Path:
    """The directory of `module@version` in Go's module cache (downloaded when missing), through
    scripts/fetch-crds.sh (`MODULE@VERSION PATH` -> the path inside the module)."""
    out = subprocess.run(
        ["bash", str(SCRIPT), f"{module}@{version}", "."],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if out.returncode == 3:
        pytest.skip(f"no Go toolchain to download {module}@{version}")
    if out.returncode != 0:  # Go is there but the module is not: a failure, never a pass
        pytest.fail(f"go mod download {module}@{version} failed: {out.stderr.strip()}")
    return Path(out.stdout.strip().splitlines()[-1]).resolve()


def kueue_crd_paths() -> list[Path]:
    base = module_dir(KUEUE_MODULE, KUEUE_VERSION) / "config" / "components" / "crd" / "bases"
    return [base / f"kueue.x-k8s.io_{plural}.yaml" for plural in KUEUE_CRDS]


def keda_scaled_object_crd() -> Path:
    return module_dir(KEDA_MODULE, KEDA_VERSION) / "config/crd/bases/keda.sh_scaledobjects.yaml"


def install_crd(api_client, path: Path, timeout: float = 60) -> str:
    """Create the CRD in `path` (or keep it) and wait until the API server serves it."""
    crd = yaml.safe_load(path.read_text())
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.create_custom_resource_definition(crd)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    name = crd["metadata"]["name"]
    deadline = time.monotonic() + timeout
    while True:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conds):
            return name
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not established after {timeout}s")
        time.sleep(0.1)


def remove_crd(api_client, name: str, timeout: float = 180) -> None:
    """Delete a CRD (and with it every object of it) and wait until it is gone. Minutes, not
    seconds, on a loaded machine: the API server's CRD finalizer can meet the CRD's watch cache
    re-initializing ("storage is (re)initializing", seen with kube-apiserver 1.37.2) and
    retries with a growing back-off."""
    ext = client.ApiextensionsV1Api(api_client)
    try:
        ext.delete_custom_resource_definition(name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ext.read_custom_resource_definition(name)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.2)
    raise TimeoutError(f"CRD {name} still there after {timeout}s")


def remove_crds(api_client, names: list[str], timeout: float = 180) -> None:
    """Delete the CRDs all at once, then wait until every one is gone (one at a time, each
    waits out the API server's cleanup of its objects: slow on a loaded machine)."""
    ext = client.ApiextensionsV1Api(api_client)
    for name in names:
        try:
            ext.delete_custom_resource_definition(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise
    deadline = time.monotonic() + timeout
    for name in names:
        remove_crd(api_client, name, timeout=max(1.0, deadline - time.monotonic()))
