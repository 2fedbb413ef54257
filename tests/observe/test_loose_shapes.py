"""Loose shapes through the Kubernetes adapter (issue "Tenant-proof", item 1): what a looser CRD,
a buggy node agent or a hand-edited object lets through, read by `observe_cluster` from
tests/observe/fake_cluster.py's cluster. Each shape is one object's (or one field's) problem: it
becomes an unreadable entry naming the object and the field, and the rest of the cycle goes on
(every other node, workload and autoscaler is read as without it, and the plan is made, with an
`unreadable-object` finding).

`RAISED` are the shapes that stopped the whole cycle before (an exception out of
`observe_cluster`: read outside the per-object guard, or in the guard's own report); `SILENT`
the ones that were dropped or misread without a word (a node agent's `status.gpus` that is a
number read as no card, a pod's `allocations` that is a string read as holding none); `HELD`
the ones the guard already held (left out and reported), kept as controls: their reports now
name the field too."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from reconciler import conventions as C
from reconciler.observe.kube import observe_cluster
from reconciler.observe.model import ObservedState
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.observe.fake_cluster import NOW, Cluster, as_model, base, serving
from tests.plan.support import desired

DESIRED = load([SourceFile("desired.yaml", desired())])


def observe(c: Cluster) -> ObservedState:
    c.api_server = False  # the shapes are answered as they are, even those no API server holds
    with serving(c):
        return observe_cluster(object(), now=NOW)


BASE = observe(base())


def state(c: Cluster) -> dict:
    return c.find("node_states", "a100-1")


def entry(c: Cluster, i: int = 0) -> dict:
    """The node agent's entry for team-a/train-0 (0) or team-b/ranker-0 (1)."""
    return state(c)["status"]["pods"][i]


def typed_pod(c: Cluster, pod: str, **meta) -> None:
    """Pod `pod` as a model object with these metadata fields (a shape the client's
    deserializer allows: its namespace and name are optional)."""
    d = c.find("pods", pod)
    m = as_model(d, "V1Pod")
    for k, v in meta.items():
        setattr(m.metadata, k, v)
    c.pods[c.pods.index(d)] = m


@dataclass(frozen=True)
class Shape:
    edit: Callable[[Cluster], object]
    ref: str
    """The unreadable entry's object."""
    says: str
    """... and what its message says (the field)."""
    gone: tuple[str, ...] = ()
    """What is left out of the snapshot with it: workload keys, "node:<name>", "hpa:<name>"."""


def _set(get: Callable[[Cluster], dict], key, value) -> Callable[[Cluster], None]:
    return lambda c: get(c).__setitem__(key, value)


GNS = f"{C.NODE_STATE_KIND} a100-1"
RAISED = {
    "node-state-status-a-string": Shape(
        _set(state, "status", "broken"), GNS, "status is a string ('broken'), not an object"
    ),
    "node-state-status-a-list": Shape(
        _set(state, "status", [{"gpus": []}]), GNS, "status is a list, not an object"
    ),
    "pod-allocations-a-number": Shape(
        _set(entry, "allocations", 2), GNS, "status.pods[0].allocations is a number (2)"
    ),
    "node-state-metadata-a-string": Shape(
        _set(state, "metadata", "a100-1"), f"{C.NODE_STATE_KIND} ?", "string indices"
    ),
    "pod-without-a-namespace": Shape(
        lambda c: typed_pod(c, "waiting", namespace=None),
        "Pod waiting",
        "metadata.namespace is missing",
        gone=("team-a/waiting",),
    ),
    "bound-pod-without-a-namespace": Shape(
        lambda c: typed_pod(c, "train-0", namespace=None),
        "Pod train-0",
        "metadata.namespace is missing",
        gone=("team-a/train-0",),
    ),
    "pod-without-a-name": Shape(
        lambda c: typed_pod(c, "admitted", name=None),
        "Pod team-a/?",
        "metadata.name is missing",
        gone=("team-a/admitted",),
    ),
    "pod-group-spec-a-string": Shape(
        lambda c: c.pod_groups[0].__setitem__("spec", "minMember: 2"),
        "PodGroup team-a/gang",
        "spec is a string",
    ),
    "pod-group-a-string": Shape(
        lambda c: c.pod_groups.__setitem__(0, "team-a/gang"),
        "PodGroup ?",
        "the object is a string",
    ),
    "scaled-object-target-name-a-list": Shape(
        lambda c: c.scaled_objects[0]["spec"]["scaleTargetRef"].__setitem__("name", ["x"]),
        "ScaledObject team-b/summarize",
        "spec.scaleTargetRef.name is a list, not a string",
        gone=("scaler:summarize",),
    ),
}
SILENT = {
    "node-state-gpus-a-number": Shape(
        _set(lambda c: state(c)["status"], "gpus", 8), GNS, "status.gpus is a number (8)"
    ),
    "node-state-gpus-an-object": Shape(
        _set(lambda c: state(c)["status"], "gpus", {"0": {"index": 0}}),
        GNS,
        "status.gpus is an object, not a list",
    ),
    "node-state-pods-a-string": Shape(
        _set(lambda c: state(c)["status"], "pods", "team-a/train-0"),
        GNS,
        "status.pods is a string",
    ),
    "node-state-pods-a-number": Shape(
        _set(lambda c: state(c)["status"], "pods", 2), GNS, "status.pods is a number (2)"
    ),
    "pod-entry-a-string": Shape(
        _set(lambda c: state(c)["status"]["pods"], 0, "team-a/train-0"),
        GNS,
        "status.pods[0] is a string",
    ),
    "pod-entry-without-a-namespace": Shape(
        lambda c: entry(c).pop("namespace"), GNS, "status.pods[0].namespace"
    ),
    "pod-allocations-a-string": Shape(
        _set(entry, "allocations", "2,3"), GNS, "status.pods[0].allocations is a string"
    ),
    "pod-allocations-an-object": Shape(
        _set(entry, "allocations", {"gpu": 2}), GNS, "status.pods[0].allocations is an object"
    ),
    "pod-allocation-a-number": Shape(
        _set(lambda c: entry(c)["allocations"], 1, 3),
        GNS,
        "status.pods[0].allocations[1] is a number (3), not an object",
    ),
    "scaled-object-target-kind-a-list": Shape(
        lambda c: c.scaled_objects[0]["spec"]["scaleTargetRef"].__setitem__("kind", ["x"]),
        "ScaledObject team-b/summarize",
        "spec.scaleTargetRef.kind is a list, not a string",
        gone=("scaler:summarize",),
    ),
}
HELD = {
    "node-state-card-a-string": Shape(
        _set(lambda c: state(c)["status"]["gpus"], 1, "A100"), GNS, "status.gpus[1]"
    ),
    "node-state-mig-instances-a-number": Shape(
        _set(lambda c: state(c)["status"]["gpus"][0], "migInstances", 2), GNS, "migInstances"
    ),
    "node-state-a-string": Shape(
        lambda c: c.node_states.append("a100-3"), f"{C.NODE_STATE_KIND} ?", "string indices"
    ),
    "kueue-label-value-a-list": Shape(
        lambda c: setattr(
            c,
            "kueue",
            {
                "resourceflavors": [
                    {"metadata": {"name": "f", "labels": {C.MANAGED_BY_LABEL: ["gpupool"]}}}
                ],
                "clusterqueues": [],
                "localqueues": [],
            },
        ),
        "ResourceFlavor f",
        "managed_by: Input should be a valid string",
    ),
    "scaled-object-spec-a-string": Shape(
        lambda c: c.scaled_objects[0].__setitem__("spec", "x"),
        "ScaledObject team-b/summarize",
        "spec",
        gone=("scaler:summarize",),
    ),
}


def what_is_read(o: ObservedState) -> set[str]:
    """Everything the snapshot read, by name: nodes, workloads, services' autoscalers,
    suspended Jobs."""
    return (
        {f"node:{n.name}" for n in o.nodes}
        | {w.key for w in o.workloads}
        | {f"scaler:{a.name}" for s in o.services for a in s.autoscalers}
        | {f"service:{s.key}" for s in o.services}
        | {f"suspended:{j.namespace}/{j.name}" for j in o.suspended_jobs}
    )


def check(shape: Shape) -> ObservedState:
    c = base()
    shape.edit(c)
    observed = observe(c)  # before: an exception, for RAISED
    reports = [(u.ref, u.message) for u in observed.unreadable]
    assert any(ref == shape.ref and shape.says in msg for ref, msg in reports), reports
    # the rest of the cycle: everything else is read as it was
    assert what_is_read(observed) == what_is_read(BASE) - set(shape.gone)
    plan, _ = plan_with_facts(DESIRED, observed, now=NOW)
    assert ("unreadable-object", shape.ref) in {(f.code, f.subject) for f in plan.findings}
    return observed


def test_the_base_cluster_reads_whole_and_without_a_report():
    assert BASE.unreadable == []
    assert len(BASE.workloads) == 8 and [len(n.gpus) for n in BASE.nodes] == [8, 8]
    assert {w.key: w.allocations for w in BASE.workloads}["team-a/train-0"]


@pytest.mark.parametrize("name", sorted(RAISED))
def test_a_shape_that_stopped_the_cycle_is_one_unreadable_entry(name):
    check(RAISED[name])


@pytest.mark.parametrize("name", sorted(SILENT))
def test_a_shape_that_was_misread_silently_is_reported(name):
    check(SILENT[name])


@pytest.mark.parametrize("name", sorted(HELD))
def test_a_shape_the_guard_held_already_is_still_held(name):
    check(HELD[name])


@pytest.mark.parametrize("status", ["broken", [1], 0])
def test_an_unreadable_agent_status_publishes_no_card_not_the_nodes_capacity(status):
    """A node agent's object that cannot be read is not read as the node's capacity (8 whole
    cards, on a node whose card 0 is in MIG mode: the planner would repartition on a guess):
    the node has no card; its pods' cards are read from their annotations, else guessed."""
    observed = check(Shape(_set(state, "status", status), GNS, "status is"))
    node = next(n for n in observed.nodes if n.name == "a100-1")
    assert node.gpus == []


@pytest.mark.parametrize(
    "allocations", ["2,3", {"gpu": 2}, [{"gpu": 2}, 3]], ids=["string", "object", "item"]
)
def test_unreadable_allocations_are_not_read_as_holding_nothing(allocations):
    """A pod the agent lists with allocations that cannot be read is read as not listed: its
    cards are guessed among the free ones, never read as none (its cards would look free)."""
    observed = check(Shape(_set(entry, "allocations", allocations), GNS, "status.pods[0]"))
    held = {w.key: w.allocations for w in observed.workloads}["team-a/train-0"]
    assert len(held) == 2


def test_several_loose_objects_at_once_each_get_their_entry():
    c = base()
    for s in (RAISED["pod-allocations-a-number"], RAISED["pod-group-spec-a-string"]):
        s.edit(c)
    RAISED["pod-without-a-namespace"].edit(c)
    SILENT["scaled-object-target-kind-a-list"].edit(c)
    observed = observe(c)
    assert {u.ref for u in observed.unreadable} == {
        GNS,
        "PodGroup team-a/gang",
        "Pod waiting",
        "ScaledObject team-b/summarize",
    }
