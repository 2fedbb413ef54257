"""Which whole cards a pod gets in the effect model: the NVIDIA device plugin's preferred
allocation (`reconciler.sim.scheduler.preferred_allocation`), not the first free cards and
not the plan's hint.

The nodes are the builders' 8-card nodes: NVLink island (and NUMA node) 0 is cards 0-3,
island 1 cards 4-7 (`reconciler.observe.builders.gpu`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconciler.observe.builders import gpu, node, snapshot, training
from reconciler.observe.model import Allocation, ObservedState, Workload
from reconciler.plan.actions import EVICTION_KINDS, Admit
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.state import DesiredState
from reconciler.sim.effects import apply_plan, schedule, step
from reconciler.sim.scheduler import Override, overrides, preferred_allocation
from tests.plan.cycles_support import overcommits

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
PERIOD = timedelta(minutes=1)
A100 = "A100-SXM4-80GB"
ISLAND_A, ISLAND_B = {0, 1, 2, 3}, {4, 5, 6, 7}

DESIRED = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: gpu}}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: gpu}}}}
  capacity: {{nodes: 2, gpusPerNode: 8}}
  training: {{minGPUs: 0, topology: {topology}}}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {{name: cluster}}
spec:
  defaultClass: training-low
  classes:
    - {{name: training-low, value: 10000, workload: training}}
  preemption: {{minRuntime: 5m, budgetPerHour: 60}}
"""


def desired(topology: str = "nvlink") -> DesiredState:
    return load([SourceFile("desired.yaml", DESIRED.format(topology=topology))])


def cards(w: Workload) -> list[int]:
    return [a.gpu for a in w.allocations]


def work(s: ObservedState) -> dict[str, Workload]:
    return {w.key: w for w in s.workloads}


def one_busy(names: tuple[str, ...] = ("gpu-a",)) -> list[Workload]:
    """A one-card job on card 0 (island A) of each node, running for an hour."""
    return [training("ml", f"busy-{n}", n, [0], started=T0 - timedelta(hours=1)) for n in names]


def pending(name: str, n: int, **update) -> Workload:
    w = training("ml", name, None, n, pool="gpu", created=T0 - timedelta(minutes=5))
    return w.model_copy(update=update)


# ------------------------------------------------------------------------- one node, one pod
def test_a_four_card_pod_gets_the_free_island_not_the_first_free_cards():
    """Card 0 of island A is busy: the first four free cards (1, 2, 3, 4) straddle the two
    islands; the plugin's best-effort policy takes island B whole."""
    s = snapshot(
        T0, [node("gpu-a", "gpu", A100)], [*one_busy(), pending("four", 4, admission="scheduler")]
    )
    w = work(schedule(desired(), s, now=T0))["ml/four"]
    assert (w.phase, w.node, cards(w)) == ("Running", "gpu-a", [4, 5, 6, 7])


def test_an_admitted_pod_gets_the_plugins_cards_and_the_difference_is_counted():
    """The plan meant cards 1-4 for it (the `gpupool.io/intended-gpus` hint): the kubelet
    allocates what the plugin prefers, island B, and `overrides` reports the difference."""
    planned = [Allocation(gpu=i) for i in (1, 2, 3, 4)]
    four = pending("four", 4, admission="admitted", node="gpu-a", allocations=planned)
    before = snapshot(T0, [node("gpu-a", "gpu", A100)], [*one_busy(), four])
    after = schedule(desired(), before, now=T0)
    assert cards(work(after)["ml/four"]) == [4, 5, 6, 7]
    assert overrides(before, after) == [Override("ml/four", "gpu-a", (1, 2, 3, 4), (4, 5, 6, 7))]
    # the plan's own choice, island B, is what the plugin prefers: nothing to count
    agreed = [Allocation(gpu=i) for i in (4, 5, 6, 7)]
    before = before.model_copy(
        update={"workloads": [*one_busy(), four.model_copy(update={"allocations": agreed})]}
    )
    after = schedule(desired(), before, now=T0)
    assert cards(work(after)["ml/four"]) == [4, 5, 6, 7]
    assert overrides(before, after) == []


def test_a_two_card_pod_keeps_the_node_in_pairs():
    """7 free cards, 2 asked: the policy keeps the best partition into pairs ({1,2}, {3},
    {4,5}, {6,7}) and hands out its first best pair."""
    s = snapshot(
        T0, [node("gpu-a", "gpu", A100)], [*one_busy(), pending("two", 2, admission="scheduler")]
    )
    assert cards(work(schedule(desired(), s, now=T0))["ml/two"]) == [1, 2]


# ------------------------------------------------------------------------- single cards
def test_a_single_card_is_the_first_free_card():
    """Size 1: every card scores the same and the policy returns the first available one;
    the model's order is the cards' index (the kubelet's own order is arbitrary)."""
    s = snapshot(
        T0,
        [node("gpu-a", "gpu", A100)],
        [*one_busy(), pending("one", 1, admission="scheduler")],
    )
    assert cards(work(schedule(desired(), s, now=T0))["ml/one"]) == [1]


def test_single_cards_fill_the_node_in_index_order_and_the_plan_is_a_hint():
    """Several one-card pods in one cycle each get the first free card left; one the plan
    meant for card 6 gets the first free card too (the plugin does not read the hint)."""
    hinted = pending(
        "hinted", 1, admission="admitted", node="gpu-a", allocations=[Allocation(gpu=6)]
    )
    pods = [
        pending(f"one-{i}", 1, admission="scheduler", created_at=T0 - timedelta(minutes=10 - i))
        for i in range(2)
    ]
    before = snapshot(T0, [node("gpu-a", "gpu", A100)], [*one_busy(), *pods, hinted])
    after = schedule(desired(), before, now=T0)
    w = work(after)
    # oldest first: one-0, one-1, then the hinted pod (created 5 minutes ago)
    assert [cards(w[k]) for k in ("ml/one-0", "ml/one-1", "ml/hinted")] == [[1], [2], [3]]
    assert overrides(before, after) == [Override("ml/hinted", "gpu-a", (6,), (3,))]
    assert overcommits(after) == []


# --------------------------------------------------- the real policy, on other topologies
def _node_cards(islands: list[int], numa: list[int]):
    return [
        gpu(i).model_copy(update={"nvlink_island": islands[i], "numa_node": numa[i]})
        for i in range(len(islands))
    ]


FOURS = ([0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 1, 1])  # the builders' node
PAIRS = ([0, 0, 1, 1, 2, 2, 3, 3], [0, 0, 0, 0, 1, 1, 1, 1])  # NVLink bridges in pairs
NO_NVLINK = (list(range(8)), [0, 0, 0, 0, 1, 1, 1, 1])  # PCIe only, two sockets


@pytest.mark.parametrize(
    ("topology", "free", "size", "want"),
    [
        (FOURS, [1, 2, 3, 4, 5, 6, 7], 4, [4, 5, 6, 7]),
        (FOURS, [1, 2, 3, 4, 5, 6, 7], 3, [1, 2, 3]),
        (FOURS, [1, 2, 3, 4, 5, 6, 7], 2, [1, 2]),
        (FOURS, [0, 4, 5, 6], 2, [5, 6]),  # a tie: the enumeration's first, not {4, 5}
        (FOURS, [3, 4, 5, 6, 7], 1, [3]),
        # the policy maximizes the whole partition, not the set it returns: {0,1,2} scores
        # more, but {0,1,4} leaves {2,3} a linked pair
        (PAIRS, [0, 1, 2, 3, 4], 3, [0, 1, 4]),
        (PAIRS, [0, 1, 2, 4, 5, 6], 4, [0, 1, 2, 6]),
        (PAIRS, list(range(8)), 3, [0, 1, 2]),
        (NO_NVLINK, list(range(8)), 4, [0, 1, 2, 3]),
    ],
    ids=[
        "four-of-seven",
        "three-of-seven",
        "two-of-seven",
        "tie",
        "one",
        "pairs-partition",
        "pairs-four",
        "pairs-three",
        "numa-only",
    ],
)
def test_preferred_allocation_is_go_gpuallocators_best_effort_policy(topology, free, size, want):
    """Each expectation is what go-gpuallocator v0.6.0's `NewBestEffortPolicy().Allocate`
    returned for these devices (links: one NVLink within an island plus P2PLinkSameCPU
    within a NUMA node, P2PLinkCrossCPU across), available in index order. The port was
    compared with it on every free set and size of these three 8-card topologies (3072
    cases, all equal); the Go harness is not part of this repository."""
    node_cards = _node_cards(*topology)
    assert preferred_allocation([node_cards[i] for i in free], size) == want


def test_preferred_allocation_cannot_give_more_than_is_free():
    assert preferred_allocation([gpu(1), gpu(2)], 3) == []


# ------------------------------------------------------------------ over several cycles
def _cycles(d: DesiredState, obs: ObservedState, n: int) -> tuple[list, list[ObservedState]]:
    """plan -> `reconciler.sim.effects.step`, `n` times; the plans and every snapshot."""
    plans, states = [], [obs]
    for k in range(n):
        now = T0 + k * PERIOD
        p = plan(d, states[-1], now)
        plans.append(p)
        states.append(step(d, states[-1], p, now=now, period=PERIOD))
    return plans, states


def _gang() -> list[Workload]:
    """A gated Job of two pods of four cards each."""
    return [pending(f"gang-{i}", 4, owner_name="gang", gang_size=2) for i in range(2)]


def test_a_gang_the_plan_keeps_on_one_island_stays_there():
    """Two nodes, card 0 of each busy; the planner (topology nvlink) admits each 4-card pod
    of the gang to island B of a node. Bound through the model, each runs on exactly the
    cards the plan meant (first-free would have given it 1-4, across both islands), and over
    the following cycles nothing moves or evicts it."""
    d = desired("nvlink")
    nodes = [node(n, "gpu", A100) for n in ("gpu-a", "gpu-b")]
    obs = snapshot(T0, nodes, [*one_busy(("gpu-a", "gpu-b")), *_gang()])
    plans, states = _cycles(d, obs, 6)
    admits = [a for a in plans[0].actions if isinstance(a, Admit)]
    meant = {(p.name, p.node): set(p.gpus) for a in admits for p in a.pods}
    assert sorted(n for _, n in meant) == ["gpu-a", "gpu-b"]
    assert all(g == ISLAND_B for g in meant.values())
    for s in states[1:]:
        w = work(s)
        got = {(k.split("/")[1], w[k].node): set(cards(w[k])) for k in ("ml/gang-0", "ml/gang-1")}
        assert got == meant
        assert all(w[k].phase == "Running" for k in ("ml/gang-0", "ml/gang-1"))
        assert overcommits(s) == []
    assert not [a for p in plans for a in p.actions if a.kind in EVICTION_KINDS]


def test_a_plan_that_straddles_islands_is_not_followed():
    """Without a topology preference the planner takes the first free cards (1-4, across
    the islands) for each pod; the plugin gives island B. The model binds the plugin's
    cards, `overrides` counts both pods, and the following cycles leave them there."""
    d = desired("node")
    nodes = [node(n, "gpu", A100) for n in ("gpu-a", "gpu-b")]
    obs = snapshot(T0, nodes, [*one_busy(("gpu-a", "gpu-b")), *_gang()])
    p = plan(d, obs, T0)
    admits = [a for a in p.actions if isinstance(a, Admit)]
    assert {p.gpus for a in admits for p in a.pods} == {(1, 2, 3, 4)}
    applied = apply_plan(d, obs, p, now=T0)
    bound = schedule(d, applied, now=T0)
    assert sorted((o.pod, o.got) for o in overrides(applied, bound)) == [
        ("ml/gang-0", (4, 5, 6, 7)),
        ("ml/gang-1", (4, 5, 6, 7)),
    ]
    plans, states = _cycles(d, obs, 6)
    for s in states[1:]:
        w = work(s)
        assert [set(cards(w[k])) for k in ("ml/gang-0", "ml/gang-1")] == [ISLAND_B, ISLAND_B]
        assert overcommits(s) == []
    assert not [a for p in plans for a in p.actions if a.kind in EVICTION_KINDS]
