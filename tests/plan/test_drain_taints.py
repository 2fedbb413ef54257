"""Drains by device taint on DRA (reconciler/plan/stages/drain_taints.py): a card of a DRA pool
about to be repartitioned gets a DeviceTaintRule (NoSchedule, gpupool's label) on each device
the driver publishes for it, ordered before the node's cordon; the rules stay while the
repartition is not over and are pruned once the driver republished the node's new layout."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.observe.builders import training
from reconciler.observe.model import ObservedState
from reconciler.observe.model_dra import (
    DeviceTaint,
    DeviceTaintRuleObject,
    DraState,
)
from reconciler.plan.actions import Admit, PruneDraObject, TaintDevice
from reconciler.plan.planner import plan_with_facts
from reconciler.plan.stages.drain_taints import rule_name
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import (
    NOW,
    always_rule_preempts_before_giving_back,
    drain_rule,
    inference_burst_mig,
    published_slices,
)

NO_SHARED = ("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
DRA = ("  gpuModel: A100-SXM4-80GB\n", "  gpuModel: A100-SXM4-80GB\n  backend: dra\n")


def rule(node: str, device: str, owner: str = C.MANAGED_BY) -> DeviceTaintRuleObject:
    return drain_rule(node, device, owner)


def _plan(observed: ObservedState, rules: list[DeviceTaintRuleObject] = (), backend=DRA):
    text, _ = inference_burst_mig()
    text = text.replace(*NO_SHARED).replace(*backend, 1)
    dra = DraState(slices=published_slices(observed.nodes), taint_rules=list(rules))
    observed = observed.model_copy(update={"dra": dra})
    plan, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    return plan


def test_cards_repartitioned_on_dra_are_tainted_before_the_cordon() -> None:
    _, observed = inference_burst_mig()
    plan = _plan(observed)
    taints = [a for a in plan.actions if isinstance(a, TaintDevice)]
    reconf = [a for a in plan.actions if a.kind == "mig-reconfigure"]
    assert reconf and taints
    changed = {(a.target.split("/")[0]) for a in taints}
    assert changed == {a.target for a in reconf}
    for a in taints:
        node, device = a.target.split("/")
        assert a.spec == {
            "deviceSelector": {"driver": C.DRA_DRIVER, "pool": node, "device": device},
            "taint": {"key": C.DRA_DRAIN_TAINT, "value": "repartition", "effect": "NoSchedule"},
        }
        assert a.labels[C.MANAGED_BY_LABEL] == C.MANAGED_BY and a.name == rule_name(node, device)
    kinds = [a.kind for a in plan.actions]
    assert kinds.index("cordon") > max(i for i, k in enumerate(kinds) if k == "taint-device")
    assert "device taint rule" in plan.summary


def test_the_device_plugin_backend_and_a_cluster_without_dra_get_no_taint() -> None:
    _, observed = inference_burst_mig()
    plugin = _plan(observed, backend=("", ""))
    assert not [a for a in plugin.actions if a.kind == "taint-device"]
    text, _ = inference_burst_mig()
    desired = load([SourceFile("desired.yaml", text.replace(*NO_SHARED).replace(*DRA, 1))])
    plan, _ = plan_with_facts(desired, observed)  # dra None: not served or not read
    assert not [a for a in plan.actions if a.kind in ("taint-device", "prune-dra-object")]


def test_rules_already_there_are_left_while_draining_and_pruned_once_over() -> None:
    _, observed = inference_burst_mig()
    first = _plan(observed)
    taints = [a for a in first.actions if isinstance(a, TaintDevice)]
    live = [rule(*a.target.split("/")) for a in taints]
    # the same plan again with its rules written: nothing to write, nothing pruned
    again = _plan(observed, live)
    assert not [a for a in again.actions if a.kind in ("taint-device", "prune-dra-object")]
    # a node cordoned by gpupool whose mig-manager has not finished gpupool's config keeps its
    # rules even when this cycle's plan does not change its cards
    other = next(n.name for n in observed.nodes if n.name != taints[0].target.split("/")[0])
    stale = rule(other, "gpu-7-mig-gone")
    cordoned = [
        n.model_copy(
            update={
                "unschedulable": True,
                "annotations": {C.CORDONED_FOR_ANN: "x"},
                "labels": {
                    **n.labels,
                    C.MIG_CONFIG_LABEL: f"{C.CONFIG_NAME_PREFIX}x",
                    C.MIG_STATE_LABEL: "pending",
                },
            }
        )
        if n.name == other
        else n
        for n in observed.nodes
    ]
    held = _plan(observed.model_copy(update={"nodes": cordoned}), [*live, stale])
    assert not [a for a in held.actions if isinstance(a, PruneDraObject)]
    # settled (not cordoned, the driver publishes what the agent reports): its rule goes, the
    # rules of the node still being repartitioned stay
    done = _plan(observed, [*live, stale])
    pruned = [a for a in done.actions if isinstance(a, PruneDraObject)]
    assert [(a.object_kind, a.name) for a in pruned] == [("DeviceTaintRule", stale.name)]
    kinds = [a.kind for a in done.actions]
    assert "taint-device" not in kinds


def test_someone_elses_rule_of_that_name_is_left_alone() -> None:
    _, observed = inference_burst_mig()
    first = _plan(observed)
    a = next(a for a in first.actions if isinstance(a, TaintDevice))
    theirs = rule(*a.target.split("/"), owner="someone")
    p = _plan(observed, [theirs])
    assert a.id not in {x.id for x in p.actions}
    assert any(f.code == "foreign-object" and theirs.name in f.subject for f in p.findings)


def _reserve_plan(observed, rules=()):
    text, _ = always_rule_preempts_before_giving_back()
    text = text.replace(*NO_SHARED).replace(*DRA, 1)
    dra = DraState(slices=published_slices(observed.nodes), taint_rules=list(rules))
    plan, _ = plan_with_facts(
        load([SourceFile("desired.yaml", text)]), observed.model_copy(update={"dra": dra})
    )
    return plan


def test_cards_freed_for_a_waiting_gang_are_kept_by_taint_until_it_is_admitted() -> None:
    _, observed = always_rule_preempts_before_giving_back()
    plan = _reserve_plan(observed)
    (admit,) = [a for a in plan.actions if isinstance(a, Admit)]
    assert admit.after == ("team-b/spot-sweep",)
    reserve = [a for a in plan.actions if a.id.startswith("taint-device:reserve:")]
    cards = {f"{pa.node}/gpu-{i}" for pa in admit.pods for i in pa.gpus}
    assert {a.target for a in reserve} == cards and len(cards) == 8
    for a in reserve:
        assert a.spec["taint"] == {
            "key": C.DRA_RESERVED_TAINT,
            "value": "gang",
            "effect": "NoSchedule",
        }
    kinds = [a.kind for a in plan.actions]
    assert max(i for i, k in enumerate(kinds) if k == "taint-device") < kinds.index("preempt")
    live = [
        drain_rule(*a.target.split("/")).model_copy(
            update={
                "name": a.name,
                "taint": DeviceTaint(key=C.DRA_RESERVED_TAINT, value="gang", effect="NoSchedule"),
            }
        )
        for a in reserve
    ]
    # while the gang waits, its rules stay as they are
    again = _reserve_plan(observed, live)
    assert not [a for a in again.actions if a.kind in ("taint-device", "prune-dra-object")]
    # the gang admitted and running there: the rules go
    node = admit.pods[0].node
    running = [
        w for w in observed.workloads if w.key not in ("team-b/spot-sweep", "team-a/llm-ft")
    ] + [training("team-a", "llm-ft", node, 8, cls="training-high", started=NOW)]
    done = _reserve_plan(observed.model_copy(update={"workloads": running}), live)
    pruned = {a.name for a in done.actions if isinstance(a, PruneDraObject)}
    assert pruned == {r.name for r in live}
