"""Test support for the controller's integration tests: seed a cluster through the API (CRDs
from deploy/, GPU nodes, GpuNodeStates, pods with GPU requests, PDBs, Deployments), an
injectable clock, a mig-manager stand-in, and request-log helpers.

Everything goes through the official client, so the same helpers work against a real cluster;
helpers that need cluster-wide stand-ins (Node objects, kubelet status) call `require_fake()`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from reconciler.apply.configs import MIG_CONFIG_KEY
from reconciler.apply.handlers import ApplyConfig
from reconciler.conventions import (
    GROUP,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    NODE_STATE_PLURAL,
    VERSION,
)
from reconciler.loop.controller import Controller
from reconciler.loop.sources import DirectorySource
from reconciler.observe.builders import PRODUCT, gpu
from reconciler.policy.catalog import default_catalog

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
A100 = "A100-SXM4-80GB"
MUTATING = ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class Clock:
    """An injected clock: tests pass grace periods and timeouts without sleeping."""

    now: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def install_crds(kube) -> None:
    """Create the CRDs from deploy/crds.yaml (cluster-wide: the fake only)."""
    kube.require_fake()
    for crd in docs(DEPLOY / "crds.yaml"):
        kube.apiextensions.create_custom_resource_definition(crd)


def ensure_namespace(kube, name: str) -> None:
    try:
        kube.core.create_namespace({"metadata": {"name": name}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    if not kube.is_fake:
        kube.cleanup(lambda: kube.core.delete_namespace(name))


def gpu_state(index: int, *, mig: list[str] | None = None, util: float = 50.0, idle_since: datetime | None = None,
              model: str = A100) -> dict:
    g = gpu(index, mig=mig, util=util, idle_since=idle_since, model=model).model_copy(update={"model": model})
    return g.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def add_gpu_node(kube, name: str, *, pool: str = "a100", model: str = A100, count: int = 8,
                 mig: dict[int, list[str]] | None = None, labels: dict | None = None, state: bool = True) -> None:
    """A GPU node as the kubelet registers it, and (state=True) its agent's GpuNodeState."""
    server = kube.require_fake()
    server.cluster.add_node(name, gpus=count, labels={"gpupool.io/pool": pool, "nvidia.com/gpu.product": PRODUCT.get(model, model),
                                                      **(labels or {})})
    if state:
        publish_state(kube, name, [gpu_state(i, mig=(mig or {}).get(i), model=model) for i in range(count)])


def publish_state(kube, node: str, gpus: list[dict], when: datetime | None = None) -> None:
    """Write a GpuNodeState as the node agent does (create, then the status subresource)."""
    co = kube.custom
    try:
        co.create_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL,
                                        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "GpuNodeState", "metadata": {"name": node}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    co.patch_cluster_custom_object_status(GROUP, VERSION, NODE_STATE_PLURAL, node,
                                          {"status": {"gpus": gpus, "updatedAt": (when or datetime.now(UTC)).isoformat()}},
                                          _content_type="application/merge-patch+json")


def node_state(kube, node: str) -> dict:
    return kube.custom.get_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL, node)


def create_pod(kube, ns: str, name: str, *, node: str | None = None, gpus: int = 0, mig: str | None = None,
               cls: str | None = "training-low", pool: str | None = "a100", started: datetime | None = None,
               allocation: str | None = None, annotations: dict | None = None, labels: dict | None = None,
               ready: bool = True) -> None:
    """A pod asking for GPUs; with `node`, bound there and Running since `started` (status subresource)."""
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {f"nvidia.com/mig-{mig}": "1"} if mig else {}
    anns = dict(annotations or {})
    if allocation is not None:
        anns["gpupool.io/gpus"] = allocation
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "registry.example/train:1",
                                            "resources": {"limits": limits}}]}
    if cls:
        spec["priorityClassName"] = cls
    if pool:
        spec["nodeSelector"] = {"gpupool.io/pool": pool}
    if node:
        spec["nodeName"] = node
    kube.core.create_namespaced_pod(ns, {"metadata": {"name": name, "namespace": ns, "annotations": anns,
                                                      "labels": labels or {"app": name}}, "spec": spec})
    if node:
        ts = (started or datetime.now(UTC)).isoformat()
        cond = "True" if ready else "False"
        kube.core.patch_namespaced_pod_status(name, ns, {"status": {
            "phase": "Running", "startTime": ts,
            "conditions": [{"type": "Ready", "status": cond, "lastTransitionTime": ts},
                           {"type": "ContainersReady", "status": cond, "lastTransitionTime": ts}]}})


def create_pdb(kube, ns: str, name: str, selector: dict, *, min_available: int | None = None, max_unavailable: int | None = None) -> None:
    spec: dict[str, Any] = {"selector": {"matchLabels": selector}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    kube.policy.create_namespaced_pod_disruption_budget(ns, {"metadata": {"name": name}, "spec": spec})


def create_inference_deployment(kube, ns: str, name: str, *, replicas: int, queue: float, last_scale: datetime | None = None,
                                cls: str = "serving", pool: str = "a100", slices: int = 1) -> None:
    anns = {"gpupool.io/queue-length": str(queue)}
    if last_scale:
        anns["gpupool.io/last-scale"] = last_scale.isoformat()
    kube.apps.create_namespaced_deployment(ns, {
        "metadata": {"name": name, "labels": {"gpupool.io/inference": "true"}, "annotations": anns},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"priorityClassName": cls, "nodeSelector": {"gpupool.io/pool": pool},
                                       "containers": [{"name": "srv", "image": "registry.example/serve:1",
                                                       "resources": {"limits": {"nvidia.com/gpu.shared": str(slices)}}}]}}},
    })


def write_policy(root: Path, text: str) -> Path:
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "desired.yaml").write_text(text)
    return root


def controller(kube, root: Path, clock: Clock, *, identity: str = "gpupool-0", dry_run: bool = False,
               mig_timeout: float = 900.0) -> Controller:
    cfg = ApplyConfig(mig_config_namespace=kube.namespace, events_namespace=kube.namespace, mig_timeout_seconds=mig_timeout)
    return Controller(DirectorySource(root), kube.api_client, namespace=kube.namespace, identity=identity,
                      dry_run=dry_run, apply_config=cfg, clock=clock)


def writes(server, *, exclude: tuple[str, ...] = ()) -> list:
    """Mutating requests in the fake's request log (optionally not those whose path has a word in `exclude`)."""
    return [r for r in server.requests() if r.method in MUTATING and not any(x in r.path for x in exclude)]


def evictions(server) -> list[str]:
    return [r.path for r in server.requests("POST") if r.path.endswith("/eviction") and not r.injected and r.status and r.status < 300]


# ------------------------------------------------------------------ mig-manager stand-in

def mig_manager_step(kube, node: str, *, outcome: str = "success", model: str = A100, publish: bool = True) -> str | None:
    """One step of NVIDIA's mig-manager for `node`, as it reacts to its `nvidia.com/mig.config`
    label: unset state -> `pending`; `pending` -> apply the named entry of the mig-parted config
    (`config.yaml`, `version: v1`, `mig-configs:`), republish the node's GpuNodeState as the
    node agent would, and set `success` (or `failed`). Returns the state it wrote, or None."""
    n = kube.core.read_node(node)
    labels = n.metadata.labels or {}
    name = labels.get(MIG_CONFIG_LABEL)
    if not name:
        return None
    state = labels.get(MIG_STATE_LABEL)
    if state in ("success", "failed"):
        return None
    if state is None:
        new = "pending"
    else:
        new = outcome
        if outcome == "success" and publish:
            cm = _mig_config(kube)
            parted = yaml.safe_load(cm.data[MIG_CONFIG_KEY])
            assert parted["version"] == "v1"
            entries = parted["mig-configs"][name]
            gpus = node_state(kube, node)["status"]["gpus"]
            cat = default_catalog()
            for entry in entries:
                for idx in entry["devices"] if entry["devices"] != "all" else [g["index"] for g in gpus]:
                    g = next(g for g in gpus if g["index"] == idx)
                    if entry.get("mig-enabled"):
                        profiles = [p for p, k in entry["mig-devices"].items() for _ in range(k)]
                        placed = cat.place(cat.model(model), profiles)
                        g.update({"migEnabled": True, "migInstances": [{"profile": p, "start": s} for p, s in placed]})
                    else:
                        g.pop("migInstances", None)
                        g["migEnabled"] = False
            publish_state(kube, node, gpus)
    kube.core.patch_node(node, {"metadata": {"labels": {MIG_STATE_LABEL: new}}}, _content_type="application/merge-patch+json")
    return new


def _mig_config(kube):
    return kube.core.read_namespaced_config_map("gpupool-mig-parted-config", kube.namespace)


def conditions(kube, name: str = "gpupool") -> dict[str, dict]:
    obj = kube.custom.get_namespaced_custom_object("gpupool.io", "v1alpha1", kube.namespace, "reconcilerstatuses", name)
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


def set_suspend(kube, value: bool) -> None:
    kube.custom.patch_namespaced_custom_object("gpupool.io", "v1alpha1", kube.namespace, "reconcilerstatuses", "gpupool",
                                               {"spec": {"suspend": value}})


def converge(ctl: Controller, kube=None, *, nodes: tuple[str, ...] = (), clock: Clock | None = None, step: float = 60,
             max_cycles: int = 20):
    """Cycle until a plan is empty, running the mig-manager stand-in for `nodes` between cycles."""
    results = []
    for _ in range(max_cycles):
        r = ctl.cycle()
        results.append(r)
        if r.converged:
            return results
        for n in nodes:
            with contextlib.suppress(client.ApiException):
                mig_manager_step(kube, n)
        if clock is not None:
            clock.advance(step)
    raise AssertionError(f"did not converge in {max_cycles} cycles: " + "; ".join(
        f"{r.summary or r.error} {[(o.action, o.status, o.message) for o in (r.applied.outcomes if r.applied else [])]}"
        for r in results[-3:]))
