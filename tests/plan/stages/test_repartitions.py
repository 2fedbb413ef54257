"""Stage 10, repartitions (reconciler/plan/stages/repartitions.py), run alone on a fresh run
whose working view earlier stages changed (here: the partition backend's `reshape`, and
`evict`, called directly).

`repartition_actions`: per node with changed cards, cordon -> (the evictions on those cards,
already emitted) -> the backend's change (mig-manager's layout, then the device plugin's
sharing config) -> uncordon, each step waiting for the one before. `finish_drains`: a node
gpupool cordoned for a repartition that is complete (nothing changes on it this plan) is
uncordoned; a node cordoned by anyone else is left alone.
"""

from __future__ import annotations

import pytest

from reconciler.conventions import CORDONED_FOR_ANN
from reconciler.plan.evictions import evict
from reconciler.plan.partition import partition_for
from reconciler.plan.stages.repartitions import finish_drains, repartition_actions
from tests.plan.scenarios import BAL
from tests.plan.support import desired, job, stage_run, two_nodes


def reshape(node: str, index: int, mode: str, layout: tuple[str, ...] | list[str] = ()):
    def step(run):
        pv = run.cluster.pools["a100"]
        g = run.cluster.slot[(node, index)]
        assert partition_for(run, pv).reshape(run, g, pv, mode, tuple(sorted(layout)), why="t")

    return step


def preempt(key: str):
    def step(run):
        evict(run, run.cluster.workloads[key], "preempt", "t", "a100")

    return step


def cordoned(by_gpupool: bool):
    nodes = two_nodes()
    ann = {CORDONED_FOR_ANN: "mig"} if by_gpupool else {}
    nodes[0] = nodes[0].model_copy(update={"unschedulable": True, "annotations": ann})
    return nodes


MIG_1 = reshape("a100-1", 0, "mig", BAL)
LOW = job("team-b", "low", "a100-1", [0])

# (nodes, workloads, earlier steps, action id -> its dependencies)
ROWS = [
    pytest.param(two_nodes(), [], [], {}, id="no-card-changes-no-action"),
    pytest.param(
        two_nodes(),
        [],
        [MIG_1],
        {
            "cordon:a100-1": (),
            "mig-reconfigure:a100-1": ("cordon:a100-1",),
            "uncordon:a100-1": ("mig-reconfigure:a100-1",),
        },
        id="a-mig-change-is-cordon-reconfigure-uncordon",
    ),
    pytest.param(
        two_nodes(),
        [LOW],
        [preempt("team-b/low"), MIG_1],
        {
            "checkpoint:team-b/low": (),
            "preempt:team-b/low": ("checkpoint:team-b/low",),
            "cordon:a100-1": (),
            "mig-reconfigure:a100-1": ("cordon:a100-1", "preempt:team-b/low"),
            "uncordon:a100-1": ("mig-reconfigure:a100-1",),
        },
        id="the-change-waits-for-the-evictions-on-its-cards",
    ),
    pytest.param(
        two_nodes(),
        [],
        [reshape("a100-2", 3, "shared")],
        {
            "cordon:a100-2": (),
            "set-sharing:a100-2": ("cordon:a100-2",),
            "uncordon:a100-2": ("set-sharing:a100-2",),
        },
        id="sharing-changes-the-whole-nodes-config",
    ),
    pytest.param(
        two_nodes(),
        [],
        [MIG_1, reshape("a100-1", 1, "shared")],
        {
            "cordon:a100-1": (),
            "mig-reconfigure:a100-1": ("cordon:a100-1",),
            "set-sharing:a100-1": ("cordon:a100-1", "mig-reconfigure:a100-1"),
            "uncordon:a100-1": ("set-sharing:a100-1",),
        },
        id="mig-layout-before-sharing-config-under-one-cordon",
    ),
    pytest.param(
        cordoned(True), [], [], {"uncordon:a100-1": ()}, id="a-drain-that-is-complete-is-uncordoned"
    ),
    pytest.param(cordoned(False), [], [], {}, id="a-node-cordoned-by-someone-else-is-left-alone"),
    pytest.param(
        cordoned(True),
        [],
        [MIG_1],
        {
            "cordon:a100-1": (),
            "mig-reconfigure:a100-1": ("cordon:a100-1",),
            "uncordon:a100-1": ("mig-reconfigure:a100-1",),
        },
        id="a-drained-node-still-changing-is-uncordoned-after-its-change-only",
    ),
]


@pytest.mark.parametrize(("nodes", "work", "steps", "actions"), ROWS)
def test_repartitions(nodes, work, steps, actions):
    run = stage_run(desired(), nodes, work)
    for step in steps:
        step(run)
    assert repartition_actions(run) is None
    assert finish_drains(run) is None
    assert {a.id: a.depends_on for a in run.actions.values()} == actions
    assert not run.findings
