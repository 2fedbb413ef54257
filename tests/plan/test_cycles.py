"""Judge plans over several cycles (issue 11): plan -> step -> plan -> ... on random clusters.

Each random (desired, observed) of `tests/plan/generators.py` runs CYCLES cycles of `plan`
then `reconciler.sim.effects.step` (the plan takes effect, a kube-scheduler stand-in binds
pending pods, the clock moves on by the case's period: 30 s, 1 min or 5 min). The properties:

(a) no cycle raises;
(b) no card is ever over-committed (a whole card with two holders, a MIG instance used twice
    or not on its card, a shared card past its slices, a pod gpupool admitted on a shared card
    whose slices have less GPU memory than it needs a slice), and no plan repartitions a card
    whose running holder it does not evict in the same plan (the only way the effect model
    could over-commit: it refuses such a repartition, so the plan is caught here instead);
(c) no action is undone: a card repartitioned X -> Y is not made X again in the next two
    cycles; a node uncordoned is not cordoned again for the same change in the next cycle; a
    moved workload is not moved back; a scale-up is not followed by a scale-down of the same
    service within its ScalingPolicy's scaleDown.cooldown;
(d) every Preempt / Reclaim / Move stops a workload whose class is preemptible (an unknown
    class, or none without a defaultClass: never), that has run minRuntime unless spot, and
    keeps the evictions of the rolling hour (`recent_preemptions`, where the effect model
    records every eviction) within budgetPerHour;
(d') a Preempt's victim has a strictly lower priority than the demand it names as its
    preemptor (a pending pod, whose priority without a class is 0 as kube-scheduler gives it,
    or a replica the same plan scales up); a Preempt naming none enforces a team's cap;
(e) the plans settle: on a stable input (the same case with cycles an hour apart, so no
    cooldown, minRuntime, idleFor or budget wait is pending after a cycle), no plan of cycles
    SETTLED + 1 .. CYCLES cordons, evicts, repartitions or scales: only actions that wait
    (a service scaled one way all along may go on climbing to its bound: that is progress);
(f) the plan is byte-identical (`to_json`) whatever order the snapshot lists things in
    (every list and mapping shuffled; checked on the states cycles 1, 2 and 4 plan from).

All properties share one test body, so hypothesis draws the same derandomized examples for
each, and every check of a case is computed once (`faults_of`; the harness and the checks
are in tests/plan/cycles_support.py). A property the planner does
not keep yet is a strict xfail (`cycles_property(..., xfail=why)`), run without shrinking;
`bench/cycles.py` runs the same checks on more clusters and prints a table.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from reconciler.conventions import CORDONED_FOR_ANN
from reconciler.observe.builders import gpu, mig_pod, node, shared_pod, snapshot, training
from reconciler.observe.model import (
    InferenceService,
    ObservedState,
    QuotaObject,
    Request,
    Taint,
    Workload,
)
from reconciler.plan.actions import (
    CardChange,
    CardLayout,
    CardSlices,
    Cordon,
    MigReconfigure,
    Preempt,
    Reclaim,
    Scale,
    SetSharing,
    Uncordon,
)
from reconciler.plan.model import Plan
from reconciler.plan.quotas import desired_priority_classes, desired_resource_quotas
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.state import DesiredState
from reconciler.sim.effects import apply_plan, schedule, step
from tests.plan.cycles_support import (
    SETTLE_PERIOD,
    Trace,
    faults_of,
    overcommits,
    permuted,
    short_slices,
    simulate,
    undone,
    unsettled,
)
from tests.plan.generators import cases

EXAMPLES = 500


def cycles_property(name: str, examples: int = EXAMPLES, xfail: str | None = None):
    """A hypothesis property: check `name` of CHECKS holds for random cases. All properties
    built here have the same source, so hypothesis draws the same derandomized examples for
    each, and `faults_of` simulates each case once. `xfail`: the reason the planner fails it
    today (a strict xfail, run without shrinking: shrinking ten cycles costs minutes)."""
    phases = tuple(Phase) if xfail is None else (Phase.explicit, Phase.generate)

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        phases=phases,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=cases())
    def test(case):
        faults, error = faults_of(case)
        if name == "crash/over-commit" and error is not None:
            raise error
        assert not faults[name], "\n".join(faults[name])

    if xfail is not None:
        mark = pytest.mark.xfail(strict=True, raises=AssertionError, reason=f"issue 11: {xfail}")
        test = mark(test)
    return test


# ----------------------------------------------------------------------------- properties
test_no_crash_and_no_overcommit = cycles_property("crash/over-commit")
test_no_action_is_undone = cycles_property("undone")
test_evictions_follow_the_rules = cycles_property("evictions")
test_preemptions_serve_higher_priority_demand = cycles_property("preempt-priority")
test_plans_settle = cycles_property("unsettled")
test_plans_ignore_list_order = cycles_property("order")


# ----------------------------------------------------------------------------- the effect model
A100 = "A100-SXM4-80GB"
T0 = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
POLICY = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {name: a100}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {matchLabels: {gpupool.io/pool: a100}}
  capacity: {nodes: 2, gpusPerNode: 8}
  inference:
    mig: {layouts: [{name: balanced, profiles: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}]}
    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {name: cluster}
spec:
  classes:
    - {name: high, value: 50000}
    - {name: low, value: 1000}
"""


def _desired() -> DesiredState:
    return load([SourceFile("desired.yaml", POLICY)])


def _plan(*actions) -> Plan:
    return Plan(observed_at=T0.isoformat(), actions=actions)


def _work(state: ObservedState) -> dict[str, Workload]:
    return {w.key: w for w in state.workloads}


def _ago(minutes: float) -> datetime:
    return T0 - timedelta(minutes=minutes)


def _ungated(w: Workload) -> Workload:
    """A pending pod kube-scheduler places itself (no gpupool gate): what `schedule` binds."""
    return w.model_copy(update={"admission": "scheduler"})


def test_preempted_pod_comes_back_pending_and_counts_in_the_budget():
    job = training("t", "job", "a100-1", [0, 1], cls="low", started=_ago(90))
    s = snapshot(T0, [node("a100-1", "a100", A100, count=2)], [job])
    evict = Preempt(id="preempt:t/job", target="t/job", reason="r", node="a100-1", gpus=(0, 1))
    after = apply_plan(_desired(), s, _plan(evict), now=T0)
    w = _work(after)["t/job"]
    assert (w.phase, w.node, w.allocations, w.started_at) == ("Pending", None, [], None)
    assert (w.created_at, w.pool, w.priority_class, w.request.gpus) == (T0, "a100", "low", 2)
    assert after.recent_preemptions == [T0]
    assert overcommits(after) == []
    # recreated in a gated namespace it is gated again: the scheduler leaves it alone
    assert w.admission == "gpupool"
    assert _work(schedule(_desired(), after, now=T0))["t/job"].phase == "Pending"
    # a pod kube-scheduler placed comes back ungated and is bound again, on the cards it left
    ungated = s.model_copy(update={"workloads": [_ungated(job)]})
    after = apply_plan(_desired(), ungated, _plan(evict), now=T0)
    again = _work(schedule(_desired(), after, now=T0))["t/job"]
    assert (again.phase, again.node, again.started_at) == ("Running", "a100-1", T0)


def test_schedule_binds_an_admitted_pod_only_to_its_node_and_never_a_gated_one():
    nodes = [node("a100-1", "a100", A100, count=8), node("a100-2", "a100", A100, count=4)]
    admitted = training("t", "in", None, 2, cls="high", pool="a100", created=_ago(1))
    admitted = admitted.model_copy(update={"admission": "admitted", "node": "a100-1"})
    gated = training("t", "gated", None, 2, cls="high", pool="a100", created=_ago(2))
    other = gated.model_copy(update={"name": "kueue", "admission": "other"})
    w = _work(schedule(_desired(), snapshot(T0, nodes, [admitted, gated, other]), now=T0))
    # the stand-in alone would pick the tightest node (a100-2); the affinity says a100-1
    assert (w["t/in"].phase, w["t/in"].node) == ("Running", "a100-1")
    assert w["t/gated"].phase == w["t/kueue"].phase == "Pending"


def test_an_eviction_of_a_workload_that_is_gone_is_skipped():
    s = snapshot(T0, [node("a100-1", "a100", A100, count=2)], [])
    evict = Reclaim(id="reclaim:t/job", target="t/job", reason="r", node="a100-1", gpus=(0,))
    assert apply_plan(_desired(), s, _plan(evict), now=T0) == s


@pytest.mark.parametrize(
    "change",
    [
        {"unschedulable": True},
        {"ready": False},
        {"taints": [Taint(key="maintenance", effect="NoExecute")]},
        {"taints": [Taint(key="dedicated", value="x", effect="NoSchedule")]},
        {"labels": {"gpupool.io/pool": "other"}},
    ],
    ids=["cordoned", "not-ready", "no-execute", "no-schedule", "other-pool"],
)
def test_schedule_never_binds_where_kube_scheduler_would_not(change):
    n = node("a100-1", "a100", A100, count=8)
    pending = _ungated(training("t", "job", None, 2, cls="high", pool="a100", created=_ago(1)))
    ok = schedule(_desired(), snapshot(T0, [n], [pending]), now=T0)
    assert _work(ok)["t/job"].phase == "Running"
    blocked = snapshot(T0, [n.model_copy(update=change)], [pending])
    assert _work(schedule(_desired(), blocked, now=T0))["t/job"].phase == "Pending"


def test_schedule_takes_priority_first_then_the_tightest_node():
    nodes = [node("a100-1", "a100", A100, count=8), node("a100-2", "a100", A100, count=4)]
    work = [
        _ungated(training("t", "big-low", None, 8, cls="low", pool="a100", created=_ago(30))),
        _ungated(training("t", "big-high", None, 8, cls="high", pool="a100", created=_ago(1))),
        _ungated(training("t", "small", None, 2, cls="low", pool="a100", created=_ago(5))),
    ]
    w = _work(schedule(_desired(), snapshot(T0, nodes, work), now=T0))
    assert (w["t/big-high"].phase, w["t/big-high"].node) == ("Running", "a100-1")
    assert w["t/big-low"].phase == "Pending"
    assert (w["t/small"].node, [a.gpu for a in w["t/small"].allocations]) == ("a100-2", [0, 1])


def test_schedule_uses_only_free_mig_instances_and_shared_slices():
    layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    cards = [gpu(0, mig=layout, model=A100), gpu(1, shared=4, model=A100)]
    n = node("a100-1", "a100", A100, cards)
    work = [
        mig_pod("t", "m-0", "a100-1", "1g.10gb", gpu_index=0, start=2, started=_ago(60)),
        shared_pod("t", "s-0", "a100-1", 3, gpu_index=1, started=_ago(60)),
        _ungated(mig_pod("t", "m-1", None, "1g.10gb", cls="high", pool="a100")),
        _ungated(mig_pod("t", "m-2", None, "1g.10gb", cls="high", pool="a100")),
        _ungated(shared_pod("t", "s-1", None, 2, cls="high", pool="a100")),
        _ungated(shared_pod("t", "s-2", None, 1, cls="high", pool="a100")),
    ]
    after = schedule(_desired(), snapshot(T0, [n], work), now=T0)
    w = _work(after)
    assert [(a.gpu, a.mig_start) for a in w["t/m-1"].allocations] == [(0, 3)]
    assert w["t/m-2"].phase == "Pending"  # both 1g instances are taken now
    assert w["t/s-1"].phase == "Pending" and w["t/s-2"].allocations[0].slices == 1
    assert overcommits(after) == []


def test_mig_reconfigure_gives_the_catalogs_placements_and_refuses_a_busy_card():
    desired = _desired()
    layout = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    n = node("a100-1", "a100", A100, count=2).model_copy(
        update={"unschedulable": True, "annotations": {CORDONED_FOR_ANN: "repartition"}}
    )
    mig = MigReconfigure(
        id="mig-reconfigure:a100-1",
        target="a100-1",
        reason="r",
        cards=(CardChange(gpu=1, before="whole", after="MIG[...]"),),
        layout=(CardLayout(gpu=0, profiles=None), CardLayout(gpu=1, profiles=layout)),
    )
    after = apply_plan(desired, snapshot(T0, [n], []), _plan(mig), now=T0)
    g = after.nodes[0].gpus[1]
    model = desired.catalog.model(A100)
    assert g.mig_enabled
    assert [(i.profile, i.start) for i in g.mig_instances] == desired.catalog.place(model, layout)
    assert after.nodes[0].gpus[0] == n.gpus[0]
    # a running pod on the card: mig-manager would break it, so nothing happens
    busy = snapshot(T0, [n], [training("t", "job", "a100-1", [1], started=_ago(60))])
    assert apply_plan(desired, busy, _plan(mig), now=T0).nodes == busy.nodes


def test_set_sharing_cordon_and_uncordon():
    desired = _desired()
    cards = [gpu(0, model=A100), gpu(1, model=A100), gpu(2, mig=BALANCED[1:-1].split(", "))]
    n = node("a100-1", "a100", A100, cards)
    share = SetSharing(
        id="set-sharing:a100-1",
        target="a100-1",
        reason="r",
        cards=(CardChange(gpu=0, before="whole", after="shared x4"),),
        shared_slices=(CardSlices(gpu=0, slices=4),),
        slices=4,
        plain_cards=2,
    )
    cordon = Cordon(id="cordon:a100-1", target="a100-1", reason="r")
    uncordon = Uncordon(id="uncordon:a100-1", target="a100-1", reason="r")
    # not cordoned: the handler refuses the repartition
    assert apply_plan(desired, snapshot(T0, [n]), _plan(share), now=T0).nodes == [n]
    after = apply_plan(desired, snapshot(T0, [n]), _plan(cordon, share, uncordon), now=T0)
    m = after.nodes[0]
    # the device plugin shares every card not in MIG mode, whatever the action names
    assert [g.shared_slices for g in m.gpus] == [4, 4, None] and m.gpus[2].mig_enabled
    assert not m.unschedulable and CORDONED_FOR_ANN not in m.annotations
    # back to no sharing: every plain card is whole again
    back = share.model_copy(update={"slices": None, "shared_slices": ()})
    again = apply_plan(desired, after, _plan(cordon, back, uncordon), now=T0)
    assert [g.shared_slices for g in again.nodes[0].gpus] == [None, None, None]
    # a node somebody else cordoned is left as it is by both
    sre = n.model_copy(update={"unschedulable": True})
    kept = apply_plan(desired, snapshot(T0, [sre]), _plan(cordon, uncordon), now=T0)
    assert kept.nodes[0].unschedulable and CORDONED_FOR_ANN not in kept.nodes[0].annotations


def test_a_card_leaving_mig_comes_back_as_its_node_shares():
    desired = _desired()
    cards = [gpu(0, shared=4, model=A100), gpu(1, mig=BALANCED[1:-1].split(", "), model=A100)]
    n = node("a100-1", "a100", A100, cards)
    off = MigReconfigure(
        id="mig-reconfigure:a100-1",
        target="a100-1",
        reason="r",
        cards=(CardChange(gpu=1, before="MIG", after="whole"),),  # what a plan might believe
        layout=(CardLayout(gpu=0, profiles=None), CardLayout(gpu=1, profiles=None)),
    )
    cordon = Cordon(id="cordon:a100-1", target="a100-1", reason="r")
    after = apply_plan(desired, snapshot(T0, [n]), _plan(cordon, off), now=T0)
    assert [g.shared_slices for g in after.nodes[0].gpus] == [4, 4]


def test_scale_adds_pending_replicas_and_removes_pending_ones_first():
    desired = _desired()
    n = node("a100-1", "a100", A100, [gpu(0, shared=4, model=A100)])
    svc = InferenceService(
        namespace="t",
        name="chat",
        replicas=2,
        replica_request=Request(shared_slices=1),
        priority_class="high",
        pool="a100",
    )
    pods = [
        shared_pod("t", f"chat-{i}", "a100-1", 1, started=_ago(60)).model_copy(
            update={"created_at": _ago(90 - i)}
        )
        for i in range(2)
    ]
    s = snapshot(T0, [n], pods, services=[svc])

    def scale(a: int, b: int) -> Scale:
        return Scale(
            id="scale:t/chat",
            target="t/chat",
            reason="r",
            workload_kind="Deployment",
            from_replicas=a,
            to_replicas=b,
            policy="p",
        )

    up = apply_plan(desired, s, _plan(scale(2, 4)), now=T0)
    assert (up.services[0].replicas, up.services[0].last_scale_at) == (4, T0)
    new = [w for w in up.workloads if w.phase == "Pending"]
    assert [(w.name, w.owner_name, w.pool, w.created_at) for w in new] == [
        ("chat-2", "chat", "a100", T0),
        ("chat-3", "chat", "a100", T0),
    ]
    down = apply_plan(desired, up, _plan(scale(4, 1)), now=T0)
    assert [w.name for w in down.workloads] == ["chat-0"]  # pending first, then the newest
    # replicas changed since the plan: skipped, as the handler does
    assert apply_plan(desired, s, _plan(scale(3, 4)), now=T0) == s


def test_step_advances_the_clock():
    s = snapshot(T0, [node("a100-1", "a100", A100, count=1)])
    after = step(_desired(), s, _plan(), now=T0, period=timedelta(minutes=1))
    assert after.observed_at == T0 + timedelta(minutes=1)


# ----------------------------------------------------------------------------- the checks can fail
def test_overcommit_check_sees_two_holders_of_one_card():
    n = node("a100-1", "a100", A100, count=1)
    a = training("t", "a", "a100-1", [0], started=_ago(60))
    b = training("t", "b", "a100-1", [0], started=_ago(60))
    assert overcommits(snapshot(T0, [n], [a])) == []
    assert overcommits(snapshot(T0, [n], [a, b])) == ["a100-1/gpu0 (whole): held by ['t/a', 't/b']"]


def test_short_slices_check_sees_an_admitted_pod_on_slices_too_small():
    # the policy's slice is 20Gi: x8 slices of an 80Gi card have 10Gi
    n = node("a100-1", "a100", A100, [gpu(0, shared=8, model=A100)])
    pod = shared_pod("t", "s", "a100-1", 1, started=_ago(5))
    admitted = pod.model_copy(update={"admission": "admitted"})
    assert short_slices(_desired(), snapshot(T0, [n], [pod])) == []  # not gpupool's
    assert short_slices(_desired(), snapshot(T0, [n], [admitted])) == [
        "t/s needs 20480 MiB for 1 slice(s) on a100-1/gpu0 shared x8 (81920 MiB)"
    ]
    small = admitted.model_copy(update={"request": Request(shared_slices=1, gpu_memory_mib=10240)})
    assert short_slices(_desired(), snapshot(T0, [n], [small])) == []


def test_undone_check_sees_a_card_changed_back():
    def sharing(k: int, before: str, after: str) -> Plan:
        return _plan(
            SetSharing(
                id="set-sharing:a100-1",
                target="a100-1",
                reason="r",
                cards=(CardChange(gpu=0, before=before, after=after),),
            )
        )

    s = snapshot(T0, [node("a100-1", "a100", A100, count=1)])
    trace = Trace(_desired(), [s] * 3, [sharing(0, "whole", "shared x4"), _plan()])
    assert undone(trace) == []
    trace.plans.append(sharing(2, "shared x4", "whole"))
    trace.states.append(s)
    assert undone(trace) == ["cycle 1: a100-1/gpu0 whole -> shared x4; cycle 3: back to whole"]


def test_permuted_snapshot_is_the_same_snapshot_in_another_order():
    layout = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    nodes = [node(f"a100-{i}", "a100", A100, [gpu(0, mig=layout), gpu(1)]) for i in range(3)]
    s = snapshot(T0, nodes, recent_preemptions=[_ago(i) for i in range(5)])
    p = permuted(s, random.Random(1))
    assert p != s
    assert sorted(p.recent_preemptions) == sorted(s.recent_preemptions)
    for m in p.nodes:
        n = next(n for n in s.nodes if n.name == m.name)
        assert sorted(m.gpus, key=lambda g: g.index)[1] == n.gpus[1]
        mine = next(g for g in m.gpus if g.index == 0).mig_instances
        assert sorted(mine, key=lambda i: i.start) == n.gpus[0].mig_instances


@settings(max_examples=25, deadline=None, derandomize=True)
@given(case=cases())
def test_generated_yaml_is_what_the_loader_reads(case):
    """The cases skip YAML parsing (`validated`); their text loads to the same documents."""
    loaded = load([SourceFile("desired.yaml", case.text)])
    assert [d.model for d in loaded.documents] == [d.model for d in case.desired.documents]


# ----------------------------------------------------------------------------- reproducers
# The planner failures the properties found, each at its smallest (all fixed; kept as tests).
ONE_POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: a100}}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: a100}}}}
  capacity: {{nodes: 1, gpusPerNode: 8}}
  inference: {{{inference}}}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {{name: cluster}}
spec:
{priority}"""
BALANCED = "[3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]"


def _run(text: str, nodes, work, period: timedelta = SETTLE_PERIOD, **kw) -> Trace:
    desired = load([SourceFile("desired.yaml", text)])
    objects = {
        "quotas": [
            QuotaObject(namespace=ns, name=n, hard=h, managed_by="gpupool")
            for (ns, n), h in desired_resource_quotas(desired).items()
        ],
        "priority_classes": [*desired_priority_classes(desired).values()],
    }
    return simulate(desired, snapshot(T0, nodes, work, **objects, **kw), period)


def _owned(w: Workload, owner: str) -> Workload:
    return w.model_copy(update={"owner_kind": "ReplicaSet", "owner_name": owner})


def test_cap_is_not_enforced_by_preempting_what_kube_schedules_again():
    text = ONE_POOL.format(
        inference=f"mig: {{layouts: [{{name: balanced, profiles: {BALANCED}}}]}}",
        priority="  classes: [{name: low, value: 1000}]\n  preemption: {budgetPerHour: 1}\n",
    )
    text += "---\napiVersion: gpupool.io/v1alpha1\nkind: Quota\nmetadata: {name: team-c}\n"
    text += "spec: {namespaces: [team-c], maxGPUs: 0}\n"
    nodes = [node("a100-1", "a100", A100, [gpu(0, mig=BALANCED[1:-1].split(", "), model=A100)])]
    pod = _owned(mig_pod("team-c", "web-0", None, "1g.10gb", cls="low", pool="a100"), "web")
    assert unsettled(_run(text, nodes, [pod])) == []


def test_a_pod_without_a_class_does_not_preempt_in_a_loop():
    text = ONE_POOL.format(
        inference="",
        priority="  defaultClass: high\n"
        "  classes: [{name: high, value: 50000}, {name: low, value: 1000}]\n"
        "  preemption: {rules: [{preemptor: high, victims: [low]}]}\n",
    )
    work = [
        training("team-a", "old", "a100-1", [0], cls="low", started=_ago(180)),
        training("team-b", "gang", None, 2, cls=None, pool="a100", created=_ago(5)),
    ]
    assert unsettled(_run(text, [node("a100-1", "a100", A100, count=2)], work)) == []


def test_reclaiming_a_guarantee_does_not_preempt_in_a_loop():
    text = ONE_POOL.format(
        inference="", priority="  classes: [{name: high, value: 50000}, {name: low, value: 1000}]\n"
    )
    for team, pools in (("team-a", "[{pool: a100, whole: {guaranteed: 2}}]"), ("team-b", "[]")):
        text += f"---\napiVersion: gpupool.io/v1alpha1\nkind: Quota\nmetadata: {{name: {team}}}\n"
        text += f"spec: {{namespaces: [{team}], pools: {pools}}}\n"
    work = [
        training("team-b", "big", "a100-1", [0, 1], cls="high", started=_ago(180)),
        training("team-a", "mine", None, 2, cls="low", pool="a100", created=_ago(5)),
    ]
    assert unsettled(_run(text, [node("a100-1", "a100", A100, count=2)], work)) == []


def test_scale_down_takes_its_pending_replicas_out_of_demand():
    text = ONE_POOL.format(
        inference="shared: {slicesPerGPU: 2, memoryPerSlice: 40Gi}",
        priority="  classes: [{name: serving, value: 30000}, {name: low, value: 1000}]\n",
    )
    text += """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: chat}
spec:
  pool: a100
  targets: [{namespace: team-b, name: chat, minReplicas: 0, maxReplicas: 1}]
  scaleUp: {queueLengthPerReplica: 5}
  scaleDown: {queueLengthPerReplica: 1}
"""
    svc = InferenceService(
        namespace="team-b",
        name="chat",
        replicas=3,
        priority_class="serving",
        replica_request=Request(shared_slices=2),
        pool="a100",
        queue_length=3,
    )
    work = [
        _owned(shared_pod("team-b", f"chat-{i}", None, 2, pool="a100"), "chat") for i in range(3)
    ]
    work.append(training("team-a", "gang", None, 2, cls="low", pool="a100", created=_ago(5)))
    nodes = [node("a100-1", "a100", A100, count=3)]
    trace = _run(text, nodes, work, period=timedelta(minutes=1), services=[svc])
    assert undone(trace) == []


def test_a_drifted_shared_card_is_not_duplicated():
    text = ONE_POOL.format(
        inference="shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}",
        priority="  classes: [{name: serving, value: 30000}, {name: low, value: 1000}]\n",
    )
    cards = [gpu(0, shared=2, model=A100), gpu(1, model=A100), gpu(2, model=A100)]
    work = [
        shared_pod("t", "web-0", "a100-1", 1, gpu_index=0, cls="serving", started=_ago(120)),
        _owned(shared_pod("t", "web-1", None, 1, cls="serving", pool="a100"), "web"),
        training("team-b", "pair", None, 2, cls="low", pool="a100", created=_ago(5)),
    ]
    trace = _run(text, [node("a100-1", "a100", A100, cards)], work, period=timedelta(minutes=1))
    assert undone(trace) == []


# ----------------------------------------------------------------------------- checkpoints
def test_a_checkpoint_is_recorded_only_for_a_workload_that_can_take_one():
    """The Checkpoint handler only asks (the `checkpoint-requested-at` annotation,
    apply/handlers/workloads.py `checkpoint`); the `last-checkpoint` the next snapshot reads
    is written by the workload itself, and only a checkpointable one answers. The planner asks every
    non-spot victim, checkpointable or not (`Checkpoint.checkpointable` says which)."""
    from reconciler.plan.actions import Checkpoint

    before = _ago(45)
    can = training("t", "can", "a100-1", [0], cls="low", started=_ago(90), checkpoint=before)
    cannot = training("t", "cannot", "a100-1", [1], cls="low", started=_ago(90), checkpoint=before)
    cannot = cannot.model_copy(update={"checkpointable": False})
    s = snapshot(T0, [node("a100-1", "a100", A100, count=2)], [can, cannot])
    asks = [
        Checkpoint(
            id=f"checkpoint:{w.key}",
            target=w.key,
            reason="r",
            grace_period_seconds=60,
            checkpointable=w.checkpointable,
        )
        for w in (can, cannot)
    ]
    w = _work(apply_plan(_desired(), s, _plan(*asks), now=T0))
    assert w["t/can"].last_checkpoint_at == T0
    assert w["t/cannot"].last_checkpoint_at == before
