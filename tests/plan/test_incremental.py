"""Incremental planning (reconciler/plan/incremental.py): over random event sequences the plan
it returns is byte-identical to the full plan of the same state, every step; and the dirty set
and the coupling of pools, unit by unit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reconciler.conventions import POOL_LABEL, PRODUCT_LABEL
from reconciler.observe.builders import PRODUCT, gpu, node, training
from reconciler.observe.model import Allocation, ObservedState, Workload
from reconciler.plan.incremental import (
    Dirty,
    coupled_pools,
    dirty,
    plan_incremental,
    reached,
)
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.state import DesiredState
from tests.plan.generators import NOW, cases

SEQUENCES = settings(
    derandomize=True,
    database=None,
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate),  # no shrinking: bounded time
)
KINDS = (
    "again",  # the same inputs: the memo serves
    "copy",  # an equal snapshot of new objects: the memo serves
    "time",
    "pod-added",
    "pod-bound",
    "pod-deleted",
    "node-added",
    "node-removed",
    "node-notready",
    "signal",
    "node-state",
)
EVENTS = st.lists(st.tuples(st.sampled_from(KINDS), st.integers(0, 10**6)), min_size=2, max_size=12)


def _bind(obs: ObservedState, i: int, now) -> ObservedState:
    """A pending whole-card pod bound to whole cards nobody holds, if some node has them."""
    pending = [w for w in obs.workloads if not w.node and w.request.gpus and not w.request.mig]
    if not pending:
        return obs
    w = pending[i % len(pending)]
    held = {(x.node, a.gpu) for x in obs.workloads if x.node for a in x.allocations}
    for n in obs.nodes:
        free = [g.index for g in n.gpus if g.mode == "whole" and (n.name, g.index) not in held]
        if len(free) >= w.request.gpus:
            bound = w.model_copy(
                update={
                    "node": n.name,
                    "phase": "Running",
                    "allocations": [Allocation(gpu=g) for g in free[: w.request.gpus]],
                    "started_at": now,
                }
            )
            return obs.model_copy(
                update={"workloads": [bound if x is w else x for x in obs.workloads]}
            )
    return obs


def apply_event(obs: ObservedState, now, kind: str, k: int):
    """The snapshot and time after one event; objects that did not change are shared."""
    nodes, work, svcs = obs.nodes, obs.workloads, obs.services
    if kind == "again":
        return obs, now
    if kind == "copy":
        return obs.model_copy(deep=True), now
    if kind == "time":
        return obs, now + timedelta(minutes=1 + k % 120)
    if kind == "pod-added":
        pool = nodes[k % len(nodes)].labels.get(POOL_LABEL) if nodes else None
        ns = ("team-a", "team-b", "team-c")[k % 3]
        pod = training(ns, f"new-{k}", None, 1 + k % 4, pool=pool, created=now)
        return obs.model_copy(update={"workloads": [*work, pod]}), now
    if kind == "pod-bound":
        return _bind(obs, k, now), now
    if kind == "pod-deleted" and work:
        gone = work[k % len(work)]
        return obs.model_copy(update={"workloads": [w for w in work if w is not gone]}), now
    if kind == "node-added" and nodes:
        new = nodes[k % len(nodes)].model_copy(update={"name": f"extra-{k}"})
        return obs.model_copy(update={"nodes": [*nodes, new]}), now
    if kind == "node-removed" and nodes:
        gone = nodes[k % len(nodes)].name
        return obs.model_copy(
            update={
                "nodes": [n for n in nodes if n.name != gone],
                "workloads": [w for w in work if w.node != gone],
            }
        ), now
    if kind == "node-notready" and nodes:
        n = nodes[k % len(nodes)]
        flipped = n.model_copy(update={"ready": not n.ready})
        return obs.model_copy(update={"nodes": [flipped if x is n else x for x in nodes]}), now
    if kind == "signal" and svcs:
        s = svcs[k % len(svcs)]
        hot = s.model_copy(update={"queue_length": float(k % 500), "pending_seconds_p99": k % 90})
        return obs.model_copy(update={"services": [hot if x is s else x for x in svcs]}), now
    if kind == "node-state" and nodes:
        n = nodes[k % len(nodes)]
        if n.gpus:
            g = n.gpus[k % len(n.gpus)]
            idle = now - timedelta(minutes=k % 300) if k % 2 else None
            g2 = g.model_copy(update={"utilization": float(k % 100), "idle_since": idle})
            n2 = n.model_copy(update={"gpus": [g2 if x is g else x for x in n.gpus]})
            return obs.model_copy(update={"nodes": [n2 if x is n else x for x in nodes]}), now
    return obs, now


@SEQUENCES
@given(case=cases(), events=EVENTS, every=st.sampled_from([10, 3, 1]))
def test_incremental_plan_is_the_full_plan(case, events, every):
    desired, obs, now = case.desired, case.observed, NOW
    out = plan_incremental(desired, obs, now, None, full_every=every)
    assert out.mode == "full" and out.why == "no previous plan"
    memo = out.memo
    for kind, k in events:
        obs, now = apply_event(obs, now, kind, k)
        out = plan_incremental(desired, obs, now, memo, full_every=every)
        full, facts = plan_with_facts(desired, obs, now)
        assert out.plan.model_dump_json() == full.model_dump_json(), (kind, out.mode, out.why)
        assert out.facts == facts
        if kind in ("again", "copy") and every > 1 and memo.since_full + 1 < every:
            assert out.mode == "reused", out.why
        if kind == "time" and k % 120 + 1 > 0 and every > 1 and memo.since_full + 1 < every:
            assert out.mode == "full" and out.why == "time moved"
        memo = out.memo


# --------------------------------------------------------------------------- units

TWO_POOLS = """
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {name: a100}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {matchLabels: {gpupool.io/pool: a100}}
  capacity: {nodes: 2, gpusPerNode: 2}
---
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {name: h100}
spec:
  gpuModel: H100-SXM5-80GB
  nodeSelector: {matchLabels: {gpupool.io/pool: h100}}
  capacity: {nodes: 2, gpusPerNode: 2}
"""


def _quota(team: str, *pools: str) -> str:
    entries = "".join(f"\n    - pool: {p}\n      whole: {{guaranteed: 1}}" for p in pools)
    return f"""
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {{name: {team}}}
spec:
  namespaces: [{team}]
  pools:{entries}
"""


BUDGET = """
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {name: priority}
spec:
  classes:
    - {name: training, value: 100}
  defaultClass: training
  preemption: {budgetPerHour: 3}
"""


def _desired(text: str, revision: str = "r1") -> DesiredState:
    return load([SourceFile("desired.yaml", text)], revision=revision)


def _snapshot(*work: Workload) -> ObservedState:
    return ObservedState(
        observed_at=NOW,
        nodes=[
            node("a-1", "a100", "A100-SXM4-80GB", [gpu(i) for i in range(2)]),
            node("h-1", "h100", "H100-SXM5-80GB", [gpu(i) for i in range(2)]),
        ],
        workloads=list(work),
    )


def test_pools_apart_without_a_shared_team_or_budget():
    d = _desired(TWO_POOLS + _quota("alpha", "a100") + _quota("beta", "h100"))
    assert coupled_pools(d, _snapshot()) == [frozenset({"a100"}), frozenset({"h100"})]


def test_a_team_quota_in_two_pools_couples_them():
    d = _desired(TWO_POOLS + _quota("alpha", "a100", "h100"))
    assert coupled_pools(d, _snapshot()) == [frozenset({"a100", "h100"})]


def test_a_team_running_in_two_pools_couples_them():
    d = _desired(TWO_POOLS + _quota("alpha", "a100"))
    w = training("alpha", "job", "h-1", [0])
    assert coupled_pools(d, _snapshot(w)) == [frozenset({"a100", "h100"})]


def test_the_hourly_budget_couples_every_pool():
    d = _desired(TWO_POOLS + BUDGET)
    assert coupled_pools(d, _snapshot()) == [frozenset({"a100", "h100"})]


def test_dirty_names_the_pool_of_what_changed():
    d = _desired(TWO_POOLS)
    before = _snapshot(training("alpha", "run", "a-1", [0]))
    pending = training("alpha", "new", None, 1, pool="h100")
    after = before.model_copy(update={"workloads": [*before.workloads, pending]})
    assert dirty(d, before, after) == Dirty(pools=frozenset({"h100"}))
    gone = before.model_copy(update={"workloads": []})
    assert dirty(d, before, gone) == Dirty(pools=frozenset({"a100"}))
    n = before.nodes[1]
    down = before.model_copy(
        update={"nodes": [before.nodes[0], n.model_copy(update={"ready": False})]}
    )
    assert dirty(d, before, down) == Dirty(pools=frozenset({"h100"}))
    assert dirty(d, before, before.model_copy(deep=True)).clean


def test_dirty_global_and_time():
    d = _desired(TWO_POOLS)
    before = _snapshot()
    later = before.model_copy(update={"recent_preemptions": [NOW]})
    assert dirty(d, before, later).reasons == ("recent preemptions changed",)
    assert dirty(d, before, before, NOW, NOW + timedelta(seconds=1)).time
    stray = before.model_copy(
        update={"workloads": [training("alpha", "lost", None, 1)]}
    )  # no pool, no node
    assert dirty(d, before, stray).reasons == ("workload alpha/lost (in no pool) changed",)
    moved = before.nodes[0].model_copy(
        update={"labels": {POOL_LABEL: "h100", PRODUCT_LABEL: PRODUCT["H100-SXM5-80GB"]}}
    )
    relabel = before.model_copy(update={"nodes": [moved, before.nodes[1]]})
    assert dirty(d, before, relabel).reasons[0].startswith("node a-1 moved from pool a100")


def test_reached_spreads_over_coupled_pools():
    groups = [frozenset({"a100", "h100"}), frozenset({"l40"})]
    every = ["a100", "h100", "l40"]
    assert reached(Dirty(pools=frozenset({"a100"})), groups, every) == {"a100", "h100"}
    assert reached(Dirty(pools=frozenset({"l40"})), groups, every) == {"l40"}
    assert reached(Dirty(time=True), groups, every) == set(every)
    assert reached(Dirty(reasons=("quotas changed",)), groups, every) == set(every)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("doubt", "relist"),
        ("revision", "desired state changed (revision r1 -> r2)"),
        ("every", "every cycle"),
        ("time", "time moved"),
        ("pod", "changed: pools h100"),
    ],
)
def test_why_a_plan_is_made_afresh(change, why):
    d = _desired(TWO_POOLS + _quota("alpha", "a100"))
    obs = _snapshot()
    first = plan_incremental(d, obs, NOW, None, full_every=1 if change == "every" else 10)
    now, doubt = NOW, ""
    if change == "doubt":
        doubt = "relist"
    elif change == "revision":
        d = _desired(TWO_POOLS + _quota("alpha", "a100", "h100"), revision="r2")
    elif change == "time":
        now = NOW + timedelta(seconds=5)
    elif change == "pod":
        pending = training("beta", "new", None, 1, pool="h100")
        obs = obs.model_copy(update={"workloads": [pending]})
    out = plan_incremental(
        d, obs, now, first.memo, full_every=1 if change == "every" else 10, doubt=doubt
    )
    assert (out.mode, out.why) == ("full", why)
    again = plan_incremental(d, obs, now, out.memo)
    assert again.mode == "reused" and again.plan is out.plan
