"""The partition seam: a backend other than the device plugin's is added by implementing
`PartitionBackend` (reconciler/plan/partition/base.py), passing it to `plan_with_facts`, and
registering its handler in apply (`handles_partition`). No stage changes: this test backend
lives here, in tests/, and the planner's stages never name it.

The test backend partitions like the device plugin (it reuses its rules) but carries every
change out as one `PartitionChange` per node, as a DRA backend would with its own objects."""

from __future__ import annotations

from reconciler.apply.executor import Executor
from reconciler.apply.handlers import PARTITION_HANDLERS, ApplyConfig, Outcome, handles_partition
from reconciler.plan.actions import CardChange, PartitionChange
from reconciler.plan.cluster import GpuSlot, PoolView
from reconciler.plan.model import Plan
from reconciler.plan.partition import DEFAULT_BACKENDS, DevicePluginBackend, PartitionBackend
from reconciler.plan.planner import plan_with_facts
from reconciler.plan.run import Run
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.apply.memory import MemoryCluster
from tests.plan.scenarios import inference_burst_mig

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
