"""Signals from Prometheus in the planner: the queries the policies need, and decisions over
readings. A scale target reads its queue and wait from readings in the observed state; a failed,
empty, NaN or missing reading is a finding and never a scale-down; a Scale made from readings
carries each query and value in its reason and in `Scale.signals`. Idle reclaim with the DCGM
exporter's utilization: a card is idle only when its sample exists and is under the threshold."""

from __future__ import annotations

import pytest

from reconciler.observe.model import SignalReading, SignalSample
from reconciler.plan.render import RENDERERS
from reconciler.plan.signals import (
    render_query,
    signal_queries,
    utilization_query,
)
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState
from tests.plan.scenarios import _objects
from tests.plan.support import (
    FORGOTTEN,
    IDLE,
    QUEUE_ID,
    QUEUE_Q,
    SHARED_CARD,
    WAIT_ID,
    WQ,
    desired,
    evicted,
    idle_gpus,
    maint,
    ok,
    prom_scaling,
    run,
    scaling,
    svc,
    two_nodes,
    wait_query,
)


def failed(qid: str, query: str, error: str) -> SignalReading:
    return SignalReading(id=qid, query=query, error=error)


def plan_with(readings, replicas=4, text=None, queue=None, last=60):
    text = text or desired(extra=prom_scaling())
    return run(
        text,
        two_nodes(SHARED_CARD),
        [],
        services=[svc(replicas, queue=queue, last=last)],
        signals=readings,
    )


# --------------------------------------------------------------------------- the queries


def test_the_queries_needed_this_cycle():
    text = desired(
        maint(idle="{utilizationBelow: 5, idleFor: 1h, utilization: {source: prometheus}}"),
        extra=prom_scaling(),
    )
    d = load([SourceFile("d.yaml", text)])
    from reconciler.observe.builders import snapshot
    from tests.plan.scenarios import NOW

    observed = snapshot(NOW, two_nodes(), [], services=[svc(2)], **_objects(text))
    qs = {q.id: q.query for q in signal_queries(d, observed)}
    assert qs == {
        QUEUE_ID: QUEUE_Q,
        WAIT_ID: wait_query(prom_scaling()),  # the policy sets scaleUp.pendingTime
        "utilization/default": "max_over_time(DCGM_FI_DEV_GPU_UTIL[3600s])",
    }
    assert "$" not in "".join(qs.values())
    # a target that was not observed is not queried; with source annotations nothing is
    assert [q.id for q in signal_queries(d, observed.model_copy(update={"services": []}))] == [
        "utilization/default"
    ]
    plain = load([SourceFile("d.yaml", desired(extra=scaling()))])
    assert signal_queries(plain, observed) == []


def test_render_replaces_only_placeholders():
    t = 'label_replace(x{namespace="$namespace",pod=~"$name-.*"}, "a", "$1", "b", "(.*)")'
    assert render_query(t, {"namespace": "ns", "name": "web"}) == (
        'label_replace(x{namespace="ns",pod=~"web-.*"}, "a", "$1", "b", "(.*)")'
    )


# --------------------------------------------------------------------------- scaling table

SCALING = [
    # (readings, replicas, (from, to) or None, findings (code, subject), reason fragments)
    pytest.param(
        [ok(QUEUE_ID, QUEUE_Q, 40, 20), ok(WAIT_ID, WQ, 1.0)],
        2,
        (2, 4),
        set(),
        ["queue 30/replica > 10", f"queueLength: {QUEUE_Q} = 60"],
        id="hot-queue-scales-up-with-query-and-value",
    ),
    pytest.param(
        [ok(QUEUE_ID, QUEUE_Q, 0), ok(WAIT_ID, WQ, 45.0)],
        2,
        (2, 4),
        set(),
        ["p99 wait 45s > 30s", f"waitTime: {WQ} = 45"],
        id="long-wait-scales-up",
    ),
    pytest.param(
        [ok(QUEUE_ID, QUEUE_Q, 0), ok(WAIT_ID, WQ, 0)],
        4,
        (4, 3),
        set(),
        ["queue 0/replica < 1", f"queueLength: {QUEUE_Q} = 0"],
        id="calm-scales-down-with-query-and-value",
    ),
    pytest.param(
        [failed(QUEUE_ID, QUEUE_Q, "empty result: no series matched"), ok(WAIT_ID, WQ, 0)],
        4,
        None,
        {("signal-unavailable", "team-b/chat")},
        [],
        id="empty-queue-no-scale-down",
    ),
    pytest.param(
        [failed(QUEUE_ID, QUEUE_Q, "non-finite value: NaN for {}"), ok(WAIT_ID, WQ, 0)],
        4,
        None,
        {("signal-unavailable", "team-b/chat")},
        [],
        id="nan-queue-no-scale-down",
    ),
    pytest.param(
        [ok(QUEUE_ID, QUEUE_Q, 0), failed(WAIT_ID, WQ, "timeout: no answer within 5s")],
        4,
        None,
        {("signal-unavailable", "team-b/chat")},
        [],
        id="wait-timeout-no-scale-down-though-queue-is-calm",
    ),
    pytest.param(
        [ok(QUEUE_ID, QUEUE_Q, 60), failed(WAIT_ID, WQ, "Prometheus error (bad_data, HTTP 400)")],
        2,
        (2, 4),
        {("signal-unavailable", "team-b/chat")},
        [f"queueLength: {QUEUE_Q} = 60"],
        id="wait-failed-scale-up-from-the-queue",
    ),
    pytest.param(
        [failed(QUEUE_ID, QUEUE_Q, "unreachable: refused"), ok(WAIT_ID, WQ, 50)],
        2,
        (2, 4),
        {("signal-unavailable", "team-b/chat")},
        [f"waitTime: {WQ} = 50"],
        id="queue-failed-scale-up-from-the-wait",
    ),
    pytest.param(
        [],
        4,
        None,
        {("signal-unavailable", "team-b/chat")},
        [],
        id="no-reading-at-all-no-scale-down",
    ),
    pytest.param(
        [ok(QUEUE_ID, "sum(other)", 0), ok(WAIT_ID, WQ, 0)],
        4,
        None,
        {("signal-unavailable", "team-b/chat")},
        [],
        id="reading-of-another-query-text-is-no-reading",
    ),
    pytest.param(
        [ok(QUEUE_ID, QUEUE_Q, -3), ok(WAIT_ID, WQ, 0)],
        4,
        None,
        {("signal-unavailable", "team-b/chat")},
        [],
        id="negative-queue-no-scale-down",
    ),
]


@pytest.mark.parametrize(("readings", "replicas", "scale", "findings", "fragments"), SCALING)
def test_scaling_over_readings(readings, replicas, scale, findings, fragments):
    # the annotation says 0: with source prometheus it is never read
    p = plan_with(readings, replicas=replicas, queue=0)
    scales = [a for a in p.actions if a.kind == "scale"]
    assert [(a.from_replicas, a.to_replicas) for a in scales] == ([scale] if scale else [])
    assert {(f.code, f.subject) for f in p.findings} == findings
    for f in p.findings:
        assert "ScalingPolicy/chat" in f.message and "no scale-down" in f.message
    if scale:
        (a,) = scales
        for fragment in fragments:
            assert fragment in a.reason, a.reason
        used = {s.name: (s.query, s.value) for s in a.signals}
        for r in readings:
            if r.ok and r.query in a.reason:
                name = r.id.rsplit("/", 1)[1]
                total = sum(s.value for s in r.samples)
                assert used[name] == (
                    r.query,
                    total if name == "queueLength" else max(s.value for s in r.samples),
                )


def test_failed_reading_finding_names_policy_target_query_and_error():
    p = plan_with(
        [
            failed(QUEUE_ID, QUEUE_Q, "timeout: no answer from Prometheus within 5s"),
            ok(WAIT_ID, WQ, 0),
        ]
    )
    (f,) = p.findings
    assert f.severity == "warning" and f.subject == "team-b/chat"
    assert QUEUE_Q in f.message and "timeout: no answer" in f.message
    assert "queueLength" in f.message


def test_the_plan_output_shows_query_and_value_in_text_and_json():
    p = plan_with([ok(QUEUE_ID, QUEUE_Q, 60), ok(WAIT_ID, WQ, 0)], replicas=2)
    text = RENDERERS["text"](p)
    assert QUEUE_Q in text and "= 60" in text
    import json

    doc = json.loads(RENDERERS["json"](p))
    (scale,) = [a for a in doc["actions"] if a["kind"] == "scale"]
    assert {"name": "queueLength", "query": QUEUE_Q, "value": 60.0} in scale["signals"]


def test_annotations_source_is_unchanged_and_reads_no_readings():
    text = desired(extra=scaling())
    p = plan_with([ok(QUEUE_ID, QUEUE_Q, 0)], replicas=2, text=text, queue=60)
    (a,) = [a for a in p.actions if a.kind == "scale"]
    assert (a.from_replicas, a.to_replicas) == (2, 4) and a.signals == ()
    assert "vllm" not in a.reason and not p.findings


# --------------------------------------------------------------------------- idle reclaim

PROM_IDLE = (
    "{utilizationBelow: 5, idleFor: 1h, excludeClasses: [training-high], "
    "utilization: {source: prometheus}}"
)
UQ = "max_over_time(DCGM_FI_DEV_GPU_UTIL[3600s])"


def dcgm(node: str, index: int, value: float, uuid: bool = False) -> SignalSample:
    labels = {"gpu": str(index), "Hostname": node, "modelName": "NVIDIA A100-SXM4-80GB"}
    if uuid:
        labels["UUID"] = f"GPU-{index:08x}"
    return SignalSample(labels=labels, value=value)


IDLE_ROWS = [
    pytest.param(
        [
            SignalReading(
                id="utilization/default",
                query=UQ,
                samples=[dcgm("a100-1", 0, 0), dcgm("a100-1", 1, 2)],
            )
        ],
        evicted("reclaim", "team-b/forgotten"),
        set(),
        id="both-cards-under-threshold-reclaimed",
    ),
    pytest.param(
        [
            SignalReading(
                id="utilization/default",
                query=UQ,
                samples=[dcgm("a100-1", 0, 0, uuid=True), dcgm("a100-1", 1, 1, uuid=True)],
            )
        ],
        evicted("reclaim", "team-b/forgotten"),
        set(),
        id="matched-by-uuid",
    ),
    pytest.param(
        [
            SignalReading(
                id="utilization/default",
                query=UQ,
                samples=[dcgm("a100-1", 0, 0), dcgm("a100-1", 1, 5)],
            )
        ],
        set(),
        set(),
        id="one-card-at-threshold-not-idle",
    ),
    pytest.param(
        [
            SignalReading(
                id="utilization/default",
                query=UQ,
                samples=[dcgm("a100-1", 0, 0), dcgm("a100-2", 1, 0)],
            )
        ],
        set(),
        {("signal-unavailable", "team-b/forgotten")},
        id="a-card-without-sample-not-reclaimed",
    ),
    pytest.param(
        [
            SignalReading(
                id="utilization/default", query=UQ, error="empty result: no series matched"
            )
        ],
        set(),
        {("signal-unavailable", "MaintenancePolicy/default")},
        id="empty-reading-nothing-reclaimed",
    ),
    pytest.param(
        [],
        set(),
        {("signal-unavailable", "MaintenancePolicy/default")},
        id="no-reading-nothing-reclaimed",
    ),
]


@pytest.mark.parametrize(("readings", "actions", "findings"), IDLE_ROWS)
def test_idle_reclaim_from_dcgm_readings(readings, actions, findings):
    # the agent says busy (util 90, never idle): with source prometheus only the readings count
    gpus = idle_gpus(util=90.0, idle=None)
    p = run(desired(maint(idle=PROM_IDLE)), two_nodes(gpus), [FORGOTTEN], signals=readings)
    assert {a.id for a in p.actions if a.kind in ("reclaim", "checkpoint")} == actions
    assert {(f.code, f.subject) for f in p.findings} == findings
    for a in p.actions:
        if a.kind == "reclaim":
            assert f"[utilization: {UQ} = " in a.reason, a.reason


def test_agent_source_ignores_readings():
    gpus = idle_gpus()
    reading = SignalReading(id="utilization/default", query=UQ, samples=[dcgm("a100-1", 0, 99)])
    p = run(desired(maint(idle=IDLE)), two_nodes(gpus), [FORGOTTEN], signals=[reading])
    assert "reclaim:team-b/forgotten" in {a.id for a in p.actions}


def test_utilization_window_is_idle_for_in_seconds():
    d = load([SourceFile("d.yaml", desired(maint(idle=PROM_IDLE.replace("1h", "1h30m"))))])
    q = utilization_query("default", d.maintenance["default"])
    assert q is not None and q.query == "max_over_time(DCGM_FI_DEV_GPU_UTIL[5400s])"


# --------------------------------------------------------------------------- policy errors

BAD = [
    (
        prom_scaling("{source: prometheus, queueLength: 'sum(x{ns=\"$namespce\"})'}"),
        "spec.signals.queueLength",
        "unknown placeholder $namespce",
    ),
    (
        prom_scaling("{source: prometheus, waitTime: 'x[$window]'}"),
        "spec.signals.waitTime",
        "unknown placeholder $window",
    ),
    (
        prom_scaling("{queueLength: 'sum(x)'}"),
        "spec.signals",
        "queueLength is read only with source: prometheus",
    ),
    (prom_scaling("{source: promql}"), "spec.signals.source", "prometheus"),
    (
        prom_scaling("{source: prometheus, queueLength: ''}"),
        "spec.signals.queueLength",
        "at least 1",
    ),
]


@pytest.mark.parametrize(("text", "path", "fragment"), BAD)
def test_bad_signals_are_load_errors_with_file_line_and_field(text, path, fragment):
    full = desired(extra=text)
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("desired.yaml", full)])
    (p,) = info.value.problems
    assert (p.file, p.path) == ("desired.yaml", path), str(p)
    assert fragment in p.message, str(p)
    line = full.splitlines()[p.line - 1]
    assert "signals" in line, (p.line, line)


def test_bad_utilization_query_placeholder():
    text = desired(maint(idle="{utilization: {source: prometheus, query: 'x[$idle]'}}"))
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("desired.yaml", text)])
    (p,) = info.value.problems
    assert p.path == "spec.idleReclaim.utilization.query" and "$idle" in p.message
    assert "$window" in p.message
