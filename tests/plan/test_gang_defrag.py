"""An 8-card job behind a queue of one-card jobs of the same priority (the digital twin's
Coding week, issue 15), over several cycles of plan -> `reconciler.sim.effects.step`.

Without a MaintenancePolicy nothing makes a node whole for it: the one-card jobs behind it take
every card that comes free and it keeps waiting. With `defragmentation` (as `bench/twin.py`
configures it) the planner moves one-card jobs off one node, all in one cycle, and admits the
8-card job there; nothing is moved twice and the node it gets stays the same."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconciler.observe.builders import node, snapshot, training
from reconciler.observe.model import ObservedState
from reconciler.plan.actions import Admit, Move
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.sim.effects import step

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
PERIOD = timedelta(minutes=1)

DESIRED = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {name: gpu}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {matchLabels: {gpupool.io/pool: gpu}}
  capacity: {nodes: 2, gpusPerNode: 8}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {name: cluster}
spec:
  defaultClass: training-low
  classes:
    - {name: training-low, value: 10000, workload: training}
  preemption: {minRuntime: 5m, budgetPerHour: 60}
"""

DEFRAG = """\
---
apiVersion: gpupool.io/v1alpha1
kind: MaintenancePolicy
metadata: {name: defragment}
spec:
  defragmentation: {when: pendingDemand, maxMigrationsPerCycle: 4, onlyMigratable: false}
"""


def start() -> ObservedState:
    """Two 8-card nodes, each with 4 one-card jobs running for an hour (8 cards free, none
    on an empty node); pending: the 8-card job, then 4 younger one-card jobs."""
    nodes = [node(n, "gpu", "A100-SXM4-80GB") for n in ("gpu-a", "gpu-b")]
    running = [
        training("ml", f"small-{n}-{i}", n, [i], started=T0 - timedelta(hours=1))
        for n in ("gpu-a", "gpu-b")
        for i in range(4)
    ]
    pending = [training("ml", "big", None, 8, created=T0 - timedelta(minutes=30))] + [
        training("ml", f"late-{i}", None, 1, created=T0 - timedelta(minutes=10 - i))
        for i in range(4)
    ]
    return snapshot(T0, nodes, running + pending)


def cycles(text: str, n: int) -> tuple[list, ObservedState]:
    desired = load([SourceFile("desired.yaml", text)])
    obs, plans = start(), []
    for k in range(n):
        now = T0 + k * PERIOD
        p = plan(desired, obs, now)
        plans.append(p)
        obs = step(desired, obs, p, now=now, period=PERIOD)
    return plans, obs


def big(obs: ObservedState):
    return next(w for w in obs.workloads if w.name == "big")


def test_without_defragmentation_the_big_job_waits_behind_the_small_ones() -> None:
    plans, obs = cycles(DESIRED, 4)
    assert big(obs).phase == "Pending"
    # the one-card jobs queued behind it were admitted onto the free cards
    assert all(w.phase == "Running" for w in obs.workloads if w.name.startswith("late-")), [
        (w.name, w.phase) for w in obs.workloads
    ]
    assert not any(isinstance(a, Move) for p in plans for a in p.actions)
    waits = [f for f in plans[-1].findings if f.subject.endswith("/big")]
    assert waits and "8 whole GPUs" in waits[0].message


@pytest.mark.parametrize("n", [4, 6])
def test_defragmentation_makes_one_node_whole_for_it(n: int) -> None:
    plans, obs = cycles(DESIRED + DEFRAG, n)
    moves = [a for p in plans for a in p.actions if isinstance(a, Move)]
    admits = [a for p in plans for a in p.actions if isinstance(a, Admit) and a.target == "ml/big"]
    # one cycle moves the four jobs off one node, to the other's free cards
    assert len(moves) == 4
    assert len({a.target for a in moves}) == 4, "a job was moved twice"
    assert {a.to_node for a in moves} == {"gpu-b"}
    assert all(a.reason and "ml/big" in a.reason for a in moves)
    assert admits and {pod.node for a in admits for pod in a.pods} == {"gpu-a"}
    b = big(obs)
    assert b.phase == "Running" and b.node == "gpu-a" and len(b.allocations) == 8
    # the moved jobs run again on gpu-b; the younger one-card jobs wait for free cards
    moved = {a.target for a in moves}
    assert all(w.phase == "Running" and w.node == "gpu-b" for w in obs.workloads if w.key in moved)
    assert all(w.phase == "Pending" for w in obs.workloads if w.name.startswith("late-"))
    # nothing more is moved once it runs
    assert not any(isinstance(a, Move) for a in plans[-1].actions)


def test_the_twin_benchmark_configures_it() -> None:
    """`bench/twin.py`'s desired state (the numbers in docs/simulator.md) carries the same
    defragmentation as this test."""
    from bench import twin

    text = twin.DESIRED.format(
        nodes=twin.NODES,
        gpn=twin.GPUS_PER_NODE,
        max=64,
        up=8,
        down=6,
        up_step="step: 4",
        down_step="step: 2",
        down_cooldown="10m",
        forecast="",
        migrations=4,  # bench/twin.py --max-migrations' default
    )
    desired = load([SourceFile("desired.yaml", text)])
    (rule,) = [m.spec.defragmentation for m in desired.maintenance_for("gpu")]
    assert rule is not None and rule.enabled
    assert (rule.when, rule.max_migrations_per_cycle, rule.only_migratable) == (
        "pendingDemand",
        4,
        False,
    )


def test_more_moves_than_a_cycle_allows_go_over_several_cycles() -> None:
    """maxMigrationsPerCycle caps a cycle, not a gang: four moves at two per cycle take two
    cycles, off the same node, each job moved once; meanwhile the cards the gang will need
    (the node's, and those the next moves go to) are not given to the younger one-card jobs."""
    plans, obs = cycles(DESIRED + DEFRAG.replace("Cycle: 4", "Cycle: 2"), 4)
    per_cycle = [[a for a in p.actions if isinstance(a, Move)] for p in plans]
    assert [len(m) for m in per_cycle] == [2, 2, 0, 0]
    moves = [a for m in per_cycle for a in m]
    assert len({a.target for a in moves}) == 4, "a job was moved twice"
    assert {a.node for a in moves} == {"gpu-a"} and {a.to_node for a in moves} == {"gpu-b"}
    waits = [f for f in plans[0].findings if f.subject == "ml/big"]
    assert waits and "defragmenting gpu-a for it: 2 move(s) this cycle, 2 more" in waits[0].message
    b = big(obs)
    assert b.phase == "Running" and b.node == "gpu-a" and len(b.allocations) == 8
    assert all(w.phase == "Pending" for w in obs.workloads if w.name.startswith("late-"))
