"""Test support for the controller's integration tests on the real control plane (world.py):
GPU nodes with their NVIDIA stand-ins, pods with GPU requests, PDBs, Deployments, the controller
as its ServiceAccount, and the audit log as the record of what it wrote.

Everything goes through the API with the official client; what only a kubelet or an NVIDIA
component would write is written by their stand-ins (tests/cluster/kubelets.py, tests/nvidia).
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

from reconciler.apply.handlers import ApplyConfig
from reconciler.conventions import GROUP, NODE_STATE_PLURAL, VERSION
from reconciler.loop.controller import Controller
from reconciler.loop.sources import DirectorySource

from .world import CONTROLLER_SA, DEPLOY, NS, OPERATOR_NS, Clock, World, docs  # noqa: F401

MERGE = "application/merge-patch+json"
MUTATING = ("create", "update", "patch", "delete", "deletecollection")
H100 = "H100-SXM5-80GB"
A100 = "A100-SXM4-80GB"


def add_gpu_node(
    kube: World,
    name: str,
    *,
    pool: str = "h100",
    model: str = H100,
    count: int = 8,
    mig: dict[int, list[str]] | None = None,
    labels: dict | None = None,
    state: bool = True,
):
    """A GPU node as the kubelet registers it, its NVIDIA components, and (state=True) its
    node agent's GpuNodeState."""
    return kube.add_gpu_node(
        name, pool=pool, model=model, count=count, mig=mig, labels=labels, publish=state
    )


def ensure_namespace(kube: World, name: str) -> None:
    kube.ensure_namespace(name)


def node_state(kube: World, node: str) -> dict:
    return kube.custom.get_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL, node)


def create_pod(
    kube: World,
    ns: str,
    name: str,
    *,
    node: str | None = None,
    gpus: int = 0,
    mig: str | None = None,
    shared: int = 0,
    cls: str | None = "training-low",
    pool: str | None = "h100",
    started: datetime | None = None,
    annotations: dict | None = None,
    labels: dict | None = None,
    owner: dict | None = None,
) -> None:
    """A pod asking for GPUs. With `node` it is bound there (as if scheduled before the test
    began), the kubelet admits it with devices from the node's device manager, and its start
    time is written as `started` on the test's clock; without, the real scheduler places it."""
    limits = (
        {"nvidia.com/gpu": str(gpus)}
        if gpus
        else {f"nvidia.com/mig-{mig}": "1"}
        if mig
        else {"nvidia.com/gpu.shared": str(shared)}
        if shared
        else {}
    )
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "registry.example/train:1", "resources": {"limits": limits}}
        ],
        "terminationGracePeriodSeconds": 30,
    }
    if cls:
        spec["priorityClassName"] = cls
    if pool:
        spec["nodeSelector"] = {"gpupool.io/pool": pool}
    if node:
        spec["nodeName"] = node
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ns,
        "annotations": dict(annotations or {}),
        "labels": labels or {"app": name},
    }
    if owner:
        meta["ownerReferences"] = [owner]
    kube.core.create_namespaced_pod(ns, {"metadata": meta, "spec": spec})
    if not node:
        return
    deadline = time.monotonic() + 10
    while (pod := kube.core.read_namespaced_pod(name, ns)).status.phase == "Pending":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{ns}/{name} not admitted on {node}")
        time.sleep(0.05)
    if pod.status.phase != "Running":
        raise AssertionError(
            f"{ns}/{name} was refused on {node}: {pod.status.reason} {pod.status.message}"
        )
    if started is not None:  # the test's clock runs ahead of the kubelet's
        ts = started.isoformat()
        kube.core.patch_namespaced_pod_status(
            name, ns, {"status": {"startTime": ts}}, _content_type=MERGE
        )
    kube.nodes[node].annotate_pods()


def create_pdb(
    kube: World,
    ns: str,
    name: str,
    selector: dict,
    *,
    min_available: int | None = None,
    max_unavailable: int | None = None,
) -> None:
    spec: dict[str, Any] = {"selector": {"matchLabels": selector}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    kube.policy.create_namespaced_pod_disruption_budget(
        ns, {"metadata": {"name": name}, "spec": spec}
    )
    deadline = time.monotonic() + 10  # the disruption controller computes what it allows
    while (
        kube.policy.read_namespaced_pod_disruption_budget(name, ns).status.observed_generation
        is None
    ):
        if time.monotonic() > deadline:
            raise TimeoutError(f"PDB {ns}/{name} has no status")
        time.sleep(0.1)


def create_inference_deployment(
    kube: World,
    ns: str,
    name: str,
    *,
    replicas: int,
    queue: float,
    last_scale: datetime | None = None,
    cls: str = "serving",
    pool: str = "h100",
    slices: int = 1,
) -> None:
    anns = {"gpupool.io/queue-length": str(queue)}
    if last_scale:
        anns["gpupool.io/last-scale"] = last_scale.isoformat()
    kube.apps.create_namespaced_deployment(
        ns,
        {
            "metadata": {
                "name": name,
                "labels": {"gpupool.io/inference": "true"},
                "annotations": anns,
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "priorityClassName": cls,
                        "nodeSelector": {"gpupool.io/pool": pool},
                        "containers": [
                            {
                                "name": "srv",
                                "image": "registry.example/serve:1",
                                "resources": {"limits": {"nvidia.com/gpu.shared": str(slices)}},
                            }
                        ],
                    },
                },
            },
        },
    )


def write_policy(root: Path, text: str) -> Path:
    (root / "policies").mkdir(parents=True, exist_ok=True)
    (root / "policies" / "desired.yaml").write_text(text)
    return root


def controller(
    kube: World,
    root: Path,
    clock: Clock,
    *,
    identity: str = "gpupool-0",
    dry_run: bool = False,
    mig_timeout: float = 900.0,
    api_client=None,
    **kw,
) -> Controller:
    """The controller as it runs in the cluster: its ServiceAccount, its namespace, the GPU
    operator's namespace for the NVIDIA configs."""
    cfg = ApplyConfig(mig_config_namespace=OPERATOR_NS, mig_timeout_seconds=mig_timeout)
    return Controller(
        DirectorySource(root),
        api_client or kube.controller_client(),
        namespace=NS,
        identity=identity,
        dry_run=dry_run,
        apply_config=cfg,
        clock=clock,
        **kw,
    )


# ------------------------------------------------------------------ the audit log: what was written


def audit_mark(kube: World) -> int:
    """A position in the audit log; `writes(kube, since=mark)` sees only what came after."""
    time.sleep(0.2)  # let the log catch up with the last response
    return len(kube.plane.audit_events())


def writes(
    kube: World, *, since: int = 0, exclude: tuple[str, ...] = (), user: str | None = None
) -> list:
    """Mutating requests the controller's ServiceAccount sent (or `user`), oldest first,
    leaving out those whose resource is in `exclude`."""
    time.sleep(0.2)
    who = user or f"system:serviceaccount:{NS}:{CONTROLLER_SA}"
    return [
        e
        for e in kube.plane.audit_events()[since:]
        if e.user == who and e.verb in MUTATING and e.resource not in exclude
    ]


def evictions(kube: World, *, since: int = 0) -> list[str]:
    """Evictions the controller sent that the API server carried out (201)."""
    return [
        f"{e.namespace}/{e.name}"
        for e in writes(kube, since=since)
        if e.subresource == "eviction" and e.code is not None and e.code < 300
    ]


# ------------------------------------------------------------------ status


def conditions(kube: World, name: str = "gpupool") -> dict[str, dict]:
    obj = kube.custom.get_namespaced_custom_object(GROUP, VERSION, NS, "reconcilerstatuses", name)
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions", [])}


def set_suspend(kube: World, value: bool) -> None:
    kube.custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "reconcilerstatuses", "gpupool", {"spec": {"suspend": value}}
    )


def converge(
    ctl: Controller,
    kube: World,
    *,
    clock: Clock | None = None,
    step: float = 60,
    max_cycles: int = 25,
):
    """Cycle until a plan is empty; between cycles the scheduler and kubelets settle, the
    NVIDIA stand-ins and node agents take a step, and the test clock moves on."""
    results = []
    for _ in range(max_cycles):
        r = ctl.cycle()
        results.append(r)
        if r.converged:
            return results
        kube.settle()
        kube.step_nodes()
        kube.settle()
        if clock is not None:
            clock.advance(step)
    last = [
        f"{r.summary or r.error} "
        f"{[(o.action, o.status, o.message) for o in (r.applied.outcomes if r.applied else [])]}"
        for r in results[-3:]
    ]
    raise AssertionError(f"did not converge in {max_cycles} cycles: " + "; ".join(last))


def drop_device_classes(kube: World, pool: str) -> None:
    """Delete the DeviceClasses gpupool rendered for DRA Pool `pool` (`gpupool-<pool>-...`), and
    the pool's guards (DeviceTaintRules `gpupool-guard-<node>` labelled with the pool). They
    are cluster-scoped and owned by gpupool: left behind, the next test's controller would
    prune them and count writes that test never caused."""
    from kubernetes import client

    from reconciler import conventions as C

    def drop(plural: str, mine) -> None:
        listed = kube.custom.list_cluster_custom_object(C.DRA_GROUP, C.DRA_VERSION, plural)
        for item in listed.get("items", []):
            if not mine(item["metadata"]):
                continue
            try:
                kube.custom.delete_cluster_custom_object(
                    C.DRA_GROUP, C.DRA_VERSION, plural, item["metadata"]["name"]
                )
            except client.ApiException as exc:
                if exc.status != 404:
                    raise

    drop("deviceclasses", lambda md: md["name"].startswith(f"gpupool-{pool}-"))
    drop(
        "devicetaintrules",
        lambda md: (
            md["name"].startswith("gpupool-guard-")
            and (md.get("labels") or {}).get(C.POOL_LABEL) == pool
        ),
    )


def custom_object(kube: World, group: str, version: str, plural: str, name: str, ns: str = ""):
    """The custom object (namespaced when `ns` is given, else cluster-scoped), or None when the
    API server has none of that name."""
    from kubernetes import client

    try:
        if ns:
            return kube.custom.get_namespaced_custom_object(group, version, ns, plural, name)
        return kube.custom.get_cluster_custom_object(group, version, plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def outcome_texts(result) -> dict[str, str]:
    """A cycle's apply outcomes as {action: "status: message"}; the cycle must not have failed."""
    assert result.error is None, result.error
    applied = result.applied.outcomes if result.applied else []
    return {o.action: f"{o.status}: {o.message}" for o in applied}
