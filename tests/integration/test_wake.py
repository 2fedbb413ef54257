"""A scaling signal that crosses a threshold wakes the running loop (issue 28), on the real control
plane: the loop runs with a 300 s interval, so only the wake can get the scale-up within
seconds. The queue annotation of an inference Deployment (watched), and a real Prometheus's
reading of vLLM's queue (polled every half second); then a crossing inside the scale-up
cooldown: it wakes a cycle, and that cycle scales nothing."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from reconciler.conventions import QUEUE_LENGTH_ANN

from .harness import controller, create_inference_deployment
from .scenario import TEXT, base, seed_priority_classes

INTERVAL = 300.0
WITHIN = 5.0
"""Seconds from the spike to the new replica count on the API server: the issue's target is
about 2 s; a loaded 2-core machine is given more (the figure is printed)."""
VLLM = "vllm:num_requests_waiting"
QUERY = 'sum(vllm:num_requests_waiting{namespace="team-b",pod=~"chat-.*"})'


def scaling(source: str) -> str:
    return f"""\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {{name: chat}}
spec:
  pool: h100
  targets:
    - {{namespace: team-b, name: chat, minReplicas: 1, maxReplicas: 8}}
  scaleUp: {{queueLengthPerReplica: 10, step: 2, cooldown: 2m}}
  scaleDown: {{queueLengthPerReplica: 1, step: 1, cooldown: 10m}}
  signals: {{source: {source}}}
"""


def start(kube, tmp_path, source: str, **kw):
    """The cluster with the `chat` Deployment (2 replicas, queue 4: inside the band), and the
    controller's loop running; returns it with the start time of every cycle."""
    clock = kube.clock
    text = TEXT + scaling(source)
    base(kube, tmp_path, clock, text=text, workloads=False)
    seed_priority_classes(kube, text)
    create_inference_deployment(
        kube, "team-b", "chat", replicas=2, queue=4, last_scale=clock.now - timedelta(hours=1)
    )
    kube.settle()
    ctl = controller(kube, tmp_path, clock, wake_gap_seconds=0.5, trigger_poll_seconds=60, **kw)
    starts: list[float] = []
    cycle = ctl.cycle

    def counted():
        starts.append(time.monotonic())
        return cycle()

    ctl.cycle = counted
    stop = threading.Event()
    kube.cleanup(stop.set)
    threading.Thread(target=ctl.run, args=(stop, INTERVAL), daemon=True).start()
    deadline = time.monotonic() + 60
    while ctl.last_ok is None:
        assert time.monotonic() < deadline, "the loop's first cycle did not finish"
        time.sleep(0.1)
    quiet(starts)
    return ctl, starts


def quiet(starts: list[float], seconds: float = 2.0, limit: float = 30.0) -> None:
    """Wait until no cycle has started for `seconds` (the pod events of a scale settle)."""
    deadline = time.monotonic() + limit
    while time.monotonic() - starts[-1] < seconds:
        assert time.monotonic() < deadline, "the loop did not settle"
        time.sleep(0.1)


def replicas(kube) -> int:
    return kube.apps.read_namespaced_deployment("chat", "team-b").spec.replicas


def wait_replicas(kube, want: int, since: float) -> float:
    """Seconds from `since` until the Deployment has `want` replicas (fails after 30 s)."""
    while replicas(kube) != want:
        assert time.monotonic() - since < 30, f"no scale to {want} in 30 s"
        time.sleep(0.05)
    return time.monotonic() - since


def annotate(kube, queue: float) -> None:
    kube.apps.patch_namespaced_deployment(
        "chat", "team-b", {"metadata": {"annotations": {QUEUE_LENGTH_ANN: str(queue)}}}
    )


def test_a_queue_annotation_spike_wakes_a_cycle_within_seconds(kube, tmp_path):
    ctl, starts = start(kube, tmp_path, "annotations")
    assert replicas(kube) == 2 and ctl.signal_wake.wakes == 0
    annotate(kube, 6)  # 3/replica: still inside the band, wakes nothing
    time.sleep(1.5)
    assert ctl.signal_wake.wakes == 0
    spiked = time.monotonic()
    annotate(kube, 60)  # 30/replica > 10
    took = wait_replicas(kube, 4, spiked)
    print(f"annotation spike -> replicas 2 -> 4 on the API server: {took:.2f} s")
    assert took < WITHIN, f"the spike took {took:.1f} s to scale (interval {INTERVAL:g} s)"
    assert ctl.signal_wake.wakes == 1

    # inside the scale-up cooldown (2m; the test clock stands still): back inside the band,
    # then a new spike: it wakes a cycle, and the cycle holds the scale
    quiet(starts)
    annotate(kube, 20)  # 5/replica at 4 replicas
    time.sleep(1.0)
    before = len(starts)
    annotate(kube, 400)
    deadline = time.monotonic() + WITHIN
    while len(starts) == before:
        assert time.monotonic() < deadline, "the second crossing did not wake the loop"
        time.sleep(0.05)
    assert ctl.signal_wake.wakes == 2
    quiet(starts)
    assert replicas(kube) == 4  # the cooldown held


def test_a_prometheus_crossing_wakes_a_cycle_within_seconds(
    kube, tmp_path, prometheus, signals_exporter
):
    def export(total: float) -> None:
        for i in range(2):  # vLLM's gauge on each of the two replicas
            pod = {"namespace": "team-b", "pod": f"chat-{i}", "model_name": "m"}
            signals_exporter.set(VLLM, pod, total / 2)

    export(8)  # 4/replica: inside the band
    prometheus.wait_for(QUERY, lambda r: len(r) == 1 and r[0]["value"][1] == "8")
    ctl, starts = start(
        kube,
        tmp_path,
        "prometheus",
        prometheus_url=prometheus.url,
        prometheus_timeout=5,
        signal_poll_seconds=0.5,
    )
    assert replicas(kube) == 2
    export(60)  # 30/replica > 10
    prometheus.wait_for(QUERY, lambda r: len(r) == 1 and r[0]["value"][1] == "60")
    seen = time.monotonic()  # Prometheus has it: from here the poller's half second counts
    took = wait_replicas(kube, 4, seen)
    print(f"Prometheus reading 60 -> replicas 2 -> 4 on the API server: {took:.2f} s")
    assert took < WITHIN, f"the crossing took {took:.1f} s to scale (interval {INTERVAL:g} s)"
    assert ctl.signal_wake.wakes >= 1
