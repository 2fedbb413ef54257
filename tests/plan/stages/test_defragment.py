"""Stage 8, training's last resort: defragmentation (reconciler/plan/stages/defragment.py),
run alone on a fresh run with its usage ledger.

`defragment(run, pv, gang)` moves a few single-card workloads off the node closest to fitting
a one-pod gang, each to a free card elsewhere (a Move after its checkpoint, through the same
eviction check as a preemption, though work of the gang's own priority may move), then places
the gang; it returns whether it did. Nothing moves without an enabled MaintenancePolicy
defragmentation rule, outside its window (UTC), with fewer moves allowed than needed (no
partial moves), when only migratable work may move and none is, or when the hour's budget is
spent (which it records as what blocked the gang).

Two one-card probes block a100-1; a100-2 runs a six-card job and has 2 free cards; an 8-card
gang waits.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from reconciler.observe.builders import training
from reconciler.plan.actions import Move
from reconciler.plan.demand import pending_demand
from reconciler.plan.stages.defragment import defragment
from tests.plan.scenarios import NOW
from tests.plan.support import HIGH, ago, desired, maint, stage_run, two_nodes

PENDING_DEMAND = "{when: pendingDemand, maxMigrationsPerCycle: 2}"
NIGHT = '{when: window, window: {start: "22:00", end: "04:00"}}'
MOVES = {
    "move:team-b/probe-0": ("a100-1", (0,), "a100-2", (6,)),
    "move:team-b/probe-1": ("a100-1", (1,), "a100-2", (7,)),
}
SPENT = [ago(0.1 * i) for i in range(1, 5)]


def at(hh: int) -> datetime:
    return NOW.replace(hour=hh)


def cluster(now, migratable: bool, cls: str) -> list:
    work = [
        training(
            "team-b",
            f"probe-{i}",
            "a100-1",
            [i],
            cls=cls,
            started=ago(2, now),
            migratable=migratable,
        )
        for i in range(2)
    ]
    work += [training("team-b", "eval", "a100-2", [0, 1, 2, 3, 4, 5], started=ago(1, now))]
    work += [training("team-a", "gang", None, 8, pool="a100", created=ago(1, now))]
    return work


# (rule, now, probes migratable, probes' class, recent preemptions, returns, moves, blocked)
ROWS = [
    pytest.param(
        PENDING_DEMAND,
        at(14),
        True,
        "training-low",
        [],
        True,
        MOVES,
        "",
        id="probes-of-the-gangs-priority-move-and-the-gang-gets-its-node",
    ),
    pytest.param(NIGHT, at(23), True, "training-low", [], True, MOVES, "", id="inside-the-window"),
    pytest.param(NIGHT, at(12), True, "training-low", [], False, {}, "", id="outside-the-window"),
    pytest.param(
        "{when: pendingDemand, maxMigrationsPerCycle: 1}",
        at(3),
        True,
        "training-low",
        [],
        False,
        {"move:team-b/probe-0": MOVES["move:team-b/probe-0"]},
        "defragmenting a100-1 for it: 1 move(s) this cycle, 1 more to come "
        "(MaintenancePolicy maxMigrationsPerCycle)",
        id="fewer-moves-allowed-than-needed-moves-as-many-now-the-rest-later",
    ),
    pytest.param(
        "{when: pendingDemand}",
        at(3),
        False,
        "training-low",
        [],
        False,
        {},
        "",
        id="only-migratable-work-moves-by-default",
    ),
    pytest.param(
        PENDING_DEMAND,
        at(3),
        True,
        HIGH,
        [],
        False,
        {},
        "",
        id="work-the-eviction-check-refuses-never-moves",
    ),
    pytest.param(
        PENDING_DEMAND,
        at(3),
        True,
        "training-low",
        SPENT,
        False,
        {},
        "the preemption budget for this hour is spent",
        id="the-hours-budget-spent-moves-none-and-blocks-the-gang",
    ),
]


@pytest.mark.parametrize(
    ("rule", "now", "migratable", "cls", "recent", "returns", "moves", "blocked"), ROWS
)
def test_defragment(rule, now, migratable, cls, recent, returns, moves, blocked):
    run = stage_run(
        desired(maint(defrag=rule, idle="")),
        two_nodes(),
        cluster(now, migratable, cls),
        now=now,
        recent_preemptions=recent,
    )
    pv = run.cluster.pools["a100"]
    (gang,) = pending_demand(run)
    assert defragment(run, pv, gang) is returns
    got = {
        a.id: (a.node, a.gpus, a.to_node, a.to_gpus)
        for a in run.actions.values()
        if isinstance(a, Move)
    }
    assert got == moves
    assert set(run.actions) == set(moves) | {f"checkpoint:{a.split(':')[1]}" for a in moves}
    placed = {g.key for g in pv.gpus if g.reserved_by == gang.key}
    assert placed == ({f"a100-1/gpu{i}" for i in range(8)} if returns else set())
    assert run.blocked.get(gang.key, "") == blocked
    assert not run.findings
