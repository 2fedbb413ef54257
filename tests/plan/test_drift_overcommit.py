"""A sharing policy change from x8 x 10Gi to x4 x 20Gi, over several cycles.

The node a100-1 is still time-sliced x8 (10Gi a slice on an 80Gi card) and runs pods of the
old policy; new gated pods declare 20Gi a slice. Time-slicing isolates no memory, so one of
them on an x8 card over-commits it. gpupool admits none there (`slice_memory_fits`,
reconciler/plan/demand.py): the node is closed to shared work that does not fit its slices,
re-shared as x4 once its old pods are gone (every plain card at once: the device plugin
shares per node), and the new pods run then. Each cycle is plan, then the effect model
(`reconciler.sim.effects.step`); the old pods finishing is `reconciler.sim.effects.finish`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconciler.observe.builders import gpu, node, shared_pod, snapshot
from reconciler.observe.model import ObservedState, Request, Workload
from reconciler.plan.actions import Admit, MigReconfigure, SetSharing
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.state import DesiredState
from reconciler.sim.effects import finish, step
from tests.plan.cycles_support import overcommits

A100, H100 = "A100-SXM4-80GB", "H100-SXM5-80GB"
T0 = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
PERIOD = timedelta(minutes=1)
GI = 1024  # MiB
POLICY = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: a100}}
spec:
  gpuModel: {model}
  nodeSelector: {{matchLabels: {{gpupool.io/pool: a100}}}}
  capacity: {{nodes: {nodes}, gpusPerNode: 2}}
  inference:
{mig}    shared: {{slicesPerGPU: 4, memoryPerSlice: 20Gi}}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {{name: cluster}}
spec:
  classes: [{{name: serving, value: 30000}}]
"""
BAL = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def _desired(model: str = A100, nodes: int = 1, mig: bool = False) -> DesiredState:
    layouts = f"    mig: {{layouts: [{{name: balanced, profiles: [{', '.join(BAL)}]}}]}}\n"
    text = POLICY.format(model=model, nodes=nodes, mig=layouts if mig else "")
    return load([SourceFile("desired.yaml", text)])


def _declaring(w: Workload, slices: int, mib: int) -> Workload:
    return w.model_copy(update={"request": Request(shared_slices=slices, gpu_memory_mib=mib)})


def old_pod(name: str, card: int, node_name: str = "a100-1") -> Workload:
    """A pod of the old policy: one 10Gi slice, running for two hours."""
    pod = shared_pod("serve", name, node_name, 1, gpu_index=card, started=T0 - timedelta(hours=2))
    return _declaring(pod, 1, 10 * GI)


def new_pod(name: str, slices: int = 1, mib: int = 20 * GI) -> Workload:
    """A gated pod of the new policy (gpupool's scheduling gate is the default admission)."""
    pod = shared_pod("serve", name, None, slices, pool="a100").model_copy(
        update={"created_at": T0, "owner_kind": "ReplicaSet", "owner_name": "new"}
    )
    return _declaring(pod, slices, mib)


def x8_node(name: str = "a100-1", model: str = A100) -> object:
    return node(name, "a100", model, [gpu(0, shared=8, model=model), gpu(1, shared=8, model=model)])


# ----------------------------------------------------------------------------- the checks
def memory_overcommits(desired: DesiredState, state: ObservedState) -> list[str]:
    """Shared cards whose running pods declare more GPU memory than the card has, and pods
    that declare more memory per slice than a slice of their card has (card memory / its
    slice count now): either over-commits the card once its slices fill up."""
    out = []
    model = desired.catalog.model(desired.pools["a100"].spec.gpu_model)
    card = model.memory_gib * GI
    for n in state.nodes:
        for g in n.gpus:
            if not g.shared_slices:
                continue
            pods = [
                (w, a)
                for w in state.workloads
                if w.phase == "Running" and w.node == n.name
                for a in w.allocations
                if a.gpu == g.index
            ]
            declared = sum(w.request.gpu_memory_mib for w, _ in pods)
            if declared > card:
                out.append(f"{n.name}/gpu{g.index}: {declared} MiB declared, {card} MiB there")
            for w, _ in pods:
                r = w.request
                if r.gpu_memory_mib * g.shared_slices > card * r.shared_slices:
                    out.append(
                        f"{w.key}: {r.gpu_memory_mib} MiB for {r.shared_slices} slice(s) on "
                        f"{n.name}/gpu{g.index} shared x{g.shared_slices}"
                    )
    return out


def admitted_to(p: Plan, node_name: str) -> list[str]:
    return sorted(
        pod.name
        for a in p.actions
        if isinstance(a, Admit)
        for pod in a.pods
        if pod.node == node_name
    )


def slices_of(state: ObservedState, node_name: str) -> list[int | None]:
    (n,) = [n for n in state.nodes if n.name == node_name]
    return [g.shared_slices for g in n.gpus]


def drift_messages(p: Plan) -> dict[str, str]:
    return {f.subject: f.message for f in p.findings if f.code == "partition-drift"}


# ----------------------------------------------------------------------------- the change
CLOSED = "closed to new shared work that does not fit its x8 slices; re-shared as x4 once empty"


def test_no_new_pod_on_the_x8_node_until_it_is_re_shared_x4_then_they_run():
    desired = _desired()
    old = [old_pod(f"old-{c}{i}", c) for c in (0, 1) for i in range(4)]
    new = [new_pod(f"new-{i}") for i in range(3)]
    state = snapshot(T0, [x8_node()], old + new)
    states, plans = [state], []

    def cycle() -> Plan:
        p = plan(desired, states[-1])
        plans.append(p)
        states.append(step(desired, states[-1], p, now=states[-1].observed_at, period=PERIOD))
        return p

    # cycles 1-2: the old pods run; no new pod is admitted to the x8 node, nothing changes
    for _ in range(2):
        p = cycle()
        assert admitted_to(p, "a100-1") == []
        assert not [a for a in p.actions if isinstance(a, SetSharing)]
        waits = {f.subject: f.message for f in p.findings if f.code == "waits"}
        assert set(waits) == {w.key for w in new}
        assert all("a100-1 (x8: 10Gi a slice)" in m for m in waits.values())
        msgs = drift_messages(p)
        assert set(msgs) == {"a100-1/gpu0", "a100-1/gpu1"}
        for msg in msgs.values():
            assert CLOSED in msg and "once its workloads finish" in msg
            assert "kube-scheduler may still bind pods without gpupool's gate" in msg
    # the pods of gpu1 finish: gpu1 is empty, but the node shares per node and gpu0 is busy
    ones = [w.key for w in old if w.allocations[0].gpu == 1]
    states[-1] = finish(desired, states[-1], ones, now=states[-1].observed_at)
    p = cycle()
    assert admitted_to(p, "a100-1") == []  # gpu1 is still x8: 10Gi a slice
    assert not [a for a in p.actions if isinstance(a, SetSharing)]
    msgs = drift_messages(p)
    assert CLOSED in msgs["a100-1/gpu1"] and "once the other plain cards" in msgs["a100-1/gpu1"]
    assert slices_of(states[-1], "a100-1") == [8, 8]
    # the rest finish: the whole node is re-shared x4, the new pods admitted after it
    rest = [w.key for w in old if w.allocations[0].gpu == 0]
    states[-1] = finish(desired, states[-1], rest, now=states[-1].observed_at)
    p = cycle()
    (sharing,) = [a for a in p.actions if isinstance(a, SetSharing)]
    assert (sharing.target, sharing.slices, sharing.plain_cards) == ("a100-1", 4, 2)
    assert {(c.gpu, c.before, c.after) for c in sharing.cards} == {
        (0, "shared x8", "shared x4"),
        (1, "shared x8", "shared x4"),
    }
    assert admitted_to(p, "a100-1") == ["new-0", "new-1", "new-2"]
    assert all(sharing.id in a.depends_on for a in p.actions if isinstance(a, Admit))
    assert slices_of(states[-1], "a100-1") == [4, 4]
    # they run, and the next plan has nothing left to do
    p = cycle()
    running = {w.key for w in states[-1].workloads if w.phase == "Running"}
    assert running == {w.key for w in new}
    assert not p.actions and "partition-drift" not in {f.code for f in p.findings}
    # in no cycle: a card past its slices, or a pod with more memory than its slice has
    for s in states:
        assert overcommits(s) == [], s.observed_at
        assert memory_overcommits(desired, s) == [], s.observed_at
    # and no plan admitted a pod to a100-1 while it was x8 but after re-sharing it x4
    for s, q in zip(states, plans, strict=False):
        if slices_of(s, "a100-1") != [8, 8]:
            continue
        x4 = {a.id for a in q.actions if isinstance(a, SetSharing) and a.slices == 4}
        for a in q.actions:
            if isinstance(a, Admit) and any(pod.node == "a100-1" for pod in a.pods):
                assert x4 & set(a.depends_on), a.id


# ----------------------------------------------------------------------------- the rule
def _plan(desired: DesiredState, nodes: list, work: list[Workload]) -> Plan:
    return plan(desired, snapshot(T0, nodes, work))


def test_an_undeclared_pod_is_judged_at_the_policys_memory_per_slice():
    # it declares nothing: it was sized to the policy's 20Gi slice and may use it
    pod = shared_pod("serve", "plain", None, 1, pool="a100")
    p = _plan(_desired(), [x8_node()], [old_pod("old", 0), pod])
    assert admitted_to(p, "a100-1") == []
    assert "serve/plain" in {f.subject for f in p.findings if f.code == "waits"}


def test_a_pod_whose_memory_per_slice_fits_the_x8_slices_is_admitted_there():
    # declared memory is the pod's, for all its slices: 20Gi on 2 slices is 10Gi a slice
    small = [new_pod("one", 1, 10 * GI), new_pod("two", 2, 20 * GI)]
    p = _plan(_desired(), [x8_node()], [old_pod("old", 0), *small])
    assert admitted_to(p, "a100-1") == ["one", "two"]
    # 25Gi on 2 slices is 12.5Gi a slice: more than an x8 slice has
    p = _plan(_desired(), [x8_node()], [old_pod("old", 0), new_pod("two", 2, 25 * GI)])
    assert admitted_to(p, "a100-1") == []


def test_memory_beyond_the_share_is_warned_about_not_made_unplaceable():
    # 30Gi on one 20Gi slice: `memory-over-share` warns (time-slicing lets it take its
    # neighbours' memory); it counts at its share, so an x4 card takes it and the x8 one not
    desired = _desired(nodes=2)
    x4 = node("a100-2", "a100", A100, [gpu(0, shared=4), gpu(1, shared=4)])
    hungry = new_pod("hungry", 1, 30 * GI)
    p = _plan(desired, [x8_node(), x4], [old_pod("old", 0), old_pod("b", 0, "a100-2"), hungry])
    assert admitted_to(p, "a100-1") == [] and admitted_to(p, "a100-2") == ["hungry"]
    assert "serve/hungry" in {f.subject for f in p.findings if f.code == "memory-over-share"}


def test_a_pod_kube_scheduler_places_is_counted_where_it_can_land():
    # no gpupool gate: kube-scheduler binds it to any free slices, the x8 ones included, and
    # gpupool cannot stop it; the plan counts it there (a card made for it elsewhere would
    # stay empty and be given back) and the finding says what holds where
    desired = _desired(nodes=2)
    free = node("a100-2", "a100", A100, [gpu(0), gpu(1)])
    pod = new_pod("ungated").model_copy(update={"admission": "scheduler"})
    p = _plan(desired, [x8_node(), free], [old_pod("old", 0), pod])
    assert not [a for a in p.actions if a.kind in ("set-sharing", "cordon")]
    assert "namespaces not gated for gpupool" in drift_messages(p)["a100-1/gpu0"]
    # the same pod gated: a100-2 is shared x4 for it, and it is admitted there
    p = _plan(desired, [x8_node(), free], [old_pod("old", 0), new_pod("gated")])
    assert [a.target for a in p.actions if isinstance(a, SetSharing)] == ["a100-2"]
    assert admitted_to(p, "a100-2") == ["gated"] and admitted_to(p, "a100-1") == []


def test_a_mig_card_does_not_join_the_x8_count_for_demand_that_does_not_fit():
    # H100: a MIG mode change costs only the card. gpu0 is x8 and full; gpu1 is an empty MIG
    # card. Joining the node's x8 count would make 10Gi slices for a 20Gi pod: it waits
    desired = _desired(model=H100, mig=True)
    n = node("a100-1", "a100", H100, [gpu(0, shared=8, model=H100), gpu(1, mig=BAL, model=H100)])
    full = [old_pod(f"old-{i}", 0) for i in range(8)]
    p = _plan(desired, [n], [*full, new_pod("new")])
    assert not [a for a in p.actions if isinstance(a, MigReconfigure | SetSharing)]
    assert "serve/new" in {f.subject for f in p.findings if f.code == "waits"}
    # a pod that fits 10Gi slices: the MIG card joins the x8 count for it, as before
    p = _plan(desired, [n], [*full, new_pod("small", 1, 10 * GI)])
    (mig,) = [a for a in p.actions if isinstance(a, MigReconfigure)]
    assert [(c.gpu, c.after) for c in mig.cards] == [(1, "shared x8")]
