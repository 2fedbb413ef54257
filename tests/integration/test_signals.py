"""Signals from Prometheus on the real control plane (issue 14): a ScalingPolicy reading vLLM's
queue from a real Prometheus (tests/prometheus) drives a real controller cycle. The exporter
reports a long queue: the cycle's plan has the Scale with the query and the value, and the
Deployment's replicas change on the API server. Then the exporter stops exporting the series:
the next cycle reports the finding and does not scale down (the workload's own queue
annotation says 0 and is not read)."""

from __future__ import annotations

from datetime import timedelta

from .harness import controller, create_inference_deployment
from .scenario import TEXT, base, seed_priority_classes

VLLM = "vllm:num_requests_waiting"
QUERY = 'sum(vllm:num_requests_waiting{namespace="team-b",pod=~"chat-.*"})'
SCALING = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: chat}
spec:
  pool: h100
  targets:
    - {namespace: team-b, name: chat, minReplicas: 1, maxReplicas: 8}
  scaleUp: {queueLengthPerReplica: 10, step: 2, cooldown: 2m}
  scaleDown: {queueLengthPerReplica: 1, step: 1, cooldown: 10m}
  signals: {source: prometheus}
"""


def test_a_prometheus_reading_scales_a_deployment_and_its_absence_does_not(
    kube, tmp_path, prometheus, signals_exporter
):
    clock = kube.clock
    text = TEXT + SCALING
    base(kube, tmp_path, clock, text=text, workloads=False)
    seed_priority_classes(kube, text)
    create_inference_deployment(
        kube, "team-b", "chat", replicas=2, queue=0, last_scale=clock.now - timedelta(hours=1)
    )
    kube.settle()
    pods = [p.metadata.name for p in kube.core.list_namespaced_pod("team-b").items]
    assert len(pods) == 2 and all(p.startswith("chat-") for p in pods)
    for name, waiting in zip(pods, (45, 15), strict=True):  # vLLM's gauge, per replica
        signals_exporter.set(VLLM, {"namespace": "team-b", "pod": name, "model_name": "m"}, waiting)
    prometheus.wait_for(QUERY, lambda r: len(r) == 1 and r[0]["value"][1] == "60")

    ctl = controller(kube, tmp_path, clock, prometheus_url=prometheus.url, prometheus_timeout=5)
    r = ctl.cycle()
    assert r.error is None, r.error
    (scale,) = [a for a in r.plan.actions if a.kind == "scale"]
    assert (scale.target, scale.from_replicas, scale.to_replicas) == ("team-b/chat", 2, 4)
    assert f"queueLength: {QUERY} = 60" in scale.reason, scale.reason
    assert [(s.name, s.query, s.value) for s in scale.signals] == [("queueLength", QUERY, 60.0)]
    done = {o.action: o.status for o in r.applied.outcomes}
    assert done["scale:team-b/chat"] == "done"
    assert kube.apps.read_namespaced_deployment("chat", "team-b").spec.replicas == 4

    signals_exporter.clear()  # the serving stack stops exporting: the series go stale
    prometheus.wait_for(f'{VLLM}{{namespace="team-b"}}', lambda r: r == [])
    clock.advance(3600)  # well past the scale-down cooldown: only the reading holds it back
    kube.settle()
    r = ctl.cycle()
    assert r.error is None, r.error
    assert [a for a in r.plan.actions if a.kind == "scale"] == []
    (f,) = [f for f in r.plan.findings if f.code == "signal-unavailable"]
    assert f.subject == "team-b/chat" and QUERY in f.message and "empty result" in f.message
    assert kube.apps.read_namespaced_deployment("chat", "team-b").spec.replicas == 4
