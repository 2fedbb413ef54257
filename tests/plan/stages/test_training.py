"""Stage 8, training (reconciler/plan/stages/training.py), run alone on a fresh run with its
usage ledger, for pool a100.

`place_training` places each whole-card gang on free whole cards (each pod on one node); when
it fits nowhere it tries, in order, giving back empty inference cards beyond the warm minimum,
preempting victims the priority rules allow, and moving single-card work (defragment.py); a
class whose rule says `when: always` (training-high over spot) preempts before inference cards
are given back. What still does not fit waits, with what stopped it (`waits`, or
`budget-spent` when the hour's budget did). A gang already on its reservation is left alone.
"""

from __future__ import annotations

import pytest

from reconciler.observe.builders import gpu
from reconciler.plan.actions import Preempt
from reconciler.plan.demand import pending_demand
from reconciler.plan.stages.training import place_training
from tests.plan.scenarios import A100, BAL, desired_text
from tests.plan.support import (
    HIGH,
    ago,
    changed_cards,
    desired,
    findings_of,
    job,
    pend,
    stage_run,
    two_nodes,
)

FULL = job("team-a", "full", "a100-1", 8, HIGH)
HALF_MIG = [gpu(i, mig=BAL, model=A100) for i in range(4)] + [gpu(i) for i in range(4, 8)]
BALANCED = "MIG[1g.10gb, 1g.10gb, 2g.20gb, 3g.40gb]"
SPOT = job("team-b", "sweep", "a100-2", 8, "spot")
SPENT = {"recent_preemptions": [ago(0.1 * i) for i in range(1, 5)]}


def cards(node: str, *index: int) -> set[str]:
    return {f"{node}/gpu{i}" for i in index}


# (desired text, a100-2's cards, workloads, snapshot kwargs, the gang on its reservation,
#  cards it gets, changed cards, preemptions, findings)
ROWS = [
    pytest.param(
        desired(),
        None,
        [pend("team-a", "job", 2)],
        {},
        False,
        cards("a100-2", 0, 1),
        {},
        set(),
        set(),
        id="a-gang-that-fits-is-placed-on-free-whole-cards",
    ),
    pytest.param(
        desired(),
        HALF_MIG,
        [FULL, pend("team-a", "job", 6, HIGH)],
        {},
        False,
        cards("a100-2", 0, 1, 4, 5, 6, 7),
        {c: f"{BALANCED} -> whole" for c in cards("a100-2", 0, 1)},
        set(),
        set(),
        id="empty-inference-cards-come-back-whole-for-it",
    ),
    pytest.param(
        desired_text(inf_min=4),
        HALF_MIG,
        [FULL, pend("team-a", "job", 6, HIGH)],
        {},
        False,
        set(),
        {},
        set(),
        {("waits", "team-a/job")},
        id="the-warm-minimums-inference-cards-stay-and-it-waits",
    ),
    pytest.param(
        desired(),
        None,
        [FULL, SPOT, pend("team-a", "job", 4, HIGH)],
        {},
        False,
        cards("a100-2", 0, 1, 2, 3),
        {},
        {"preempt:team-b/sweep"},
        set(),
        id="training-high-preempts-spot-its-rule-allows",
    ),
    pytest.param(
        desired(),
        None,
        [FULL, SPOT, pend("team-a", "job", 4, HIGH)],
        SPENT,
        False,
        set(),
        {},
        set(),
        {("budget-spent", "team-a/job")},
        id="the-hours-budget-spent-it-waits-and-says-so",
    ),
    pytest.param(
        desired(),
        None,
        [FULL, job("team-b", "busy", "a100-2", 8, HIGH), pend("team-a", "job", 2)],
        {},
        False,
        set(),
        {},
        set(),
        {("waits", "team-a/job")},
        id="nothing-can-be-freed-it-waits",
    ),
    pytest.param(
        desired(),
        None,
        [pend("team-a", "job", 2)],
        {},
        True,
        set(),
        {},
        set(),
        set(),
        id="a-gang-on-its-reservation-is-left-alone",
    ),
]


@pytest.mark.parametrize(
    (
        "text",
        "gpus2",
        "work",
        "kw",
        "on_reservation",
        "got",
        "changed",
        "preempts",
        "findings",
    ),
    ROWS,
)
def test_place_training(text, gpus2, work, kw, on_reservation, got, changed, preempts, findings):
    run = stage_run(text, two_nodes(None, gpus2), work, **kw)
    pv = run.cluster.pools["a100"]
    (gang,) = pending_demand(run)
    gang.on_reservation = on_reservation
    assert place_training(run, pv, [gang]) is None
    assert {g.key for g in pv.gpus if g.reserved_by == gang.key} == got
    assert changed_cards(run) == changed
    preempted = {a.id: a.preemptor for a in run.actions.values() if isinstance(a, Preempt)}
    assert preempted == dict.fromkeys(preempts, gang.key)
    assert findings_of(run) == findings
    assert (gang.key in run.waiting) == bool(findings)


def test_a_serving_pod_goes_where_serving_runs_already() -> None:
    """Whole-card inference goes to a node that hosts inference when one has room, not to the
    best fit: a serving pod is never moved for a gang, so each node it opens stays closed to
    whole-node training (the digital twin's weekday idle, docs/simulator.md)."""
    serving = job("serve", "llm-0", "a100-1", [0], "serving")
    work = [
        serving,
        job("team-a", "a", "a100-1", [1, 2, 3, 4, 5]),  # a100-1: 2 free, hosts serving
        job("team-a", "b", "a100-2", [0, 1, 2, 3, 4, 5, 6]),  # a100-2: 1 free, the best fit
        pend("serve", "llm-1", 1, "serving"),
        pend("team-a", "one", 1),
    ]
    r = stage_run(desired(), two_nodes(), work)
    pv = r.cluster.pools["a100"]
    place_training(r, pv, pending_demand(r))
    got = {g.reserved_by: g.node for g in pv.gpus if g.reserved_by}
    assert got == {"serve/llm-1": "a100-1", "team-a/one": "a100-2"}
