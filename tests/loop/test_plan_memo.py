"""The controller plans through the memo of its last cycle (`Controller._plan`,
reconciler/plan/incremental.py): the same inputs reuse the plan; a change of leadership, a
relist of the watch cache, `--full-plan-every 1` or a moved clock plan afresh; each counted in
`gpupool_plans_total{mode}`."""

from __future__ import annotations

from datetime import timedelta
from types import SimpleNamespace

import pytest
from kubernetes import client

from reconciler.loop import metrics
from reconciler.loop.controller import Controller
from reconciler.loop.sources import DirectorySource
from reconciler.observe.builders import gpu, node, training
from reconciler.observe.model import ObservedState
from tests.plan.generators import NOW
from tests.plan.support import desired


def _count(mode: str) -> float:
    return metrics.REGISTRY.get_sample_value("gpupool_plans_total", {"mode": mode}) or 0.0


@pytest.fixture
def ctl(tmp_path):
    (tmp_path / "pools").mkdir()
    c = Controller(
        DirectorySource(tmp_path),
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")),
        namespace="gpupool-system",
        identity="t",
        full_plan_every=10,  # the default, 1, reuses no plan (its view memo is kept)
    )
    return c


def _state():
    from reconciler.policy.files import SourceFile
    from reconciler.policy.loader import load

    d = load([SourceFile("desired.yaml", desired())], revision="r1")
    obs = ObservedState(
        observed_at=NOW,
        nodes=[node("a100-1", "a100", "A100-SXM4-80GB", [gpu(i) for i in range(8)])],
        workloads=[training("team-a", "run", "a100-1", [0, 1])],
    )
    return d, obs


def test_same_inputs_reuse_the_plan_and_doubts_plan_afresh(ctl):
    d, obs = _state()
    full, reused = _count("full"), _count("reused")
    p1, _ = ctl._plan(d, obs, NOW, True)
    p2, _ = ctl._plan(d, obs, NOW, True)
    assert p2 is p1 and (_count("full"), _count("reused")) == (full + 1, reused + 1)
    ctl._plan(d, obs, NOW, False)  # leadership changed
    assert _count("full") == full + 2
    ctl.cache = SimpleNamespace(node_informer=SimpleNamespace(relists=1))
    ctl._plan(d, obs, NOW, False)  # the watch cache relisted
    assert _count("full") == full + 3
    ctl._plan(d, obs, NOW + timedelta(seconds=1), False)  # the clock moved
    assert _count("full") == full + 4
    ctl.full_plan_every = 1
    ctl._plan(d, obs, NOW + timedelta(seconds=1), False)
    assert _count("full") == full + 5 and _count("reused") == reused + 1


def test_every_cycle_afresh_still_keeps_the_view_memo(ctl):
    """`--full-plan-every 1` (the default) plans every cycle afresh, and each builds its
    working view from the view memo of the cycle before."""
    d, obs = _state()
    ctl.full_plan_every = 1
    ctl._plan(d, obs, NOW, True)
    first = ctl._plan_memo
    assert first is not None and first.view is not None and first.view.hits == 0
    ctl._plan(d, obs, NOW + timedelta(seconds=1), True)
    assert ctl._plan_memo.view.hits > 0 and ctl._plan_memo.view.misses == 0


def test_a_view_memo_that_finds_no_object_again_is_dropped(ctl):
    """With `--full-plan-every 1`, a snapshot whose every object is new each cycle (read no
    answer of the kept view) stops the controller keeping the memo: it would only cost memory."""
    d, obs = _state()
    ctl.full_plan_every = 1
    ctl._plan(d, obs, NOW, True)
    assert ctl._plan_memo is not None
    ctl._plan(d, obs.model_copy(deep=True), NOW + timedelta(seconds=1), True)
    assert ctl._plan_memo is None and ctl._view_serves is False
    ctl._plan(d, obs, NOW + timedelta(seconds=2), True)
    assert ctl._plan_memo is None
