"""The bundled policy (pools/ + policies/) converges a cluster seeded from the bundled snapshot.

The fake API server is seeded, through the official client, with what examples/observed.yaml
describes: 16 GPU nodes with their agents' GpuNodeStates, namespaces, PriorityClasses,
ResourceQuotas, the running and pending pods (with `gpupool.io/gpus` allocations), and the two
inference Deployments. The controller then reads the repository's own pools/ and policies/.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from kubernetes import client

from reconciler.apply.handlers import ApplyConfig
from reconciler.loop.controller import Controller
from reconciler.loop.sources import DirectorySource
from reconciler.observe.model import Workload
from reconciler.observe.snapshot import load_snapshot
from tests.integration.harness import Clock, conditions, evictions, install_crds, publish_state

ROOT = Path(__file__).resolve().parents[2]


def _limits(w: Workload) -> dict[str, str]:
    r = w.request
    if r.gpus:
        return {"nvidia.com/gpu": str(r.gpus)}
    if r.mig:
        return {f"nvidia.com/mig-{p}": str(n) for p, n in r.mig.items()}
    return {"nvidia.com/gpu.shared": str(r.shared_slices)}


def _allocation(w: Workload) -> str:
    parts = []
    for a in w.allocations:
        if a.mig_start is not None:
            parts.append(f"{a.gpu}:{a.mig_start}")
        elif a.slices:
            parts.append(f"{a.gpu}/{a.slices}")
        else:
            parts.append(str(a.gpu))
    return ",".join(parts)


def seed(kube, clock: Clock) -> None:
    server = kube.require_fake()
    obs = load_snapshot(ROOT / "examples" / "observed.yaml")
    clock.now = obs.observed_at
    install_crds(kube)
    for c in obs.priority_classes:
        kube.scheduling.create_priority_class({"metadata": {"name": c.name}, "value": c.value, "preemptionPolicy": c.preemption_policy})
    namespaces = sorted({w.namespace for w in obs.workloads} | {q.namespace for q in obs.quotas})
    for ns in namespaces:
        with contextlib.suppress(client.ApiException):
            kube.core.create_namespace({"metadata": {"name": ns}})
    for q in obs.quotas:
        kube.core.create_namespaced_resource_quota(q.namespace, {"metadata": {"name": q.name}, "spec": {"hard": q.hard}})
    for n in obs.nodes:
        server.cluster.add_node(n.name, gpus=len(n.gpus), labels=n.labels)
        publish_state(kube, n.name, [g.model_dump(mode="json", by_alias=True, exclude_defaults=True) for g in n.gpus], when=obs.observed_at)
        shared = {str(g.index): g.shared_slices for g in n.gpus if g.shared_slices}
        if shared:
            kube.core.patch_node(n.name, {"metadata": {"annotations": {"gpupool.io/shared-slices": json.dumps(shared)}}},
                                 _content_type="application/merge-patch+json")
    for w in obs.workloads:
        anns = {"gpupool.io/checkpointable": str(w.checkpointable).lower(), "gpupool.io/migratable": str(w.migratable).lower()}
        if w.last_checkpoint_at:
            anns["gpupool.io/last-checkpoint"] = w.last_checkpoint_at.isoformat()
        if w.allocations:
            anns["gpupool.io/gpus"] = _allocation(w)
        spec = {"containers": [{"name": "main", "image": "registry.example/w:1", "resources": {"limits": _limits(w)}}],
                "priorityClassName": w.priority_class}
        if w.pool:
            spec["nodeSelector"] = {"gpupool.io/pool": w.pool}
        if w.node:
            spec["nodeName"] = w.node
        kube.core.create_namespaced_pod(w.namespace, {"metadata": {"name": w.name, "annotations": anns, "labels": {"app": w.name}}, "spec": spec})
        if w.phase == "Running":
            ts = w.started_at.isoformat()
            kube.core.patch_namespaced_pod_status(w.name, w.namespace, {"status": {
                "phase": "Running", "startTime": ts, "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ts}]}})
    for s in obs.services:
        anns = {"gpupool.io/queue-length": str(s.queue_length)}
        if s.pending_seconds_p99 is not None:
            anns["gpupool.io/pending-p99-seconds"] = str(s.pending_seconds_p99)
        if s.last_scale_at:
            anns["gpupool.io/last-scale"] = s.last_scale_at.isoformat()
        limits = _limits(Workload(namespace="x", name="x", request=s.replica_request))
        kube.apps.create_namespaced_deployment(s.namespace, {
            "metadata": {"name": s.name, "labels": {"gpupool.io/inference": "true"}, "annotations": anns},
            "spec": {"replicas": s.replicas, "selector": {"matchLabels": {"app": s.name}},
                     "template": {"metadata": {"labels": {"app": s.name}},
                                  "spec": {"priorityClassName": s.priority_class, "nodeSelector": {"gpupool.io/pool": s.pool},
                                           "containers": [{"name": "srv", "image": "registry.example/serve:1", "resources": {"limits": limits}}]}}},
        })


def test_bundled_policy_converges_the_bundled_cluster(kube, tmp_path):
    clock = Clock()
    seed(kube, clock)
    ctl = Controller(DirectorySource(ROOT), kube.api_client, namespace=kube.namespace, identity="gpupool-0",
                     apply_config=ApplyConfig(mig_config_namespace=kube.namespace, events_namespace=kube.namespace), clock=clock)
    kube.server.clear_requests()
    results = []
    for _ in range(12):
        r = ctl.cycle()
        results.append(r)
        assert r.error is None, r.error
        if r.converged:
            break
        # the serving stack's exporter: after the scale-up the queue per replica is back in band
        with contextlib.suppress(client.ApiException):
            kube.apps.patch_namespaced_deployment("chat-llm", "assistant", {"metadata": {"annotations": {"gpupool.io/queue-length": "40", "gpupool.io/pending-p99-seconds": "5"}}},
                                                  _content_type="application/merge-patch+json")
        clock.advance(301)
    assert results[-1].converged, [(r.summary, [(o.action, o.status, o.message) for o in (r.applied.outcomes if r.applied else [])]) for r in results[-2:]]
    # what the first plan said is what happened
    first = results[0].summary
    assert first.startswith("Plan: 1 sharing change, 2 preemptions, 1 idle reclaim, 1 scale-up, 1 quota change")
    evicted = sorted(p.split("/")[-2] for p in evictions(kube.server))
    assert evicted == ["ablation-a", "spot-sweep", "stale-notebook"]
    assert kube.apps.read_namespaced_deployment("chat-llm", "assistant").spec.replicas == 10
    hard = kube.core.read_namespaced_resource_quota("gpupool-assistant", "assistant").spec.hard
    assert hard["requests.nvidia.com/gpu.shared"] == "96"
    node = kube.core.read_node("h100-06")
    assert not node.spec.unschedulable
    assert json.loads(node.metadata.annotations["gpupool.io/shared-slices"]) == {"0": 8, "1": 8}
    assert conditions(kube)["Ready"]["status"] == "True"
