"""gpupool's state on a pod is believed only where gpupool wrote it (issue "Tenant-proof",
item 2): the Kubernetes adapter reads `gpupool.io/admitted`, `reserved` and `intended-gpus`
from a pod, and a Move's `gpupool.io/next-pod-reserved` from a Job, only when the API server
names gpupool's field manager as the annotation's owner in `metadata.managedFields`
(reconciler/observe/kube_pods.py, `believed`; kube_owners.py, `gpupool_wrote`). A value
anyone else wrote, or an admission to a node that does not exist, is ignored with a
`forged-state` report (an `unreadable-object` finding in the plan).

Pods are built from the official client's models as the API server returns them, with the
managedFields entries it records, and read the way `observe_cluster` reads them
(`pod_holdings`, then `pod_workloads`).
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.observe.builders import snapshot
from reconciler.observe.kube_common import _UNREADABLE
from reconciler.observe.kube_owners import Owners, _next_pod_reservation
from reconciler.observe.kube_pods import pod_holdings, pod_workloads
from reconciler.observe.model import Workload
from reconciler.plan.actions import Admit
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import _objects
from tests.plan.support import HIGH, LOW, NOW, desired, job, two_nodes

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
OTHER = "kubectl-annotate"  # what `kubectl annotate` records as its field manager


def owned(manager: str, *annotations: str) -> client.V1ManagedFieldsEntry:
    """A managedFields entry: `manager` set these annotations (an Update, as a patch records)."""
    return client.V1ManagedFieldsEntry(
        manager=manager,
        operation="Update",
        api_version="v1",
        fields_type="FieldsV1",
        fields_v1={"f:metadata": {"f:annotations": {f"f:{k}": {} for k in annotations}}},
        time=T0,
    )


def raw_pod(
    name: str,
    *,
    ns: str = "team-a",
    gpus: int = 2,
    cls: str = LOW,
    gated: bool = False,
    node: str | None = None,
    annotations: dict[str, str] | None = None,
    managed: list[client.V1ManagedFieldsEntry] | None = None,
    created: datetime = T0,
) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            namespace=ns,
            annotations=annotations,
            managed_fields=managed,
            creation_timestamp=created,
        ),
        spec=client.V1PodSpec(
            node_name=node,
            priority_class_name=cls,
            node_selector={C.POOL_LABEL: "a100"},
            scheduling_gates=[client.V1PodSchedulingGate(name=C.ADMISSION_GATE)] if gated else None,
            containers=[
                client.V1Container(
                    name="main",
                    resources=client.V1ResourceRequirements(limits={C.GPU_RESOURCE: str(gpus)}),
                )
            ],
        ),
        status=client.V1PodStatus(phase="Running" if node else "Pending"),
    )


def observe(*pods: client.V1Pod, owners: Owners | None = None) -> tuple[dict[str, Workload], list]:
    """The pods' workloads (by name) and what was reported, read as `observe_cluster` does, on
    the two A100 nodes of the plan tests (a100-1, a100-2)."""
    found: list = []
    token = _UNREADABLE.set(found)
    try:
        gpu_pods, taken = pod_holdings(list(pods), {})
        by_name = {n.name: n for n in two_nodes()}
        ws = pod_workloads(gpu_pods, by_name, taken, owners or Owners())
    finally:
        _UNREADABLE.reset(token)
    return {w.name: w for w in ws}, found


def forged_reports(found: list) -> dict[str, str]:
    return {u.ref: u.message for u in found if u.message.startswith("forged-state:")}


# ---------------------------------------------------------------- admitted


@pytest.mark.parametrize(
    "managed",
    [None, [owned(OTHER, C.ADMITTED_ANN)], [owned("gpupool", C.RESERVED_ANN)]],
    ids=["no-managed-fields", "another-manager", "gpupool-owns-another-key"],
)
def test_a_forged_admission_is_demand_not_admitted(managed):
    """A pending pod nobody admitted, whose `gpupool.io/admitted` gpupool did not write
    (a tenant's `kubectl annotate`), holds no card: it is demand, with a finding."""
    p = raw_pod("squat", annotations={C.ADMITTED_ANN: "a100-1"}, managed=managed)
    ws, found = observe(p)
    w = ws["squat"]
    assert (w.phase, w.admission, w.node, w.allocations) == ("Pending", "scheduler", None, [])
    assert not w.placed
    msg = forged_reports(found)["Pod team-a/squat"]
    assert C.ADMITTED_ANN in msg and "not written by gpupool" in msg
    if managed and managed[0].manager == OTHER:
        assert OTHER in msg  # who wrote it, for the Event on the pod
    # the pod object is left as it was (it may be the watch cache's)
    assert p.metadata.annotations == {C.ADMITTED_ANN: "a100-1"}


def test_an_admission_to_a_node_that_does_not_exist_is_demand_not_admitted():
    p = raw_pod(
        "ghost",
        annotations={C.ADMITTED_ANN: "a100-9", C.INTENDED_GPUS_ANN: "0,1"},
        managed=[owned("gpupool", C.ADMITTED_ANN, C.INTENDED_GPUS_ANN)],
    )
    ws, found = observe(p)
    w = ws["ghost"]
    assert (w.admission, w.node, w.allocations, w.placed) == ("scheduler", None, [], False)
    msg = forged_reports(found)["Pod team-a/ghost"]
    assert "a100-9" in msg and "does not exist" in msg


def test_gpupools_own_admission_is_believed():
    """The control: what gpupool's admission patch wrote (its field manager owns the keys)
    holds the cards meant for the pod until it is bound, with no report."""
    p = raw_pod(
        "ours",
        annotations={C.ADMITTED_ANN: "a100-1", C.INTENDED_GPUS_ANN: "2,3"},
        managed=[owned("OpenAPI-Generator"), owned("gpupool", C.ADMITTED_ANN, C.INTENDED_GPUS_ANN)],
    )
    ws, found = observe(p)
    w = ws["ours"]
    assert (w.admission, w.node, w.placed) == ("admitted", "a100-1", True)
    assert [a.gpu for a in w.allocations] == [2, 3]
    assert found == []


def test_forged_intended_cards_are_not_believed():
    """gpupool admitted the pod, then someone rewrote the cards meant for it: the rewritten
    hint is not followed (on a full node it would make the pod collide with others and get
    their cards fenced); the pod holds the first free cards of its node."""
    bound = raw_pod(
        "neighbour",
        ns="team-b",
        node="a100-1",
        annotations={C.GPUS_ANN: "0,1"},
        managed=[owned(C.AGENT_FIELD_MANAGER, C.GPUS_ANN)],
    )
    p = raw_pod(
        "ours",
        annotations={C.ADMITTED_ANN: "a100-1", C.INTENDED_GPUS_ANN: "6,7"},
        managed=[owned("gpupool", C.ADMITTED_ANN), owned(OTHER, C.INTENDED_GPUS_ANN)],
    )
    ws, found = observe(bound, p)
    assert (ws["ours"].admission, ws["ours"].node) == ("admitted", "a100-1")
    assert [a.gpu for a in ws["ours"].allocations] == [2, 3]
    assert C.INTENDED_GPUS_ANN in forged_reports(found)["Pod team-a/ours"]


# ---------------------------------------------------------------- reservations


def test_a_forged_reservation_is_ignored_and_gpupools_is_kept():
    ann = {C.RESERVED_ANN: "a100-1:0,1"}
    forged_pod = raw_pod("forged", gated=True, annotations=ann, managed=[owned(OTHER, *ann)])
    ours = raw_pod("ours", gated=True, annotations=ann, managed=[owned("gpupool", *ann)])
    ws, found = observe(forged_pod, ours)
    assert (ws["forged"].reserved_node, ws["forged"].reserved_gpus) == (None, [])
    assert (ws["ours"].reserved_node, ws["ours"].reserved_gpus) == ("a100-1", [0, 1])
    assert set(forged_reports(found)) == {"Pod team-a/forged"}


def _job(annotations: dict, managed: list) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(
            name="train", namespace="team-a", annotations=annotations, managed_fields=managed
        )
    )


def test_a_forged_next_pod_reservation_on_a_job_is_ignored():
    """A Move's reservation for the pod a Job creates next (`gpupool.io/next-pod-reserved`)
    is a reservation of that pod: the Job's owner cannot write one."""
    ann = {C.NEXT_POD_RESERVED_ANN: f"a100-1:0,1@{T0.isoformat()}"}
    found: list = []
    token = _UNREADABLE.set(found)
    try:
        forged_job = _next_pod_reservation(_job(ann, [owned(OTHER, *ann)]))
        ours = _next_pod_reservation(_job(ann, [owned("gpupool", *ann)]))
    finally:
        _UNREADABLE.reset(token)
    assert forged_job is None
    assert ours == ("a100-1", [0, 1], T0)
    [u] = found
    assert (u.ref, u.message.startswith("forged-state:")) == ("Job team-a/train", True)


def test_a_bound_pods_unverified_state_is_dropped_quietly():
    """On a bound pod nothing reads gpupool's state (it holds its cards on its node), and pods
    admitted before gpupool named its field manager still carry theirs: dropped, no report."""
    p = raw_pod(
        "running",
        node="a100-1",
        annotations={C.ADMITTED_ANN: "a100-1", C.RESERVED_ANN: "a100-1:0,1", C.GPUS_ANN: "0,1"},
        managed=[
            owned("OpenAPI-Generator", C.ADMITTED_ANN, C.RESERVED_ANN),
            owned(C.AGENT_FIELD_MANAGER, C.GPUS_ANN),
        ],
    )
    ws, found = observe(p)
    w = ws["running"]
    assert (w.phase, w.node, [a.gpu for a in w.allocations]) == ("Running", "a100-1", [0, 1])
    assert (w.reserved_node, found) == (None, [])


# ---------------------------------------------------------------- the plan


def test_a_forged_admission_holds_no_cards_in_the_plan():
    """The issue's case: a tenant's own `gpupool.io/admitted: a100-1` on its unschedulable
    pending pod. Believed, it held all of a100-1 and team-a's gated pod could not be placed
    ("nothing can be freed"); now the plan admits team-a's pod onto a100-1, and says why the
    squatter's admission was not believed."""
    squatter = raw_pod(
        "squat",
        ns="team-b",
        gpus=8,
        annotations={C.ADMITTED_ANN: "a100-1", C.INTENDED_GPUS_ANN: "0,1,2,3,4,5,6,7"},
        managed=[owned(OTHER, C.ADMITTED_ANN, C.INTENDED_GPUS_ANN)],
    )
    real = raw_pod("train", gpus=2, cls=HIGH, gated=True, created=NOW)
    ws, found = observe(squatter, real)
    text = desired()
    fill = job("team-b", "fill", "a100-2", 8, HIGH)  # a100-2 is full of work nobody may stop
    observed = snapshot(NOW, two_nodes(), [fill, *ws.values()], unreadable=found, **_objects(text))
    p = plan(load([SourceFile("desired.yaml", text)]), observed)
    admits = {pa.name: pa.node for a in p.actions if isinstance(a, Admit) for pa in a.pods}
    assert admits == {"train": "a100-1"}, p.findings
    assert {(f.code, f.subject) for f in p.findings if "forged-state" in f.message} == {
        ("unreadable-object", "Pod team-b/squat")
    }


# ---------------------------------------------------------------- gpupool.io/gpus


@pytest.mark.parametrize(
    "managed",
    [None, [owned(OTHER, C.GPUS_ANN)], [owned("gpupool", C.GPUS_ANN)]],
    ids=["no-managed-fields", "a-tenant", "the-controller"],
)
def test_a_gpus_annotation_the_agent_did_not_write_leaves_the_cards_unknown(managed):
    """On a node whose agent publishes no pods the annotation says which cards a bound pod
    holds; written by anyone but the node agent (even gpupool's controller, which never writes
    it) it is not believed: the pod's cards are unknown (empty: the planner counts it as
    holding any card of its node), with a `forged-state` report naming the trusted writer."""
    p = raw_pod("run", node="a100-1", annotations={C.GPUS_ANN: "0,1"}, managed=managed)
    ws, found = observe(p)
    assert (ws["run"].phase, ws["run"].allocations) == ("Running", [])
    msg = forged_reports(found)["Pod team-a/run"]
    assert C.GPUS_ANN in msg and C.AGENT_FIELD_MANAGER in msg and "unknown" in msg


def test_the_agents_gpus_annotation_is_believed():
    p = raw_pod(
        "run",
        node="a100-1",
        annotations={C.GPUS_ANN: "0,1"},
        managed=[owned("OpenAPI-Generator"), owned(C.AGENT_FIELD_MANAGER, C.GPUS_ANN)],
    )
    ws, found = observe(p)
    assert ([a.gpu for a in ws["run"].allocations], found) == ([0, 1], [])


def test_an_unbound_pods_forged_gpus_annotation_is_ignored_quietly():
    """A pending pod holds nothing whatever its annotation says: nothing to report."""
    p = raw_pod("wait", gated=True, annotations={C.GPUS_ANN: "0,1"}, managed=[owned(OTHER)])
    ws, found = observe(p)
    assert (ws["wait"].allocations, found) == ([], [])


def test_a_forged_gpus_annotation_cannot_steer_the_plan():
    """team-b's 4-card pod runs on a100-1, and an annotation it wrote itself says it holds
    cards 0-3 (which cards the kubelet gave it nobody but the kubelet knows). Believed, cards
    4-7 looked free and team-a's gated 4-card pod was admitted there, onto cards team-b may
    hold; now its cards are unknown, every card it may hold is fenced, and team-a's pod waits.
    (A count that is short, "0" for 8 cards, was already fenced as `allocation-unknown`.)"""
    squatter = raw_pod(
        "hide",
        ns="team-b",
        gpus=4,
        cls=HIGH,
        node="a100-1",
        annotations={C.GPUS_ANN: "0,1,2,3"},
        managed=[owned(OTHER, C.GPUS_ANN)],
    )
    real = raw_pod("train", gpus=4, cls=HIGH, gated=True, created=NOW)
    ws, found = observe(squatter, real)
    text = desired()
    fill = job("team-b", "fill", "a100-2", 8, HIGH)
    observed = snapshot(NOW, two_nodes(), [fill, *ws.values()], unreadable=found, **_objects(text))
    p = plan(load([SourceFile("desired.yaml", text)]), observed)
    admits = {pa.name: pa.node for a in p.actions if isinstance(a, Admit) for pa in a.pods}
    assert admits == {}, admits
    codes = {(f.code, f.subject) for f in p.findings}
    assert ("allocation-unknown", "team-b/hide") in codes, codes
    assert ("unreadable-object", "Pod team-b/hide") in codes, codes


# ---------------------------------------------------------------- upgrading


def pinned(p: client.V1Pod, node: str) -> client.V1Pod:
    """What gpupool's admission patch does besides the annotations: the pod pinned to `node`
    (required node affinity on metadata.name) and its scheduling gate removed."""
    p.spec.scheduling_gates = None
    p.spec.affinity = client.V1Affinity(
        node_affinity=client.V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=client.V1NodeSelector(
                node_selector_terms=[
                    client.V1NodeSelectorTerm(
                        match_fields=[
                            client.V1NodeSelectorRequirement(
                                key="metadata.name", operator="In", values=[node]
                            )
                        ]
                    )
                ]
            )
        )
    )
    return p


def upgrade_plan(*pods: client.V1Pod) -> tuple[dict[str, Workload], dict[str, str], list]:
    """One cycle over a100-1 (empty) and a100-2 (full of work nobody may stop): the pods'
    workloads, what was admitted where, and the plan's findings."""
    ws, found = observe(*pods)
    text = desired()
    fill = job("team-b", "fill", "a100-2", 8, HIGH)
    observed = snapshot(NOW, two_nodes(), [fill, *ws.values()], unreadable=found, **_objects(text))
    p = plan(load([SourceFile("desired.yaml", text)]), observed)
    admits = {pa.name: pa.node for a in p.actions if isinstance(a, Admit) for pa in a.pods}
    return ws, admits, p.findings


OLD_MANAGER = "OpenAPI-Generator"  # what a patch without ?fieldManager= records (the client's)


def test_an_admission_made_before_the_field_manager_was_named_is_kept_on_upgrade():
    """Upgrade: team-b's 4-card pod was admitted to a100-1 by an older controller, whose
    patches named no field manager; kube-scheduler has not bound it yet. Its annotation is not
    gpupool's on record, but the admission is in force at the API server (ungated, pinned to
    a100-1: kube-scheduler binds it there and nowhere else), so it keeps holding 4 cards: the
    8-card gated pod that follows is not admitted onto them (before: dropped as forged, the
    plan admitted the 8-card pod onto all of a100-1, double-booking it)."""
    old = pinned(
        raw_pod(
            "old",
            ns="team-b",
            gpus=4,
            cls=HIGH,
            annotations={C.ADMITTED_ANN: "a100-1", C.INTENDED_GPUS_ANN: "4,5,6,7"},
            managed=[owned(OLD_MANAGER, C.ADMITTED_ANN, C.INTENDED_GPUS_ANN)],
        ),
        "a100-1",
    )
    big = raw_pod("big", gpus=8, cls=HIGH, gated=True, created=NOW)
    small = raw_pod("small", gpus=4, cls=HIGH, gated=True, created=NOW)
    ws, admits, findings = upgrade_plan(old, big)
    assert (ws["old"].admission, ws["old"].node, len(ws["old"].allocations)) == (
        "admitted",
        "a100-1",
        4,
    )
    assert admits == {}, admits  # 4 cards are free, the 8-card pod waits
    # the cards meant for it are a hint an older controller wrote: not followed, reported
    forged = {f.subject: f.message for f in findings if "forged-state" in f.message}
    assert set(forged) == {"Pod team-b/old"} and C.INTENDED_GPUS_ANN in forged["Pod team-b/old"]
    assert C.ADMITTED_ANN + " 'a100-1' was not" not in forged["Pod team-b/old"]
    # a 4-card pod fits beside it: admitted onto the other four cards, never the same ones
    ws, admits, _ = upgrade_plan(old, small)
    assert admits == {"small": "a100-1"}
    held = {a.gpu for a in ws["old"].allocations}
    p = plan(
        load([SourceFile("desired.yaml", desired())]),
        snapshot(
            NOW,
            two_nodes(),
            [job("team-b", "fill", "a100-2", 8, HIGH), *ws.values()],
            **_objects(desired()),
        ),
    )
    [small_admit] = [pa for a in p.actions if isinstance(a, Admit) for pa in a.pods]
    assert held.isdisjoint(small_admit.gpus), (held, small_admit.gpus)
    # next cycle: kube-scheduler bound it, the agent publishes what the kubelet gave it
    bound = raw_pod(
        "old",
        ns="team-b",
        gpus=4,
        cls=HIGH,
        node="a100-1",
        annotations={C.ADMITTED_ANN: "a100-1", C.GPUS_ANN: "0,1,2,3"},
        managed=[
            owned(OLD_MANAGER, C.ADMITTED_ANN),
            owned(C.AGENT_FIELD_MANAGER, C.GPUS_ANN),
        ],
    )
    ws, admits, findings = upgrade_plan(bound, big)
    assert [a.gpu for a in ws["old"].allocations] == [0, 1, 2, 3] and admits == {}
    assert not [f for f in findings if "forged-state" in f.message]


def test_an_old_admission_not_in_force_is_dropped_and_the_pod_readmitted():
    """An admission annotation from before the upgrade on a pod that is still gated (or not
    pinned to that node) is not in force at the API server: dropped with a report, the pod
    is demand again and gpupool admits it anew under its own field manager."""
    stale = raw_pod(
        "stale",
        gpus=4,
        cls=HIGH,
        gated=True,
        created=NOW,
        annotations={C.ADMITTED_ANN: "a100-1"},
        managed=[owned(OLD_MANAGER, C.ADMITTED_ANN)],
    )
    ws, admits, findings = upgrade_plan(stale)
    assert ws["stale"].admission == "gpupool"
    assert admits == {"stale": "a100-1"}
    assert {f.subject for f in findings if "forged-state" in f.message} == {"Pod team-a/stale"}
