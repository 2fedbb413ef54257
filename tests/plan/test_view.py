"""The planner's working view changes only through its named methods (place, reserve,
repartition, release), which keep its indexes right; table tests of those methods."""

from __future__ import annotations

import ast
from pathlib import Path

from reconciler.observe.builders import gpu, hours, node, snapshot, training
from reconciler.plan.cluster import GpuSlot, build_cluster
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import A100, NOW, desired_text

PLAN = Path(__file__).resolve().parents[2] / "reconciler" / "plan"
CARD_STATE = {name for name in GpuSlot.__dataclass_fields__ if name not in ("node", "index")}


def _writes_to_cards(source: str) -> list[int]:
    """Lines that assign a card's state or add to/remove from its sets directly."""
    out = []
    for n in ast.walk(ast.parse(source)):
        targets = (
            n.targets
            if isinstance(n, ast.Assign)
            else [n.target]
            if isinstance(n, ast.AugAssign)
            else []
        )
        for t in targets:
            for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                if (
                    isinstance(el, ast.Attribute)
                    and el.attr in CARD_STATE
                    and not (isinstance(el.value, ast.Name) and el.value.id == "self")
                ):
                    out.append(n.lineno)
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("add", "discard", "remove", "clear")
            and isinstance(n.func.value, ast.Attribute)
            and n.func.value.attr in CARD_STATE
        ):
            out.append(n.lineno)
    return sorted(out)


def test_only_the_view_changes_cards():
    found = {
        p.name: _writes_to_cards(p.read_text())
        for p in sorted(PLAN.glob("*.py"))
        if p.name != "cluster.py"
    }
    assert not {k: v for k, v in found.items() if v}, found


def test_the_scan_sees_direct_writes():
    assert _writes_to_cards(
        "g.holders.add(k)\ng.reserved_by = k\ng.used_slices += 1\nself.mode = 1\n"
    ) == [1, 2, 3]


def _view():
    desired = load([SourceFile("desired.yaml", desired_text())])
    n = node("a100-1", "a100", A100, gpus=[gpu(i) for i in range(8)])
    job = training("team-a", "job", "a100-1", [0, 1], started=NOW - hours(2))
    view = build_cluster(desired, snapshot(NOW, [n], [job]))
    return view, view.pools["a100"], job


def test_release_frees_the_cards_and_recounts_the_node():
    view, pv, job = _view()
    assert pv.free_whole_on("a100-1") == 6
    view.release(job)
    assert pv.free_whole_on("a100-1") == 8
    assert not view.slot[("a100-1", 0)].holders


def test_reserve_takes_cards_out_of_the_free_count():
    view, pv, _ = _view()
    cards = [view.slot[("a100-1", i)] for i in (2, 3)]
    pv.reserve(cards, "team-b/gang")
    assert pv.free_whole_on("a100-1") == 4
    assert all(not g.free_whole for g in cards)


def test_repartition_moves_a_card_into_the_inference_indexes():
    view, pv, _ = _view()
    g = view.slot[("a100-1", 7)]
    pv.repartition(g, "shared", slices=4, why="burst")
    assert g in pv.inference_slots() and g.changes and g.free_slices == 4
    assert pv.free_whole_on("a100-1") == 5
    pv.take_slices(g, 3, "team-b/server")
    assert g.free_slices == 1 and pv.shared_buckets()[1] == [g]
    pv.repartition(g, "whole", why="back")
    assert g not in pv.inference_slots() and g.used_slices == 0
