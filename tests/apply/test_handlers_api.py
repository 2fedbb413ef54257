"""The handler table rows again, against `KubeOps` over an API server, so the in-memory cluster
cannot drift from what a server does; and the in-memory cluster's own answers (404s, 409s,
merge patches, evictions) checked against the server's, call by call.

The server is the integration suite's `kube` target: the real kube-apiserver of tests/cluster.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from reconciler import conventions as C
from reconciler.apply.handlers import HANDLERS, Context
from reconciler.apply.kube import KubeOps
from reconciler.apply.port import ApiError, ClusterOps
from reconciler.plan.actions import Admit, Preempt, Resume
from tests.apply.api import ApiWorld
from tests.apply.memory import MemoryCluster
from tests.apply.rows import GATE, OTHER_GATE, OWN_TERM, ROWS, SERVER_SIDE_APPLY
from tests.apply.table import (
    NOW,
    NS,
    Job,
    MemoryProbe,
    Node,
    Owner,
    Pod,
    PriorityClass,
    Probe,
    Recording,
    ReplicaSet,
    Row,
    Seed,
    Workload,
    assert_result,
    memory_config,
    run,
    seed_memory,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.kube

API_ROWS = [
    "cordon/fresh",
    "cordon/already-cordoned",
    "cordon/no-node",
    "uncordon/ours",
    "uncordon/someone-elses",
    "uncordon/mig-pending",
    "uncordon/not-cordoned",
    "uncordon/no-node",
    "label-node/present",
    "label-node/missing",
    "mig/not-cordoned",
    "mig/busy-by-annotation",
    "mig/hopper-mode-change-pod-on-other-gpu",  # gpupool.io/gpus by the agent: believed
    "mig/hopper-mode-change-annotation-by-the-client",  # by anyone else: the pod may be on gpu0
    "mig/gpu-pod-without-annotation",
    "mig/terminating-gpu-pod-counts",
    "mig/finished-gpu-pod",
    "mig/cpu-pod",
    "mig/free",
    "mig/keeps-other-entries",
    "mig/entry-already-there",
    "mig/propagating",
    "mig/propagated",
    "mig/mark-of-another-config",
    "mig/state-unset",
    "mig/propagation-restarted-when-rewritten",
    "mig/ampere-mode-change-pod-on-other-gpu",
    "mig/failed-retried-with-a-new-value",
    "mig/failed-retry-writes-its-entry-and-waits",
    "mig/retries-exhausted",
    "mig/stuck-pending-retried",
    "mig/hopper-beside-mig-writes-both-stages",
    "mig/hopper-beside-mig-then-the-whole-node",
    "mig/agent-shows-layout",
    "mig/agent-shows-old-layout",
    "mig/failed",
    "mig/stuck-pending",
    "set-sharing/not-cordoned",
    "set-sharing/busy",
    "set-sharing/other-gpu-busy",
    "set-sharing/free",
    "set-sharing/keeps-other-keys",
    "set-sharing/key-already-there",
    "set-sharing/propagating",
    "set-sharing/propagation-restarted-when-rewritten",
    "set-sharing/mark-of-another-config",
    "set-sharing/propagated",
    "set-sharing/propagated-but-busy-again",
    "set-sharing/waiting-for-allocatable",
    "set-sharing/allocatable-shows-both-names",
    "set-sharing/since-lost",
    "set-sharing/done-when-allocatable-shows-it",
    "set-sharing/repeat",
    "set-sharing/timeout",
    "set-sharing/unshare-selects-default",
    "set-sharing/unshare-busy",
    "set-sharing/unshare-waits-for-allocatable",
    "set-sharing/unshare-done",
    "set-sharing/unshare-no-label-done",
    "set-sharing/unshare-timeout",
    "set-sharing/mps-rendered",
    "set-sharing/mps-beside-mig-refused",
    "set-sharing/mps-too-many-clients",
    "checkpoint/pod-gone",
    "checkpoint/fresh",
    "checkpoint/recent-request",
    "checkpoint/stale-request",
    "checkpoint/terminating-pod",
    "evict/grace-left",
    "evict/grace-over",
    "evict/checkpoint-done",
    "evict/no-checkpoint",
    "evict/unscheduled-pod",
    "evict/pdb",
    "evict/pod-gone",
    "evict/terminating",
    "reclaim/evicts",
    "move/annotates-then-evicts",
    "move/pdb",
    "move/reserves-the-jobs-next-pod",
    "move/job-already-reserved",
    "move/job-reserved-for-other-cards",
    "move/job-reservation-renewed-past-half-its-ttl",
    "move/job-reservation-unreadable",
    "move/replicaset-pod-not-reserved",
    "move/job-grace-left",
    "move/job-pdb",
    "preempt/jobs-pod-not-reserved",
    "suspend/suspends-the-job",
    "suspend/after-the-grace-period",
    "suspend/grace-left",
    "suspend/reclaim",
    "suspend/no-pdb-consulted",
    "suspend/already-suspended-by-gpupool",
    "suspend/suspended-by-someone-else",
    "suspend/job-gone",
    "suspend/job-gone-pdb",
    "suspend/pod-gone",
    "suspend/pod-terminating",
    "suspend/move-evicts",
    "resume/ours",
    "resume/someone-elses",
    "resume/not-suspended",
    "resume/job-gone",
    "scale/at-target",
    "scale/changed-since-plan",
    "scale/up",
    "scale/statefulset-down",
    "scale/kind-differs",
    "scale/missing",
    # the envelope rows' autoscalers are MemoryCluster seeds (AutoscalerSeed); on the server,
    # the one without an autoscaler here, the rest in integration/test_autoscalers.py (a real
    # HPA, KEDA's ScaledObject CRD, the HPA KEDA makes)
    "scale-envelope/gone",
    "admit/fresh-gang",
    "admit/reserved-already",
    "admit/after-pod-running",
    "admit/after-pod-terminating",
    "admit/after-pod-gone",
    "admit/after-pod-recreated-unbound",
    "admit/after-pod-finished",
    "admit/pod-gone",
    "admit/pod-terminating",
    "admit/ungated-by-someone-else",
    "admit/admitted-elsewhere-before",
    "admit/another-admission-system",
    "admit/already-admitted",
    "admit/half-admitted",
    "admit/keeps-the-pods-own-affinity",
    "hold/set",
    "hold/same-message",
    "hold/new-message-keeps-the-transition-time",
    "hold/from-true",
    "hold/admitted-meanwhile",
    "hold/pod-gone",
    "quota/namespace-missing",
    "quota/create",
    "priority-class/create",
    "priority-class/same",
    "priority-class/value-changed",
    "priority-class/policy-changed",
    "priority-class/global-default",
    "priority-class/global-default-taken",
]
assert not [i for i in API_ROWS if ROWS[i].fail], (
    "injected errors are MemoryCluster's; the server has none"
)


@pytest.mark.parametrize("row", [pytest.param(ROWS[i], id=i) for i in API_ROWS])
def test_row_against_the_api_server(kube, row: Row):
    world = ApiWorld(kube)
    world.seed(row.seed)
    expected, action = world.localize(row)
    ops = Recording(world.ops())
    got = run(expected, ops, world.config(), action, writes=lambda: list(ops.writes))
    assert_result(expected, got)
    if row.check is not None:
        row.check(world.probe())
    if row.writes and not isinstance(
        row.action, SERVER_SIDE_APPLY
    ):  # and a second run writes nothing
        again = run(expected, ops, world.config(), action, writes=lambda: list(ops.writes))
        assert again.status != "error", again.message
        assert again.writes == got.writes


# ---------------------------------------------------------------------- MemoryCluster vs the server
def answer(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except ApiError as exc:
        return ("ApiError", exc.status)


class Names:
    """Where a scenario's objects are: the namespace, and the names of cluster-scoped things."""

    ns = NS

    def pc(self, name: str) -> str:
        return name

    def node(self, name: str) -> str:
        return name


Scenario = Callable[[ClusterOps, Any], list]
"""(ops, names: Names or ApiWorld) -> what came back, step by step."""


def reads_of_missing_objects(o: ClusterOps, n: Any) -> list:
    ns = n.ns
    return [
        o.read_node("gpupool-no-such-node"),
        o.read_pod(ns, "nope"),
        o.read_config_map(ns, "nope"),
        o.read_priority_class(n.pc("gpupool-nope")),
        o.namespace_exists("gpupool-absent"),
        o.namespace_exists(ns),
        answer(lambda: o.read_workload("Deployment", ns, "nope")),
        answer(lambda: o.read_workload("StatefulSet", ns, "nope")),
        o.pods_on_node("gpupool-no-such-node"),
    ]


def writes_to_missing_objects(o: ClusterOps, n: Any) -> list:
    ns = n.ns
    return [
        answer(lambda: o.patch_node("gpupool-no-such-node", labels={"a": "b"})),
        answer(lambda: o.annotate_pod(ns, "nope", {"a": "b"})),
        answer(lambda: o.evict_pod(ns, "nope")),
        answer(
            lambda: o.scale_workload(
                "Deployment", ns, "nope", replicas=1, resource_version="1", annotations={}
            )
        ),
        answer(lambda: o.write_config_map(ns, "nope", {"a": "b"}, resource_version="1")),
        answer(
            lambda: o.write_config_map("gpupool-absent", "cm", {"a": "b"}, resource_version=None)
        ),
        answer(lambda: o.delete_priority_class(n.pc("gpupool-nope"))),
        answer(
            lambda: o.server_side_apply(
                {
                    "apiVersion": "v1",
                    "kind": "ResourceQuota",
                    "metadata": {"name": "q", "namespace": "gpupool-absent"},
                    "spec": {"hard": {"pods": "1"}},
                }
            )
        ),
    ]


def config_map_versions(o: ClusterOps, n: Any) -> list:
    ns = n.ns
    o.write_config_map(ns, "cm", {"a": "1", "b": "1"}, resource_version=None)
    first = o.read_config_map(ns, "cm")
    again = answer(lambda: o.write_config_map(ns, "cm", {"a": "2"}, resource_version=None))
    o.write_config_map(ns, "cm", {"b": "2", "c": "2"}, resource_version=first.resource_version)
    second = o.read_config_map(ns, "cm")
    stale = answer(
        lambda: o.write_config_map(ns, "cm", {"a": "3"}, resource_version=first.resource_version)
    )
    o.write_config_map(
        ns, "cm", {"c": "2"}, resource_version=second.resource_version
    )  # nothing changes
    third = o.read_config_map(ns, "cm")
    return [
        again,
        stale,
        second.data,
        second.resource_version != first.resource_version,
        third.resource_version == second.resource_version,
    ]


def node_merge_patches(o: ClusterOps, n: Any) -> list:
    name = n.node("gpu-1")

    def seen() -> tuple:
        node = o.read_node(name)
        mine = "abcxy"  # a real control plane adds its own (the TTL controller's annotation)
        return (
            node.unschedulable,
            {k: v for k, v in node.labels.items() if k in mine},
            {k: v for k, v in node.annotations.items() if k in mine},
        )

    out = [seen()]
    o.patch_node(
        name, unschedulable=True, labels={"a": None, "c": "3"}, annotations={"x": None, "y": "2"}
    )
    out.append(seen())
    o.patch_node(name, labels={"b": "20"})  # the cordon is left as it is
    out.append(seen())
    o.patch_node(name, unschedulable=None)
    out.append(seen())
    return out


def pods(o: ClusterOps, n: Any) -> list:
    ns = n.ns
    o.annotate_pod(ns, "job", {"a": "2", "b": "2"})
    listed = [
        (p.name, p.phase, p.gpu_resources, p.deleting) for p in o.pods_on_node(n.node("gpu-1"))
    ]
    return [o.read_pod(ns, "job").annotations, listed, o.read_pod(ns, "cpu").gpu_resources]


def evictions(o: ClusterOps, n: Any) -> list:
    ns = n.ns

    def evicted(name: str) -> bool:
        p = o.read_pod(ns, name)
        return p is None or p.deleting

    out = [answer(lambda: o.evict_pod(ns, "guarded")), evicted("guarded")]
    out += [answer(lambda: o.evict_pod(ns, "job")), evicted("job")]
    out += [
        answer(lambda: o.evict_pod(ns, "loose")),
        o.read_pod(ns, "loose"),
    ]  # never scheduled: gone at once
    out += [
        answer(lambda: o.evict_pod(ns, "done")),
        o.read_pod(ns, "done"),
    ]  # finished: gone at once
    out += [
        answer(lambda: o.evict_pod(ns, "finishing")),
        evicted("finishing"),
    ]  # terminating: no budget check
    return out


def jobs(o: ClusterOps, n: Any) -> list:
    """Pods' owners (the controller reference, else the first), Jobs read by name (None when
    missing), annotated, suspended and resumed with merge patches (404 when missing)."""
    ns = n.ns

    def owner(name: str) -> tuple[str, str]:
        p = o.read_pod(ns, name)
        return (p.owner_kind, p.owner_name)

    def annotations(name: str) -> Any:
        j = o.read_job(ns, name)
        return None if j is None else j.annotations

    def state(name: str) -> Any:
        j = o.read_job(ns, name)
        return None if j is None else (j.suspended, j.annotations)

    def suspend(name: str, suspend: bool, annotations: dict[str, str | None]) -> Any:
        return answer(lambda: o.set_job_suspend(ns, name, suspend=suspend, annotations=annotations))

    out: list = [owner("worker"), owner("replica"), owner("bare")]
    out += [annotations("train"), annotations("nope")]
    out.append(answer(lambda: o.annotate_job(ns, "train", {"a": None, "b": "2"})))
    out.append(annotations("train"))
    out.append(answer(lambda: o.annotate_job(ns, "train", {"b": "2"})))  # changes nothing
    out.append(annotations("train"))
    out.append(answer(lambda: o.annotate_job(ns, "nope", {"a": "b"})))
    # spec.suspend and the annotations in one merge patch; a None value removes its key
    out += [state("train"), state("paused")]
    out += [suspend("train", True, {"s": "1", "b": None}), state("train")]
    out += [suspend("train", True, {"s": "1"}), state("train")]  # changes nothing
    out += [suspend("train", False, {"s": None}), state("train")]
    out += [suspend("paused", False, {}), state("paused")]
    out.append(suspend("nope", True, {"s": "1"}))
    return out


def workload_versions(o: ClusterOps, n: Any) -> list:
    ns = n.ns
    first = o.read_workload("Deployment", ns, "serve")
    o.scale_workload(
        "Deployment",
        ns,
        "serve",
        replicas=3,
        resource_version=first.resource_version,
        annotations={C.LAST_SCALE_ANN: "now"},
    )
    second = o.read_workload("Deployment", ns, "serve")
    stale = answer(
        lambda: o.scale_workload(
            "Deployment",
            ns,
            "serve",
            replicas=1,
            resource_version=first.resource_version,
            annotations={},
        )
    )
    return [
        first.replicas,
        second.replicas,
        second.resource_version != first.resource_version,
        stale,
        o.read_workload("Deployment", ns, "serve").replicas,
        o.read_workload("StatefulSet", ns, "db").replicas,
    ]


def priority_classes(o: ClusterOps, n: Any) -> list:
    name = n.pc("gpupool-batch")

    def body(value: int) -> dict:
        return {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name, "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY}},
            "value": value,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": "test",
        }

    out = [
        o.read_priority_class(name),
        answer(lambda: o.server_side_apply(body(100))),
        o.read_priority_class(name),
    ]
    out.append(answer(lambda: o.server_side_apply(body(100))))
    out.append(answer(lambda: o.server_side_apply(body(200))))  # value is immutable
    out += [
        o.read_priority_class(name),
        answer(lambda: o.delete_priority_class(name)),
        o.read_priority_class(name),
    ]
    return out


def event(namespace: str, kind: str, obj_ns: str | None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"gpupool.{uuid.uuid4().hex[:10]}", "namespace": namespace},
        "involvedObject": {"kind": kind, "name": "x", "namespace": obj_ns},
        "reason": "GpuPoolTest",
        "message": "m",
        "type": "Normal",
        "source": {"component": "gpupool"},
    }


def quotas_and_events(o: ClusterOps, n: Any) -> list:
    ns = n.ns
    q = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "gpu-quota",
            "namespace": ns,
            "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY},
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
    }

    on_pod = event(ns, "Pod", ns)
    return [
        answer(lambda: o.server_side_apply(q)),
        answer(lambda: o.server_side_apply(q)),
        answer(lambda: o.create_event(ns, on_pod)),
        answer(lambda: o.create_event(ns, on_pod)),  # same name: 409
        answer(
            lambda: o.create_event(
                "gpupool-absent", event("gpupool-absent", "Pod", "gpupool-absent")
            )
        ),
        answer(lambda: o.create_event("default", event("default", "Node", None))),
    ]


def event_namespaces(o: ClusterOps, n: Any) -> list:
    """An Event is in its object's namespace; one about a cluster-scoped object (a Node: no
    involvedObject.namespace) in "default" (core/v1 Event validation)."""
    ns = n.ns
    return [
        answer(lambda: o.create_event(ns, event(ns, "Pod", "default"))),
        answer(lambda: o.create_event(ns, event(ns, "Node", None))),
        answer(lambda: o.create_event("default", event("default", "Node", None))),
    ]


def conditional_conditions(o: ClusterOps, n: Any) -> list:
    """A condition set from a copy of the pod (`PodInfo.resource_version`) is written only
    while the pod is still that version: 409 once it changed (here by the first write), 404
    when it is gone; the pods/status patch's resourceVersion is a precondition (what a Hold
    decided on the watch cache's copy relies on)."""
    ns = n.ns
    cond: dict[str, Any] = dict(
        type=C.ADMITTED_CONDITION,
        status="False",
        reason="HeldCap",
        message="first",
        last_transition_time="2026-12-07T12:00:00Z",
    )
    first = o.read_pod(ns, "held")
    assert first is not None and first.resource_version
    rv = first.resource_version
    out = [answer(lambda: o.set_pod_condition(ns, "held", **cond, resource_version=rv))]
    cond["message"] = "second"  # from the same copy: the pod changed since
    out.append(answer(lambda: o.set_pod_condition(ns, "held", **cond, resource_version=rv)))
    again = o.read_pod(ns, "held")
    assert again is not None and again.resource_version != rv
    cond["message"] = "third"
    out.append(
        answer(
            lambda: o.set_pod_condition(ns, "held", **cond, resource_version=again.resource_version)
        )
    )
    out.append(answer(lambda: o.set_pod_condition(ns, "nope", **cond, resource_version=rv)))
    held = o.read_pod(ns, "held")
    assert held is not None
    c = held.condition(C.ADMITTED_CONDITION)
    return [*out, None if c is None else (c.status, c.reason, c.message)]


CONTRACT: dict[str, tuple[tuple[Seed, ...], Scenario]] = {
    "reads-of-missing-objects": ((), reads_of_missing_objects),
    "writes-to-missing-objects": ((), writes_to_missing_objects),
    "config-map-versions": ((), config_map_versions),
    "node-merge-patches": (
        (Node(labels={"a": "1", "b": "2"}, annotations={"x": "1"}),),
        node_merge_patches,
    ),
    "pods": (
        (
            Pod("job", annotations={"a": "1", "keep": "k"}),
            Pod("cpu", gpus=False, phase="Succeeded"),
        ),
        pods,
    ),
    "evictions": (
        (
            Pod("guarded", pdb=True),
            Pod("job"),
            Pod("loose", node=None),
            Pod("done", phase="Succeeded"),
            Pod("finishing", pdb=True, deleting=True),
        ),
        evictions,
    ),
    "jobs": (
        (
            Job("train", annotations={"a": "1", "keep": "k"}),
            Job("paused", suspended=True),
            ReplicaSet("serve-7d9f"),
            # a non-controller reference first: the controller one is the owner
            Pod(
                "worker",
                owners=(
                    Owner("ReplicaSet", "serve-7d9f", controller=False),
                    Owner("Job", "train"),
                ),
            ),
            Pod("replica", owners=(Owner("ReplicaSet", "serve-7d9f", controller=False),)),
            Pod("bare"),
        ),
        jobs,
    ),
    "workload-versions": (
        (Workload("serve", 2), Workload("db", 1, kind="StatefulSet")),
        workload_versions,
    ),
    "priority-classes": ((), priority_classes),
    "quotas-and-events": ((), quotas_and_events),
    "conditional-conditions": ((Pod("held", node=None, gates=(GATE,)),), conditional_conditions),
}


@pytest.mark.parametrize("name", list(CONTRACT))
def test_memory_cluster_answers_as_the_server_does(kube, name: str):
    seeds, scenario = CONTRACT[name]
    memory: MemoryCluster = seed_memory(Row(name, ROWS["cordon/fresh"].action, seeds))
    want = scenario(memory, Names())
    world = ApiWorld(kube)
    world.seed(seeds)
    got = scenario(world.ops(), world)
    assert got == want


def test_a_terminating_pod_stays_until_its_deletion_finishes(kube):
    """What `MemoryCluster.finish_deletion` stands for: a pod with a deletionTimestamp is still
    listed (and still holds its GPUs) until the kubelet, or the last finalizer, lets it go."""
    world = ApiWorld(kube)
    world.seed((Pod("job", deleting=True),))
    ops = world.ops()
    assert [(p.name, p.deleting) for p in ops.pods_on_node(world.node("gpu-1"))] == [("job", True)]
    kube.core.patch_namespaced_pod(
        "job",
        world.ns,
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )


def test_admit_hands_the_cards_on_once_a_pod_going_now_is_gone(kube):
    """On a server: a pod deleted a moment ago says when (`PodInfo.delete_asked`, from its
    deletionTimestamp and grace period), and the Admit step waiting for it reads it again
    within the step: its last finalizer goes during the wait, and the gang is admitted then."""
    row = ROWS["admit/after-pod-terminating"]
    world = ApiWorld(kube)
    world.seed(row.seed)
    _, action = world.localize(row)
    ops = world.ops()
    victim = ops.read_pod(world.ns, "victim")
    assert victim is not None and victim.deleting and victim.delete_asked is not None
    asked = victim.delete_asked
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:  # the kubelet is done: the pod goes (its delete with grace 0)
            kube.core.patch_namespaced_pod(
                "victim",
                world.ns,
                {"metadata": {"finalizers": None}},
                _content_type="application/merge-patch+json",
            )
            kube.core.delete_namespaced_pod("victim", world.ns, grace_period_seconds=0)
            wait_for("the victim gone", lambda: ops.read_pod(world.ns, "victim") is None)
        time.sleep(seconds)

    # the plan's clock far from the server's (as in a simulation): the wall clock judges
    ctx = Context(
        ops,
        world.config(),
        clock=lambda: NOW,
        sleep=sleep,
        wall=lambda: asked + timedelta(seconds=0.2),
    )
    out = HANDLERS[Admit](action, ctx)
    assert out.status == "done" and len(waits) == 2, out.message


def test_event_namespaces_are_checked_as_the_server_does(kube):
    world = ApiWorld(kube)
    assert event_namespaces(world.ops(), world) == event_namespaces(
        MemoryCluster(namespaces={NS}), Names()
    )


def test_a_changed_preemption_policy_is_refused_like_a_changed_value(kube):
    """preemptionPolicy is immutable on a real API server, as value is (the handler replaces the
    object when either changes); MemoryCluster refuses both."""
    world = ApiWorld(kube)
    world.seed((PriorityClass("gpupool-batch", 100),))
    body = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": world.pc("gpupool-batch")},
        "value": 100,
        "preemptionPolicy": "Never",
    }
    assert answer(lambda: world.ops().server_side_apply(body)) == ("ApiError", 422)


# ---------------------------------------------------------------------- admission: fake vs server
ADMISSION_SEEDS: tuple[Seed, ...] = (
    Pod("ours", node=None, gates=(GATE,)),
    Pod("ours-and-other", node=None, gates=(GATE, OTHER_GATE)),
    Pod("other-only", node=None, gates=(OTHER_GATE,)),
    Pod("ungated", node=None),
    Pod("own-terms", node=None, gates=(GATE,), affinity=(OWN_TERM,)),
    Pod("job"),
)


def admissions(o: ClusterOps, p: Probe) -> list:
    """admit_pod on each kind of pod, then again; set_pod_condition merged by type. What comes
    back: the answer, then the pod's gates, annotation and required node affinity terms."""
    ns = p.namespace

    def seen(name: str) -> Any:
        pod = o.read_pod(ns, name)
        if pod is None:
            return None
        return (pod.gates, pod.annotations.get(C.ADMITTED_ANN), p.pod_terms(name))

    def admit(name: str, node: str = "node-a") -> Any:
        return answer(lambda: o.admit_pod(ns, name, node=node, annotations={C.ADMITTED_ANN: node}))

    out = []
    for name in ("ours", "ours-and-other", "other-only", "ungated", "own-terms", "nope"):
        out += [name, admit(name), seen(name)]
    # ungated now: the same affinity again changes nothing (accepted), another node is refused
    out += [admit("ours"), seen("ours"), admit("ours", "node-b"), seen("ours")]

    def conditions(name: str) -> Any:
        pod = o.read_pod(ns, name)
        mine = (C.ADMITTED_CONDITION, "example.com/Other")  # the scheduler posts PodScheduled
        return sorted(
            (c.type, c.status, c.reason, c.message) for c in pod.conditions if c.type in mine
        )

    def cond(type_: str, message: str, clear_nominated: bool = False) -> Any:
        return answer(
            lambda: o.set_pod_condition(
                ns,
                "job",
                type=type_,
                status="False",
                reason="HeldCap",
                message=message,
                last_transition_time="2026-03-02T12:00:00Z",
                clear_nominated=clear_nominated,
            )
        )

    out += [cond(C.ADMITTED_CONDITION, "one"), conditions("job")]
    out += [cond("example.com/Other", "two"), conditions("job")]
    out += [cond(C.ADMITTED_CONDITION, "three"), conditions("job")]
    out += [
        answer(
            lambda: o.set_pod_condition(
                ns,
                "nope",
                type=C.ADMITTED_CONDITION,
                status="False",
                reason="HeldCap",
                message="x",
                last_transition_time="2026-03-02T12:00:00Z",
            )
        )
    ]
    # a condition's patch that also takes back a nomination (none here): accepted, none read
    out += [
        cond(C.ADMITTED_CONDITION, "four", clear_nominated=True),
        conditions("job"),
        o.read_pod(ns, "job").nominated,  # type: ignore[union-attr]
    ]
    return out


def test_memory_cluster_admits_as_the_server_does(kube):
    """The server keeps other gates, refuses affinity on a pod with no gate left (422) and
    accepts it on one another system still gates, adds the node to a pod's own terms, and
    merges pod conditions by type: the fake must agree, answer by answer."""
    memory = seed_memory(Row("admissions", ROWS["cordon/fresh"].action, ADMISSION_SEEDS))
    want = admissions(memory, MemoryProbe(memory, NS, memory_config()))
    world = ApiWorld(kube)
    world.seed(ADMISSION_SEEDS)
    got = admissions(world.ops(), world.probe())
    assert got == want
    assert ("ApiError", 422) in got and ("ApiError", 404) in got


def test_admission_steps_run_with_the_controllers_rbac(kube):
    """Admit (pods: get, patch) and Hold (pods/status: patch) as the controller's
    ServiceAccount, held to exactly deploy/rbac.yaml's rules: a missing rule is a 403."""
    api = kube.controller_client()
    kube.cleanup(api.close)
    for name in ("admit/fresh-gang", "hold/set"):
        row = ROWS[name]
        world = ApiWorld(kube)  # a namespace each: both rows have a pod p-0
        world.seed(row.seed)
        expected, action = world.localize(row)
        ops = Recording(KubeOps(api))
        got = run(expected, ops, world.config(), action, writes=lambda ops=ops: list(ops.writes))
        assert_result(expected, got)
        assert row.check is not None
        row.check(world.probe())


def test_move_of_a_jobs_pod_runs_with_the_controllers_rbac(kube):
    """A move that lands (pods: get, patch; jobs: list, patch; pods/eviction: create) as the
    controller's ServiceAccount, held to exactly deploy/rbac.yaml's rules: a missing rule is a
    403. The controller runs of tests/integration/test_rbac.py move no Job's pod."""
    api = kube.controller_client()
    kube.cleanup(api.close)
    row = ROWS["move/reserves-the-jobs-next-pod"]
    world = ApiWorld(kube)
    world.seed(row.seed)
    expected, action = world.localize(row)
    ops = Recording(KubeOps(api))
    got = run(expected, ops, world.config(), action, writes=lambda: list(ops.writes))
    assert_result(expected, got)
    assert row.check is not None
    row.check(world.probe())


# ---------------------------------------------------------------------- suspension: Job controller
def test_a_suspended_job_is_stopped_by_the_job_controller_and_resumed(kube):
    """What the suspension rows leave out (their Jobs are `spec.managedBy` no one, and the Job
    controller skips such a Job entirely: job_controller.go managedByExternalController): here a
    Job of the real Job controller. Preempting its pod suspends the Job (as the controller's
    ServiceAccount: jobs list + patch, pods get); the Job controller deletes the pod, creates
    none while suspended and does not count the deleted pod as failed (backoffLimit 0 would
    fail the Job at the first failure); resuming lets it create a pod again."""
    api = kube.controller_client()
    kube.cleanup(api.close)
    world = ApiWorld(kube)
    world._wait_service_account()  # the Job controller cannot create pods before it exists
    batch, ns = world.batch, world.ns
    batch.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "train"},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        # never scheduled: nothing but the Job controller touches its pods
                        "nodeSelector": {"gpupool.test/unschedulable": "true"},
                        "containers": [{"name": "main", "image": "registry.example/train:1"}],
                    }
                },
            },
        },
    )

    def pods() -> list[str]:
        listed = world.core.list_namespaced_pod(
            ns, label_selector="batch.kubernetes.io/job-name=train"
        ).items
        return sorted(p.metadata.name for p in listed if p.metadata.deletion_timestamp is None)

    def job() -> Any:
        return batch.read_namespaced_job("train", ns)

    def condition(type_: str) -> str | None:
        conds = job().status.conditions or []
        return next((c.status for c in conds if c.type == type_), None)

    wait_for("the Job controller's pod", lambda: len(pods()) == 1)
    [first] = pods()
    ops = Recording(KubeOps(api))
    pod = ops.read_pod(ns, first)
    assert pod is not None and (pod.owner_kind, pod.owner_name) == ("Job", "train")

    preempt = Preempt(
        id=f"preempt:{ns}/{first}",
        target=f"{ns}/{first}",
        reason="make room",
        node=None,
        gpus=(),
        suspend_job="train",
    )
    budget: list[str] = []
    ctx = Context(
        ops, world.config(), clock=lambda: NOW, before_preempt=lambda a, _pod: budget.append(a.id)
    )
    out = HANDLERS[Preempt](preempt, ctx)
    assert (out.status, out.changed, out.stopped) == ("done", True, True), out.message
    assert out.message == "suspended Job train: the Job controller stops its pods"
    assert budget == [preempt.id] and ops.writes == ["set_job_suspend"]
    assert job().spec.suspend and job().metadata.annotations[C.SUSPENDED_BY_ANN] == NOW.isoformat()

    wait_for("the suspended Job's pod to go", lambda: ops.read_pod(ns, first) is None)
    wait_for("the JobSuspended condition", lambda: condition("Suspended") == "True")
    time.sleep(2)  # give the Job controller time to do what it must not: create a pod
    assert pods() == []
    status = job().status
    assert not status.failed and condition("Failed") is None, status  # not counted: no failure
    again = HANDLERS[Preempt](preempt, ctx)  # the pod is gone: nothing recorded, nothing written
    assert (again.status, again.message) == ("done", "pod is gone")
    assert budget == [preempt.id] and ops.writes == ["set_job_suspend"]

    resume = Resume(id=f"resume:{ns}/train", target=f"{ns}/train", reason="room again")
    out = HANDLERS[Resume](resume, ctx)
    assert (out.status, out.changed) == ("done", True), out.message
    assert not job().spec.suspend and C.SUSPENDED_BY_ANN not in (job().metadata.annotations or {})
    wait_for("a new pod of the resumed Job", lambda: len(pods()) == 1)
    assert pods() != [first]
    wait_for("the JobSuspended condition False", lambda: condition("Suspended") == "False")
    assert not job().status.failed and condition("Failed") is None
    out = HANDLERS[Resume](resume, ctx)
    assert (out.status, out.changed) == ("done", False), out.message
    assert ops.writes == ["set_job_suspend", "set_job_suspend"]
