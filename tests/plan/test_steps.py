"""Step-level table tests of the planner, beside the golden triples.

One table per step of `plan_with_facts` (admission, scaling, team caps, idle reclaim, maintenance
windows). Each row is a small tweak of the golden desired state (tests/plan/scenarios.py), a
small observed cluster and a time; it expects the plan's action ids and finding
(code, subject) pairs exactly. Every row also checks the invariants any plan keeps: each
`depends_on` names an earlier action of the same plan, and each eviction of a non-spot
workload waits for its checkpoint.

The helpers the rows are made of (`desired`, `run`, `pend`, `job`, `svc`, ...) live in
tests/plan/support.py, which the other plan tests share.

Rows describe what the planner does today; rows marked xfail(strict) describe what it should
do where today's behaviour looks wrong.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from reconciler.observe.builders import gpu, mig_pod, shared_pod, training
from reconciler.observe.model import Node, Workload
from reconciler.plan.actions import Checkpoint, Cordon, Preempt
from reconciler.plan.model import Plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import A100, BAL, NOW
from tests.plan.support import (
    FORGOTTEN,
    HIGH,
    IDLE,
    LOW,
    SHARED_CARD,
    ago,
    check_invariants,
    desired,
    evicted,
    idle_gpus,
    job,
    maint,
    pend,
    repartition,
    run,
    run_a,
    scaling,
    svc,
    two_nodes,
)

TEAM_A_POOLS = "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4}}]"


ADMISSION_KINDS = ("admit", "hold")


def expect(p: Plan, actions: set[str], findings: set[tuple[str, str]]) -> None:
    """The plan's actions and findings, but for admit/hold: which pods are admitted where,
    or told why they wait, is judged in tests/plan/test_admission.py."""
    assert {a.id for a in p.actions if a.kind not in ADMISSION_KINDS} == actions
    assert {(f.code, f.subject) for f in p.findings} == findings


# =========================================================================== admission


ADMISSION = [
    pytest.param(
        (), None, [pend("team-a", "job", 2)], set(), set(), id="fits-whole-cards-placed-no-action"
    ),
    pytest.param(
        (),
        [gpu(0, mig=BAL, model=A100)] + [gpu(i) for i in range(1, 8)],
        [mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")],
        set(),
        set(),
        id="fits-free-mig-instance-no-action",
    ),
    pytest.param(
        (),
        None,
        [mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")],
        repartition("a100-1"),
        set(),
        id="fits-after-repartition-only",
    ),
    pytest.param(
        (),
        None,
        [run_a("team-a", "big", "a100-1", 8), pend("team-a", "more", 2, HIGH)],
        set(),
        {("held-cap", "team-a/more")},
        id="over-team-cap-held",
    ),
    pytest.param(
        (),
        None,
        [
            run_a("team-a", "big", "a100-1", 8),
            mig_pod("team-a", "tiny-0", None, "1g.10gb", pool="a100"),
        ],
        set(),
        {("held-cap", "team-a/tiny-0")},
        id="cap-counts-card-equivalents-mig-held",
    ),
    pytest.param(
        (),
        None,
        [
            run_a("team-a", "big", "a100-1", 7),
            mig_pod("team-a", "tiny-0", None, "1g.10gb", pool="a100"),
        ],
        repartition("a100-2"),  # A100: a MIG mode change resets the node, a100-1 runs `big`
        set(),
        id="cap-fraction-fits-admitted",
    ),
    pytest.param(
        (),
        None,
        [
            run_a("team-a", "six", "a100-1", 6),
            pend("team-a", "low", 2, LOW, created=2),
            pend("team-a", "high", 2, HIGH, created=0.1),
        ],
        set(),
        {("held-cap", "team-a/low")},
        id="higher-priority-admitted-first",
    ),
    pytest.param(
        (),
        None,
        [run_a("team-a", "four", "a100-1", 4), pend("team-a", "borrow", 4)],
        set(),
        set(),
        id="borrowing-beyond-guarantee-within-limit-placed",
    ),
    pytest.param(
        ((TEAM_A_POOLS, TEAM_A_POOLS.replace("borrowingLimit: 4", "borrowingLimit: 2")),),
        None,
        [run_a("team-a", "four", "a100-1", 4), pend("team-a", "borrow", 4)],
        set(),
        {("held-borrowing", "team-a/borrow")},
        id="beyond-guarantee-plus-borrowing-held",
    ),
    pytest.param(
        ((TEAM_A_POOLS, TEAM_A_POOLS.replace("borrowingLimit: 4", "borrowingLimit: 2")),),
        None,
        [run_a("team-a", "four", "a100-1", 4), pend("team-a", "borrow", 2)],
        set(),
        set(),
        id="exactly-at-borrowing-limit-placed",
    ),
    pytest.param(
        (),
        None,
        [pend("team-a", "ghost", 2, pool="h100")],
        set(),
        {("no-pool", "team-a/ghost")},
        id="no-pool-unknown-pool",
    ),
    pytest.param(
        (),
        None,
        [mig_pod("team-b", "big-mig-0", None, "7g.80gb")],
        set(),
        {("no-pool", "team-b/big-mig-0")},
        id="no-pool-profile-in-no-layout",
    ),
    pytest.param(
        (),
        None,
        [run_a("other", "x", "a100-1", 8), pend("other", "y", 8)],
        set(),
        set(),
        id="namespace-without-quota-uncapped",
    ),
    pytest.param(
        (),
        None,
        [
            run_a("team-a", "four", "a100-1", 4),
            pend("team-a", "ghost", 4, HIGH, pool="h100"),
            pend("team-a", "real", 2),
        ],
        set(),
        {("no-pool", "team-a/ghost")},
        id="no-pool-demand-does-not-reserve-cap",
    ),
]


@pytest.mark.parametrize(("swaps", "gpus1", "work", "actions", "findings"), ADMISSION)
def test_admission(swaps, gpus1, work, actions, findings):
    expect(run(desired(*swaps), two_nodes(gpus1), work), actions, findings)


# =========================================================================== scaling


SCALING_ROWS = [
    pytest.param({}, svc(2, queue=60), (2, 4), set(), id="queue-over-threshold-up-by-step"),
    pytest.param({}, svc(5, queue=100), (5, 6), set(), id="up-by-step-clipped-at-max"),
    pytest.param(
        {},
        svc(6, queue=100),
        None,
        {("at-max-replicas", "team-b/chat")},
        id="hot-at-max-finding-only",
    ),
    pytest.param({}, svc(2, queue=60, last=1), None, set(), id="up-cooldown-not-elapsed"),
    pytest.param({}, svc(2, queue=60, last=2), (2, 4), set(), id="up-cooldown-just-elapsed"),
    pytest.param({}, svc(2, queue=60, last=None), (2, 4), set(), id="up-never-scaled-before"),
    pytest.param({}, svc(2, queue=20), None, set(), id="queue-at-threshold-not-hot"),
    pytest.param({}, svc(2, queue=10, p99=45), (2, 4), set(), id="pending-time-over-target-up"),
    pytest.param({}, svc(2, queue=0, p99=45), (2, 4), set(), id="pending-time-beats-calm-queue"),
    pytest.param({}, svc(2, queue=10, p99=20), None, set(), id="pending-time-under-target"),
    pytest.param({}, svc(4, queue=0), (4, 3), set(), id="calm-past-cooldown-down-by-step"),
    pytest.param({}, svc(4, queue=0, last=5), None, set(), id="calm-down-cooldown-not-elapsed"),
    pytest.param({}, svc(4, queue=0, last=10), (4, 3), set(), id="calm-down-cooldown-just-elapsed"),
    pytest.param({}, svc(4, queue=0, last=None), (4, 3), set(), id="calm-never-scaled-before"),
    pytest.param({}, svc(1, queue=0), None, set(), id="calm-at-min-stays"),
    pytest.param(
        {"lo": 2, "down_step": 3}, svc(3, queue=0), (3, 2), set(), id="down-step-never-below-min"
    ),
    pytest.param({}, svc(4, queue=4), None, set(), id="queue-between-thresholds-no-change"),
    pytest.param({}, svc(4), None, set(), id="no-signals-no-change"),
    pytest.param({"lo": 2}, svc(1, last=0), (1, 2), set(), id="below-min-raised-despite-cooldown"),
    pytest.param(
        {"hi": 3}, svc(5, queue=100, last=0), (5, 3), set(), id="above-max-lowered-despite-cooldown"
    ),
    pytest.param(
        {"target": "gone"},
        svc(2, queue=60),
        None,
        {("scale-target-missing", "team-b/gone")},
        id="target-missing",
    ),
]


@pytest.mark.parametrize(("policy", "service", "scale", "findings"), SCALING_ROWS)
def test_scaling(policy, service, scale, findings):
    p = run(desired(extra=scaling(**policy)), two_nodes(SHARED_CARD), [], services=[service])
    scales = [a for a in p.actions if a.kind == "scale"]
    assert [(a.from_replicas, a.to_replicas) for a in scales] == ([scale] if scale else [])
    if scale:
        assert scales[0].id == "scale:team-b/chat" and scales[0].policy == "chat"
    assert {a.id for a in p.actions} == {a.id for a in scales}, (
        "new replicas fit the free shared slices"
    )
    assert {(f.code, f.subject) for f in p.findings} == findings


def test_scale_up_stops_at_team_cap():
    # team-b: 8 whole cards + 7 full MIG cards + 3 shared slices = 15.75 of its cap of 16; one
    # more slice fits
    nodes = two_nodes(
        [gpu(0, shared=4)] + [gpu(i, mig=["7g.80gb"], model=A100) for i in range(1, 8)]
    )
    work = [run_a("team-b", "huge", "a100-2", 8)]
    work += [
        mig_pod("team-b", f"big-{i}", "a100-1", "7g.80gb", gpu_index=i, started=ago(2))
        for i in range(1, 8)
    ]
    work += [shared_pod("team-b", f"chat-{i}", "a100-1", 1, started=ago(2)) for i in range(3)]
    p = run(desired(extra=scaling()), nodes, work, services=[svc(3, queue=60)])
    assert [(a.from_replicas, a.to_replicas) for a in p.actions if a.kind == "scale"] == [(3, 4)]
    assert not [f for f in p.findings if f.code == "held-cap"]
    assert [f.subject for f in p.findings if f.code == "scale-held"] == ["team-b/chat"]


# =========================================================================== team caps


CAP_ROWS = [
    pytest.param([job("team-a", "big", "a100-1", 8, HIGH)], {}, set(), set(), id="at-cap-nothing"),
    pytest.param(
        [job("team-a", "big", "a100-1", 8, HIGH), job("team-a", "extra", "a100-2", [0])],
        {},
        evicted("preempt", "team-a/extra"),
        set(),
        id="over-by-one-preempts-low",
    ),
    pytest.param(
        [
            job("team-a", "big", "a100-1", 7, HIGH),
            job("team-a", "low", "a100-1", [7]),
            job("team-a", "sweep", "a100-2", [0], cls="spot"),
        ],
        {},
        evicted("preempt", "team-a/sweep", spot=True),
        set(),
        id="spot-before-training-low",
    ),
    pytest.param(
        [
            job("team-a", "big", "a100-1", 7, HIGH),
            job("team-a", "old-ckpt", "a100-1", [7], ckpt=0.5),
            job("team-a", "new-ckpt", "a100-2", [0], ckpt=0.1),
        ],
        {},
        evicted("preempt", "team-a/new-ckpt"),
        set(),
        id="same-class-least-work-lost-first",
    ),
    pytest.param(
        [job("team-a", "big", "a100-1", 6, HIGH)]
        + [job("team-a", f"w{i}", "a100-2", [i], ckpt=0.1 * (i + 1)) for i in range(4)],
        {},
        evicted("preempt", "team-a/w0", "team-a/w1"),
        set(),
        id="preempts-until-under",
    ),
    pytest.param(
        [job("team-a", "big", "a100-1", 6, HIGH), job("team-a", "four", "a100-2", [0, 1, 2, 3])],
        {},
        evicted("preempt", "team-a/four"),
        set(),
        id="multi-card-victim-overshoots-under",
    ),
    pytest.param(
        [
            job("team-a", "big", "a100-1", 7, HIGH),
            job("team-a", "low", "a100-2", [0]),
            mig_pod(
                "team-a", "ranker-0", "a100-2", "3g.40gb", gpu_index=1, start=4, started=ago(2)
            ),
        ],
        {"gpus2": [gpu(i, mig=BAL if i == 1 else None, model=A100) for i in range(8)]},
        evicted("preempt", "team-a/low"),
        set(),
        # 8.43 card-equivalents with the MIG share; `low` is a Job's: suspended, it does not
        # come back (and is held at admission), so stopping it brings the team under its cap
        id="mig-share-counts-toward-cap-a-suspended-job-stays-out",
    ),
    pytest.param(
        [
            job("team-a", "big", "a100-1", 7, HIGH),
            job("team-a", "low", "a100-2", [0]).model_copy(
                update={"owner_kind": "ReplicaSet", "owner_name": "low-5d8f"}
            ),
            mig_pod(
                "team-a", "ranker-0", "a100-2", "3g.40gb", gpu_index=1, start=4, started=ago(2)
            ),
        ],
        {"gpus2": [gpu(i, mig=BAL if i == 1 else None, model=A100) for i in range(8)]},
        set(),
        {("over-cap", "team-a")},
        # ungated, `low`'s ReplicaSet recreates it at once, and the ResourceQuota caps whole
        # cards (8, 8 in use): a preempted `low` would be admitted and bound again
        id="mig-share-counts-toward-cap-but-the-quota-would-readmit",
    ),
    pytest.param(
        [job("team-a", "big", "a100-1", 8, HIGH), job("team-a", "more", "a100-2", [0, 1], HIGH)],
        {},
        set(),
        {("over-cap", "team-a")},
        id="non-preemptible-protected",
    ),
    pytest.param(
        [
            job("team-a", "big", "a100-1", 8, HIGH),
            job("team-a", "fresh", "a100-2", [0], started=0.1),
        ],
        {},
        set(),
        {("over-cap", "team-a")},
        id="min-runtime-protects",
    ),
    pytest.param(
        [
            job("team-a", "big", "a100-1", 8, HIGH),
            job("team-a", "fresh-spot", "a100-2", [0], "spot", started=0.1),
        ],
        {},
        evicted("preempt", "team-a/fresh-spot", spot=True),
        set(),
        id="spot-has-no-min-runtime",
    ),
    pytest.param(
        [job("team-a", "big", "a100-1", 8, HIGH), job("team-a", "extra", "a100-2", [0])],
        {"recent_preemptions": [ago(0.1 * i) for i in range(1, 5)]},
        set(),
        {("budget-spent", "team-a"), ("over-cap", "team-a")},
        id="budget-spent",
    ),
    pytest.param(
        [
            job("team-a", "big", "a100-1", 8, HIGH),
            job("team-a", "extra", "a100-2", [0]),
            job("team-b", "cheap", "a100-2", [1, 2], cls="spot"),
        ],
        {},
        evicted("preempt", "team-a/extra"),
        set(),
        id="other-teams-untouched",
    ),
    pytest.param(
        [job("team-a", "big", "a100-1", 8, HIGH), job("team-a", "idle", "a100-2", [0, 1])],
        {"gpus2": [gpu(i, util=1.0, idle_since=ago(3)) for i in range(8)]},
        evicted("preempt", "team-a/idle"),
        set(),
        id="cap-preempts-before-idle-reclaim",
    ),
]


@pytest.mark.parametrize(("work", "kw", "actions", "findings"), CAP_ROWS)
def test_team_caps(work, kw, actions, findings):
    kw = dict(kw)
    nodes = two_nodes(None, kw.pop("gpus2", None))
    expect(run(desired(), nodes, work, **kw), actions, findings)


# =========================================================================== idle reclaim


IDLE_ROWS = [
    pytest.param(
        IDLE,
        idle_gpus(),
        [FORGOTTEN],
        evicted("reclaim", "team-b/forgotten"),
        set(),
        id="idle-default-action-reclaims",
    ),
    pytest.param(
        IDLE.replace("}", ", action: evict}"),
        idle_gpus(),
        [FORGOTTEN],
        evicted("reclaim", "team-b/forgotten"),
        set(),
        id="idle-action-evict-reclaims",
    ),
    pytest.param(
        IDLE.replace("}", ", action: report}"),
        idle_gpus(),
        [FORGOTTEN],
        set(),
        {("idle-report", "team-b/forgotten")},
        id="idle-report-finding-only",
    ),
    pytest.param(
        IDLE, idle_gpus(util=5.0), [FORGOTTEN], set(), set(), id="utilization-at-threshold-not-idle"
    ),
    pytest.param(
        IDLE, idle_gpus(util=40.0), [FORGOTTEN], set(), set(), id="utilization-above-threshold"
    ),
    pytest.param(
        IDLE, idle_gpus(idle=0.5), [FORGOTTEN], set(), set(), id="idle-shorter-than-idleFor"
    ),
    pytest.param(
        IDLE,
        idle_gpus(idle=1),
        [FORGOTTEN],
        evicted("reclaim", "team-b/forgotten"),
        set(),
        id="idle-exactly-idleFor-reclaims",
    ),
    pytest.param(
        IDLE, idle_gpus(idle=None), [FORGOTTEN], set(), set(), id="unknown-idle-since-kept"
    ),
    pytest.param(
        IDLE,
        [gpu(0, util=1.0, idle_since=ago(3)), gpu(1, util=80.0)] + [gpu(i) for i in range(2, 8)],
        [FORGOTTEN],
        set(),
        set(),
        id="one-card-busy-kept",
    ),
    pytest.param(
        IDLE,
        idle_gpus(),
        [job("team-a", "protected", "a100-1", [0, 1], HIGH)],
        set(),
        set(),
        id="excluded-class-nothing",
    ),
    pytest.param(
        IDLE.replace("training-high", "training-low"),
        idle_gpus(),
        [FORGOTTEN],
        set(),
        set(),
        id="excluded-class-custom",
    ),
    pytest.param(
        "{utilizationBelow: 5, idleFor: 1h}",
        idle_gpus(),
        [job("team-a", "protected", "a100-1", [0, 1], HIGH)],
        set(),
        {("idle-protected", "team-a/protected")},
        id="non-preemptible-idle-protected-info",
    ),
    pytest.param(
        IDLE,
        idle_gpus(),
        [job("team-b", "sweep", "a100-1", [0, 1], cls="spot")],
        evicted("reclaim", "team-b/sweep", spot=True),
        set(),
        id="spot-reclaimed-without-checkpoint",
    ),
    pytest.param(
        IDLE,
        idle_gpus(),
        [FORGOTTEN.model_copy(update={"priority_class": None})],
        evicted("reclaim", "team-b/forgotten"),
        set(),
        id="default-class-reclaimed",
    ),
    pytest.param(
        IDLE,
        idle_gpus(mig=BAL, model=A100),
        [mig_pod("team-b", "ranker-0", "a100-1", "3g.40gb", start=4, cls="spot", started=ago(5))],
        set(),
        set(),
        id="mig-card-skipped",
    ),
    pytest.param(
        IDLE,
        idle_gpus(shared=4),
        [shared_pod("team-b", "embed-0", "a100-1", 2, cls="spot", started=ago(5))],
        set(),
        set(),
        id="shared-card-skipped",
    ),
    pytest.param(
        IDLE.replace("{", "{enabled: false, "),
        idle_gpus(),
        [FORGOTTEN],
        set(),
        set(),
        id="disabled",
    ),
    pytest.param("", idle_gpus(), [FORGOTTEN], set(), set(), id="no-idle-reclaim-rule"),
    pytest.param(
        "{utilizationBelow: 5, idleFor: 4h}",
        idle_gpus(),
        [FORGOTTEN],
        set(),
        set(),
        id="longer-idleFor",
    ),
]


@pytest.mark.parametrize(("rule", "gpus1", "work", "actions", "findings"), IDLE_ROWS)
def test_idle_reclaim(rule, gpus1, work, actions, findings):
    p = run(desired(maint(idle=rule)), two_nodes(gpus1), work)
    expect(p, actions, findings)
    for a in p.actions:
        if a.kind == "reclaim":
            assert (a.node, a.gpus) == ("a100-1", (0, 1))


# =========================================================================== windows


def defrag_cluster(now: datetime, migratable: bool = True) -> tuple[list[Node], list[Workload]]:
    """Two one-card probes block a100-1; a100-2 has 2 free cards; an 8-card gang waits."""
    work = [
        training("team-b", f"probe-{i}", "a100-1", [i], started=ago(2, now), migratable=migratable)
        for i in range(2)
    ]
    work += [training("team-b", "eval", "a100-2", [0, 1, 2, 3, 4, 5], started=ago(1, now))]
    work += [training("team-a", "gang", None, 8, pool="a100", created=ago(1, now))]
    return two_nodes(), work


def at(hh: int, mm: int = 0) -> datetime:
    return NOW.replace(hour=hh, minute=mm)


MOVES = evicted("move", "team-b/probe-0", "team-b/probe-1")
WAITS = {("waits", "team-a/gang")}
NIGHT = '{when: window, window: {start: "22:00", end: "04:00"}}'
EARLY = '{when: window, window: {start: "02:00", end: "04:00"}}'

WINDOW_ROWS = [
    pytest.param(
        "{when: pendingDemand, maxMigrationsPerCycle: 2}",
        at(14),
        True,
        MOVES,
        set(),
        id="pending-demand-any-time",
    ),
    pytest.param(EARLY, at(3), True, MOVES, set(), id="inside-window-moves"),
    pytest.param(EARLY, at(2), True, MOVES, set(), id="window-start-inclusive"),
    pytest.param(EARLY, at(1, 59), True, set(), WAITS, id="before-window-waits"),
    pytest.param(EARLY, at(4), True, set(), WAITS, id="window-end-exclusive"),
    pytest.param(NIGHT, at(23, 30), True, MOVES, set(), id="midnight-window-before-midnight"),
    pytest.param(NIGHT, at(0), True, MOVES, set(), id="midnight-window-at-midnight"),
    pytest.param(NIGHT, at(3, 59), True, MOVES, set(), id="midnight-window-after-midnight"),
    pytest.param(NIGHT, at(4), True, set(), WAITS, id="midnight-window-end-exclusive"),
    pytest.param(NIGHT, at(12), True, set(), WAITS, id="midnight-window-midday-outside"),
    pytest.param(NIGHT, at(21, 59), True, set(), WAITS, id="midnight-window-just-before-start"),
    pytest.param(
        "{when: pendingDemand, maxMigrationsPerCycle: 1}",
        at(3),
        True,
        evicted("move", "team-b/probe-0"),
        WAITS,
        id="max-migrations-too-few-moves-as-many-now-gang-waits",
    ),
    pytest.param(
        "{when: pendingDemand}", at(3), False, set(), WAITS, id="only-migratable-by-default"
    ),
    pytest.param(
        "{when: pendingDemand, onlyMigratable: false}",
        at(3),
        False,
        MOVES,
        set(),
        id="only-migratable-false-moves-any",
    ),
    pytest.param("{enabled: false}", at(3), True, set(), WAITS, id="defragmentation-disabled"),
    pytest.param("", at(3), True, set(), WAITS, id="no-defragmentation-rule"),
]


@pytest.mark.parametrize(("rule", "now", "migratable", "actions", "findings"), WINDOW_ROWS)
def test_defragmentation_windows(rule, now, migratable, actions, findings):
    nodes, work = defrag_cluster(now, migratable)
    p = run(desired(maint(defrag=rule, idle="")), nodes, work, now=now)
    expect(p, actions, findings)
    for a in p.actions:
        if a.kind == "move":
            assert (a.node, a.to_node) == ("a100-1", "a100-2")


@pytest.mark.parametrize(
    "offset",
    [
        pytest.param(0, id="utc"),
        pytest.param(9, id="utc+9"),
    ],
)
def test_window_is_utc_whatever_the_offset(offset):
    now = at(3).astimezone(timezone(timedelta(hours=offset)))  # the same instant, 03:00Z
    nodes, work = defrag_cluster(now)
    expect(run(desired(maint(defrag=EARLY, idle="")), nodes, work, now=now), MOVES, set())


# =========================================================================== the checker itself


def test_invariant_check_catches_bad_plans():
    """The per-row invariants are live: a preemption without its checkpoint, a dependency that
    is missing and one that comes later all fail."""
    d = load([SourceFile("desired.yaml", desired())])
    ck = Checkpoint(
        id="checkpoint:team-a/x",
        target="team-a/x",
        reason="r",
        grace_period_seconds=0,
        checkpointable=True,
    )
    pre = Preempt(
        id="preempt:team-a/x",
        target="team-a/x",
        reason="r",
        node="n",
        gpus=(0,),
        priority_class=LOW,
    )
    spot = Preempt(
        id="preempt:team-a/s",
        target="team-a/s",
        reason="r",
        node="n",
        gpus=(1,),
        priority_class="spot",
    )
    good = pre.model_copy(update={"depends_on": (ck.id,)})
    check_invariants(d, Plan(observed_at="t", actions=(ck, good, spot)))
    bad = [
        (ck, pre),  # no checkpoint dependency
        (good,),  # the checkpoint is missing
        (good, ck),  # the checkpoint comes later
        (ck, good, Cordon(id="cordon:n", target="n", reason="r", depends_on=("nowhere",))),
        (ck,),  # a checkpoint of something the plan does not stop
    ]
    for actions in bad:
        with pytest.raises(AssertionError):
            check_invariants(d, Plan(observed_at="t", actions=actions))
