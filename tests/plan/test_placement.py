"""Behaviour of each placement policy on tiny hand-made clusters."""

from __future__ import annotations

import random

import pytest

from reconciler.plan.placement import (
    POLICIES,
    NodeState,
    Placement,
    PlacementContext,
    PodDemand,
    Resident,
    TargetPod,
    allocate,
    choose,
    choose_with_migration,
    defragment,
    fits,
    node_fragmentation,
    release,
    typical_workload,
)


def node(name, gpus, cpu=64_000, mem=256_000, model="G2"):
    return NodeState(name, model, cpu, mem, list(gpus))


SHARE = PodDemand(num_gpu=1, gpu_milli=500, cpu_milli=4000)
WHOLE = PodDemand(num_gpu=1, gpu_milli=1000, cpu_milli=4000)
EIGHT = PodDemand(num_gpu=8, gpu_milli=1000, cpu_milli=8000)
CPU_ONLY = PodDemand(num_gpu=0, gpu_milli=0, cpu_milli=8000)


@pytest.mark.parametrize(
    "n, req, ok",
    [
        (node("a", [1000, 1000]), WHOLE, True),
        (node("a", [400, 400]), SHARE, False),  # shares do not add up across GPUs
        (node("a", [500, 0]), SHARE, True),
        (node("a", [1000] * 7 + [900]), EIGHT, False),  # multi-GPU needs whole free cards
        (node("a", [1000] * 8), EIGHT, True),
        (node("a", [1000], cpu=3000), WHOLE, False),
        (node("a", [1000], mem=10), PodDemand(1, 1000, 0, 100), False),
        (node("a", [1000], model="T4"), PodDemand(1, 1000, gpu_models=frozenset({"G2"})), False),
        (
            node("a", [1000], model="T4"),
            PodDemand(1, 1000, gpu_models=frozenset({"G2", "T4"})),
            True,
        ),
        (node("a", [], cpu=8000), CPU_ONLY, True),
    ],
)
def test_fits(n, req, ok):
    assert fits(n, req) is ok


def ctx_for(*reqs, seed=0):
    return PlacementContext(target=typical_workload(reqs), rng=random.Random(seed))


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_places_on_a_fitting_node_or_none(policy):
    nodes = [node("full", [0, 0]), node("ok", [1000, 600])]
    ctx = ctx_for(SHARE, WHOLE)
    p = choose(policy, nodes, SHARE, ctx)
    assert p is not None and p.node == "ok"
    assert choose(policy, [node("full", [0, 0])], SHARE, ctx) is None


@pytest.mark.parametrize(
    "policy, nodes, req, want",
    [
        # best-fit: the tightest node
        (
            "bestfit",
            [node("roomy", [1000] * 8), node("tight", [1000, 0, 0, 0, 0, 0, 0, 0])],
            WHOLE,
            "tight",
        ),
        # packing: an already shared GPU beats a free card on a busy node beats an idle node
        (
            "packing",
            [
                node("idle", [1000] * 4),
                node("busy", [1000, 0, 0, 0]),
                node("shared", [600, 0, 0, 0]),
            ],
            SHARE,
            "shared",
        ),
        ("packing", [node("idle", [1000] * 4), node("busy", [1000, 0, 0, 0])], WHOLE, "busy"),
        # dot product: the node whose free vector is least aligned with the demand
        (
            "dotprod",
            [node("lots", [1000] * 8), node("little", [1000, 0, 0, 0, 0, 0, 0, 0])],
            WHOLE,
            "little",
        ),
        # FGD: never break a whole card when a half-used one fits
        ("fgd", [node("fresh", [1000, 1000]), node("half", [500, 1000])], SHARE, "half"),
        ("ours", [node("fresh", [1000, 1000]), node("half", [500, 1000])], SHARE, "half"),
    ],
)
def test_policy_choice(policy, nodes, req, want):
    ctx = ctx_for(SHARE, WHOLE, WHOLE)
    for seed in range(5):  # deterministic whatever the tie-breaking seed
        ctx.rng = random.Random(seed)
        assert choose(policy, nodes, req, ctx).node == want


def test_clustering_keeps_classes_together():
    a, b, c = node("a", [1000] * 4), node("b", [1000] * 4), node("c", [1000] * 4)
    allocate(a, SHARE, Placement("a", (0,)))
    allocate(b, WHOLE, Placement("b", (0,)))
    ctx = ctx_for(SHARE, WHOLE)
    assert choose("clustering", [a, b, c], SHARE, ctx).node == "a"
    assert choose("clustering", [a, b, c], WHOLE, ctx).node == "b"


def test_fgd_picks_the_gpu_that_fragments_least():
    # a 500 share on [1000, 500]: GPU 1 fills exactly; GPU 0 would leave 500 stranded
    n = node("a", [1000, 500])
    p = choose("fgd", [n], SHARE, ctx_for(SHARE, WHOLE))
    assert p.gpus == (1,)


def test_fgd_keeps_whole_nodes_for_multi_gpu_pods():
    empty, used = node("empty", [1000] * 8), node("used", [1000] * 7 + [0])
    ctx = ctx_for(WHOLE, WHOLE, EIGHT)
    assert choose("fgd", [empty, used], WHOLE, ctx).node == "used"


def test_fragmentation_counts_unusable_free_gpu():
    ctx = PlacementContext(target=(TargetPod(1000, 1, 1000, None, 1.0),))
    assert (
        node_fragmentation(node("a", [1000, 300]), ctx) == 300
    )  # 300 cannot host a whole-card task
    assert node_fragmentation(node("a", [1000, 1000]), ctx) == 0
    assert node_fragmentation(node("a", [1000], cpu=0), ctx) == 1000  # no CPU: all of it


def test_typical_workload_weights_sum_to_one():
    t = typical_workload([SHARE, SHARE, WHOLE, CPU_ONLY])
    assert abs(sum(x.weight for x in t) - 1) < 1e-9
    assert t[0].gpu_milli == 500 and t[0].weight == 0.5


def test_random_is_seeded():
    nodes = [node(f"n{i}", [1000] * 2) for i in range(20)]
    a = [choose("random", nodes, WHOLE, ctx_for(WHOLE, seed=7)).node for _ in range(3)]
    b = [choose("random", nodes, WHOLE, ctx_for(WHOLE, seed=7)).node for _ in range(3)]
    assert a == b


def test_allocate_release_roundtrip_and_errors():
    n = node("a", [1000, 1000])
    p = Placement("a", (1,))
    allocate(n, SHARE, p)
    assert n.gpu_free_milli == [1000, 500] and n.cpu_free_milli == 60_000
    release(n, SHARE, p)
    assert n.gpu_free_milli == [1000, 1000]
    with pytest.raises(ValueError):
        allocate(n, EIGHT, Placement("a", (0, 1)))


def test_memo_follows_node_changes():
    nodes = [node("a", [1000]), node("b", [1000, 1000])]
    ctx = ctx_for(WHOLE)
    ctx.memo = True
    first = choose("bestfit", nodes, WHOLE, ctx)
    assert first.node == "a"
    allocate(nodes[0], WHOLE, first)
    assert choose("bestfit", nodes, WHOLE, ctx).node == "b"


def test_unknown_policy():
    with pytest.raises(ValueError, match="unknown placement policy"):
        choose("nope", [], WHOLE, PlacementContext())


def test_migration_makes_room():
    a, b = node("a", [600]), node("b", [300])
    small = PodDemand(1, 400, 1000)
    allocate(a, small, Placement("a", (0,)))  # a: 600 -> 200 free
    residents = {"a": [Resident("p", small, Placement("a", (0,)))], "b": []}
    big = PodDemand(1, 500, 1000)
    assert choose("ours", [a, b], big, ctx_for(big)) is None
    got = choose_with_migration("ours", [a, b], big, ctx_for(big), residents)
    assert got is None  # b cannot take the 400 share either
    b2 = node("b", [450])
    placement, moves = choose_with_migration(
        "ours", [a, b2], big, ctx_for(big), {"a": residents["a"], "b": []}
    )
    assert placement.node == "a" and moves[0].target.node == "b"
    assert a.gpu_free_milli == [200]  # inputs are not modified


def _first_free(req, others):
    return next(
        (
            Placement(o.name, (i,))
            for o in others
            for i, f in enumerate(o.gpu_free_milli)
            if f >= req.gpu_milli
        ),
        None,
    )


def _on(trial, req):
    return Placement(
        trial.name,
        tuple(i for i, f in enumerate(trial.gpu_free_milli) if f >= req.gpu_milli)[: req.num_gpu],
    )


def test_defragment_moves_the_fewest_residents_and_places_them_one_after_another():
    """The planner's case: a 4-card gang; node a has two one-card residents, b two free cards."""
    one = PodDemand(1, 1000)
    a, b = node("a", [0, 0, 1000, 1000]), node("b", [1000, 1000, 0, 0])
    residents = {
        "a": [Resident("x", one, Placement("a", (0,))), Resident("y", one, Placement("a", (1,)))]
    }
    gang = PodDemand(4, 1000)
    assert (
        defragment([a, b], gang, residents, _first_free, _on, max_moves=1) is None
    )  # two moves needed
    placement, moves = defragment([a, b], gang, residents, _first_free, _on, max_moves=2)
    assert placement == Placement("a", (0, 1, 2, 3))
    assert [(m.key, m.target) for m in moves] == [
        ("x", Placement("b", (0,))),
        ("y", Placement("b", (1,))),
    ]
    assert b.gpu_free_milli == [1000, 1000, 0, 0]  # inputs are not modified
    pinned = {"a": [Resident("x", one, Placement("a", (0,)), movable=False), residents["a"][1]]}
    assert defragment([a, b], gang, pinned, _first_free, _on, max_moves=2) is None
