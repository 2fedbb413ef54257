"""The partition seam: a backend other than the device plugin's is added by implementing
`PartitionBackend` (reconciler/plan/partition/base.py), passing it to `plan_with_facts`, and
registering its handler in apply (`handles_partition`). No stage changes: this test backend
lives here, in tests/, and the planner's stages never name it.

The test backend partitions like the device plugin (it reuses its rules) but carries every
change out as one `PartitionChange` per node, as a DRA backend would with its own objects."""

from __future__ import annotations

from reconciler.apply.executor import Executor
from reconciler.apply.handlers import PARTITION_HANDLERS, ApplyConfig, Outcome, handles_partition
from reconciler.plan.actions import Admit, CardChange, PartitionChange
from reconciler.plan.cluster import GpuSlot, PoolView
from reconciler.plan.model import Plan
from reconciler.plan.partition import (
    DEFAULT_BACKENDS,
    DevicePluginBackend,
    NotYet,
    PartitionBackend,
)
from reconciler.plan.planner import plan_with_facts
from reconciler.plan.run import Run
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.apply.memory import MemoryCluster
from tests.plan.scenarios import always_rule_preempts_before_giving_back, inference_burst_mig

BACKEND = "test-per-node"


class PerNodeChangeBackend(DevicePluginBackend):
    """Serves the pools it is given; each node's change is one backend-neutral action."""

    name = BACKEND

    def __init__(self, pools: set[str]):
        self.pools = pools

    def serves(self, pv: PoolView) -> bool:
        return pv.name in self.pools

    def change_actions(
        self,
        run: Run,
        pv: PoolView,
        node: str,
        changed: list[GpuSlot],
        deps: tuple[str, ...],
        why: str,
    ) -> list[str]:
        cards = tuple(
            CardChange(gpu=g.index, before=g.describe(), after=g.describe(target=True))
            for g in changed
        )
        return [
            run.add(
                PartitionChange(
                    id=f"partition-change:{node}",
                    target=node,
                    pool=pv.name,
                    reason=f"{len(cards)} card(s) change ({why})",
                    depends_on=deps,
                    cards=cards,
                    backend=BACKEND,
                    settings={f"gpu{c.gpu}": c.after for c in cards},
                )
            )
        ]


def _inputs():
    text, observed = inference_burst_mig()
    return load([SourceFile("desired.yaml", text)]), observed


def test_the_test_backend_satisfies_the_protocol():
    backend: PartitionBackend = PerNodeChangeBackend({"a100"})
    assert backend.name == BACKEND


def test_a_pool_served_by_another_backend_gets_its_actions_and_nothing_else_changes():
    desired, observed = _inputs()
    default, _ = plan_with_facts(desired, observed)
    other, _ = plan_with_facts(
        desired, observed, backends=(PerNodeChangeBackend({"a100"}), *DEFAULT_BACKENDS)
    )
    kinds = {a.kind for a in other.actions}
    assert "partition-change" in kinds
    assert not kinds & {"mig-reconfigure", "set-sharing"}
    # the same decisions: the same cards change, the same work is stopped, same ordering shape
    changed_default = {
        (a.target, c.gpu, c.after)
        for a in default.actions
        if a.kind in ("mig-reconfigure", "set-sharing")
        for c in a.cards
    }
    changed_other = {
        (a.target, c.gpu, c.after)
        for a in other.actions
        if a.kind == "partition-change"
        for c in a.cards
    }
    assert changed_other == changed_default
    rest = lambda p: [  # noqa: E731
        a.id
        for a in p.actions
        if a.kind not in ("mig-reconfigure", "set-sharing", "partition-change")
    ]
    assert rest(other) == rest(default)
    uncordon = next(a for a in other.actions if a.kind == "uncordon")
    assert uncordon.depends_on == (f"partition-change:{uncordon.target}",)


def _other_steps(p) -> list[str]:
    changes = ("mig-reconfigure", "set-sharing", "partition-change")
    return [a.id for a in p.actions if a.kind not in changes]


def test_a_backend_serving_no_pool_changes_nothing():
    desired, observed = _inputs()
    default, _ = plan_with_facts(desired, observed)
    same, _ = plan_with_facts(
        desired, observed, backends=(PerNodeChangeBackend(set()), *DEFAULT_BACKENDS)
    )
    assert same == default


def test_apply_dispatches_the_change_to_the_backend_s_registered_handler():
    desired, observed = _inputs()
    result, _ = plan_with_facts(
        desired, observed, backends=(PerNodeChangeBackend({"a100"}), *DEFAULT_BACKENDS)
    )
    change = next(a for a in result.actions if a.kind == "partition-change")
    seen: list[PartitionChange] = []

    @handles_partition(BACKEND)
    def carry_out(a: PartitionChange, ctx) -> Outcome:
        seen.append(a)
        return Outcome(a.id, "done", f"{len(a.settings)} card(s) set", changed=True)

    try:
        ex = Executor(MemoryCluster(), ApplyConfig())
        only = result.model_copy(update={"actions": (change,)})
        outcome = ex.apply(only).outcomes[0]
    finally:
        PARTITION_HANDLERS.pop(BACKEND, None)
    assert seen == [change]
    assert outcome.status == "done"


def test_a_change_of_an_unknown_backend_fails_with_a_reason():
    change = PartitionChange(
        id="partition-change:n1",
        target="n1",
        reason="r",
        cards=(CardChange(gpu=0, before="whole", after="shared x4"),),
        backend="nobody",
    )
    ex = Executor(MemoryCluster(), ApplyConfig())
    outcome = ex.apply(Plan(observed_at="2026-12-02T03:00:00+00:00", actions=(change,))).outcomes[0]
    assert outcome.status == "failed"
    assert "nobody" in outcome.message


class HoldsAfterBackend(PerNodeChangeBackend):
    """Names a pod's place its own way and says what still holds the cards of pods going."""

    def pod_admission(self, run: Run, pv: PoolView, member: str, cards: list[GpuSlot]):
        hint = super().pod_admission(run, pv, member, cards)
        return hint.model_copy(update={"devices": tuple(f"dev-{g.index}" for g in cards)})

    def held_beyond(self, run: Run, pv: PoolView, pods) -> tuple[str, ...]:
        return tuple(f"{p}-lease" for p in sorted(pods))


def test_an_admission_names_places_and_waits_as_the_backend_says():
    """Step 11 asks the pool's backend how an Admit names a pod's place
    (`PartitionBackend.pod_admission`: a place, or why not yet) and what still holds the
    cards of the pods it waits for (`held_beyond`): DRA's devices and claims come that way,
    and the stage names no backend."""
    text, observed = always_rule_preempts_before_giving_back()
    desired = load([SourceFile("desired.yaml", text)])
    stopping = [
        w.model_copy(update={"terminating": True}) if w.name == "spot-sweep" else w
        for w in observed.workloads
    ]
    going = observed.model_copy(update={"workloads": stopping})
    default, _ = plan_with_facts(desired, going)
    (admit,) = [a for a in default.actions if isinstance(a, Admit)]
    assert admit.after == ("team-b/spot-sweep",) and admit.after_claims == ()
    backend = HoldsAfterBackend({"a100"})
    other, _ = plan_with_facts(desired, going, backends=(backend, *DEFAULT_BACKENDS))
    (admit,) = [a for a in other.actions if isinstance(a, Admit)]
    assert admit.after_claims == ("team-b/spot-sweep-lease",)
    assert admit.pods[0].devices == tuple(f"dev-{i}" for i in admit.pods[0].gpus)
    backend.pod_admission = lambda run, pv, member, cards: NotYet("test-not-yet", "not yet")
    held, _ = plan_with_facts(desired, going, backends=(backend, *DEFAULT_BACKENDS))
    assert not [a for a in held.actions if isinstance(a, Admit)]
    assert any(a.kind == "hold" and a.code == "test-not-yet" for a in held.actions)
