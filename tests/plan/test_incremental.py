"""Incremental planning (reconciler/plan/incremental.py): over random event sequences the plan
it returns is byte-identical to the full plan of the same state, every step; and the dirty set
and the coupling of pools, unit by unit."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from reconciler.conventions import POOL_LABEL, PRODUCT_LABEL
from reconciler.observe.builders import PRODUCT, gpu, node, training
from reconciler.observe.model import Allocation, ObservedState, Workload
from reconciler.plan.cluster import build_cluster, node_pool_name, unknown_holdings
from reconciler.plan.consistency import canonical, holding_groups
from reconciler.plan.incremental import (
    POOLED_FIELDS,
    Dirty,
    coupled_pools,
    dirty,
    plan_incremental,
    reached,
)
from reconciler.plan.kept import Keeper
from reconciler.plan.partition import DEFAULT_BACKENDS
from reconciler.plan.planner import open_run, plan_with_facts, plan_with_view
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
    "node-cards",  # a node's cards change (a card's sharing): a new node object
    "alloc-moved",  # a workload's allocation changes in place: same key, a new object
    "equal-copies",  # some nodes, workloads and services become equal objects, not the same
    "readd",  # an object removed by an earlier step comes back, the very same object
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


def _node_cards(obs: ObservedState, k: int) -> ObservedState:
    """One node's plain cards shared (or made whole again), as the device plugin shares a
    node: every card not in MIG mode, one count. Its pods stay (the planner judges them)."""
    nodes = obs.nodes
    if not nodes:
        return obs
    n = nodes[k % len(nodes)]
    shared = any(g.shared_slices for g in n.gpus)
    gpus = [
        g if g.mig_enabled else g.model_copy(update={"shared_slices": None if shared else 4})
        for g in n.gpus
    ]
    n2 = n.model_copy(update={"gpus": gpus})
    return obs.model_copy(update={"nodes": [n2 if x is n else x for x in nodes]})


def _alloc_moved(obs: ObservedState, k: int) -> ObservedState:
    """A running whole-card workload's allocation moved to another index of its node (free or
    not: a drifted record is what the planner must judge), as a new object with its key."""
    running = [w for w in obs.workloads if w.node and w.allocations and w.request.gpus]
    if not running:
        return obs
    w = running[k % len(running)]
    node = next((n for n in obs.nodes if n.name == w.node), None)
    if node is None or not node.gpus:
        return obs
    first = w.allocations[0]
    other = node.gpus[k % len(node.gpus)].index
    moved = w.model_copy(update={"allocations": [Allocation(gpu=other), *w.allocations[1:]]})
    if first.gpu == other:
        moved = w.model_copy(update={"allocations": list(w.allocations)})
    return obs.model_copy(update={"workloads": [moved if x is w else x for x in obs.workloads]})


def _equal_copies(obs: ObservedState, k: int) -> ObservedState:
    """Every other node, workload and service (by `k`'s parity) an equal copy, not itself."""

    def copies(items: list) -> list:
        return [x.model_copy(deep=True) if (i + k) % 2 else x for i, x in enumerate(items)]

    return obs.model_copy(
        update={
            "nodes": copies(obs.nodes),
            "workloads": copies(obs.workloads),
            "services": copies(obs.services),
        }
    )


def _readd(obs: ObservedState, gone: list, k: int) -> ObservedState:
    """An object an earlier step removed comes back as itself (a node with its pods, or a
    pod), when no object of its name is there now."""
    if not gone:
        return obs
    x = gone.pop(k % len(gone))
    if isinstance(x, tuple):  # a node and the workloads it had
        node, pods = x
        if any(n.name == node.name for n in obs.nodes):
            return obs
        keys = {w.key for w in obs.workloads}
        back = [w for w in pods if w.key not in keys]
        return obs.model_copy(
            update={"nodes": [*obs.nodes, node], "workloads": [*obs.workloads, *back]}
        )
    if any(w.key == x.key for w in obs.workloads) or (
        x.node and not any(n.name == x.node for n in obs.nodes)
    ):
        return obs
    return obs.model_copy(update={"workloads": [*obs.workloads, x]})


def apply_event(obs: ObservedState, now, kind: str, k: int, gone: list | None = None):
    """The snapshot and time after one event; objects that did not change are shared.
    `gone`: what was removed (a pod; a node and its pods), for `readd` to bring back."""
    nodes, work, svcs = obs.nodes, obs.workloads, obs.services
    gone = [] if gone is None else gone
    if kind == "node-cards":
        return _node_cards(obs, k), now
    if kind == "alloc-moved":
        return _alloc_moved(obs, k), now
    if kind == "equal-copies":
        return _equal_copies(obs, k), now
    if kind == "readd":
        return _readd(obs, gone, k), now
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
        pod = work[k % len(work)]
        gone.append(pod)
        return obs.model_copy(update={"workloads": [w for w in work if w is not pod]}), now
    if kind == "node-added" and nodes:
        new = nodes[k % len(nodes)].model_copy(update={"name": f"extra-{k}"})
        return obs.model_copy(update={"nodes": [*nodes, new]}), now
    if kind == "node-removed" and nodes:
        out = nodes[k % len(nodes)]
        gone.append((out, [w for w in work if w.node == out.name]))
        return obs.model_copy(
            update={
                "nodes": [n for n in nodes if n.name != out.name],
                "workloads": [w for w in work if w.node != out.name],
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
    """Every step plans through the memo of the step before (its plan, and the view memo its
    working view was built with: `reconciler.plan.kept`), and its plan's JSON and facts are
    those of a plan made without any memo."""
    desired, obs, now = case.desired, case.observed, NOW
    out = plan_incremental(desired, obs, now, None, full_every=every)
    assert out.mode == "full" and out.why == "no previous plan"
    assert out.memo.view is not None and out.memo.view.size() > 0
    memo = out.memo
    gone: list = []
    for kind, k in events:
        obs, now = apply_event(obs, now, kind, k, gone)
        out = plan_incremental(desired, obs, now, memo, full_every=every)
        full, facts = plan_with_facts(desired, obs, now)
        assert out.plan.model_dump_json() == full.model_dump_json(), (kind, out.mode, out.why)
        assert out.facts == facts
        if kind in ("again", "copy") and every > 1 and memo.since_full + 1 < every:
            assert out.mode == "reused", out.why
        if kind == "time" and k % 120 + 1 > 0 and every > 1 and memo.since_full + 1 < every:
            assert out.mode == "full" and out.why == "time moved"
        assert out.memo.view is not None  # kept whatever made the plan afresh
        memo = out.memo


def test_the_view_memo_serves_only_its_own_objects():
    """A plan through a view memo reads the answers of objects it holds (hits), computes the
    others, and leaves a memo of this snapshot's objects only."""
    desired = _desired(TWO_POOLS)
    a = training("team-a", "a", "a-1", 1, pool="a100", created=NOW)
    obs = _snapshot(a)
    first = plan_with_view(desired, obs, NOW, None)[2]
    assert first.size() > 0 and first.hits == 0
    p, _, again = plan_with_view(desired, obs, NOW, first)
    assert again.hits == first.misses and again.misses == 0
    assert p.model_dump_json() == plan_with_facts(desired, obs, NOW)[0].model_dump_json()
    b = training("team-a", "b", None, 1, pool="a100", created=NOW)
    moved = obs.model_copy(
        update={"nodes": [obs.nodes[0].model_copy(deep=True), obs.nodes[1]], "workloads": [a, b]}
    )
    p, _, kept = plan_with_view(desired, moved, NOW, first)
    assert kept.misses > 0 and kept.hits > 0  # the equal copy of a node is not what was asked
    assert p.model_dump_json() == plan_with_facts(desired, moved, NOW)[0].model_dump_json()
    held = {id(x[0][0] if isinstance(x[0], tuple) else x[0]) for x in _answers(kept)}
    assert id(obs.nodes[0]) not in held and id(moved.nodes[0]) in held


def test_another_desired_state_reads_no_view_memo():
    desired = _desired(TWO_POOLS)
    obs = _snapshot(training("team-a", "a", "a100-1", 1, pool="a100", created=NOW))
    out = plan_incremental(desired, obs, NOW, None)
    other = _desired(TWO_POOLS + _quota("team-a", "a100"), revision="r2")
    assert not plan_incremental(other, obs, NOW, out.memo).memo.view.read_kept
    # an equal desired state is served (a doubt makes it plan afresh rather than reuse)
    equal = plan_incremental(_desired(TWO_POOLS), obs, NOW, out.memo, doubt="a relist")
    assert equal.mode == "full" and equal.memo.view.read_kept and equal.memo.view.hits > 0


def _answers(memo) -> list:
    return [entry for step in memo.steps.values() for entry in step.values()]


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


def test_a_node_listed_twice_is_a_change_dirty_cannot_place():
    """A snapshot built without validation may list a name twice; by name, the second listing
    would hide, so it reaches every pool (found by the property test: a node added twice)."""
    desired = _desired(TWO_POOLS)
    obs = _snapshot()
    twice = obs.model_copy(update={"nodes": [*obs.nodes, obs.nodes[0].model_copy(deep=True)]})
    d = dirty(desired, obs, twice)
    assert "a node is listed twice" in d.reasons
    out = plan_incremental(desired, twice, NOW, plan_incremental(desired, obs, NOW, None).memo)
    assert out.mode == "full"
    assert out.plan.model_dump_json() == plan_with_facts(desired, twice, NOW)[0].model_dump_json()


def _dirty_by_key(desired, before, after, before_now=None, after_now=None) -> Dirty:
    """`dirty` as it was first written: every object of both snapshots keyed, every node's
    pool asked: the reference the faster `dirty` must equal."""

    def changed(old_list, new_list, key):
        old = {key(x): x for x in old_list}
        new = {key(x): x for x in new_list}
        if len(old) != len(old_list) or len(new) != len(new_list):
            return None
        out = set(old.keys() ^ new.keys())
        out.update(k for k, x in new.items() if k in old and old[k] is not x and old[k] != x)
        return out

    pools: set[str] = set()
    reasons: list[str] = []
    node_pool: dict = {}
    for snap in (before, after):
        for n in snap.nodes:
            p = node_pool_name(desired, n)
            if n.name in node_pool and node_pool[n.name] != p:
                reasons.append(f"node {n.name} moved from pool {node_pool[n.name]} to {p}")
            node_pool.setdefault(n.name, p)
    parts = (
        ("node", lambda s: s.nodes, lambda n: n.name, lambda n: node_pool.get(n.name)),
        (
            "workload",
            lambda s: s.workloads,
            lambda w: w.key,
            lambda w: node_pool.get(w.node) if w.node else w.pool,
        ),
        ("service", lambda s: s.services, lambda s: (s.kind, s.key), lambda s: s.pool),
    )
    for what, listed, key, pool in parts:
        objects = {key(x): x for x in [*listed(before), *listed(after)]}
        keys = changed(listed(before), listed(after), key)
        if keys is None:
            reasons.append(f"a {what} is listed twice")
        for k in sorted(keys or ()):
            p = pool(objects[k])
            if p is None:
                name = k[1] if what == "service" else k
                reasons.append(f"{what} {name} (in no pool) changed")
            else:
                pools.add(p)
    for name in type(after).model_fields:
        if name not in POOLED_FIELDS and getattr(before, name) != getattr(after, name):
            reasons.append(f"{name.replace('_', ' ')} changed")
    moved = (before_now or before.observed_at) != (after_now or after.observed_at)
    return Dirty(frozenset(pools), tuple(dict.fromkeys(reasons)), moved)


def _shuffled(obs: ObservedState, k: int) -> ObservedState:
    """The same objects listed in another order, or one of them listed twice."""
    nodes, work = list(obs.nodes), list(obs.workloads)
    if k % 4 == 0 and work:
        work.insert(k % (len(work) + 1), work[k % len(work)])  # a workload twice
    elif k % 4 == 1 and nodes:
        nodes.append(nodes[k % len(nodes)].model_copy(deep=True))  # a node twice
    else:
        random.Random(k).shuffle(work)
        random.Random(k + 1).shuffle(nodes)
    return obs.model_copy(update={"nodes": nodes, "workloads": work})


@SEQUENCES
@given(case=cases(), events=EVENTS, shuffle=st.lists(st.integers(0, 10**6), max_size=4))
def test_dirty_is_the_key_by_key_comparison(case, events, shuffle):
    """`dirty` compares only what lies between the objects two snapshots share at either end
    of their lists, and asks a node's pool only when it is needed: over random event
    sequences (and the same objects reordered, or listed twice) it says what keying every
    object says, reasons in the same order."""
    desired, obs, now = case.desired, case.observed, NOW
    gone: list = []
    for i, (kind, k) in enumerate(events):
        after, later = apply_event(obs, now, kind, k, gone)
        if i < len(shuffle):
            after = _shuffled(after, shuffle[i])
        got = dirty(desired, obs, after, now, later)
        assert got == _dirty_by_key(desired, obs, after, now, later), (kind, i)
        if "listed twice" not in " ".join(got.reasons):
            obs, now = after, later


@SEQUENCES
@given(case=cases(), events=EVENTS)
def test_the_census_kept_per_node_is_the_census_of_every_workload(case, events):
    """The view's census (what team usage, ResourceQuota use and FGD's target workloads are
    summed from) counted per node and kept in the view memo (`cluster.NodePart.census`) with
    the workloads on no node counted apart, equals a count of every workload of the view,
    at every step of a random event sequence planned through the memo before it."""
    desired, obs, now = case.desired, case.observed, NOW
    view = None
    gone: list = []
    for kind, k in [("again", 0), *events]:
        obs, now = apply_event(obs, now, kind, k, gone)
        keep = Keeper(view)
        run = open_run(desired, obs, now, DEFAULT_BACKENDS, keep)
        direct = build_cluster(desired, run.observed)
        assert run.cluster.census == direct.census, kind
        view = keep.memo()


@SEQUENCES
@given(case=cases(), events=EVENTS)
def test_the_lists_kept_whole_are_the_lists_made_afresh(case, events):
    """The steps kept over a whole list (the canonical nodes, workloads and services, the
    holding groups and the workloads holding nothing, the unknown holdings: made from the
    previous plan's when few objects changed, `consistency._respliced`, `_groups_spliced`,
    `cluster.unknown_holdings`) equal the same steps without a memo at every step of a random
    event sequence, each step kept from the one before."""
    obs, now = case.observed, NOW
    view = None
    gone: list = []
    for kind, k in [("again", 0), *events]:
        obs, now = apply_event(obs, now, kind, k, gone)
        keep = Keeper(view)
        kept = canonical(obs, keep)
        fresh_ = canonical(obs)
        assert kept.model_dump_json() == fresh_.model_dump_json(), kind
        rest_kept: list = []
        rest: list = []
        assert holding_groups(kept, rest_kept, keep) == holding_groups(fresh_, rest), kind
        assert [w.key for w in rest_kept] == [w.key for w in rest], kind
        assert unknown_holdings(kept, keep) == unknown_holdings(fresh_), kind
        view = keep.memo()
