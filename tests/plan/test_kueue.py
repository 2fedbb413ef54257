"""Kueue mode (issue 14 item 4): with PriorityPolicy `admission.controller: kueue` the Quotas
render as ClusterQueues of one cohort, the Pools as ResourceFlavors, the team namespaces as
LocalQueues; gpupool's ResourceQuotas are pruned; Kueue admits training (whether) and gpupool
places what Kueue admitted (where). Switching back prunes the Kueue objects gpupool made; never
one without its label."""

from __future__ import annotations

import pytest

from reconciler.observe.builders import snapshot
from reconciler.observe.model import KueueObject
from reconciler.plan.kueue import body, desired_kueue_objects, spec_matches
from reconciler.plan.planner import plan
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState
from reconciler.sim.effects import apply_plan
from tests.plan.scenarios import L40S_POOL, NOW, _objects
from tests.plan.support import CHANGE, desired, pend, run_a, two_nodes, without

KUEUE = (
    "  defaultClass: training-low\n",
    "  defaultClass: training-low\n  admission: {controller: kueue}\n",
)


def kueue_text(*swaps: tuple[str, str], extra: str = "") -> str:
    return desired(KUEUE, *swaps, extra=extra)


def loaded(text: str):
    return load([SourceFile("desired.yaml", text)])


def quota_doc(name: str, ns: str, pools: str, extra: str = "") -> str:
    return (
        f"---\napiVersion: gpupool.io/v1alpha1\nkind: Quota\nmetadata: {{name: {name}}}\n"
        f"spec:\n  namespaces: [{ns}]\n{extra}  pools: {pools}\n"
    )


def cluster_queue(text: str, quota: str) -> dict:
    return desired_kueue_objects(loaded(text))[("ClusterQueue", "", f"gpupool-{quota}")]


def resources(cq: dict) -> dict[str, dict[str, dict]]:
    """flavor -> resource -> {nominalQuota, borrowingLimit, lendingLimit} (None: absent)."""
    (group,) = cq["resourceGroups"]
    out = {}
    for f in group["flavors"]:
        names = [r["name"] for r in f["resources"]]
        assert names == group["coveredResources"], "each flavor lists the covered resources"
        out[f["name"]] = {
            r["name"]: {k: v for k, v in r.items() if k != "name"} for r in f["resources"]
        }
    return out


def q(nominal, borrowing=None, lending=None) -> dict:
    return {"nominalQuota": nominal, "borrowingLimit": borrowing, "lendingLimit": lending}


# ---------------------------------------------------------------------- rendering
SHAPES = [
    pytest.param(
        "[{pool: a100, whole: {guaranteed: 4}}]",
        {"gpupool-a100": {"nvidia.com/gpu": q(4)}},
        id="guarantee-only-borrows-without-limit",
    ),
    pytest.param(
        "[{pool: a100, whole: {guaranteed: 4, borrowingLimit: 2}}]",
        {"gpupool-a100": {"nvidia.com/gpu": q(4, 2)}},
        id="guarantee-and-borrowing-limit",
    ),
    pytest.param(
        "[{pool: a100, whole: {guaranteed: 4, borrowingLimit: 0, lendingLimit: 1}}]",
        {"gpupool-a100": {"nvidia.com/gpu": q(4, 0, 1)}},
        id="lending-limit",
    ),
    pytest.param(
        "[{pool: a100, mig: {3g.40gb: {guaranteed: 2, borrowingLimit: 1},"
        " 1g.10gb: {guaranteed: 3}}}]",
        {
            "gpupool-a100": {
                "nvidia.com/gpu": q(0),
                "nvidia.com/mig-1g.10gb": q(3),
                "nvidia.com/mig-3g.40gb": q(2, 1),
            }
        },
        id="mig-profiles",
    ),
    pytest.param(
        # 40Gi guaranteed, 30Gi borrowing over 20Gi slices: 2 slices, 2 more (rounded up)
        "[{pool: a100, sharedMemory: {guaranteed: 40Gi, borrowingLimit: 30Gi}}]",
        {"gpupool-a100": {"nvidia.com/gpu": q(0), "nvidia.com/gpu.shared": q(2, 2)}},
        id="shared-memory-as-slices",
    ),
    pytest.param(
        # a lendingLimit of 30Gi over 20Gi slices: 2 slices lent (rounded up, as the others)
        "[{pool: a100, sharedMemory: {guaranteed: 40Gi, lendingLimit: 30Gi}}]",
        {"gpupool-a100": {"nvidia.com/gpu": q(0), "nvidia.com/gpu.shared": q(2, None, 2)}},
        id="shared-memory-lending-as-slices",
    ),
    pytest.param(
        "[{pool: a100, whole: {guaranteed: 2}, mig: {3g.40gb: {guaranteed: 1}}},"
        " {pool: l40s, whole: {guaranteed: 1, borrowingLimit: 1},"
        " sharedMemory: {guaranteed: 24Gi}}]",
        {
            "gpupool-a100": {
                "nvidia.com/gpu": q(2),
                "nvidia.com/mig-3g.40gb": q(1),
                "nvidia.com/gpu.shared": q(0),
            },
            "gpupool-l40s": {
                "nvidia.com/gpu": q(1, 1),
                "nvidia.com/mig-3g.40gb": q(0),
                "nvidia.com/gpu.shared": q(2),
            },
        },
        id="two-pools-one-flavor-each",
    ),
]


@pytest.mark.parametrize(("pools", "want"), SHAPES)
def test_each_quota_shape_renders_as_one_cluster_queue(pools, want):
    text = kueue_text(extra="---\n" + L40S_POOL + quota_doc("shape", "team-c", pools))
    cq = cluster_queue(text, "shape")
    assert resources(cq) == want
    assert cq["cohortName"] == "gpupool"
    assert cq["namespaceSelector"] == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-c"]}
        ]
    }
    # what is sent leaves the absent limits out (Kueue: null = no limit)
    sent = body(cq)["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert None not in sent.values()


def test_every_pool_a_flavor_every_namespace_a_local_queue_in_the_policys_cohort():
    text = kueue_text(
        ("admission: {controller: kueue}", "admission: {controller: kueue, cohort: research}"),
        ("namespaces: [team-b]", "namespaces: [team-b, team-b-eval]"),
    )
    objs = desired_kueue_objects(loaded(text))
    assert list(objs) == [
        ("ResourceFlavor", "", "gpupool-a100"),
        ("ClusterQueue", "", "gpupool-team-a"),
        ("ClusterQueue", "", "gpupool-team-b"),
        ("LocalQueue", "team-a", "gpupool"),
        ("LocalQueue", "team-b", "gpupool"),
        ("LocalQueue", "team-b-eval", "gpupool"),
    ]
    assert objs[("ResourceFlavor", "", "gpupool-a100")] == {
        "nodeLabels": {"gpupool.io/pool": "a100"}
    }
    assert objs[("LocalQueue", "team-b-eval", "gpupool")] == {"clusterQueue": "gpupool-team-b"}
    assert {objs[k]["cohortName"] for k in objs if k[0] == "ClusterQueue"} == {"research"}


def test_observed_defaults_still_match_and_a_dropped_limit_does_not():
    want = {
        "resourceGroups": [{"flavors": [{"name": "f", "resources": [q(4)]}]}],
        "cohortName": "c",
    }
    have = {
        "cohortName": "c",
        "queueingStrategy": "BestEffortFIFO",  # CRD defaults
        "stopPolicy": "None",
        "resourceGroups": [{"flavors": [{"name": "f", "resources": [{"nominalQuota": 4}]}]}],
    }
    assert spec_matches(want, have)
    have["resourceGroups"][0]["flavors"][0]["resources"][0]["borrowingLimit"] = 2
    assert not spec_matches(want, have)
    assert not spec_matches({"nominalQuota": 4}, {"nominalQuota": 5})
    assert spec_matches({"x": []}, {})


# ---------------------------------------------------------------------- the plan
def snap(work=(), kueue=None, quotas=False):
    """Two A100 nodes, the policy's PriorityClasses, and (`quotas`) gpupool-mode's quotas."""
    objs = _objects(desired())
    return snapshot(
        NOW,
        two_nodes(),
        list(work),
        kueue=kueue,
        priority_classes=objs["priority_classes"],
        quotas=objs["quotas"] if quotas else [],
    )


def kueue_objects(text: str) -> list[KueueObject]:
    """What a converged cluster holds in kueue mode (as the API server stores what was sent)."""
    return [
        KueueObject(kind=k, namespace=ns, name=n, spec=body(spec), managed_by="gpupool")
        for (k, ns, n), spec in desired_kueue_objects(loaded(text)).items()
    ]


def test_kueue_mode_renders_no_resource_quota_and_prunes_gpupools():
    text = kueue_text()
    snap = snapshot(NOW, two_nodes(), [], kueue=[], **_objects(desired()))
    p = plan(loaded(text), snap)
    kinds = [a.kind for a in p.actions]
    assert "quota" not in kinds
    assert sorted(a.target for a in p.actions if a.kind == "prune-quota") == [
        "team-a/gpupool-team-a",
        "team-b/gpupool-team-b",
    ]
    applied = [(a.object_kind, a.target) for a in p.actions if a.kind == "kueue-object"]
    # flavors before cluster queues before local queues
    assert applied == [
        ("ResourceFlavor", "gpupool-a100"),
        ("ClusterQueue", "gpupool-team-a"),
        ("ClusterQueue", "gpupool-team-b"),
        ("LocalQueue", "team-a/gpupool"),
        ("LocalQueue", "team-b/gpupool"),
    ]
    cq = next(a for a in p.actions if a.id == "kueue:ClusterQueue:gpupool-team-a")
    assert cq.depends_on == ("kueue:ResourceFlavor:gpupool-a100",)
    assert cq.verb == "create" and "kueue mode" in cq.reason


def test_the_next_cycle_is_a_no_op():
    text = kueue_text()
    d = loaded(text)
    snap = snapshot(NOW, two_nodes(), [], kueue=[], **_objects(desired()))
    after = apply_plan(d, snap, plan(d, snap), now=NOW)
    again = plan(d, after)
    assert again.actions == ()
    # and with the defaults the CRD adds to what was sent
    defaulted = [
        o.model_copy(update={"spec": {**o.spec, "queueingStrategy": "BestEffortFIFO"}})
        if o.kind == "ClusterQueue"
        else o
        for o in after.kueue or []
    ]
    assert plan(d, after.model_copy(update={"kueue": defaulted})).actions == ()


def test_a_changed_quota_updates_its_cluster_queue_and_a_removed_one_is_pruned_with_its_queue():
    text = kueue_text()
    objs = kueue_objects(text)
    changed = kueue_text(("guaranteed: 4, borrowingLimit: 4", "guaranteed: 2"))
    p = plan(loaded(changed), snap(kueue=objs))
    (a,) = p.actions
    assert (a.kind, a.verb, a.target) == ("kueue-object", "update", "gpupool-team-a")
    flavor = a.spec["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert flavor == {"name": "nvidia.com/gpu", "nominalQuota": 2}  # borrowingLimit gone
    # team-b's Quota removed from git: its LocalQueue, then its ClusterQueue
    gone = without_quota(text, "team-b")
    p = plan(loaded(gone), snap(kueue=objs))
    assert [(a.kind, a.target) for a in p.actions] == [
        ("prune-kueue-object", "team-b/gpupool"),
        ("prune-kueue-object", "gpupool-team-b"),
    ]
    assert p.actions[1].depends_on == ("prune-kueue:LocalQueue:team-b/gpupool",)
    assert "gpupool made it" in p.actions[1].reason


def without_quota(text: str, name: str) -> str:
    return "---".join(d for d in text.split("---") if f"metadata: {{name: {name}}}" not in d)


def test_a_namespace_moving_to_another_quota_gets_its_local_queue_made_again():
    text = kueue_text()
    objs = kueue_objects(text)
    moved = kueue_text(
        ("namespaces: [team-a]", "namespaces: [team-a, team-b]"),
    ).replace("namespaces: [team-b]", "namespaces: [team-b-new]")
    p = plan(loaded(moved), snap(kueue=objs))
    by_id = {a.id: a for a in p.actions}
    create = by_id["kueue:LocalQueue:team-b/gpupool"]
    assert create.verb == "create" and create.spec == {"clusterQueue": "gpupool-team-a"}
    assert "prune-kueue:LocalQueue:team-b/gpupool" in create.depends_on
    assert "cannot change" in by_id["prune-kueue:LocalQueue:team-b/gpupool"].reason


def test_switching_back_to_gpupool_prunes_only_gpupools_kueue_objects():
    text = kueue_text()
    foreign = KueueObject(kind="ClusterQueue", name="platform", spec={}, managed_by="")
    helm = KueueObject(kind="LocalQueue", namespace="team-a", name="batch", managed_by="helm")
    snap = snapshot(
        NOW, two_nodes(), [], kueue=[*kueue_objects(text), foreign, helm], **_objects(desired())
    )
    p = plan(loaded(desired()), snap)
    pruned = [(a.object_kind, a.target) for a in p.actions if a.kind == "prune-kueue-object"]
    assert pruned == [
        ("LocalQueue", "team-a/gpupool"),
        ("LocalQueue", "team-b/gpupool"),
        ("ClusterQueue", "gpupool-team-a"),
        ("ClusterQueue", "gpupool-team-b"),
        ("ResourceFlavor", "gpupool-a100"),
    ]
    assert all("admission.controller is gpupool" in a.reason for a in p.actions)
    assert not [a for a in p.actions if a.kind in ("quota", "prune-quota")]


def test_a_name_taken_by_someone_else_is_left_alone_with_a_finding():
    text = kueue_text()
    objs = [
        o.model_copy(update={"managed_by": ""}) if o.name == "gpupool-team-a" else o
        for o in kueue_objects(text)
    ]
    objs = [o.model_copy(update={"spec": {}}) if o.name == "gpupool-team-a" else o for o in objs]
    p = plan(loaded(text), snap(kueue=objs))
    assert not p.actions
    (f,) = [f for f in p.findings if f.code == "foreign-object"]
    assert f.subject == "ClusterQueue gpupool-team-a"


def test_pruning_every_kueue_object_needs_allow_delete_all_quotas():
    text = kueue_text()
    empty = without(text, "Quota")
    cluster = snap(kueue=kueue_objects(text))
    p = plan(loaded(empty), cluster)
    assert not [a for a in p.actions if a.kind == "prune-kueue-object"]
    (f,) = [f for f in p.findings if f.code == "prune-everything-refused"]
    assert f.subject == "Kueue object" and "allowDeleteAllQuotas" in f.message
    allowed = loaded(empty + CHANGE.format(spec="allowDeleteAllQuotas: true"))
    pruned = [a.target for a in plan(allowed, cluster).actions if a.kind == "prune-kueue-object"]
    # the pool's ResourceFlavor stays: the Pool is still there
    assert pruned == ["team-a/gpupool", "team-b/gpupool", "gpupool-team-a", "gpupool-team-b"]


def test_a_terminating_object_is_not_pruned_again():
    text = kueue_text()
    objs = [
        o.model_copy(update={"terminating": True}) if o.kind == "LocalQueue" else o
        for o in kueue_objects(text)
    ]
    gone = without_quota(text, "team-b")
    p = plan(loaded(gone), snap(kueue=objs))
    assert [a.target for a in p.actions] == ["gpupool-team-b"]


# ---------------------------------------------------------------------- admission left to Kueue
def gated_job(ns: str, name: str, n: int, queue: str = "gpupool"):
    return pend(ns, name, n).model_copy(update={"queue_name": queue})


def test_kueue_decides_whether_gpupool_decides_where():
    """A gated training pod in kueue mode exists only once Kueue admitted its Job (Kueue
    creates it suspended): gpupool admits it where its plan placed it (node and cards), as in
    gpupool mode, but never holds it by the Quota (Kueue's ClusterQueue keeps that) and
    resumes no Job (Kueue suspends and unsuspends)."""
    work = [gated_job("team-a", "fits", 4), gated_job("team-a", "over-cap", 8)]
    gpupool_mode = plan(loaded(desired()), snapshot(NOW, two_nodes(), work, **_objects(desired())))
    held = {a.target for a in gpupool_mode.actions if a.kind == "hold"}
    assert held == {"team-a/over-cap"}  # team a's cap in gpupool mode
    text = kueue_text()
    p = plan(loaded(text), snap(work, kueue=kueue_objects(text)))
    kinds = {a.kind for a in p.actions}
    assert "admit" in kinds and not kinds & {"hold", "resume"}
    assert {a.target for a in p.actions if a.kind == "admit"} == {
        "team-a/fits",
        "team-a/over-cap",
    }
    # gpupool's own admission (team caps) does not hold what Kueue admitted
    assert not [f for f in p.findings if f.code.startswith("held-")]
    assert not [f for f in p.findings if f.code == "kueue-gated-training"]


def test_training_without_the_queue_name_label_is_a_finding():
    text = kueue_text()
    work = [
        gated_job("team-a", "queued", 2).model_copy(update={"admission": "scheduler"}),
        pend("team-b", "unqueued", 2).model_copy(update={"admission": "scheduler"}),
        pend("elsewhere", "not-a-team", 2).model_copy(update={"admission": "scheduler"}),
    ]
    p = plan(loaded(text), snap(work, kueue=kueue_objects(text)))
    (f,) = [f for f in p.findings if f.code == "kueue-queue-name-missing"]
    assert f.subject == "team-b/unqueued"
    assert "kueue.x-k8s.io/queue-name=gpupool" in f.message
    # in gpupool mode nobody asks for the label
    p = plan(loaded(desired()), snapshot(NOW, two_nodes(), work, **_objects(desired())))
    assert not [f for f in p.findings if f.code.startswith("kueue")]


def test_without_kueue_installed_nothing_changes_but_a_finding():
    text = kueue_text()
    snap = snapshot(NOW, two_nodes(), [], **_objects(desired()))  # kueue: None (CRDs absent)
    p = plan(loaded(text), snap)
    assert p.actions == ()  # the ResourceQuotas stay until Kueue can enforce the Quotas
    (f,) = [f for f in p.findings if f.code == "kueue-not-installed"]
    assert f.severity == "warning"


def test_preemption_evicts_instead_of_suspending_in_kueue_mode():
    text = kueue_text()
    low = run_a("team-b", "low", "a100-2", 8, cls="spot").model_copy(
        update={"owner_kind": "Job", "owner_name": "low"}
    )
    hi = pend("team-a", "high", 8, cls="training-high").model_copy(
        update={"admission": "scheduler"}
    )
    full = [run_a("team-b", "base", "a100-1", 8), low, hi]
    for t, kw, job in ((desired(), {}, "low"), (text, {"kueue": kueue_objects(text)}, None)):
        p = plan(loaded(t), snap(full, **kw))
        (pre,) = [a for a in p.actions if a.kind == "preempt"]
        assert pre.suspend_job == job


# ---------------------------------------------------------------------- validation
def test_an_unknown_controller_is_an_error_with_file_line_and_field():
    text = desired(
        (
            "  defaultClass: training-low\n",
            "  defaultClass: training-low\n  admission: {controller: volcano}\n",
        )
    )
    with pytest.raises(InvalidDesiredState) as e:
        loaded(text)
    msg = str(e.value)
    assert "desired.yaml:" in msg and "spec.admission.controller" in msg


def test_a_lending_limit_above_the_guarantee_is_an_error_in_kueue_mode():
    bad = (
        "guaranteed: 4, borrowingLimit: 4}",
        "guaranteed: 4, borrowingLimit: 4, lendingLimit: 5}",
    )
    loaded(desired(bad))  # gpupool mode: accepted as before
    with pytest.raises(InvalidDesiredState) as e:
        loaded(kueue_text(bad))
    msg = str(e.value)
    assert "spec.pools[0].whole.lendingLimit" in msg and "nominalQuota" in msg
    assert "Quota/team-a" in msg and "desired.yaml:" in msg


def test_a_shared_memory_lending_limit_above_the_guarantee_is_an_error_in_kueue_mode():
    text = kueue_text(
        extra="---\n"
        + quota_doc(
            "shape",
            "team-c",
            "[{pool: a100, sharedMemory: {guaranteed: 20Gi, lendingLimit: 40Gi}}]",
        )
    )
    with pytest.raises(InvalidDesiredState) as e:
        loaded(text)
    msg = str(e.value)
    assert "spec.pools[0].sharedMemory.lendingLimit" in msg and "nominalQuota" in msg
    assert "lendingLimit 40Gi exceeds guaranteed 20Gi" in msg
