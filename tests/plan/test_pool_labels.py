"""Pool labels are pruned like gpupool's other objects (issue 14): a node in no desired pool
loses `gpupool.io/pool`, unless no Pool is desired at all; the cycle after changes nothing."""

from __future__ import annotations

from reconciler.conventions import POOL_LABEL
from reconciler.observe.builders import node, snapshot
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.sim.effects import step

from .scenarios import A100, NOW, desired_text


def test_a_node_of_a_deleted_pool_loses_the_label_once():
    desired = load([SourceFile("desired.yaml", desired_text())])
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100), node("x-1", "gone", A100)]
    observed = snapshot(NOW, nodes, [])
    p = plan(desired, observed, NOW)
    unlabel = [a for a in p.actions if a.kind == "label-node"]
    assert [(a.target, a.labels, a.pool) for a in unlabel] == [("x-1", {POOL_LABEL: None}, "gone")]
    after = step(desired, observed, p, now=NOW, period=NOW - NOW)
    assert POOL_LABEL not in next(n for n in after.nodes if n.name == "x-1").labels
    assert not [a for a in plan(desired, after, NOW).actions if a.kind == "label-node"]


def test_with_no_pool_desired_no_label_is_removed():
    """An empty or lost policy directory would otherwise strip every node."""
    text = "apiVersion: gpupool.io/v1alpha1\nkind: ChangePolicy\nmetadata: {name: c}\nspec: {}\n"
    desired = load([SourceFile("desired.yaml", text)])
    assert not desired.pools
    observed = snapshot(NOW, [node("a100-1", "a100", A100)], [])
    p = plan(desired, observed, NOW)
    assert not [a for a in p.actions if a.kind == "label-node"]
    assert "prune-everything-refused" in {f.code for f in p.findings}
