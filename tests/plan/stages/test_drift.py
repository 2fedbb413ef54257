"""Stage 1, drift (reconciler/plan/stages/drift.py), run alone on a fresh run.

`repartition_drift`: a card whose partition the pool's policy does not offer is repartitioned
in the working view when it is empty, and only reported (`partition-drift`) while work runs on
it; a shared card changes with its node's other plain cards (the device plugin shares per
node); inference cards over `inference.maxGPUs` go back to whole. The stage emits no action
(the repartitions become actions at step 10) and returns nothing. `report_fences`: an
unavailable node is a `node-unavailable` finding, and its cards are not judged.
"""

from __future__ import annotations

import pytest

from reconciler.observe.builders import gpu, mig_pod, shared_pod
from reconciler.plan.stages.drift import repartition_drift, report_fences
from tests.plan.scenarios import A100, BAL
from tests.plan.support import (
    ago,
    changed_cards,
    desired,
    findings_of,
    stage_run,
    two_nodes,
)

BALANCED = "MIG[1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb]"
DROPPED = [gpu(0, mig=["7g.80gb"], model=A100)] + [gpu(i, mig=BAL, model=A100) for i in range(1, 8)]
X8 = [gpu(i, shared=8) for i in range(8)]
NO_SHARED = ("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
MAX_2 = ("    maxGPUs: 8\n", "    maxGPUs: 2\n")


def a100_1(*cards: int) -> list[str]:
    return [f"a100-1/gpu{i}" for i in cards]


# (swaps of the desired state, a100-1's cards, workloads, a100-1 ready, changed cards, findings)
ROWS = [
    pytest.param(
        (),
        [gpu(i, mig=BAL, model=A100) for i in range(2)] + [gpu(i) for i in range(2, 8)],
        [],
        True,
        {},
        set(),
        id="cards-the-policy-offers-are-left-alone",
    ),
    pytest.param(
        (),
        DROPPED,
        [],
        True,
        {"a100-1/gpu0": f"MIG[7g.80gb] -> {BALANCED}"},
        set(),
        id="empty-card-of-a-layout-the-policy-dropped-is-repartitioned",
    ),
    pytest.param(
        (),
        DROPPED,
        [mig_pod("team-b", "big-0", "a100-1", "7g.80gb", started=ago(2))],
        True,
        {},
        {("partition-drift", "a100-1/gpu0")},
        id="busy-drifted-card-only-gets-a-finding",
    ),
    pytest.param(
        (),
        X8,
        [],
        True,
        {card: "shared x8 -> shared x4" for card in a100_1(*range(8))},
        set(),
        id="empty-node-at-an-old-slice-count-is-reshared-with-the-policys",
    ),
    pytest.param(
        (),
        X8,
        [shared_pod("team-b", "chat-0", "a100-1", 1, started=ago(2))],
        True,
        {},
        {("partition-drift", card) for card in a100_1(*range(8))},
        id="one-busy-shared-card-keeps-its-node-at-the-old-count",
    ),
    pytest.param(
        (NO_SHARED,),
        [gpu(i, shared=4) for i in range(8)],
        [],
        True,
        {card: f"shared x4 -> {BALANCED}" for card in a100_1(*range(8))},
        set(),
        id="shared-cards-of-a-pool-without-shared-slices-become-its-preferred-mig",
    ),
    pytest.param(
        (MAX_2,),
        [gpu(i, mig=BAL, model=A100) for i in range(4)] + [gpu(i) for i in range(4, 8)],
        [],
        True,
        {card: f"{BALANCED} -> whole" for card in a100_1(0, 1)},
        set(),
        id="inference-cards-over-max-gpus-go-back-to-whole",
    ),
    pytest.param(
        (),
        DROPPED,
        [],
        False,
        {},
        {("node-unavailable", "a100-1")},
        id="cards-of-an-unavailable-node-are-not-judged-and-it-is-reported",
    ),
]


@pytest.mark.parametrize(("swaps", "gpus1", "work", "ready", "changed", "findings"), ROWS)
def test_drift(swaps, gpus1, work, ready, changed, findings):
    nodes = two_nodes(gpus1)
    nodes[0] = nodes[0].model_copy(update={"ready": ready})
    run = stage_run(desired(*swaps), nodes, work)
    assert repartition_drift(run) is None
    report_fences(run)
    assert changed_cards(run) == changed
    assert findings_of(run) == findings
    assert not run.actions, "drift changes the working view; step 10 makes the actions"
    assert run.generation == len(changed), "each card repartitioned frees capacity"
