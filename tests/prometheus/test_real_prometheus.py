"""The adapter and the planner against a real Prometheus (Debian's 2.42 package) scraping, every
second, an exporter these tests control (server.py): real values, a metric that does not exist,
Prometheus' own parse error, a NaN, a server that never answers, and decisions made from the
real readings."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from reconciler.loop.signals import with_signals
from reconciler.observe.builders import gpu, node, snapshot, training
from reconciler.observe.model import InferenceService, Request
from reconciler.observe.prometheus import read
from reconciler.plan.planner import plan
from reconciler.plan.signals import render_query, signal_queries
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.models import DEFAULT_WAIT_TIME_QUERY
from tests.plan.scenarios import A100, NOW, _objects, desired_text

TIMEOUT = 5.0
VLLM = "vllm:num_requests_waiting"
DCGM = "DCGM_FI_DEV_GPU_UTIL"


def wait_value(prometheus, query: str, value: str) -> None:
    """Until `query` gives exactly one sample of `value` (series of an earlier test are stale
    one scrape after the exporter dropped them)."""
    prometheus.wait_for(query, lambda r: len(r) == 1 and r[0]["value"][1] == value)


def test_the_adapter_reads_real_values(prometheus, signals_exporter):
    signals_exporter.set(VLLM, {"namespace": "serve", "pod": "llm-abc-1", "model_name": "m"}, 12)
    signals_exporter.set(VLLM, {"namespace": "serve", "pod": "llm-abc-2", "model_name": "m"}, 5)
    signals_exporter.set(VLLM, {"namespace": "other", "pod": "llm-abc-3", "model_name": "m"}, 99)
    wait_value(prometheus, f"sum({VLLM})", "116")
    by_pod = read(prometheus.url, "q", f'{VLLM}{{namespace="serve"}}', timeout=TIMEOUT)
    assert by_pod.error == ""
    assert sorted((s.labels["pod"], s.value) for s in by_pod.samples) == [
        ("llm-abc-1", 12.0),
        ("llm-abc-2", 5.0),
    ]
    total = read(
        prometheus.url, "q", f'sum({VLLM}{{namespace="serve",pod=~"llm-.*"}})', timeout=TIMEOUT
    )
    assert [(s.labels, s.value) for s in total.samples] == [({}, 17.0)]


def test_a_metric_that_does_not_exist_is_an_empty_reading(prometheus, signals_exporter):
    r = read(prometheus.url, "q", 'sum(vllm:no_such_metric{namespace="serve"})', timeout=TIMEOUT)
    assert r.samples == [] and r.error.startswith("empty result"), r.error


def test_a_syntax_error_is_prometheus_own_error(prometheus):
    r = read(prometheus.url, "q", "sum(vllm:num_requests_waiting{namespace=", timeout=TIMEOUT)
    assert r.error.startswith("Prometheus error (bad_data, HTTP 400):"), r.error
    assert "parse error" in r.error


def test_nan_and_a_range_vector_are_refused(prometheus):
    nan = read(prometheus.url, "q", "0/0", timeout=TIMEOUT)
    assert nan.error.startswith("non-finite value: NaN"), nan.error
    matrix = read(prometheus.url, "q", "up[1m]", timeout=TIMEOUT)
    assert matrix.error.startswith("wrong result type: matrix"), matrix.error


def test_a_server_that_never_answers_is_a_timeout_within_the_limit():
    with socket.socket() as silent:  # the kernel completes the handshake; nobody ever reads
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        r = read(url, "q", "up", timeout=0.5)
        took = time.monotonic() - started
    assert r.error == "timeout: no answer from Prometheus within 0.5s"
    assert took < 5, f"the timeout of 0.5s took {took:.1f}s"


def test_a_server_that_does_not_speak_http_is_an_error_reading():
    with socket.socket() as rude:
        rude.bind(("127.0.0.1", 0))
        rude.listen(8)

        def answer() -> None:
            conn, _ = rude.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

        t = threading.Thread(target=answer, daemon=True)
        t.start()
        r = read(f"http://127.0.0.1:{rude.getsockname()[1]}", "q", "up", timeout=TIMEOUT)
        t.join(5)
    assert r.error.startswith("unreachable: not an HTTP answer"), r.error


def test_a_url_without_a_scheme_is_an_error_reading():
    r = read("prometheus:9090", "q", "up", timeout=TIMEOUT)
    assert r.error == "unreachable: unknown url type: prometheus", r.error
    r = read("http://[::1", "q", "up", timeout=TIMEOUT)
    assert r.error.startswith("bad URL 'http://[::1'"), r.error


def test_nothing_listening_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    r = read(f"http://127.0.0.1:{port}", "q", "up", timeout=TIMEOUT)
    assert r.error.startswith("unreachable:"), r.error


# --------------------------------------------------------------------------- the planner

SCALING = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: chat}
spec:
  pool: a100
  targets:
    - {namespace: team-b, name: chat, minReplicas: 1, maxReplicas: 8}
  scaleUp: {queueLengthPerReplica: 10, pendingTime: 30s, step: 2, cooldown: 2m}
  scaleDown: {queueLengthPerReplica: 1, step: 1, cooldown: 10m}
  signals: {source: prometheus}
"""


def chat(replicas: int) -> InferenceService:
    return InferenceService(
        namespace="team-b",
        name="chat",
        replicas=replicas,
        priority_class="serving",
        replica_request=Request(shared_slices=1),
        pool="a100",
        last_scale_at=NOW.replace(hour=0),
    )


def nodes():
    cards = [gpu(i, shared=4) for i in range(8)]
    return [node("a100-1", "a100", A100, cards), node("a100-2", "a100", A100)]


def test_the_planner_scales_up_from_real_readings(prometheus, signals_exporter):
    """A long queue of vLLM's gauge across the target's pods (and a histogram with no request
    finished: the default wait query gives 0) -> a Scale whose reason and `signals` carry the
    rendered queries and the values Prometheus returned."""
    for i, waiting in enumerate((30, 20)):
        pod = {"namespace": "team-b", "pod": f"chat-7d9f-{i}", "model_name": "m", "engine": "0"}
        signals_exporter.set(VLLM, pod, waiting)
        for le in ("1.0", "+Inf"):
            signals_exporter.set("vllm:request_queue_time_seconds_bucket", {**pod, "le": le}, 0)
        signals_exporter.set("vllm:request_queue_time_seconds_count", pod, 0)
    signals_exporter.set(VLLM, {"namespace": "team-c", "pod": "chat-1"}, 500)  # not ours
    wait_value(prometheus, f"sum({VLLM})", "550")
    prometheus.wait_for(  # rate() needs two samples of the counter
        'count_over_time(vllm:request_queue_time_seconds_count{namespace="team-b"}[1m])',
        lambda r: r and all(float(x["value"][1]) >= 2 for x in r),
    )
    text = desired_text(extra=SCALING)
    d = load([SourceFile("d.yaml", text)])
    observed = with_signals(
        d,
        snapshot(NOW, nodes(), [], services=[chat(2)], **_objects(text)),
        prometheus.url,
        timeout=TIMEOUT,
    )
    assert {r.id: (r.error, [s.value for s in r.samples]) for r in observed.signals} == {
        "scaling/chat/Deployment/team-b/chat/queueLength": ("", [50.0]),
        "scaling/chat/Deployment/team-b/chat/waitTime": ("", [0.0]),
    }
    p = plan(d, observed)
    (scale,) = [a for a in p.actions if a.kind == "scale"]
    assert (scale.from_replicas, scale.to_replicas) == (2, 4)
    queue_q = 'sum(vllm:num_requests_waiting{namespace="team-b",pod=~"chat-.*"})'
    assert f"queueLength: {queue_q} = 50" in scale.reason, scale.reason
    assert "queue 25/replica > 10" in scale.reason
    assert [(s.name, s.query, s.value) for s in scale.signals][0] == ("queueLength", queue_q, 50.0)
    assert not p.findings


def test_an_emptied_exporter_is_a_finding_and_no_scale_down(prometheus, signals_exporter):
    """Calm readings would scale 4 -> 3; once the series are gone (the exporter stopped
    exporting them and Prometheus marked them stale) the reading is empty: a finding, and 4
    replicas stay."""
    pod = {"namespace": "team-b", "pod": "chat-7d9f-0"}
    signals_exporter.set(VLLM, pod, 0)
    wait_value(prometheus, f'sum({VLLM}{{namespace="team-b"}})', "0")
    wait_value(prometheus, f'count({VLLM}{{namespace="team-b"}})', "1")
    text = desired_text(extra=SCALING.replace("pendingTime: 30s, ", ""))
    d = load([SourceFile("d.yaml", text)])
    base = snapshot(NOW, nodes(), [], services=[chat(4)], **_objects(text))
    calm = plan(d, with_signals(d, base, prometheus.url, timeout=TIMEOUT))
    assert [(a.from_replicas, a.to_replicas) for a in calm.actions if a.kind == "scale"] == [(4, 3)]
    signals_exporter.clear()
    prometheus.wait_for(f'{VLLM}{{namespace="team-b"}}', lambda r: r == [])
    p = plan(d, with_signals(d, base, prometheus.url, timeout=TIMEOUT))
    assert [a for a in p.actions if a.kind == "scale"] == []
    (f,) = p.findings
    assert (f.code, f.subject) == ("signal-unavailable", "team-b/chat")
    assert "empty result" in f.message and "vllm:num_requests_waiting" in f.message


AGENT_IDLE = "idleReclaim: {utilizationBelow: 5, idleFor: 1h, excludeClasses: [training-high]}"
DCGM_IDLE = "idleReclaim: {utilizationBelow: 5, idleFor: 1h, utilization: {source: prometheus}}"


def test_dcgm_utilization_drives_idle_reclaim(prometheus, signals_exporter):
    """The DCGM exporter's gauge (its labels) for the two cards a job holds: both at 0 over the
    window -> reclaimed, the query and value in the reason (the agent's own view says busy and
    is not read); one card busy within the window -> not; a job on cards the exporter has no
    series for -> a finding, not reclaimed."""
    text = desired_text()
    assert AGENT_IDLE in text
    text = text.replace(AGENT_IDLE, DCGM_IDLE)
    d = load([SourceFile("d.yaml", text)])
    cards = [gpu(i, util=90.0) for i in range(8)]
    cards = [c.model_copy(update={"uuid": f"GPU-a-{c.index}"}) for c in cards]
    started = NOW.replace(hour=0)

    def job(name: str, gpus: list[int]):
        return training("team-b", name, "a100-1", gpus, cls="training-low", started=started)

    def state(*work):
        return snapshot(NOW, [node("a100-1", "a100", A100, cards)], list(work), **_objects(text))

    base = state(job("forgotten", [0, 1]))
    (q,) = signal_queries(d, base)
    assert q.query == "max_over_time(DCGM_FI_DEV_GPU_UTIL[3600s])"

    def dcgm(i: int, value: float) -> None:
        labels = {
            "gpu": str(i),
            "UUID": f"GPU-a-{i}",
            "Hostname": "a100-1",
            "device": f"nvidia{i}",
            "modelName": "NVIDIA A100-SXM4-80GB",
            "pci_bus_id": f"00000000:0{i}:00.0",
        }
        signals_exporter.set(DCGM, labels, value)

    dcgm(0, 0)
    dcgm(1, 0)
    wait_value(prometheus, f"count({DCGM})", "2")
    p = plan(d, with_signals(d, base, prometheus.url, timeout=TIMEOUT))
    (reclaim,) = [a for a in p.actions if a.kind == "reclaim"]
    assert reclaim.target == "team-b/forgotten"
    assert f"[utilization: {q.query} = 0]" in reclaim.reason, reclaim.reason

    dcgm(1, 40)  # busy within the window: max_over_time sees it
    wait_value(prometheus, f'max_over_time({DCGM}{{gpu="1"}}[1h])', "40")
    p = plan(d, with_signals(d, base, prometheus.url, timeout=TIMEOUT))
    assert [a for a in p.actions if a.kind == "reclaim"] == []

    other = state(job("elsewhere", [2, 3]))  # cards 2 and 3 have no series in Prometheus
    p = plan(d, with_signals(d, other, prometheus.url, timeout=TIMEOUT))
    assert [a for a in p.actions if a.kind == "reclaim"] == []
    assert {(f.code, f.subject) for f in p.findings} == {("signal-unavailable", "team-b/elsewhere")}
    (f,) = p.findings
    assert "no utilization sample for a100-1 GPU 2" in f.message


def test_the_default_wait_query_is_the_p99_of_vllm_queue_time(prometheus, signals_exporter):
    """The default waitTime over vLLM's histogram: 0 while no request finished in the window,
    then the p99 once requests finished (10 requests, each queued between 1 s and 10 s: the
    linear interpolation in that bucket puts the p99 at 1 + 9 * 0.99)."""

    q = render_query(DEFAULT_WAIT_TIME_QUERY, {"namespace": "team-q", "name": "llm"})
    pod = {"namespace": "team-q", "pod": "llm-5c6d-0", "model_name": "m", "engine": "0"}

    def histogram(finished: int) -> None:
        for le, n in (("1.0", 0), ("10.0", finished), ("+Inf", finished)):
            signals_exporter.set("vllm:request_queue_time_seconds_bucket", {**pod, "le": le}, n)
        signals_exporter.set("vllm:request_queue_time_seconds_count", pod, finished)

    histogram(0)
    count = 'count_over_time(vllm:request_queue_time_seconds_count{namespace="team-q"}[1m])'
    prometheus.wait_for(count, lambda r: r and float(r[0]["value"][1]) >= 2)
    idle = read(prometheus.url, "q", q, timeout=TIMEOUT)
    assert [s.value for s in idle.samples] == [0.0], idle
    histogram(10)
    prometheus.wait_for(
        'increase(vllm:request_queue_time_seconds_count{namespace="team-q"}[1m])',
        lambda r: r and float(r[0]["value"][1]) > 0,
    )
    busy = read(prometheus.url, "q", q, timeout=TIMEOUT)
    assert busy.error == "" and len(busy.samples) == 1, busy
    assert busy.samples[0].value == pytest.approx(1 + 9 * 0.99)
