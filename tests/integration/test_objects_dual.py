"""Quotas and PriorityClasses converge, a second cycle changes nothing, drift is healed and an
immutable PriorityClass is replaced — on the real API server, which enforces immutability."""

from __future__ import annotations

import uuid

from .harness import audit_mark, controller, write_policy, writes
from .objects_desired import _desired


def test_objects_converge_and_stay_put(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    ns = kube.new_namespace()
    write_policy(tmp_path, _desired(ns, sfx))
    clock = kube.clock
    ctl = controller(kube, tmp_path, clock)
    first = ctl.cycle()
    assert first.error is None and first.leader
    assert {o.action: o.status for o in first.applied.outcomes} == {
        f"quota:{ns}/gpupool-team-x": "done",
        f"priority-class:high-{sfx}": "done",
        f"priority-class:low-{sfx}": "done",
    }
    q = kube.core.read_namespaced_resource_quota("gpupool-team-x", ns)
    assert q.spec.hard == {"requests.nvidia.com/gpu": "8"}
    pc = kube.scheduling.read_priority_class(f"low-{sfx}")
    assert pc.value == 10000 and pc.preemption_policy == "Never"
    mark = audit_mark(kube)
    clock.advance(30)
    second = ctl.cycle()
    assert second.converged and second.applied is None
    assert writes(kube, since=mark, exclude=("leases", "reconcilerstatuses")) == []
    # someone edits the quota by hand: the next cycle puts it back (drift is healed)
    kube.core.patch_namespaced_resource_quota(
        "gpupool-team-x", ns, {"spec": {"hard": {"requests.nvidia.com/gpu": "2"}}}
    )
    third = ctl.cycle()
    assert [o.action for o in third.applied.outcomes] == [f"quota:{ns}/gpupool-team-x"]
    assert kube.core.read_namespaced_resource_quota("gpupool-team-x", ns).spec.hard == {
        "requests.nvidia.com/gpu": "8"
    }
    # and gpupool's PriorityClass whose value changed is replaced (value is immutable: the
    # real server refuses an update, so the test, like any other writer, deletes and recreates
    # it; it keeps gpupool's managed-by label, so it is still gpupool's)
    kube.scheduling.delete_priority_class(f"high-{sfx}")
    kube.scheduling.create_priority_class(
        {
            "metadata": {
                "name": f"high-{sfx}",
                "labels": {"app.kubernetes.io/managed-by": "gpupool"},
            },
            "value": 1,
            "preemptionPolicy": "PreemptLowerPriority",
        }
    )
    ctl.cycle()
    pc = kube.scheduling.read_priority_class(f"high-{sfx}")
    assert pc.value == 50000 and pc.preemption_policy == "Never"
    assert ctl.cycle().converged
    # a class of that name someone else made (no label) is theirs: never deleted nor changed,
    # whatever the policy says (it would change the priority of every pod using it)
    kube.scheduling.delete_priority_class(f"low-{sfx}")
    kube.scheduling.create_priority_class({"metadata": {"name": f"low-{sfx}"}, "value": 7})
    foreign = kube.scheduling.read_priority_class(f"low-{sfx}")
    mark = audit_mark(kube)
    for _ in range(2):
        clock.advance(30)
        assert ctl.cycle().converged
    pc = kube.scheduling.read_priority_class(f"low-{sfx}")
    assert (pc.metadata.uid, pc.value) == (foreign.metadata.uid, 7)
    assert [w for w in writes(kube, since=mark) if w.resource == "priorityclasses"] == []


def test_removing_a_quota_and_a_class_from_git_removes_their_objects(kube, tmp_path):
    """Prune on the real API server: a Quota and a PriorityClass deleted from the policy files
    take their ResourceQuota and PriorityClass with them on the next cycle (gpupool's own,
    labelled); a foreign quota in the same namespace is left alone, and the cycle after
    changes nothing."""
    sfx = uuid.uuid4().hex[:6]
    ns = kube.new_namespace()
    write_policy(tmp_path, _desired(ns, sfx))
    clock = kube.clock
    ctl = controller(kube, tmp_path, clock)
    assert ctl.cycle().error is None
    kube.core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "theirs"}, "spec": {"hard": {"pods": "100"}}}
    )
    # the team's Quota and the high class are deleted from git; another team keeps a quota
    # (pruning every quota at once would need allowDeleteAllQuotas)
    text = _desired(ns, sfx)
    other = kube.new_namespace()
    text = text.replace(
        f"metadata: {{name: team-x}}\nspec:\n  namespaces: [{ns}]",
        f"metadata: {{name: team-y}}\nspec:\n  namespaces: [{other}]",
    ).replace(
        f"    - {{name: high-{sfx}, value: 50000, workload: training, preemptible: false}}\n", ""
    )
    write_policy(tmp_path, text)
    clock.advance(30)
    r = ctl.cycle()
    assert r.error is None, r.error
    done = {o.action: o.status for o in r.applied.outcomes}
    assert done[f"prune-quota:{ns}/gpupool-team-x"] == "done"
    assert done[f"prune-priority-class:high-{sfx}"] == "done"
    assert [q.metadata.name for q in kube.core.list_namespaced_resource_quota(ns).items] == [
        "theirs"
    ]
    assert f"high-{sfx}" not in {
        c.metadata.name for c in kube.scheduling.list_priority_class().items
    }
    clock.advance(30)
    assert ctl.cycle().converged
