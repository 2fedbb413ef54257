"""Exact admission on DynamicMIG names the placement (issue 32, items 3 and 4;
reconciler/plan/dra_admit.py): NVIDIA's driver publishes one device per placement
(`gpu-<minor>-mig-<profile>-<id>-<start>`, each consuming the counters `memory-slice-<i>` of its
range), so the plan says which one each pod gets, `gpu.nvidia.com/<node>/<device>`, and the
executor writes it as the claim's allocation. The placements follow the card's planned layout
(the catalog's starts, largest instances first) around what is already allocated there; a
layout the allocated placements leave no room for is no fit."""

from __future__ import annotations

import random

from reconciler.observe.builders import gpu, mig_pod, node, snapshot
from reconciler.plan.actions import Admit, Hold
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import NOW, _objects, desired_text, dynamic_mig_devices

H100 = "H100-SXM5-80GB"
LAYOUTS = """\
        - {name: balanced, profiles: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}
        - {name: two-3g, profiles: [3g.40gb, 3g.40gb]}
"""


def _text(layouts: list[tuple[str, list[str]]]) -> str:
    lines = "".join(f"        - {{name: {n}, profiles: [{', '.join(p)}]}}\n" for n, p in layouts)
    text = desired_text(train_min=0).replace(LAYOUTS, lines)
    assert lines in text
    return text.replace("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "").replace(
        "  gpuModel: A100-SXM4-80GB\n",
        f"  gpuModel: {H100}\n  backend: dra\n  dra: {{mig: dynamic}}\n",
        1,
    )


def ref(card: int, profile: str, start: int) -> str:
    """The plan's name of a partition (the test slices' profile id is 9: scenarios.py
    `dynamic_mig_devices`)."""
    return f"gpu.nvidia.com/h-1/gpu-{card}-mig-{profile.replace('.', '')}-9-{start}"


def _plan(layouts, workloads, cards: int = 1):
    text = _text(layouts)
    desired = load([SourceFile("desired.yaml", text)])
    held = {(w.allocations[0].gpu, w.allocations[0].mig_profile) for w in workloads if w.node}
    gpus = [gpu(i, mig=[p for c, p in held if c == i] or None, model=H100) for i in range(cards)]
    observed = snapshot(NOW, [node("h-1", "a100", H100, gpus)], workloads, **_objects(text))
    gated = [
        w.model_copy(update={"admission": "gpupool"}) if w.node is None else w
        for w in observed.workloads
    ]
    observed = observed.model_copy(
        update={"workloads": gated, "dra": dynamic_mig_devices("h-1", cards)}
    )
    plan, _ = plan_with_facts(desired, observed)
    return plan


def _devices(plan) -> dict[str, tuple[str, ...]]:
    return {p.name: p.devices for a in plan.actions if isinstance(a, Admit) for p in a.pods}


def _pending(*profiles: str):
    return [mig_pod("team-b", f"p-{i}-{p}", None, p, pool="a100") for i, p in enumerate(profiles)]


FOUR_TWO_ONE = [("four-two-one", ["4g.40gb", "2g.20gb", "1g.10gb"])]


def test_three_partitions_planned_on_one_card_in_one_cycle_get_disjoint_placements() -> None:
    # the 4g.40gb fits only at slice 0; the 2g.20gb goes at 4 and the 1g.10gb at 6, whatever
    # order the allocator would have served them in
    plan = _plan(FOUR_TWO_ONE, _pending("4g.40gb", "2g.20gb", "1g.10gb"))
    assert _devices(plan) == {
        "p-0-4g.40gb": (ref(0, "4g.40gb", 0),),
        "p-1-2g.20gb": (ref(0, "2g.20gb", 4),),
        "p-2-1g.10gb": (ref(0, "1g.10gb", 6),),
    }


def test_an_allocated_partition_forces_the_rest_of_the_layout_around_it() -> None:
    # a 1g.10gb allocated at slice 0: the balanced layout still fits around it (the other
    # 1g.10gb at 1, the 2g.20gb at 2, the 3g.40gb at 4), and the new pods get those
    running = mig_pod("team-b", "small", "h-1", "1g.10gb", gpu_index=0, start=0)
    plan = _plan(
        [("balanced", ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"])],
        [running, *_pending("3g.40gb", "2g.20gb", "1g.10gb")],
    )
    assert _devices(plan) == {
        "p-0-3g.40gb": (ref(0, "3g.40gb", 4),),
        "p-1-2g.20gb": (ref(0, "2g.20gb", 2),),
        "p-2-1g.10gb": (ref(0, "1g.10gb", 1),),
    }


def test_an_allocated_partition_that_leaves_no_room_for_the_layout_admits_nothing_there() -> None:
    # a 1g.10gb allocated at slice 0 leaves no 4g.40gb placement (it starts at 0 only): the
    # only offered layout does not fit, so no 4g.40gb is admitted onto the card (it would be
    # admitted and never allocated): the pod is held with the reason, and the card's layout
    # is a finding (it is reshaped once its work is gone)
    running = mig_pod("team-b", "small", "h-1", "1g.10gb", gpu_index=0, start=0)
    plan = _plan(FOUR_TWO_ONE, [running, *_pending("4g.40gb")])
    assert _devices(plan) == {}
    held = [a for a in plan.actions if isinstance(a, Hold)]
    assert [(a.target, a.code) for a in held] == [("team-b/p-0-4g.40gb", "waits")], held
    drift = [f for f in plan.findings if f.code == "partition-drift"]
    assert len(drift) == 1 and "[1g.10gb], which Pool/a100 does not offer" in drift[0].message


def test_placements_are_deterministic_whatever_the_snapshot_order() -> None:
    pods = _pending("4g.40gb", "2g.20gb", "1g.10gb", "3g.40gb", "3g.40gb")
    want = _devices(_plan(FOUR_TWO_ONE + [("two-3g", ["3g.40gb", "3g.40gb"])], pods, cards=2))
    assert len(want) == 5
    for seed in range(3):
        shuffled = list(pods)
        random.Random(seed).shuffle(shuffled)
        got = _devices(_plan(FOUR_TWO_ONE + [("two-3g", ["3g.40gb", "3g.40gb"])], shuffled, 2))
        assert got == want
    taken = [d for devices in want.values() for d in devices]
    assert len(set(taken)) == len(taken)
