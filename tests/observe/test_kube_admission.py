"""How the Kubernetes adapter reads admission from a pod (reconciler/observe/kube.py): its
scheduling gates, gpupool's annotations and condition, its gang, a move's reservation on its
Job. Built from the official client's models, as the API server returns them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.observe.builders import gpu, node
from reconciler.observe.kube import (
    _UNREADABLE,
    Owners,
    _workload,
    admission_event,
    admitted_allocations,
    pod_request,
    terminating_event,
)

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
KUEUE_GATE = "kueue.x-k8s.io/admission"


def pod(
    *,
    gates: tuple[str, ...] = (),
    node: str | None = None,
    phase: str = "Pending",
    annotations: dict | None = None,
    labels: dict | None = None,
    owner: tuple[str, str] | None = None,
    conditions: list | None = None,
    deleting: bool = False,
    created: datetime = T0,
) -> client.V1Pod:
    refs = (
        [client.V1OwnerReference(api_version="v1", kind=owner[0], name=owner[1], uid="u")]
        if owner
        else None
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="p",
            namespace="team-a",
            annotations=annotations,
            labels=labels,
            owner_references=refs,
            creation_timestamp=created,
            deletion_timestamp=T0 if deleting else None,
        ),
        spec=client.V1PodSpec(
            node_name=node,
            scheduling_gates=[client.V1PodSchedulingGate(name=g) for g in gates] or None,
            containers=[
                client.V1Container(
                    name="main",
                    resources=client.V1ResourceRequirements(limits={C.GPU_RESOURCE: "2"}),
                )
            ],
        ),
        status=client.V1PodStatus(phase=phase, conditions=conditions),
    )


def read(p: client.V1Pod, owners: Owners | None = None):
    req = pod_request(p)
    return _workload(p, req, admitted_allocations(p, req, None, set()), owners)


@pytest.mark.parametrize(
    ("kw", "admission", "node"),
    [
        ({"gates": (C.ADMISSION_GATE,)}, "gpupool", None),
        ({"gates": (KUEUE_GATE, C.ADMISSION_GATE)}, "other", None),
        ({"gates": (KUEUE_GATE,)}, "other", None),
        ({}, "scheduler", None),
        ({"annotations": {C.ADMITTED_ANN: "n1", C.INTENDED_GPUS_ANN: "2,3"}}, "admitted", "n1"),
    ],
    ids=["ours", "ours-and-kueue", "kueue-only", "no-gate", "admitted-not-bound"],
)
def test_who_decides_a_pending_pod(kw, admission, node):
    w = read(pod(**kw))
    assert (w.phase, w.admission, w.node) == ("Pending", admission, node)
    # an admitted pod holds the whole cards meant for it until it is bound
    assert [a.gpu for a in w.allocations] == ([2, 3] if admission == "admitted" else [])
    assert w.placed == (admission == "admitted")


@pytest.mark.parametrize(
    ("taken", "holds"),
    [
        (set(), [2, 3]),  # the cards meant for it are free: it holds them
        ({2}, [3, 0]),  # one was handed to a bound pod: another free card instead
        ({0, 1, 2, 4, 5, 6, 7}, [3, 2]),  # too few free: it keeps a taken one (a collision)
    ],
    ids=["as-meant", "re-aimed", "node-full"],
)
def test_an_admitted_pod_holds_free_cards_of_its_node(taken, holds):
    """The kubelet hands an admitted pod cards of its own choosing (the intended cards are a
    hint nothing reads): in the view it yields to cards a bound pod holds."""
    p = pod(annotations={C.ADMITTED_ANN: "n1", C.INTENDED_GPUS_ANN: "2,3"})
    n = node("n1", "h100", "h100", [gpu(i) for i in range(8)])
    seen = set(taken)
    got = admitted_allocations(p, pod_request(p), n, seen)
    assert [a.gpu for a in got] == holds
    assert seen == taken | set(holds)


def test_a_bound_pod_is_placed_before_it_runs_and_a_terminating_one_still_holds_cards():
    bound = read(pod(node="n1", phase="Pending"))
    assert (bound.phase, bound.node, bound.placed) == ("Running", "n1", True)
    stopping = read(pod(node="n1", phase="Running", deleting=True))
    assert stopping.terminating and stopping.placed


def test_reservation_and_held_condition_and_unreadable_annotations():
    held = client.V1PodCondition(type=C.ADMITTED_CONDITION, status="False", message="held: cap")
    w = read(
        pod(
            gates=(C.ADMISSION_GATE,),
            annotations={C.RESERVED_ANN: "n1:0,1"},
            conditions=[held],
        )
    )
    assert (w.reserved_node, w.reserved_gpus, w.held) == ("n1", [0, 1], "held: cap")
    for bad in ("n1", "n1:x", ":0", "n1:-1"):
        w = read(pod(gates=(C.ADMISSION_GATE,), annotations={C.RESERVED_ANN: bad}))
        assert (w.reserved_node, w.reserved_gpus) == (None, []), bad


@pytest.mark.parametrize(
    ("kw", "owners", "gang", "size"),
    [
        ({"annotations": {C.GANG_ANN: "g", C.GANG_SIZE_ANN: "4"}}, Owners(), "g", 4),
        ({"annotations": {C.GANG_ANN: "g", C.GANG_SIZE_ANN: "all"}}, Owners(), "g", None),
        (
            {"labels": {C.POD_GROUP_LABEL: "pg"}},
            Owners(sizes={("team-a", "PodGroup", "pg"): 3}),
            "pod-group:pg",
            3,
        ),
        ({"owner": ("Job", "j")}, Owners(sizes={("team-a", "Job", "j"): 2}), "", 2),
        ({"owner": ("ReplicaSet", "r")}, Owners(), "", None),
        (
            {"owner": ("Job", "j")},
            Owners(sizes={("team-a", "Job", "j"): 2}, foreign_jobs={("team-a", "j")}),
            "job:j",
            2,
        ),
    ],
    ids=["explicit", "explicit-bad-size", "pod-group", "job", "replica-set", "foreign-job"],
)
def test_gang_identity_and_size(kw, owners, gang, size):
    w = read(pod(gates=(C.ADMISSION_GATE,), **kw), owners)
    assert (w.gang, w.gang_size) == (gang, size)


@pytest.mark.parametrize(
    ("created", "gates", "reserved"),
    [
        (T0 + timedelta(seconds=30), (C.ADMISSION_GATE,), True),
        (T0 - timedelta(seconds=30), (C.ADMISSION_GATE,), False),  # older than the move
        (T0 + timedelta(minutes=11), (C.ADMISSION_GATE,), False),  # past the TTL
        (T0 + timedelta(seconds=30), (), False),  # not gated: the scheduler's
    ],
    ids=["next-pod", "older-pod", "too-late", "ungated"],
)
def test_a_moves_reservation_on_the_job_reserves_its_next_pod(created, gates, reserved):
    owners = Owners(next_pod={("team-a", "j"): ("n2", [5], T0)}, jobs={("team-a", "j")})
    w = read(pod(gates=gates, owner=("Job", "j"), created=created), owners)
    assert (w.reserved_node, w.reserved_gpus) == (("n2", [5]) if reserved else (None, []))


def test_a_gated_pod_of_a_job_not_read_is_held_and_reported():
    """Jobs and pods come through separate watches: a pod can be seen before its Job. Its
    gang's size is the Job's parallelism, so it is held (not admitted) until the Job is read;
    a pod kube-scheduler places (not gated) is read as before."""
    found: list = []
    token = _UNREADABLE.set(found)
    try:
        held = read(pod(gates=(C.ADMISSION_GATE,), owner=("Job", "j")), Owners())
        free = read(pod(gates=(), owner=("Job", "j")), Owners())
    finally:
        _UNREADABLE.reset(token)
    assert held.admission == "other" and free.admission != "other"
    assert [u.name for u in found] == ["p"] and "Job j, which was not read" in found[0].message
    known = read(pod(gates=(C.ADMISSION_GATE,), owner=("Job", "j")), Owners(jobs={("team-a", "j")}))
    assert known.admission == "gpupool"


@pytest.mark.parametrize(
    ("kind", "kw", "wakes"),
    [
        ("ADDED", {"gates": (C.ADMISSION_GATE,)}, True),  # new demand
        ("MODIFIED", {"gates": (C.ADMISSION_GATE,)}, True),  # e.g. its gang's size known now
        ("ADDED", {"gates": (KUEUE_GATE, C.ADMISSION_GATE)}, False),  # Kueue's first
        ("ADDED", {}, False),  # kube-scheduler's
        ("MODIFIED", {"annotations": {C.ADMITTED_ANN: "n1"}}, False),  # our own admission
        ("MODIFIED", {"node": "n1", "phase": "Running"}, False),
        ("MODIFIED", {"node": "n1", "phase": "Running", "deleting": True}, True),
        ("MODIFIED", {"node": "n1", "phase": "Succeeded"}, True),
        ("DELETED", {"node": "n1", "phase": "Running"}, True),
    ],
)
def test_which_pod_events_wake_the_loop(kind, kw, wakes):
    assert admission_event(kind, pod(**kw)) is wakes


def test_a_pod_without_gpus_never_wakes_the_loop():
    p = pod(gates=(C.ADMISSION_GATE,))
    p.spec.containers[0].resources = client.V1ResourceRequirements(limits={"cpu": "1"})
    assert not admission_event("ADDED", p) and not admission_event("DELETED", p)


@pytest.mark.parametrize(
    ("kind", "kw", "wakes"),
    [
        ("ADDED", {"gates": (C.ADMISSION_GATE,)}, True),
        ("MODIFIED", {"node": "n1", "phase": "Running"}, False),
        ("DELETED", {"node": "n1", "phase": "Running"}, True),
        ("MODIFIED", {"node": "n1", "phase": "Succeeded"}, True),
    ],
)
def test_a_pod_asking_through_resource_claims_wakes_the_loop_as_a_gpu_pod(kind, kw, wakes):
    """On a DRA pool a pod asks its cards through claims, with no `nvidia.com/gpu`: its events
    wake the loop as a GPU pod's do (before, none did: a DRA pool's gated pods waited for the
    interval, 30 s in deploy/controller.yaml, and so did the cards its ended pods freed)."""
    p = pod(**kw)
    p.spec.containers[0].resources = client.V1ResourceRequirements(
        claims=[client.CoreV1ResourceClaim(name="gpu")]
    )
    p.spec.resource_claims = [
        client.V1PodResourceClaim(name="gpu", resource_claim_template_name="gpupool-a-gpu-1")
    ]
    assert admission_event(kind, p) is wakes


@pytest.mark.parametrize(
    ("kind", "kw", "going"),
    [
        ("MODIFIED", {"node": "n1", "phase": "Running", "deleting": True}, True),
        ("MODIFIED", {"node": "n1", "phase": "Running"}, False),
        ("DELETED", {"node": "n1", "phase": "Running", "deleting": True}, False),
        ("MODIFIED", {"node": "n1", "phase": "Succeeded", "deleting": True}, False),
    ],
)
def test_a_terminating_event_is_a_pod_on_its_way_out_not_gone_yet(kind, kw, going):
    """The loop wakes on it even for a DRA pod whose claim still holds its devices: the plan
    gives its cards to the next pod, whose admission waits for the pod and the claim; its
    delete or its end waits for the claim's release instead (loop/controller.py `run`)."""
    assert terminating_event(kind, pod(**kw)) is going


# ---------------------------------------------------------------------- Kueue's queue label
def test_the_kueue_queue_comes_from_the_pod_or_its_job():
    """Kueue reads `kueue.x-k8s.io/queue-name` from the Job (or from a plain pod it manages):
    the adapter gives each pod its queue, and none when neither carries the label."""
    req = pod_request(pod())
    queued = Owners(queues={("team-a", "train"): "gpupool"})
    assert _workload(pod(owner=("Job", "train")), req, [], queued).queue_name == "gpupool"
    labelled = pod(labels={C.KUEUE_QUEUE_LABEL: "mine"})
    assert _workload(labelled, req, [], Owners()).queue_name == "mine"
    assert _workload(pod(owner=("Job", "other")), req, [], queued).queue_name == ""
    assert _workload(pod(owner=("ReplicaSet", "train")), req, [], queued).queue_name == ""
