"""`gpupool plan` / `apply` with Prometheus signals: a snapshot carries its readings and the
plan replays them without any network; `--prometheus-url` reads fresh ones from a real
Prometheus instead; a saved plan is checked again against fresh readings (their values are
measurements, not a stale cluster, as long as the decision is the same); without any
Prometheus the policy gets its finding."""

from __future__ import annotations

import json

import pytest

from reconciler.cli import main
from reconciler.loop.signals import with_signals
from reconciler.observe.builders import gpu, node, snapshot
from reconciler.observe.model import InferenceService, Request, SignalReading, SignalSample
from reconciler.observe.prometheus import NO_URL
from reconciler.observe.snapshot import dump_snapshot, load_snapshot
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import A100, NOW, _objects, desired_text

QUERY = 'sum(vllm:num_requests_waiting{namespace="team-b",pod=~"chat-.*"})'
QID = "scaling/chat/Deployment/team-b/chat/queueLength"
SCALING = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: chat}
spec:
  pool: a100
  targets:
    - {namespace: team-b, name: chat, minReplicas: 1, maxReplicas: 8}
  scaleUp: {queueLengthPerReplica: 10, step: 2, cooldown: 2m}
  scaleDown: {queueLengthPerReplica: 1, step: 1, cooldown: 10m}
  signals: {source: prometheus}
"""
TEXT = desired_text(extra=SCALING)


def files(tmp_path, readings):
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "desired.yaml").write_text(TEXT)
    chat = InferenceService(
        namespace="team-b",
        name="chat",
        replicas=2,
        priority_class="serving",
        replica_request=Request(shared_slices=1),
        pool="a100",
        last_scale_at=NOW.replace(hour=0),
    )
    cards = [gpu(i, shared=4) for i in range(8)]
    state = snapshot(
        NOW,
        [node("a100-1", "a100", A100, cards), node("a100-2", "a100", A100)],
        [],
        services=[chat],
        signals=readings,
        **_objects(TEXT),
    )
    snap = tmp_path / "observed.yaml"
    snap.write_text(dump_snapshot(state, "yaml"))
    return str(tmp_path / "policies"), str(snap)


def scales(out: str) -> list[dict]:
    return [a for a in json.loads(out)["actions"] if a["kind"] == "scale"]


def test_a_snapshot_replays_its_readings(tmp_path, capsys):
    reading = SignalReading(
        id=QID, query=QUERY, samples=[SignalSample(labels={"pod": "chat-1"}, value=60)]
    )
    policies, snap = files(tmp_path, [reading])
    assert load_snapshot(snap).signals == [reading]  # written and read back as it was
    assert main(["plan", policies, "--observed", snap, "--format", "json"]) == 0
    (scale,) = scales(capsys.readouterr().out)
    assert (scale["from_replicas"], scale["to_replicas"]) == (2, 4)
    assert scale["signals"] == [{"name": "queueLength", "query": QUERY, "value": 60.0}]
    assert f"queueLength: {QUERY} = 60" in scale["reason"]
    assert main(["plan", policies, "--observed", snap]) == 0  # the text shows it too
    assert f"{QUERY} = 60" in capsys.readouterr().out


def test_prometheus_url_reads_fresh_values_and_apply_checks_them_again(
    tmp_path, capsys, prometheus, signals_exporter
):
    stale = SignalReading(id=QID, query=QUERY, samples=[SignalSample(value=0)])
    policies, snap = files(tmp_path, [stale])
    signals_exporter.set("vllm:num_requests_waiting", {"namespace": "team-b", "pod": "chat-x"}, 80)
    prometheus.wait_for(QUERY, lambda r: len(r) == 1 and r[0]["value"][1] == "80")
    url = ["--prometheus-url", prometheus.url, "--prometheus-timeout", "3s"]
    out = tmp_path / "plan.json"
    argv = ["plan", policies, "--observed", snap, "--format", "json", "--out", str(out), *url]
    assert main(argv) == 0
    (scale,) = scales(capsys.readouterr().out)
    assert scale["signals"] == [{"name": "queueLength", "query": QUERY, "value": 80.0}]
    # the queue moves (a measurement, not a changed cluster): same decision, still current
    signals_exporter.set("vllm:num_requests_waiting", {"namespace": "team-b", "pod": "chat-x"}, 81)
    prometheus.wait_for(QUERY, lambda r: len(r) == 1 and r[0]["value"][1] == "81")
    assert main(["apply", str(out), policies, "--observed", snap, *url]) == 0, capsys.readouterr()
    capsys.readouterr()
    # the snapshot's own reading (0: calm, a different decision) is refused
    assert main(["apply", str(out), policies, "--observed", snap]) == 1
    assert "not what gpupool plans" in capsys.readouterr().err


def test_a_bad_timeout_is_a_usage_error(tmp_path, capsys):
    policies, snap = files(tmp_path, [])
    with pytest.raises(SystemExit) as info:
        main(["plan", policies, "--observed", snap, "--prometheus-timeout", "soon"])
    assert info.value.code == 1  # a usage error: 2 is plan --detailed-exitcode's
    assert "--prometheus-timeout" in capsys.readouterr().err


def test_a_url_without_scheme_is_a_usage_error(tmp_path, capsys):
    policies, snap = files(tmp_path, [])
    with pytest.raises(SystemExit) as info:
        main(["plan", policies, "--observed", snap, "--prometheus-url", "prom:9090"])
    assert info.value.code == 1  # a usage error: 2 is plan --detailed-exitcode's
    assert "not an http:// or https:// URL" in capsys.readouterr().err


def test_no_prometheus_url_is_a_finding_and_no_scale_down():
    d = load([SourceFile("d.yaml", TEXT)])
    chat = InferenceService(
        namespace="team-b",
        name="chat",
        replicas=4,
        replica_request=Request(shared_slices=1),
        pool="a100",
        queue_length=0,  # calm by its annotation, which this policy does not read
    )
    observed = with_signals(
        d, snapshot(NOW, [], [], services=[chat], **_objects(TEXT)), None, timeout=1
    )
    assert [(r.id, r.error) for r in observed.signals] == [(QID, NO_URL)]
    p = plan(d, observed)
    assert [a for a in p.actions if a.kind == "scale"] == []
    (f,) = [f for f in p.findings if f.code == "signal-unavailable"]
    assert NO_URL in f.message and f.subject == "team-b/chat"
