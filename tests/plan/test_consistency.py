"""Plan-time consistency: drift a live cluster produces gets a finding and a safe plan, never a
traceback; and `canonical` makes the planner's input independent of every list's order."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from reconciler.observe.builders import gpu, mig_pod, node, shared_pod, snapshot, training
from reconciler.observe.model import (
    Allocation,
    GpuProcess,
    InferenceService,
    MigInstance,
    ObservedState,
    Request,
    Taint,
    Workload,
)
from reconciler.observe.snapshot import load_snapshot
from reconciler.plan.actions import Repartition
from reconciler.plan.consistency import CODES, Consistency, canonical, card_key, check
from reconciler.plan.planner import plan
from reconciler.plan.render import to_json
from reconciler.policy.files import SourceFile, files_from_paths
from reconciler.policy.loader import load
from tests.plan.scenarios import A100, BAL, NOW, ago, desired_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
DESIRED = load([SourceFile("desired.yaml", desired_text())])
N1, N2 = "a100-1", "a100-2"


def mig_card(index: int, layout: list[str] = BAL):
    return gpu(index, mig=layout)


def starts(g) -> list[int]:
    return [i.start for i in g.mig_instances]


def cluster(gpus1=None, workloads=(), **kw) -> ObservedState:
    return snapshot(
        NOW,
        [node(N1, "a100", A100, gpus1), node(N2, "a100", A100)],
        list(workloads),
        **kw,
    )


def only(c: Consistency, code: str):
    found = [f for f in c.findings if f.code == code]
    assert len(found) == 1, [(f.code, f.subject) for f in c.findings]
    assert all(f.severity == "warning" and f.code in CODES for f in c.findings)
    return found[0]


def suspect(c: Consistency) -> set:
    return set(c.suspect_cards)


def safe_plan(observed: ObservedState, c: Consistency):
    """The planner takes the drift without a traceback, reports it, and repartitions no
    suspect card."""
    p = plan(DESIRED, observed)
    assert {(f.code, f.subject) for f in c.findings} <= {(f.code, f.subject) for f in p.findings}
    for a in p.actions:
        if isinstance(a, Repartition):
            assert not {(a.target, g) for g in a.changed_gpus} & suspect(c), a
    return p


# --------------------------------------------------------------------------- each drift


def test_a_pod_on_a_mig_start_the_card_no_longer_has():
    card = mig_card(0)
    gone = next(s for s in range(8) if s not in starts(card))
    pods = [mig_pod("team-b", "ranker-0", N1, "1g.10gb", gpu_index=0, start=gone, started=ago(1))]
    obs = cluster([card, *[gpu(i) for i in range(1, 8)]], pods)
    c = check(DESIRED, obs)
    f = only(c, "unknown-mig-instance")
    assert f.subject == f"{N1}/gpu0" and f"slice {gone}" in f.message and "fences" in f.message
    assert suspect(c) == {(N1, 0)}
    assert c.ignored_allocations == {("team-b/ranker-0", 0)}
    safe_plan(obs, c)


def test_a_pod_on_a_mig_instance_of_another_profile():
    card = mig_card(0)
    three_g = next(i.start for i in card.mig_instances if i.profile == "3g.40gb")
    pods = [mig_pod("team-b", "r", N1, "1g.10gb", gpu_index=0, start=three_g, started=ago(1))]
    c = check(DESIRED, cluster([card, *[gpu(i) for i in range(1, 8)]], pods))
    assert "a 3g.40gb instance there" in only(c, "unknown-mig-instance").message
    assert suspect(c) == {(N1, 0)}


def test_a_mig_pod_on_a_whole_card():
    pods = [mig_pod("team-b", "r", N1, "1g.10gb", gpu_index=3, start=0, started=ago(1))]
    obs = cluster(workloads=pods)
    c = check(DESIRED, obs)
    assert "MIG is off" in only(c, "unknown-mig-instance").message
    assert suspect(c) == {(N1, 3)}
    safe_plan(obs, c)


def test_the_pods_that_do_hold_the_instances_are_consistent():
    card = mig_card(0)
    pods = [
        mig_pod("team-b", f"r{k}", N1, i.profile, gpu_index=0, start=i.start, started=ago(1))
        for k, i in enumerate(card.mig_instances)
    ]
    c = check(DESIRED, cluster([card, *[gpu(i) for i in range(1, 8)]], pods))
    assert c == Consistency()


def test_two_pods_on_one_whole_card():
    work = [
        training("team-a", "a", N1, [0], started=ago(3)),
        training("team-a", "b", N1, [0, 1], started=ago(3)),
        training("team-a", "c", N1, [2], started=ago(3)),
    ]
    obs = cluster(workloads=work)
    c = check(DESIRED, obs)
    f = only(c, "whole-card-shared")
    assert f.subject == f"{N1}/gpu0" and "team-a/a, team-a/b" in f.message
    assert suspect(c) == {(N1, 0)}
    assert c.ignored_allocations == {("team-a/a", 0), ("team-a/b", 0)}
    assert c.usable(obs.workloads[1]) == [Allocation(gpu=1)]
    assert c.usable(obs.workloads[2]) == [Allocation(gpu=2)]
    safe_plan(obs, c)


def test_an_admitted_pod_meant_for_a_card_a_running_pod_holds():
    """Admitted (ungated, not bound yet) pods hold the cards meant for them, so a collision
    with a running pod is the same drift as two running pods on one card: a finding and a
    fenced card, never the planner's own over-commit guard failing every cycle."""
    running = training("team-a", "a", N1, [0], started=ago(3))
    admitted = Workload(
        **{
            **training("team-a", "b", N1, [0]).model_dump(),
            "phase": "Pending",
            "admission": "admitted",
        }
    )
    assert admitted.placed
    obs = cluster(workloads=[running, admitted])
    c = check(DESIRED, obs)
    f = only(c, "whole-card-shared")
    assert f.subject == f"{N1}/gpu0" and "team-a/a, team-a/b" in f.message
    assert "team-a/b admitted here but not bound" in f.message
    assert suspect(c) == {(N1, 0)}
    safe_plan(obs, c)


def test_a_shared_card_over_full_after_its_slice_count_was_lowered():
    cards = [gpu(0, shared=2), *[mig_card(i) for i in range(1, 8)]]
    pods = [shared_pod("team-b", f"chat-{k}", N1, 1, started=ago(1)) for k in range(3)]
    obs = cluster(cards, pods)
    c = check(DESIRED, obs)
    f = only(c, "shared-overfull")
    assert f.subject == f"{N1}/gpu0" and "3 shared slices are held" in f.message
    assert "offers 2" in f.message
    assert suspect(c) == {(N1, 0)}
    assert len(c.ignored_allocations) == 3
    safe_plan(obs, c)


def test_a_full_shared_card_is_consistent():
    cards = [gpu(0, shared=2), *[mig_card(i) for i in range(1, 8)]]
    pods = [shared_pod("team-b", f"chat-{k}", N1, 1, started=ago(1)) for k in range(2)]
    assert check(DESIRED, cluster(cards, pods)) == Consistency()


def test_a_pod_on_a_node_missing_from_the_snapshot():
    work = [training("team-a", "ghost-job", "a100-9", [0, 1], started=ago(3))]
    obs = cluster(workloads=work)
    c = check(DESIRED, obs)
    f = only(c, "unknown-node")
    assert f.subject == "team-a/ghost-job" and "a100-9" in f.message
    assert "still counts it as running" in f.message
    assert c.ignored_allocations == {("team-a/ghost-job", 0), ("team-a/ghost-job", 1)}
    assert not c.suspect_cards
    safe_plan(obs, c)


def test_gpu_9_on_an_8_gpu_node_is_ignored_the_rest_still_held():
    work = [training("team-a", "j", N1, [0, 9], started=ago(3))]
    obs = cluster(workloads=work)
    c = check(DESIRED, obs)
    f = only(c, "unknown-gpu")
    assert f.subject == "team-a/j" and "GPU 9" in f.message and "0, 1, 2" in f.message
    assert c.ignored_allocations == {("team-a/j", 1)}
    assert c.usable(obs.workloads[0]) == [Allocation(gpu=0)]
    assert not c.suspect_cards
    safe_plan(obs, c)


def test_a_partly_unknown_workload_still_counts_as_running():
    """Team usage holds: a team at its cap with a job half on an unknown card still has
    its pending work held by the cap."""
    work = [
        training("team-a", "big", N1, [0, 1, 2, 3, 4, 5, 6, 12], started=ago(3)),
        training("team-a", "more", None, 2, created=ago(0.1)),
    ]
    obs = cluster(workloads=work)
    p = safe_plan(obs, check(DESIRED, obs))
    assert any(f.subject == "team-a/more" and "cap" in f.message for f in p.findings), [
        (f.code, f.subject, f.message) for f in p.findings
    ]


def test_one_mig_instance_held_by_two_pods():
    card = mig_card(0)
    s = card.mig_instances[0]
    pods = [
        mig_pod("team-b", f"r{k}", N1, s.profile, gpu_index=0, start=s.start, started=ago(1))
        for k in range(2)
    ]
    obs = cluster([card, *[gpu(i) for i in range(1, 8)]], pods)
    c = check(DESIRED, obs)
    assert "team-b/r0, team-b/r1" in only(c, "mig-instance-shared").message
    assert suspect(c) == {(N1, 0)}
    safe_plan(obs, c)


@pytest.mark.parametrize(
    ("cards", "work", "fragment"),
    [
        (
            [gpu(0, shared=4), *[mig_card(i) for i in range(1, 8)]],
            [training("team-a", "j", N1, [0], started=ago(3))],
            "the card is shared, but team-a/j hold(s) it as whole",
        ),
        (
            None,
            [shared_pod("team-b", "chat", N1, 1, gpu_index=2, started=ago(1))],
            "the card is whole, but team-b/chat hold(s) it as shared",
        ),
        (
            [mig_card(0), *[gpu(i) for i in range(1, 8)]],
            [training("team-a", "j", N1, [0], started=ago(3))],
            "the card is mig, but team-a/j hold(s) it as whole",
        ),
    ],
)
def test_a_card_held_as_the_wrong_kind(cards, work, fragment):
    obs = cluster(cards, work)
    c = check(DESIRED, obs)
    assert fragment in only(c, "wrong-card-mode").message
    assert len(c.suspect_cards) == 1
    safe_plan(obs, c)


# ----------------------------------------------------------- states built without validation


def test_collisions_a_validated_snapshot_cannot_hold_are_still_fenced():
    obs = cluster()
    n1 = obs.nodes[0]
    overlapping = n1.gpus[1].model_copy(
        update={
            "mig_enabled": True,
            "mig_instances": [
                MigInstance(profile="3g.40gb", start=0),
                MigInstance(profile="2g.20gb", start=2),
            ],
        }
    )
    twice = n1.gpus[2].model_copy(update={"uuid": "GPU-twin"})
    n1 = n1.model_copy(update={"gpus": [n1.gpus[0], overlapping, *n1.gpus[2:], twice]})
    job = training("team-a", "j", N1, [3], started=ago(3))
    bad = obs.model_copy(
        update={
            "nodes": [n1, obs.nodes[1], obs.nodes[1]],
            "workloads": [job, job.model_copy(update={"allocations": [Allocation(gpu=4)]})],
        }
    )
    c = check(DESIRED, bad)
    codes = {f.code: f.subject for f in c.findings}
    assert codes == {
        "mig-overlap": f"{N1}/gpu1",
        "duplicate-gpu": f"{N1}/gpu2",
        "duplicate-node": N2,
        "duplicate-workload": "team-a/j",
    }
    assert {(N1, 1), (N1, 2)} | {(N2, i) for i in range(8)} == suspect(c)
    assert not c.ignored_allocations
    assert (
        "overlaps 3g.40gb at slice 0"
        in next(f for f in c.findings if f.code == "mig-overlap").message
    )


# --------------------------------------------------------------------------- no false alarms


def _golden():
    for d in sorted(p for p in GOLDEN.iterdir() if (p / "observed.yaml").is_file()):
        yield pytest.param(d, id=d.name)


@pytest.mark.parametrize("case", list(_golden()))
def test_consistent_clusters_have_no_findings(case):
    desired = load(files_from_paths([str(case / "desired.yaml")]))
    assert check(desired, load_snapshot(case / "observed.yaml")) == Consistency()


def test_the_example_cluster_has_no_findings():
    desired = load(files_from_paths(["pools", "policies"]))
    assert check(desired, load_snapshot("examples/observed.yaml")) == Consistency()


def test_findings_are_sorted_and_stable():
    work = [
        training("team-a", "z", N1, [0], started=ago(3)),
        training("team-a", "y", N1, [0], started=ago(3)),
        training("team-a", "x", "nowhere", [1], started=ago(3)),
        training("team-a", "w", N1, [11], started=ago(3)),
    ]
    obs = cluster(workloads=work)
    c = check(DESIRED, obs)
    keys = [(f.subject, f.code, f.message) for f in c.findings]
    assert keys == sorted(keys) and len(keys) == 3
    assert check(DESIRED, canonical(obs)).findings == c.findings


# --------------------------------------------------------------------------- canonical


def shuffled(value, rnd: random.Random):
    """`value` with every list at every depth permuted and every mapping re-ordered."""
    if isinstance(value, BaseModel):
        return value.model_copy(
            update={name: shuffled(getattr(value, name), rnd) for name in type(value).model_fields}
        )
    if isinstance(value, list):
        out = [shuffled(v, rnd) for v in value]
        rnd.shuffle(out)
        return out
    if isinstance(value, dict):
        items = [(k, shuffled(v, rnd)) for k, v in value.items()]
        rnd.shuffle(items)
        return dict(items)
    return value


def rich() -> ObservedState:
    """The example cluster plus what it lacks: taints, processes, a workload holding several
    cards and MIG instances, a Deployment and a StatefulSet of one name, preemption times."""
    obs = load_snapshot("examples/observed.yaml")
    first = obs.nodes[0]
    first = first.model_copy(
        update={
            "taints": [
                Taint(key="b", effect="NoSchedule"),
                Taint(key="a", value="2", effect="NoExecute"),
                Taint(key="a", value="1", effect="NoExecute"),
            ],
            "gpus": [
                first.gpus[0].model_copy(
                    update={
                        "processes": [
                            GpuProcess(pid=7, used_memory_mib=10),
                            GpuProcess(pid=3),
                            GpuProcess(pid=7, used_memory_mib=5),
                        ]
                    }
                ),
                *first.gpus[1:],
            ],
        }
    )
    many = Workload(
        namespace="zz",
        name="many",
        request=Request(gpus=1, mig={"2g.20gb": 1, "1g.10gb": 2}, shared_slices=2),
        node=first.name,
        allocations=[
            Allocation(gpu=5, slices=2),
            Allocation(gpu=2, mig_start=6, mig_profile="1g.10gb"),
            Allocation(gpu=2, mig_start=4),
            Allocation(gpu=2),
            Allocation(gpu=1),
        ],
    )
    twins = [
        InferenceService(
            namespace="zz", name="twin", kind=k, replicas=1, replica_request=Request(gpus=1)
        )
        for k in ("StatefulSet", "Deployment")
    ]
    return obs.model_copy(
        update={
            "nodes": [first, *obs.nodes[1:]],
            "workloads": [*obs.workloads, many],
            "services": [*obs.services, *twins],
            "recent_preemptions": [ago(0.1), ago(0.5), ago(0.3)],
        }
    )


RICH = rich()
CANON = canonical(RICH)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_canonical_makes_every_permutation_identical(rnd):
    other = shuffled(RICH, rnd)
    assert canonical(other) == CANON
    assert canonical(other).model_dump_json() == CANON.model_dump_json()


def test_shuffling_does_reorder_so_the_test_above_can_fail():
    other = shuffled(RICH, random.Random(1))
    assert other != RICH and canonical(other) == CANON


def _inventory(o: ObservedState) -> dict:
    """What a snapshot says, as order-free multisets."""
    return {
        "nodes": sorted(
            (n.name, sorted(n.labels.items()), sorted((t.key, t.value) for t in n.taints))
            for n in o.nodes
        ),
        "cards": sorted(
            (n.name, g.index, g.mode, sorted((i.start, i.profile) for i in g.mig_instances))
            for n in o.nodes
            for g in n.gpus
        ),
        "processes": sorted(
            (n.name, g.index, p.pid, p.used_memory_mib)
            for n in o.nodes
            for g in n.gpus
            for p in g.processes
        ),
        "workloads": sorted(
            (
                w.key,
                w.phase,
                sorted(w.request.mig.items()),
                sorted((a.gpu, a.mig_start or -1, a.slices) for a in w.allocations),
            )
            for w in o.workloads
        ),
        "services": sorted((s.key, s.kind, s.replicas) for s in o.services),
        "quotas": sorted((q.namespace, q.name, sorted(q.hard.items())) for q in o.quotas),
        "classes": sorted((p.name, p.value) for p in o.priority_classes),
        "preemptions": sorted(o.recent_preemptions),
    }


def test_canonical_keeps_everything_and_is_idempotent():
    assert _inventory(CANON) == _inventory(RICH)
    assert canonical(CANON) == CANON
    assert ObservedState.model_validate(CANON.model_dump()) == CANON
    assert [n.name for n in CANON.nodes] == sorted(n.name for n in RICH.nodes)
    assert [w.key for w in CANON.workloads] == sorted(w.key for w in RICH.workloads)
    many = next(w for w in CANON.workloads if w.key == "zz/many")
    assert [(a.gpu, a.mig_start, a.slices) for a in many.allocations] == [
        (1, None, 0),
        (2, None, 0),
        (2, 4, 0),
        (2, 6, 0),
        (5, None, 2),
    ]
    assert list(many.request.mig) == ["1g.10gb", "2g.20gb"]
    assert [s.kind for s in CANON.services if s.name == "twin"] == ["Deployment", "StatefulSet"]
    assert CANON.recent_preemptions == sorted(RICH.recent_preemptions)
    first = next(n for n in CANON.nodes if n.name == RICH.nodes[0].name)
    assert [(t.key, t.value) for t in first.taints] == [("a", "1"), ("a", "2"), ("b", "")]
    assert [(p.pid, p.used_memory_mib) for p in first.gpus[0].processes] == [
        (3, 0),
        (7, 5),
        (7, 10),
    ]


def test_canonical_breaks_ties_between_equal_keys_by_content():
    obs = cluster()
    a = training("team-a", "j", N1, [1], started=ago(3))
    b = a.model_copy(update={"allocations": [Allocation(gpu=2)]})
    one = obs.model_copy(update={"workloads": [a, b]})
    two = obs.model_copy(update={"workloads": [b, a]})
    assert canonical(one).model_dump_json() == canonical(two).model_dump_json()


@pytest.mark.parametrize("case", list(_golden()))
def test_plans_do_not_depend_on_the_order_of_any_list(case):
    """Reversing one pod's allocations, or permuting every list of the snapshot, plans the
    same (the SRE's report: a reversed allocation list repartitioned another card)."""
    desired = load(files_from_paths([str(case / "desired.yaml")]))
    observed = load_snapshot(case / "observed.yaml")
    first = to_json(plan(desired, observed))
    reversed_allocs = observed.model_copy(
        update={
            "workloads": [
                w.model_copy(update={"allocations": w.allocations[::-1]})
                for w in observed.workloads
            ]
        }
    )
    assert to_json(plan(desired, reversed_allocs)) == first
    for seed in range(3):
        assert to_json(plan(desired, shuffled(observed, random.Random(seed)))) == first


# --------------------------------------------------------------------------- any drift at all


def _allocation(draw) -> Allocation:
    kind = draw(st.sampled_from(["whole", "mig", "shared"]))
    g = draw(st.integers(0, 9))
    if kind == "mig":
        prof = draw(st.sampled_from([None, "1g.10gb", "2g.20gb", "3g.40gb"]))
        return Allocation(gpu=g, mig_start=draw(st.integers(0, 7)), mig_profile=prof)
    if kind == "shared":
        return Allocation(gpu=g, slices=draw(st.integers(1, 4)))
    return Allocation(gpu=g)


@st.composite
def drifted(draw) -> ObservedState:
    """Two real nodes of random card modes, workloads on them and on a node that is gone,
    holding random cards, instances and slices; some pending demand."""
    nodes = []
    for name in (N1, N2):
        cards = []
        for i in range(8):
            mode = draw(st.sampled_from(["whole", "whole", "mig", "shared"]))
            if mode == "mig":
                cards.append(gpu(i, mig=draw(st.sampled_from([BAL, ["3g.40gb", "3g.40gb"]]))))
            elif mode == "shared":
                cards.append(gpu(i, shared=draw(st.integers(1, 4))))
            else:
                cards.append(gpu(i))
        nodes.append(node(name, "a100", A100, cards))
    work = []
    for k in range(draw(st.integers(0, 10))):
        where = draw(st.sampled_from([N1, N2, "a100-gone"]))
        allocs = [_allocation(draw) for _ in range(draw(st.integers(1, 3)))]
        cls = draw(st.sampled_from(["training-low", "spot", "serving", "training-high"]))
        work.append(
            Workload(
                namespace=draw(st.sampled_from(["team-a", "team-b"])),
                name=f"w{k}",
                priority_class=cls,
                request=Request(gpus=len(allocs)),
                node=where,
                allocations=allocs,
                started_at=ago(draw(st.sampled_from([0.1, 2, 30]))),
                checkpointable=True,
                migratable=draw(st.booleans()),
            )
        )
    for k in range(draw(st.integers(0, 3))):
        req = draw(
            st.sampled_from(
                [
                    Request(gpus=8),
                    Request(gpus=2),
                    Request(mig={"3g.40gb": 1}),
                    Request(shared_slices=1),
                ]
            )
        )
        work.append(
            Workload(
                namespace="team-b",
                name=f"p{k}",
                priority_class=draw(st.sampled_from(["serving", "training-high"])),
                phase="Pending",
                request=req,
                created_at=ago(0.2),
            )
        )
    return snapshot(NOW, nodes, work)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drifted())
def test_any_drift_gets_findings_and_a_safe_plan(obs):
    c = check(DESIRED, obs)
    cards = {(n.name, g.index): g for n in obs.nodes for g in n.gpus}
    held: dict = {}
    for w in obs.workloads:
        for i, a in enumerate(w.allocations):
            card = (w.node, a.gpu)
            if card not in cards:
                assert (w.key, i) in c.ignored_allocations
                continue
            assert ((w.key, i) in c.ignored_allocations) == (card in c.suspect_cards)
            held.setdefault(card, []).append((w.key, a))
    for card, claims in held.items():
        g = cards[card]
        whole_holders = {k for k, a in claims if a.mig_start is None and not a.slices}
        if g.mode == "whole" and len({k for k, _ in claims}) > 1:
            assert card in c.suspect_cards
        if g.mode == "shared" and sum(a.slices for _, a in claims) > (g.shared_slices or 0):
            assert card in c.suspect_cards
        if g.mode != "whole" and whole_holders:
            assert card in c.suspect_cards
        if card in c.suspect_cards:
            assert any(f.subject in (card_key(card), card[0]) for f in c.findings)
    safe_plan(obs, c)
