"""Holes the planner used to pass over in silence: a running pod whose cards are unknown, names
that cannot be printed, a service or quota listed twice. Each gets a finding and a safe plan."""

from __future__ import annotations

import json

from reconciler.cli import main
from reconciler.observe.builders import gpu, mig_pod, node, snapshot
from reconciler.observe.model import ObservedState, QuotaObject, Workload
from reconciler.observe.snapshot import load_snapshot
from reconciler.plan.actions import Admit, Repartition, Scale
from reconciler.plan.change import ChangeReport
from reconciler.plan.cluster import build_cluster, unknown_holdings
from reconciler.plan.consistency import CODES, canonical, check, first_listings
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan
from reconciler.plan.render import (
    change_to_markdown,
    change_to_text,
    printable,
    to_json,
    to_markdown,
    to_text,
)
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import A100, NOW, _objects
from tests.plan.support import HIGH, desired, job, pend, scaling, svc, two_nodes

TEXT = desired()
DESIRED = load([SourceFile("desired.yaml", TEXT)])
N1, N2 = "a100-1", "a100-2"


def observed(work: list[Workload], nodes=None, **kw) -> ObservedState:
    return snapshot(NOW, nodes or two_nodes(), work, **{**_objects(TEXT), **kw})


def fill() -> Workload:
    """a100-2 full of team-b's non-preemptible work: a100-1 is the only place left."""
    return job("team-b", "fill", N2, 8, HIGH)


def unknown(w: Workload, allocations: list | None = None) -> Workload:
    """`w` as its node's agent publishes it: `allocations: []` (or only some)."""
    return w.model_copy(update={"allocations": allocations or []})


def member(ns: str, name: str, i: int, w: Workload, size: int = 2) -> Workload:
    return w.model_copy(
        update={"name": f"{name}-{i}", "owner_kind": "Job", "owner_name": name, "gang_size": size}
    )


def admitted_to(p: Plan, node_name: str) -> dict[str, tuple[int, ...]]:
    return {
        pa.name: pa.gpus
        for a in p.actions
        if isinstance(a, Admit)
        for pa in a.pods
        if pa.node == node_name
    }


def codes(p: Plan, code: str) -> dict[str, str]:
    return {f.subject: f.message for f in p.findings if f.code == code}


# --------------------------------------------------------------------------- allocation-unknown


def running_gang() -> list[Workload]:
    """team-b's gang of two 4-GPU pods running on a100-1, its agent publishing
    `allocations: []` for both: they hold all 8 cards, which the snapshot does not say."""
    return [
        member("team-b", "run", i, unknown(job("team-b", "x", N1, [0, 1, 2, 3], HIGH)))
        for i in range(2)
    ]


def pending_gang() -> list[Workload]:
    """team-a's gated gang of two 4-GPU training-high pods."""
    return [member("team-a", "next", i, pend("team-a", "x", 4, HIGH)) for i in range(2)]


def test_a_running_gang_without_allocations_keeps_its_node_from_the_pending_one():
    obs = observed([fill(), *running_gang(), *pending_gang()])
    p = plan(DESIRED, obs)
    # before: a100-1 looked empty, and the pending gang was admitted onto the running one's cards
    assert admitted_to(p, N1) == {}, admitted_to(p, N1)
    found = codes(p, "allocation-unknown")
    assert set(found) == {"team-b/run-0", "team-b/run-1"}, [(f.code, f.subject) for f in p.findings]
    msg = found["team-b/run-0"]
    assert N1 in msg and "4 whole GPUs" in msg and f"{N1}/gpu0" in msg and "fences" in msg
    assert not [a for a in p.actions if isinstance(a, Repartition) and a.target == N1]


def test_a_pod_without_allocations_holds_every_card_it_may_be_on():
    """One 4-GPU pod published with `allocations: []` beside a job known on cards 0-1: it may
    hold any of cards 2-7, so all six are held and fenced (not just four of them: gpupool
    would reset one of the others as empty under it)."""
    work = [fill(), job("team-a", "known", N1, [0, 1], HIGH), unknown(job("team-b", "u", N1, 4))]
    obs = canonical(observed(work))
    (u,) = unknown_holdings(obs)
    assert (u.workload, u.node, u.missing) == ("team-b/u", N1, ("4 whole GPUs",))
    assert u.cards == tuple((N1, i) for i in range(2, 8))
    c = check(DESIRED, obs)
    assert [f.code for f in c.findings] == ["allocation-unknown"]
    assert set(c.suspect_cards) == set(u.cards)
    view = build_cluster(DESIRED, obs, dict(c.suspect_cards))
    for i in range(2, 8):
        s = view.slot[(N1, i)]
        assert s.holders == {"team-b/u"} and s.fenced and not s.free_whole
    assert view.pools["a100"].free_whole_on(N1) == 0
    # a gated 2-GPU pod finds no room on a100-1, and waits
    p = plan(DESIRED, observed([*work, pend("team-a", "small", 2, HIGH)]))
    assert admitted_to(p, N1) == {}
    assert "allocation-unknown" in {f.code for f in p.findings}


def test_a_pod_with_some_allocations_holds_the_rest_conservatively():
    partial = unknown(job("team-b", "u", N1, [0, 1, 2, 3]), job("team-b", "u", N1, [0]).allocations)
    (u,) = unknown_holdings(observed([fill(), partial]))
    assert u.missing == ("3 whole GPUs",) and u.cards == tuple((N1, i) for i in range(1, 8))


def test_a_mig_pod_without_allocation_fences_the_cards_with_a_free_instance_of_its_profile():
    cards = [gpu(0, mig=["3g.40gb", "3g.40gb"]), gpu(1, mig=["7g.80gb"]), *map(gpu, range(2, 8))]
    pod = mig_pod("team-b", "r", N1, "3g.40gb", gpu_index=0, start=0, started=NOW)
    obs = observed([unknown(pod)], nodes=[node(N1, "a100", A100, cards)])
    (u,) = unknown_holdings(obs)
    assert u.missing == ("1 MIG 3g.40gb instance",) and u.cards == ((N1, 0),)
    assert check(DESIRED, obs).suspect_cards.keys() == {(N1, 0)}


def test_pods_whose_allocations_are_known_are_not_reported():
    obs = observed([fill(), job("team-a", "known", N1, [0, 1], HIGH)])
    assert unknown_holdings(obs) == []
    assert "allocation-unknown" in CODES
    assert not codes(plan(DESIRED, obs), "allocation-unknown")


def test_a_snapshot_file_with_an_empty_allocation_list(tmp_path):
    """The same gang, read from a snapshot file as `gpupool plan --observed` reads it."""
    data = observed([fill(), *running_gang(), *pending_gang()]).model_dump(
        mode="json", by_alias=True
    )
    for w in data["workloads"]:
        if w["name"].startswith("run-"):
            assert w["allocations"] == []
    path = tmp_path / "observed.json"
    path.write_text(json.dumps(data))
    p = plan(DESIRED, load_snapshot(path))
    assert admitted_to(p, N1) == {} and codes(p, "allocation-unknown")


# --------------------------------------------------------------------------- duplicate-object

SCALED = desired(extra=scaling())
SCALED_DESIRED = load([SourceFile("desired.yaml", SCALED)])


def with_objects(quotas: list, services: list) -> ObservedState:
    objs = _objects(SCALED)
    return snapshot(
        NOW,
        two_nodes(),
        [fill()],
        quotas=quotas,
        priority_classes=objs["priority_classes"],
        services=services,
    )


def without_finding(p: Plan, code: str) -> tuple:
    return (p.actions, [f for f in p.findings if f.code != code], p.capacity)


def test_a_quota_listed_twice_is_reported_and_planned_once():
    objs = _objects(SCALED)["quotas"]
    right = objs[0]
    wrong = right.model_copy(update={"hard": {"requests.nvidia.com/gpu": "99"}})
    stale = QuotaObject(namespace="team-old", name="gpupool-team-old", managed_by="gpupool")
    plans = [
        plan(SCALED_DESIRED, with_objects([*twice, *objs[1:], stale, stale], [svc(2)]))
        for twice in ([right, wrong], [wrong, right])
    ]
    # whatever the order listed, the same plan: the first listing in canonical order is kept
    assert plans[0] == plans[1]
    p = plans[0]
    found = codes(p, "duplicate-object")
    assert set(found) == {
        "ResourceQuota team-a/gpupool-team-a",
        "ResourceQuota team-old/gpupool-team-old",
    }, [(f.code, f.subject) for f in p.findings]
    assert "listed 2 times" in found["ResourceQuota team-a/gpupool-team-a"]
    # the plan is the plan of the snapshot with that one listing: the stale quota pruned once
    ids = [a.id for a in p.actions]
    assert ids.count("prune-quota:team-old/gpupool-team-old") == 1
    first = min([right, wrong], key=lambda q: q.model_dump_json())
    single = plan(SCALED_DESIRED, with_objects([first, *objs[1:], stale], [svc(2)]))
    assert without_finding(p, "duplicate-object") == without_finding(single, "duplicate-object")


def test_a_service_listed_twice_is_reported_and_scaled_once():
    s = svc(2, queue=100)
    other = s.model_copy(update={"replicas": 5})
    objs = _objects(SCALED)["quotas"]
    plans = [plan(SCALED_DESIRED, with_objects(objs, order)) for order in ([s, other], [other, s])]
    assert plans[0] == plans[1]
    p = plans[0]
    assert set(codes(p, "duplicate-object")) == {"Deployment team-b/chat"}
    scales = [a for a in p.actions if isinstance(a, Scale)]
    assert len(scales) == 1
    first = min([s, other], key=lambda x: x.model_dump_json())
    single = plan(SCALED_DESIRED, with_objects(objs, [first]))
    assert without_finding(p, "duplicate-object") == without_finding(single, "duplicate-object")
    # a Deployment and a StatefulSet of one name are two objects, not a duplicate
    sts = s.model_copy(update={"kind": "StatefulSet"})
    assert not codes(plan(SCALED_DESIRED, with_objects(objs, [s, sts])), "duplicate-object")


def test_first_listings_leaves_a_snapshot_without_duplicates_alone():
    obs = canonical(with_objects(_objects(SCALED)["quotas"], [svc(2)]))
    assert first_listings(obs) is obs
    assert not [f for f in check(SCALED_DESIRED, obs).findings if f.code == "duplicate-object"]


# --------------------------------------------------------------------------- unprintable names

ODD = "\ud800x"  # a lone surrogate: JSON can spell it ("\ud800x"), UTF-8 cannot encode it


def odd_snapshot(tmp_path) -> str:
    """A snapshot file whose gated pod is named with a lone surrogate (JSON's `\\ud800`)."""
    obs = observed([fill(), pend("team-a", ODD, 2, HIGH)])
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(obs.model_dump(mode="json", by_alias=True)))
    assert "\\ud800x" in path.read_text()
    return str(path)


def test_a_name_utf8_cannot_encode_is_escaped_in_text_and_markdown(tmp_path):
    p = plan(DESIRED, load_snapshot(odd_snapshot(tmp_path)))
    assert any(ODD in a.target for a in p.actions)  # the plan itself keeps the name as read
    for render in (to_text, to_markdown):
        out = render(p)
        out.encode("utf-8")  # before: UnicodeEncodeError when printed
        assert "\\ud800x" in out and ODD not in out
    assert "\\ud800x" in to_json(p)  # JSON escaped it already
    assert printable("plain é") == "plain é"


def test_plan_prints_such_a_name_in_every_format(tmp_path, capsys):
    path = odd_snapshot(tmp_path)
    for fmt in ("text", "markdown", "json"):
        capsys.readouterr()
        assert main(["plan", "pools", "policies", "--observed", path, "--format", fmt]) == 0, fmt
        captured = capsys.readouterr()
        assert "Traceback" not in captured.err and "\\ud800x" in captured.out, fmt


def test_a_change_report_with_such_a_name_renders_too():
    report = ChangeReport(
        base_revision=None,
        head_revision=None,
        capacity={},
        policy_changes=[f"Quota/{ODD} spec.maxGPUs: 4 -> 8"],
        quota_changes={},
        repartitions=[],
        disruptions=[],
        drained_nodes=[],
        gates=[f"{ODD} is refused"],
        head_summary="h",
        base_summary="b",
    )
    for render in (change_to_text, change_to_markdown):
        out = render(report)
        out.encode("utf-8")
        assert "\\ud800x" in out and ODD not in out
