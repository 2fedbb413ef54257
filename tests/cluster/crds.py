"""Other projects' CRDs for the real control plane, from those projects' own published Go
modules (scripts/fetch-crds.sh: `go mod download MODULE@VERSION`, kept in the Go module cache
outside the repository; nothing of theirs is copied here).

    path = fetch(KEDA, KEDA_SCALED_OBJECT_CRD)   # a file, or a directory such as
    install_crds(api_client, path)              # Kueue's config/components/crd/bases

`fetch` skips the test when there is no Go toolchain (the script's exit 3), like the control
plane's build does.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fetch-crds.sh"

KEDA = "github.com/kedacore/keda/v2@v2.19.0"
"""The newest KEDA release whose go.mod Go 1.26 builds (newer ones need a newer Go)."""
KEDA_SCALED_OBJECT_CRD = "config/crd/bases/keda.sh_scaledobjects.yaml"


def fetch(module: str, path: str) -> Path:
    """The absolute path of `path` inside the Go module `module` (MODULE@VERSION)."""
    proc = subprocess.run(
        ["bash", str(SCRIPT), module, path], capture_output=True, text=True, timeout=600
    )
    if proc.returncode == 3:
        pytest.skip(f"no Go toolchain to download {module}: {proc.stderr.strip()}")
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/fetch-crds.sh {module} {path} failed:\n{proc.stderr}")
    return Path(proc.stdout.strip().splitlines()[-1])


def install_crds(api_client, path: Path, timeout: float = 60.0) -> list[str]:
    """Create the CRDs in `path` (a file or a directory of *.yaml; one that exists is kept) and
    wait until each is Established; returns their names."""
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    ext = client.ApiextensionsV1Api(api_client)
    names = []
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            try:
                ext.create_custom_resource_definition(doc)
            except client.ApiException as exc:
                if exc.status != 409:
                    raise
            names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:
        while not any(
            c.type == "Established" and c.status == "True"
            for c in ext.read_custom_resource_definition(name).status.conditions or []
        ):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not established")
            time.sleep(0.1)
    return names
