"""Answers the planner computes once per run (reconciler/plan/run.py `Run.memo`, `Run.gang`;
evictions.py `refused`, `as_candidate`; quotas.py `quota_use_by_namespace`; run.py
`init_usage`) are the answers computed afresh, on generated clusters and after evictions."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from hypothesis import HealthCheck, given, settings

from reconciler.plan.cluster import card_equivalents
from reconciler.plan.evictions import as_candidate, evict, refused, stop_refusal
from reconciler.plan.partition import DEFAULT_BACKENDS
from reconciler.plan.planner import open_run
from reconciler.plan.quotas import quota_use, quota_use_by_namespace
from tests.plan.generators import NOW, cases, desired_of

SETTINGS = settings(
    max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


def _run(case):
    return open_run(desired_of(case.documents), case.observed, NOW, DEFAULT_BACKENDS)


@SETTINGS
@given(case=cases())
def test_refused_and_candidates_agree_with_the_long_way(case):
    run = _run(case)
    prios = [None, 0, 10**9] + [c.value for c in (run.desired.priority_class(None),) if c]
    work = list(run.cluster.workloads.values())
    for round_ in range(2):
        for w in work:
            for prio in prios:
                assert refused(run, w, prio) == bool(stop_refusal(run, w, prio, budget=False))
            pool = run.cluster.pool_of(w)
            assert as_candidate(run, w, pool) == as_candidate(run, w, pool)
            gang = run.gang(w)
            assert gang[0] is w and gang == run.gang(w)
        if round_ == 0:  # stop one stoppable gang: the answers follow
            first = next((w for w in work if w.placed and not stop_refusal(run, w)), None)
            if first is None:
                return
            evict(run, first, "preempt", "test", run.cluster.pool_of(first))


@SETTINGS
@given(case=cases())
def test_usage_is_the_running_total(case):
    run = _run(case)
    total: dict[str, Fraction] = {}
    for w in run.cluster.workloads.values():
        team = run.team(w.namespace)
        if w.placed and team is not None:
            pv = run.pool_view(run.cluster.pool_of(w))
            total[team] = total.get(team, Fraction(0)) + card_equivalents(w.request, pv)
    # equal as mappings: every reader looks a team up by name (caps.py, the controller's
    # gauges), so the order teams were first counted in is not an output (it follows the
    # census's order, not the workloads')
    assert run.team_usage == total
    naive: dict[str, Counter] = {}
    for w in case.observed.workloads:
        naive.setdefault(w.namespace, Counter()).update(quota_use(w.request))
    assert quota_use_by_namespace(case.observed.workloads) == naive
