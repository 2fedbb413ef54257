"""Idle by threshold: the node agent publishes, per card, since when utilization has stayed
below each of a fixed ladder of levels (processes or not); a policy's `utilizationBelow` is
read conservatively from that ladder (issue 12, item 6)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconciler.observe import kube
from reconciler.observe.agent import collect_node
from reconciler.observe.model import (
    UTILIZATION_LEVELS,
    Gpu,
    Node,
    ObservedState,
    below_since_after,
    idle_since_below,
)
from reconciler.observe.snapshot import dump_snapshot, parse_snapshot
from reconciler.plan.cluster import _slot
from reconciler.plan.consistency import canonical
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml

T0 = datetime(2026, 12, 2, tzinfo=UTC)
UUID = "GPU-0b7e2a4c-aaaa-bbbb-cccc-000000000001"


def _publish(utilization: int, at: datetime, previous: Node | None, uuid: str = UUID) -> Node:
    """One agent publication of a one-card node whose card holds a process (a notebook)."""
    fake = FakeNvml(
        [FakeGpu("L40S-48GB", uuid=uuid, utilization=utilization, processes=[(4242, 900)])]
    )
    return collect_node("n1", nvml=fake, now=at, previous=previous)


def _card(node: Node) -> Gpu:
    [g] = node.gpus
    return g


# --- the agent ---------------------------------------------------------------------------------


def test_a_card_with_a_process_is_idle_below_a_threshold_it_stays_under():
    """3 % with a CUDA context held: idle for a 5 % policy from when it dropped below 5 %,
    not idle for a 2 % policy."""
    busy = _publish(60, T0, None)
    assert _card(busy).below_since == {} and _card(busy).idle_since is None
    low = _publish(3, T0 + timedelta(minutes=1), busy)
    later = _publish(3, T0 + timedelta(minutes=90), low)
    g = _card(later)
    assert g.processes  # the process does not matter
    assert g.idle_since_below(5) == T0 + timedelta(minutes=1)
    assert g.idle_since_below(2) is None
    assert g.idle_since is None  # 3 % is not below the lowest level
    assert set(g.below_since) == {lvl for lvl in UTILIZATION_LEVELS if lvl > 3}


def test_a_sample_at_a_level_restarts_that_level_and_the_ones_under_it_only():
    a = _publish(3, T0, None)
    b = _publish(7, T0 + timedelta(minutes=10), a)  # a burst: 7 %
    c = _publish(3, T0 + timedelta(minutes=20), b)
    g = _card(c)
    assert g.idle_since_below(5) == T0 + timedelta(minutes=20)  # the 5 % stretch restarted
    assert g.idle_since_below(10) == T0  # never reached 10 %
    assert g.below_since[50] == T0


def test_levels_carry_over_by_uuid_and_a_new_uuid_starts_afresh():
    a = _publish(0, T0, None)
    assert _card(a).idle_since == T0
    assert _card(a).below_since == dict.fromkeys(UTILIZATION_LEVELS, T0)
    b = _publish(0, T0 + timedelta(hours=2), a)
    assert _card(b).below_since == dict.fromkeys(UTILIZATION_LEVELS, T0)
    assert _card(b).idle_since == T0
    swapped = _publish(0, T0 + timedelta(hours=3), b, uuid="GPU-replaced-card")
    assert _card(swapped).below_since == dict.fromkeys(UTILIZATION_LEVELS, T0 + timedelta(hours=3))
    assert _card(swapped).idle_since == T0 + timedelta(hours=3)


def test_an_old_agents_idle_since_carries_over_to_every_level():
    """A publication from before `belowSince` (idleSince meant: no process and 0 %) seeds
    every level, so an upgrade of the agent does not restart idle times."""
    old = Node(name="n1", gpus=[Gpu(index=0, uuid=UUID, idle_since=T0)])
    g = _card(_publish(3, T0 + timedelta(hours=1), old))
    assert g.idle_since_below(5) == T0
    assert g.idle_since_below(2) is None


def test_below_since_after_is_pure_and_strict():
    before = {5: T0, 10: T0}
    now = T0 + timedelta(minutes=1)
    assert below_since_after(before, 5.0, now) == {
        lvl: T0 if lvl == 10 else now for lvl in UTILIZATION_LEVELS if lvl > 5
    }
    assert below_since_after(before, 100.0, now) == {}
    assert before == {5: T0, 10: T0}


# --- reading a policy threshold ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("percent", "level"),
    [(1, 1), (5, 5), (7, 5), (9.5, 5), (10, 10), (45, 40), (50, 50), (80, 50), (100, 50)],
)
def test_a_threshold_is_read_from_the_largest_level_under_it(percent, level):
    """Conservative: below a lower level is below `percent` too, never the other way."""
    below = {lvl: T0 + timedelta(minutes=100 - lvl) for lvl in UTILIZATION_LEVELS}
    assert idle_since_below(below, None, percent) == below[level]


@pytest.mark.parametrize("percent", [0, 0.5])
def test_a_threshold_under_the_lowest_level_is_never_known(percent):
    below = dict.fromkeys(UTILIZATION_LEVELS, T0)
    assert idle_since_below(below, T0, percent) is None


def test_a_level_the_card_is_above_now_is_not_idle():
    g = Gpu(index=0, utilization=12, below_since={15: T0, 20: T0, 50: T0})
    assert g.idle_since_below(10) is None
    assert g.idle_since_below(17) == T0


def test_without_below_since_idle_since_is_read_for_any_threshold():
    """Snapshot files and agents from before `belowSince`."""
    g = Gpu(index=0, utilization=1, idle_since=T0)
    assert g.idle_since_below(5) == T0
    assert g.idle_since_below(0.5) == T0
    assert g.idle_since_below(0) is None
    assert Gpu(index=0).idle_since_below(5) is None


def test_the_planner_slot_reads_the_same_way():
    g = Gpu(index=0, utilization=3, below_since={5: T0, 10: T0 - timedelta(hours=1)})
    slot = _slot(Node(name="n1", gpus=[g]), g)
    assert slot.idle_since_below(7) == T0
    assert slot.idle_since_below(12) == T0 - timedelta(hours=1)
    assert slot.idle_since_below(2) is None
    legacy = Gpu(index=0, utilization=0, idle_since=T0)
    assert _slot(Node(name="n1", gpus=[legacy]), legacy).idle_since_below(5) == T0


# --- serialisation -------------------------------------------------------------------------------


def test_below_since_round_trips_through_a_snapshot_and_is_canonical():
    g = Gpu(index=0, utilization=3, below_since={50: T0, 5: T0, 10: T0})
    state = ObservedState(observed_at=T0, nodes=[Node(name="n1", gpus=[g])])
    assert parse_snapshot(dump_snapshot(state)) == state
    assert list(canonical(state).nodes[0].gpus[0].below_since) == [5, 10, 50]
    dumped = g.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    assert dumped["belowSince"] == dict.fromkeys(["50", "5", "10"], "2026-12-02T00:00:00Z")


def test_a_published_below_since_is_read_back():
    """What `gpupool agent` writes (`model_dump(mode="json", by_alias=True)`) reads back the
    same; a naive time is UTC, an unreadable one drops its level."""
    g = _card(_publish(3, T0, None))
    entry = g.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    assert kube.published_gpus("n1", [entry]) == [g]
    [read] = kube.published_gpus(
        "n1",
        [{"index": 0, "belowSince": {"5": "2026-12-02T00:00:00", "10": "soon", "20": T0}}],
    )
    assert read.below_since == {5: T0, 20: T0}


def test_a_published_below_since_with_a_bad_level_leaves_the_card_out():
    assert kube.published_gpus("n1", [{"index": 0, "belowSince": {"0": T0.isoformat()}}]) == []
    assert kube.published_gpus("n1", [{"index": 0, "belowSince": {"x": T0.isoformat()}}]) == []
