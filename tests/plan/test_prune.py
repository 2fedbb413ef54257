"""Prune (issue 14): what gpupool made (its managed-by label) and the desired state no longer
has is deleted, each deletion a plan action with its reason; never an object without the label;
a class a pod still names is kept (a finding); pruning every object of a kind while the desired
state has none of it is refused unless the ChangePolicy allows it."""

from __future__ import annotations

from reconciler.observe.builders import snapshot
from reconciler.observe.model import PriorityClassObject, QuotaObject, SuspendedJob
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.sim.effects import apply_plan
from tests.plan.scenarios import NOW, _objects
from tests.plan.support import CHANGE, desired, maint, pend, two_nodes, without

OLD_QUOTA = QuotaObject(
    namespace="team-old",
    name="gpupool-old",
    hard={"requests.nvidia.com/gpu": "2"},
    managed_by="gpupool",
)
OLD_CLASS = PriorityClassObject(
    name="retired", value=5, preemption_policy="Never", managed_by="gpupool"
)


def converged(text: str, quotas=(), classes=(), workloads=(), **kw):
    objs = _objects(desired())
    return snapshot(
        NOW,
        two_nodes(),
        list(workloads),
        quotas=[*objs["quotas"], *quotas],
        priority_classes=[*objs["priority_classes"], *classes],
        **kw,
    )


def kinds(p, *ks):
    return {a.kind: a for a in p.actions if a.kind in ks}


def test_a_quota_and_a_class_no_longer_desired_are_pruned_with_their_reason():
    d = load([SourceFile("desired.yaml", desired())])
    p = plan(d, converged(desired(), [OLD_QUOTA], [OLD_CLASS]))
    pruned = [(a.kind, a.target) for a in p.actions]
    assert pruned == [
        ("prune-quota", "team-old/gpupool-old"),
        ("prune-priority-class", "retired"),
    ]
    assert p.actions[0].reason.startswith("prune ResourceQuota team-old/gpupool-old: no Quota")
    assert "app.kubernetes.io/managed-by=gpupool" in p.actions[1].reason
    assert "1 quota pruned, 1 priority class pruned" in p.summary


def test_objects_without_the_label_are_never_pruned():
    d = load([SourceFile("desired.yaml", desired())])
    for by in ("", "helm"):
        snap = converged(
            desired(),
            [OLD_QUOTA.model_copy(update={"managed_by": by})],
            [OLD_CLASS.model_copy(update={"managed_by": by})],
        )
        p = plan(d, snap)
        assert not p.actions
        assert not [f for f in p.findings if f.code.startswith("prune")]


def test_a_class_a_pod_or_a_suspended_job_still_names_is_kept_with_a_finding():
    d = load([SourceFile("desired.yaml", desired())])
    users = {
        "pod": dict(workloads=[pend("team-a", "old-run", 1, cls="retired")]),
        "suspended job": dict(
            suspended_jobs=[
                SuspendedJob(
                    namespace="team-a",
                    name="paused",
                    parallelism=1,
                    request={"gpus": 1},
                    priority_class="retired",
                )
            ]
        ),
    }
    for what, kw in users.items():
        p = plan(d, converged(desired(), classes=[OLD_CLASS], **kw))
        assert not kinds(p, "prune-priority-class"), what
        (f,) = [f for f in p.findings if f.code == "prune-class-in-use"]
        assert f.subject == "retired" and "still name" in f.message, what
        assert not p.summary.startswith("No changes"), what


def test_pruning_everything_at_once_is_refused_unless_the_change_policy_allows_it():
    # the Quota files vanished (or the directory is empty): every quota would go
    text = without(desired(), "Quota")
    d = load([SourceFile("desired.yaml", text)])
    p = plan(d, converged(text))
    assert not kinds(p, "prune-quota")
    (f,) = [f for f in p.findings if f.code == "prune-everything-refused"]
    assert f.subject == "ResourceQuota" and "allowDeleteAllQuotas" in f.message
    allowed = load([SourceFile("d.yaml", text + CHANGE.format(spec="allowDeleteAllQuotas: true"))])
    pruned = [a.target for a in plan(allowed, converged(text)).actions if a.kind == "prune-quota"]
    assert pruned == ["team-a/gpupool-team-a", "team-b/gpupool-team-b"]
    # the PriorityPolicy vanished: every class gpupool made would go
    text = without(desired(maint(idle="{utilizationBelow: 5, idleFor: 1h}")), "PriorityPolicy")
    d = load([SourceFile("desired.yaml", text)])
    p = plan(d, converged(text))
    assert not kinds(p, "prune-priority-class")
    assert "PriorityClass" in {
        f.subject for f in p.findings if f.code == "prune-everything-refused"
    }
    allowed = load(
        [SourceFile("d.yaml", text + CHANGE.format(spec="allowDeleteAllPriorityClasses: true"))]
    )
    pruned = [
        a.target for a in plan(allowed, converged(text)).actions if a.kind == "prune-priority-class"
    ]
    assert pruned == sorted(c.name for c in _objects(desired())["priority_classes"])


def test_prune_converges_over_cycles():
    d = load([SourceFile("desired.yaml", desired())])
    snap = converged(desired(), [OLD_QUOTA], [OLD_CLASS])
    p = plan(d, snap)
    assert p.actions
    after = apply_plan(d, snap, p, now=NOW)
    assert OLD_QUOTA not in after.quotas and OLD_CLASS not in after.priority_classes
    again = plan(d, after)
    assert not again.actions
    assert again.summary.startswith("No changes")
