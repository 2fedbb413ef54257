"""Step 9, the objects (reconciler/plan/objects/: wanted.py, prune.py, kueue_objects.py), run
alone on a fresh run, in the planner's order.

`desired_objects` creates or updates the ResourceQuotas, PriorityClasses and pool labels the
desired state asks for, never an object gpupool does not manage (`foreign-object`).
`prune_pool_labels` removes gpupool's pool label from a node in no desired pool.
`prune_objects` deletes the quotas and classes gpupool made that the desired state no longer
has, never a class a pod still names (`prune-class-in-use`), and refuses to prune every object
of a kind while the desired state has none (`prune-everything-refused`) unless the ChangePolicy
allows it. `kueue_objects`, in gpupool mode, prunes the Kueue objects gpupool made.
"""

from __future__ import annotations

import pytest

from reconciler.conventions import POOL_LABEL
from reconciler.observe.builders import node
from reconciler.observe.model import KueueObject, PriorityClassObject
from reconciler.plan.objects.kueue_objects import kueue_objects
from reconciler.plan.objects.prune import prune_objects, prune_pool_labels
from reconciler.plan.objects.wanted import desired_objects
from tests.plan.scenarios import _objects
from tests.plan.support import CHANGE, desired, findings_of, job, stage_run, two_nodes, without

CONVERGED = _objects(desired())
QUOTAS, CLASSES = CONVERGED["quotas"], CONVERGED["priority_classes"]
RETIRED = PriorityClassObject(
    name="retired", value=5, preemption_policy="Never", managed_by="gpupool"
)
NO_QUOTA = without(desired(), "Quota")
UNMANAGED_A = [
    q.model_copy(update={"hard": {}, "managed_by": ""}) if q.namespace == "team-a" else q
    for q in QUOTAS
]
KUEUE = [
    KueueObject(kind="ClusterQueue", name="gpupool-team-a", managed_by="gpupool"),
    KueueObject(kind="ClusterQueue", name="platform"),
]

# (desired text, extra nodes, workloads, snapshot kwargs, action id -> (kind, key field), findings)
ROWS = [
    pytest.param(desired(), [], [], {}, {}, set(), id="a-converged-cluster-needs-nothing"),
    pytest.param(
        desired(),
        [],
        [],
        {"quotas": [q for q in QUOTAS if q.namespace != "team-a"]},
        {"quota:team-a/gpupool-team-a": ("quota", "create")},
        set(),
        id="a-missing-quota-is-created",
    ),
    pytest.param(
        desired(),
        [],
        [],
        {"quotas": UNMANAGED_A},
        {},
        {("foreign-object", "ResourceQuota team-a/gpupool-team-a")},
        id="a-quota-gpupool-does-not-manage-is-left-alone",
    ),
    pytest.param(
        desired(),
        [node("h100-1", "h100", "H100-SXM5-80GB")],
        [],
        {},
        {"label-node:h100-1": ("label-node", None)},
        set(),
        id="a-node-in-no-desired-pool-loses-its-pool-label",
    ),
    pytest.param(
        desired(),
        [],
        [],
        {"priority_classes": [*CLASSES, RETIRED]},
        {"prune-priority-class:retired": ("prune-priority-class", "retired")},
        set(),
        id="a-class-gpupool-made-that-the-policy-dropped-is-pruned",
    ),
    pytest.param(
        desired(),
        [],
        [job("team-b", "old", "a100-1", [0], cls="retired")],
        {"priority_classes": [*CLASSES, RETIRED]},
        {},
        {("prune-class-in-use", "retired")},
        id="a-dropped-class-a-pod-still-names-is-kept",
    ),
    pytest.param(
        NO_QUOTA,
        [],
        [],
        {"quotas": QUOTAS},
        {},
        {("prune-everything-refused", "ResourceQuota")},
        id="pruning-every-quota-is-refused-without-the-change-policy",
    ),
    pytest.param(
        NO_QUOTA + CHANGE.format(spec="allowDeleteAllQuotas: true"),
        [],
        [],
        {"quotas": QUOTAS},
        {
            "prune-quota:team-a/gpupool-team-a": ("prune-quota", "team-a/gpupool-team-a"),
            "prune-quota:team-b/gpupool-team-b": ("prune-quota", "team-b/gpupool-team-b"),
        },
        set(),
        id="the-change-policy-allows-pruning-every-quota",
    ),
    pytest.param(
        desired(),
        [],
        [],
        {"kueue": KUEUE},
        {"prune-kueue:ClusterQueue:gpupool-team-a": ("prune-kueue-object", "ClusterQueue")},
        set(),
        id="in-gpupool-mode-the-kueue-objects-gpupool-made-are-pruned",
    ),
]


def key_field(a) -> object:
    """The field that says what the action does: a quota's verb, the label a node gets,
    what a prune deletes."""
    if a.kind == "quota":
        return a.verb
    if a.kind == "label-node":
        return a.labels[POOL_LABEL]
    if a.kind == "prune-kueue-object":
        return a.object_kind
    return a.target


@pytest.mark.parametrize(("text", "nodes", "work", "kw", "actions", "findings"), ROWS)
def test_objects(text, nodes, work, kw, actions, findings):
    run = stage_run(text, two_nodes() + nodes, work, **kw)
    assert desired_objects(run) is None
    assert prune_pool_labels(run) is None
    assert prune_objects(run) is None
    assert kueue_objects(run) is None
    assert {a.id: (a.kind, key_field(a)) for a in run.actions.values()} == actions
    assert findings_of(run) == findings
