"""The admission gate's helpers, shared by the tests that need a namespace where
deploy/admission-gate.yaml gates GPU pods: `gated_namespace` (one, once the policy is in effect
there), `pod` (a pod manifest) and `gate_names` (a pod's scheduling gates). Used by
tests/integration/test_admission_gate.py, tests/integration/test_admission.py and
bench/admission_openb.py.
"""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from reconciler.conventions import (
    ADMISSION_GATE,
    ADMISSION_NAMESPACE_LABEL,
    ADMISSION_NAMESPACE_VALUE,
    GPU_RESOURCE,
    POOL_LABEL,
)
from tests.support.wait import wait_for

from .world import World

POLICY = "gpupool-admission-gate"  # deploy/admission-gate.yaml
IMAGE = "registry.example/train:1"


def pod(
    name: str,
    *,
    limits: dict[str, str] | None = None,
    init_limits: dict[str, str] | None = None,
    requests: dict[str, str] | None = None,
    scheduler: str | None = None,
    node: str | None = None,
    gates: tuple[str, ...] = (),
    pool: str | None = None,
) -> dict[str, Any]:
    """A pod asking for `limits`/`requests` in its container and `init_limits` in an init
    container (None: no init container; {}: one without resources)."""

    def container(name: str, limits: dict | None, requests: dict | None = None) -> dict:
        c: dict[str, Any] = {"name": name, "image": IMAGE}
        if limits or requests:
            c["resources"] = {"limits": limits or {}, "requests": requests or {}}
        return c

    spec: dict[str, Any] = {
        "containers": [container("main", limits, requests)],
        "terminationGracePeriodSeconds": 0,
    }
    if init_limits is not None:
        spec["initContainers"] = [container("warmup", init_limits)]
    if scheduler:
        spec["schedulerName"] = scheduler
    if node:
        spec["nodeName"] = node
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if pool:
        spec["nodeSelector"] = {POOL_LABEL: pool}
    return {"metadata": {"name": name}, "spec": spec}


def gate_names(p: client.V1Pod) -> list[str]:
    return [g.name for g in p.spec.scheduling_gates or []]


def gated_namespace(kube: World, timeout: float = 30.0) -> str:
    """A namespace labelled for gpupool's admission, returned once the policy is in effect in
    it: the API server applies a new policy only after its informer has synced it, and matches
    the namespace selector against its namespace cache, so a dry-run probe pod is created until
    it comes back gated (no blind sleep)."""
    api = client.AdmissionregistrationV1Api(kube.api_client)
    # install() ignores creation errors of deploy/ objects; say so if the policy is missing
    api.read_mutating_admission_policy(POLICY)
    api.read_mutating_admission_policy_binding(POLICY)
    name = f"gated-{uuid.uuid4().hex[:8]}"
    labels = {ADMISSION_NAMESPACE_LABEL: ADMISSION_NAMESPACE_VALUE}
    kube.core.create_namespace({"metadata": {"name": name, "labels": labels}})
    kube.ensure_namespace(name)  # the World deletes it at teardown
    probe = pod("probe", limits={GPU_RESOURCE: "1"})
    wait_for(
        f"{POLICY} to take effect in namespace {name}",
        lambda: (
            ADMISSION_GATE
            in gate_names(kube.core.create_namespaced_pod(name, probe, dry_run="All"))
        ),
        timeout=timeout,
        interval=0.1,
    )
    return name
