"""The real `helm` (helm.sh/helm/v4 cmd/helm at HELM_VERSION, built from the Go module proxy
and cached by scripts/build-helm.sh) run on deploy/chart/gpupool, and the objects
`kubectl apply -k deploy/` makes, for comparing the two.

Without Go and without a cached binary, `binary()` fails the calling test with the build
script's message (GPUPOOL_SKIP_HELM=1 makes that an explicit skip instead)."""

from __future__ import annotations

import copy
import functools
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "chart" / "gpupool"
CI_VALUES = CHART / "ci"
BUILD_SCRIPT = ROOT / "scripts" / "build-helm.sh"
HELM_VERSION = "v4.3.2"
RELEASE, NAMESPACE = "gpupool", "gpupool-system"
# What Helm's labels and annotations add to an object beyond what deploy/ has (the chart's
# _helpers.tpl "gpupool.labels", the CRDs' keep policy, the pod template's source checksum).
HELM_LABELS = (
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "helm.sh/chart",
)
HELM_ANNOTATIONS = ("helm.sh/resource-policy", "checksum/source")


@functools.cache
def _build() -> tuple[int, str, str]:
    env = {**os.environ, "HELM_VERSION": HELM_VERSION}
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def binary() -> Path:
    """The helm binary ($HELM_BINARY, else the build script's cached one; the first build takes
    minutes, docs/development.md)."""
    override = os.environ.get("HELM_BINARY")
    if override:
        return Path(override)
    rc, out, err = _build()
    if rc == 3:
        msg = f"helm {HELM_VERSION} cannot be built: {err.strip()}"
        if os.environ.get("GPUPOOL_SKIP_HELM"):
            pytest.skip(msg + " (GPUPOOL_SKIP_HELM is set)")
        pytest.fail(msg + "; install Go >= 1.26 or set GPUPOOL_SKIP_HELM=1 to skip")
    if rc != 0:
        pytest.fail(f"scripts/build-helm.sh failed ({rc}):\n{err[-8000:]}")
    return Path(out.strip().splitlines()[-1])


def helm(
    *args: str, check: bool = True, kubeconfig: Path | None = None
) -> subprocess.CompletedProcess:
    """`helm ARGS` with a private home (no repositories, no plugins, no cache of the user's)
    and no cluster unless `kubeconfig` is given."""
    home = Path(tempfile.gettempdir()) / f"gpupool-helm-home-{os.getuid()}"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(kubeconfig or home / "no-kubeconfig"),
    }
    proc = subprocess.run(
        [str(binary()), *args], capture_output=True, text=True, env=env, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def template_text(
    *values_files: Path | str, sets: tuple[str, ...] = (), namespace: str = NAMESPACE
) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", namespace]
    for f in values_files:
        args += ["--values", str(f)]
    for s in sets:
        args += ["--set", s]
    return helm(*args).stdout


def render(
    *values_files: Path | str, sets: tuple[str, ...] = (), namespace: str = NAMESPACE
) -> list[dict]:
    """The objects `helm template` renders (the chart's templates, CRDs included)."""
    text = template_text(*values_files, sets=sets, namespace=namespace)
    return [d for d in yaml.safe_load_all(text) if d]


def by_key(objects: list[dict]) -> dict[tuple[str, str, str], dict]:
    out = {}
    for o in objects:
        key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        assert key not in out, f"{key} twice"
        out[key] = o
    return out


def kustomize() -> list[dict]:
    """The objects `kubectl apply -k deploy/` applies, built here from deploy/kustomization.yaml
    by the three kustomize features it uses: `labels` (pairs added to each object's
    metadata.labels only: no includeSelectors, no includeTemplates), `configMapGenerator`
    (its ConfigMap; kustomize appends a content hash to the name and to each reference, left
    out here on both sides) and `images` (newTag on the containers running that image)."""
    (k,) = [d for d in yaml.safe_load_all((DEPLOY / "kustomization.yaml").read_text()) if d]
    known = {"apiVersion", "kind", "labels", "resources", "configMapGenerator", "images"}
    assert set(k) <= known, f"kustomization.yaml uses {set(k) - known}: teach helm.kustomize"
    objects = [d for r in k["resources"] for d in yaml.safe_load_all((DEPLOY / r).read_text()) if d]
    for gen in k.get("configMapGenerator", []):
        data = dict(line.split("=", 1) for line in gen.get("literals", []))
        meta = {"name": gen["name"], "namespace": gen["namespace"]}
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    for pair in k.get("labels", []):
        assert not pair.get("includeSelectors") and not pair.get("includeTemplates"), pair
        for o in objects:
            o["metadata"].setdefault("labels", {}).update(pair["pairs"])
    for image in k.get("images", []):
        for o in objects:
            spec = o.get("spec", {}).get("template", {}).get("spec", {})
            for c in spec.get("containers", []) + spec.get("initContainers", []):
                if c["image"].rpartition(":")[0] == image["name"]:
                    c["image"] = f"{image['name']}:{image['newTag']}"
    return objects


def without_helm_metadata(obj: dict) -> dict:
    """The object less what Helm alone adds (HELM_LABELS, HELM_ANNOTATIONS)."""
    o = copy.deepcopy(obj)
    metas = [o["metadata"]]
    template = o.get("spec", {}).get("template")
    if isinstance(template, dict) and "metadata" in template:
        metas.append(template["metadata"])
    for meta in metas:
        for field, keys in (("labels", HELM_LABELS), ("annotations", HELM_ANNOTATIONS)):
            got = meta.get(field)
            if got is None:
                continue
            for key in keys:
                got.pop(key, None)
            if not got:
                del meta[field]
    return o
