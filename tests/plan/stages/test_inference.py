"""Stage 8, inference (reconciler/plan/stages/inference.py), run alone on a fresh run with its
usage ledger, for pool a100 (A100: a MIG mode change resets the whole node).

`serve_inference` places pending MIG and shared-slice demand on free instances and slices;
for what is left it reshapes empty inference cards of the wrong shape first, then takes whole
cards (empty ones first, then freed by preempting what the priority rules allow), or shares a
whole node (the device plugin shares every plain card of a node), within the pool's inference
budget (`inference-limit` past it); what still does not fit waits (`waits`).
`keep_warm_minimum` keeps `inference.minGPUs` cards for inference from empty whole cards only
(`warm-short` when there are none): nothing is stopped for it.
"""

from __future__ import annotations

import pytest

from reconciler.observe.builders import gpu, mig_pod, shared_pod
from reconciler.plan.actions import Preempt
from reconciler.plan.demand import pending_demand
from reconciler.plan.stages.inference import keep_warm_minimum, serve_inference
from tests.plan.scenarios import A100, BAL, desired_text
from tests.plan.support import (
    HIGH,
    ago,
    changed_cards,
    desired,
    findings_of,
    job,
    stage_run,
    two_nodes,
)

BALANCED = "MIG[1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb]"
RANKER = mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")
WHOLE = [gpu(i) for i in range(1, 8)]
FULL_HIGH = job("team-a", "wide-1", "a100-1", 8, HIGH)
MAX_1 = ("    maxGPUs: 8\n", "    maxGPUs: 1\n")
TWO_3G_FULL = [
    mig_pod("team-b", f"ranker-{i}", "a100-1", "3g.40gb", start=4 * (i - 1), started=ago(1))
    for i in (1, 2)
]


def every_card(node: str, change: str) -> dict[str, str]:
    return {f"{node}/gpu{i}": change for i in range(8)}


# (desired swaps, a100-1's cards, workloads, where the demand is placed, changed cards,
#  preemptions, findings)
SERVE_ROWS = [
    pytest.param(
        (),
        [gpu(0, mig=BAL, model=A100), *WHOLE],
        [RANKER],
        {"team-b/ranker-0": "a100-1/gpu0"},
        {},
        set(),
        set(),
        id="a-free-mig-instance-is-taken-as-it-is",
    ),
    pytest.param(
        (),
        None,
        [RANKER],
        {"team-b/ranker-0": "a100-1/gpu0"},
        {"a100-1/gpu0": f"whole -> {BALANCED}"},
        set(),
        set(),
        id="no-free-instance-an-empty-whole-card-becomes-the-covering-layout",
    ),
    pytest.param(
        (),
        [gpu(0, mig=["3g.40gb", "3g.40gb"], model=A100), *WHOLE],
        [mig_pod("team-b", "ranker-0", None, "1g.10gb", pool="a100")],
        {"team-b/ranker-0": "a100-1/gpu0"},
        {"a100-1/gpu0": f"MIG[3g.40gb, 3g.40gb] -> {BALANCED}"},
        set(),
        set(),
        id="an-empty-inference-card-of-the-wrong-layout-is-reshaped-before-a-whole-one",
    ),
    pytest.param(
        (),
        None,
        [shared_pod("team-b", "chat-0", None, 1, pool="a100")],
        {"team-b/chat-0": "a100-1/gpu0"},
        every_card("a100-1", "whole -> shared x4"),
        set(),
        set(),
        id="shared-demand-shares-a-whole-free-node",
    ),
    pytest.param(
        (),
        None,
        [
            RANKER,
            FULL_HIGH,
            job("team-b", "low-a", "a100-2", [0, 1, 2, 3]),
            job("team-b", "low-b", "a100-2", [4, 5, 6, 7], ckpt=1),
        ],
        {"team-b/ranker-0": "a100-2/gpu0"},
        {"a100-2/gpu0": f"whole -> {BALANCED}"},
        {"preempt:team-b/low-a", "preempt:team-b/low-b"},
        set(),
        id="serving-preempts-a-nodes-training-low-for-a-mig-card-on-ampere",
    ),
    pytest.param(
        (MAX_1,),
        [gpu(0, mig=["3g.40gb", "3g.40gb"], model=A100), *WHOLE],
        [RANKER, *TWO_3G_FULL],
        {},
        {},
        set(),
        {("inference-limit", "a100"), ("waits", "team-b/ranker-0")},
        id="past-inference-max-gpus-the-demand-waits",
    ),
]


@pytest.mark.parametrize(
    ("swaps", "gpus1", "work", "placed", "changed", "preempts", "findings"), SERVE_ROWS
)
def test_serve_inference(swaps, gpus1, work, placed, changed, preempts, findings):
    run = stage_run(desired(*swaps), two_nodes(gpus1), work)
    pv = run.cluster.pools["a100"]
    assert serve_inference(run, pv, pending_demand(run)) is None
    demand = {p.key for p in pending_demand(run)}
    assert {h: g.key for g in pv.gpus for h in g.holders if h in demand} == placed
    assert changed_cards(run) == changed
    got = {a.id: a.preemptor for a in run.actions.values() if isinstance(a, Preempt)}
    assert got == dict.fromkeys(preempts, "team-b/ranker-0")
    assert findings_of(run) == findings


# (a100-2's workloads, changed cards, findings)
WARM_ROWS = [
    pytest.param(
        [],
        {f"a100-2/gpu{i}": f"whole -> {BALANCED}" for i in (0, 1)},
        set(),
        id="the-warm-minimum-comes-from-empty-whole-cards",
    ),
    pytest.param(
        [job("team-b", "low", "a100-2", 8)],
        {},
        {("warm-short", "a100")},
        id="nothing-is-stopped-for-the-warm-minimum",
    ),
]


@pytest.mark.parametrize(("work", "changed", "findings"), WARM_ROWS)
def test_keep_warm_minimum(work, changed, findings):
    run = stage_run(desired_text(inf_min=2), two_nodes(), [FULL_HIGH, *work])
    assert keep_warm_minimum(run, run.cluster.pools["a100"]) is None
    assert changed_cards(run) == changed
    assert not run.actions
    assert findings_of(run) == findings
