"""The guard of a DRA pool (reconciler/plan/stages/drain_taints.py `_guards`, issue 32): one
DeviceTaintRule per node of a DRA pool whose claims gpupool pins, NoSchedule
`gpupool.io/guarded`, selecting every device of the node's driver pool (no device named), so
kube-scheduler's allocator gives the pool's devices only to the claims gpupool pins (they
tolerate it: apply/handlers/dra_admit.py). Only while every namespace of the pool's Quotas is
gated and DeviceTaintRules are served; else the finding `dra-guard-off`. Checked on the real
scheduler by tests/integration/test_dra_guard.py."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.observe.model import ObservedState
from reconciler.observe.model_dra import DeviceTaint, DeviceTaintRuleObject, DraState
from reconciler.plan.actions import PruneDraObject, TaintDevice
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan_with_facts
from reconciler.plan.stages.drain_taints import GUARD_VALUE, rule_name
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import inference_burst_mig, published_slices

NO_SHARED = ("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
DRA = ("  gpuModel: A100-SXM4-80GB\n", "  gpuModel: A100-SXM4-80GB\n  backend: dra\n")
NODES = ("a100-1", "a100-2")
ALL_GATED = ["team-a", "team-b"]


def guard_rule(node: str, owner: str = C.MANAGED_BY, value: str = GUARD_VALUE):
    return DeviceTaintRuleObject(
        name=rule_name(node, "", C.DRA_GUARD_TAINT),
        driver=C.DRA_DRIVER,
        pool=node,
        taint=DeviceTaint(key=C.DRA_GUARD_TAINT, value=value, effect="NoSchedule"),
        managed_by=owner,
    )


def _plan(
    gated: list[str] | None = ALL_GATED,
    rules: list[DeviceTaintRuleObject] = (),
    *,
    backend=DRA,
    extra: tuple[str, str] = ("", ""),
    served: bool = True,
) -> Plan:
    text, observed = inference_burst_mig()
    text = text.replace(*NO_SHARED).replace(*backend, 1).replace(*extra, 1)
    dra = DraState(
        slices=published_slices(observed.nodes),
        taint_rules=list(rules),
        taint_rules_served=served,
    )
    observed = ObservedState.model_validate(
        {**observed.model_dump(), "dra": dra.model_dump(), "gated_namespaces": gated}
    )
    plan, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    return plan


def _guards(plan: Plan) -> list[TaintDevice]:
    return [
        a
        for a in plan.actions
        if isinstance(a, TaintDevice) and a.spec["taint"]["key"] == C.DRA_GUARD_TAINT
    ]


def _pruned(plan: Plan) -> list[str]:
    return [
        a.name
        for a in plan.actions
        if isinstance(a, PruneDraObject) and a.name.startswith("gpupool-guard-")
    ]


def _off(plan: Plan) -> list[str]:
    return [f.message for f in plan.findings if f.code == "dra-guard-off"]


def test_a_dra_pool_whose_namespaces_are_all_gated_is_guarded_node_by_node() -> None:
    plan = _plan()
    guards = _guards(plan)
    assert [a.target for a in guards] == list(NODES)
    for a in guards:
        assert a.name == f"gpupool-guard-{a.target}" and a.verb == "create"
        assert a.id == f"taint-device:guard:{a.target}" and a.pool == "a100"
        # driver and the node's pool, no device: every device of every slice of that pool
        assert a.spec == {
            "deviceSelector": {"driver": C.DRA_DRIVER, "pool": a.target},
            "taint": {"key": C.DRA_GUARD_TAINT, "value": GUARD_VALUE, "effect": "NoSchedule"},
        }
        assert a.labels == {C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: "a100"}
        assert "every device of" in a.reason
    assert not _off(plan)
    # taints first in the plan: before any admission or cordon
    kinds = [a.kind for a in plan.actions]
    last_taint = max(i for i, k in enumerate(kinds) if k == "taint-device")
    assert all(i > last_taint for i, k in enumerate(kinds) if k in ("admit", "cordon"))


def test_guards_there_are_kept_and_a_changed_one_is_fixed() -> None:
    assert _guards(_plan(rules=[guard_rule(n) for n in NODES])) == []
    fixed = _guards(_plan(rules=[guard_rule("a100-1"), guard_rule("a100-2", value="x")]))
    assert [(a.target, a.verb) for a in fixed] == [("a100-2", "update")]


def test_an_ungated_namespace_leaves_the_pool_unguarded_and_says_why() -> None:
    plan = _plan(gated=["team-a"], rules=[guard_rule(n) for n in NODES])
    assert _guards(plan) == []
    (msg,) = _off(plan)
    assert "team-b" in msg and "team-a" not in msg and "not gated" in msg
    # the guard it had is taken off: team-b's pods are placed by kube-scheduler
    assert _pruned(plan) == [f"gpupool-guard-{n}" for n in NODES]


def test_unknown_gating_changes_no_guard() -> None:
    plan = _plan(gated=None, rules=[guard_rule("a100-1")])
    assert _guards(plan) == [] and _pruned(plan) == [] and not _off(plan)


def test_guard_false_and_a_device_plugin_pool_have_none_and_prune_ours() -> None:
    off = ("  backend: dra\n", "  backend: dra\n  dra: {guard: false}\n")
    plan = _plan(rules=[guard_rule(n) for n in NODES], extra=off)
    assert _guards(plan) == [] and not _off(plan)
    assert _pruned(plan) == [f"gpupool-guard-{n}" for n in NODES]
    plugin = _plan(rules=[guard_rule("a100-1")], backend=("", ""))
    assert _guards(plugin) == [] and _pruned(plugin) == ["gpupool-guard-a100-1"]


def test_without_device_taint_rules_served_the_guard_is_off() -> None:
    plan = _plan(served=False)
    assert _guards(plan) == []
    (msg,) = _off(plan)
    assert "DRADeviceTaintRules" in msg


def test_a_rule_of_that_name_not_gpupools_is_left_alone() -> None:
    plan = _plan(rules=[guard_rule("a100-1", owner="someone")])
    assert [a.target for a in _guards(plan)] == ["a100-2"]
    assert any(
        f.code == "foreign-object" and f.subject == "DeviceTaintRule gpupool-guard-a100-1"
        for f in plan.findings
    )
    assert _pruned(plan) == []
