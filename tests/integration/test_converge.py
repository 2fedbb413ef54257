"""The controller against an API server: convergence, idempotence, status, events, mig-manager."""

from __future__ import annotations

import yaml

from reconciler.apply.configs import MIG_CONFIG_KEY
from reconciler.conventions import CHECKPOINT_REQUESTED_ANN as CHECKPOINT_ANN
from reconciler.conventions import CORDONED_FOR_ANN as CORDON_ANNOTATION
from reconciler.conventions import MIG_CONFIG_LABEL, MIG_STATE_LABEL

from .harness import (
    Clock,
    conditions,
    controller,
    converge,
    evictions,
    mig_manager_step,
    node_state,
    writes,
)
from .scenario import base

BOOKKEEPING = ("/leases", "/reconcilerstatuses")  # the Lease renewal and the status report, every cycle


def pods(kube, ns):
    return sorted(p.metadata.name for p in kube.core.list_namespaced_pod(ns).items)


def test_converges_checkpoint_preempt_mig_uncordon(kube, tmp_path):
    clock = Clock()
    base(kube, tmp_path, clock)
    server = kube.server
    ctl = controller(kube, tmp_path, clock)

    first = ctl.cycle()
    assert first.leader and first.error is None
    out = {o.action: o for o in first.applied.outcomes}
    assert out["cordon:a100-2"].status == "done"
    assert out["checkpoint:team-b/bert-new"].status == "done"
    assert out["preempt:team-b/bert-new"].status == "waiting"  # the 5m grace period
    assert out["mig-reconfigure:a100-2"].status == "skipped"
    assert "bert-new" in pods(kube, "team-b")
    assert CHECKPOINT_ANN in kube.core.read_namespaced_pod("bert-new", "team-b").metadata.annotations
    assert conditions(kube)["Reconciling"]["status"] == "True"
    assert "grace period" in conditions(kube)["Reconciling"]["message"]

    converge(ctl, kube, nodes=("a100-2",), clock=clock)

    # the younger low-priority job was checkpointed, then evicted once; the others run on
    assert pods(kube, "team-b") == ["bert-old", "ranker-0", "ranker-1"]
    assert pods(kube, "team-a") == ["resnet"]
    assert evictions(server) == ["/api/v1/namespaces/team-b/pods/bert-new/eviction"]
    log = server.requests()
    ck = next(i for i, r in enumerate(log) if r.method == "PATCH" and r.path.endswith("/pods/bert-new"))
    ev = next(i for i, r in enumerate(log) if r.path.endswith("/bert-new/eviction"))
    assert ck < ev
    # the node went cordoned -> mig-manager -> uncordoned; its agent shows the new layout
    node = kube.core.read_node("a100-2")
    assert not node.spec.unschedulable and CORDON_ANNOTATION not in (node.metadata.annotations or {})
    config = node.metadata.labels[MIG_CONFIG_LABEL]
    assert node.metadata.labels[MIG_STATE_LABEL] == "success"
    parted = yaml.safe_load(kube.core.read_namespaced_config_map("gpupool-mig-parted-config", kube.namespace).data[MIG_CONFIG_KEY])
    assert parted["version"] == "v1"
    entry = {e["devices"][0]: e for e in parted["mig-configs"][config]}
    assert entry[4] == {"devices": [4], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    assert entry[0] == {"devices": [0], "mig-enabled": False}
    gpu4 = node_state(kube, "a100-2")["status"]["gpus"][4]
    assert gpu4["migEnabled"] and sorted(i["profile"] for i in gpu4["migInstances"]) == ["3g.40gb", "3g.40gb"]
    # quotas (server-side applied) and the PriorityClasses
    quota = kube.core.read_namespaced_resource_quota("gpupool-team-b", "team-b")
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "16"
    assert quota.metadata.labels["app.kubernetes.io/managed-by"] == "gpupool"
    assert kube.scheduling.read_priority_class("serving").preemption_policy == "Never"
    # status: Ready, revision recorded
    conds = conditions(kube)
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "ReconciliationSucceeded"
    assert conds["Stalled"]["status"] == "False" and conds["Reconciling"]["status"] == "False"
    st = kube.custom.get_namespaced_custom_object("gpupool.io", "v1alpha1", kube.namespace, "reconcilerstatuses", "gpupool")["status"]
    assert st["lastAppliedRevision"].startswith("dir:") and len(st["recentPreemptions"]) == 1
    # one Event per disruptive step, no more
    reasons = sorted(e.reason for e in kube.core.list_event_for_all_namespaces().items if e.reason.startswith("GpuPool"))
    assert reasons == ["GpuPoolCheckpoint", "GpuPoolCordon", "GpuPoolMigReconfigure", "GpuPoolPreempt"]
    preempt = next(e for e in kube.core.list_namespaced_event("team-b").items if e.reason == "GpuPoolPreempt")
    assert preempt.involved_object.kind == "Pod" and preempt.involved_object.name == "bert-new" and preempt.type == "Warning"


def test_second_apply_writes_nothing(kube, tmp_path):
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    converge(ctl, kube, nodes=("a100-2",), clock=clock)
    kube.server.clear_requests()
    for _ in range(2):
        r = ctl.cycle()
        assert r.converged and r.applied is None
        clock.advance(30)
    assert writes(kube.server, exclude=BOOKKEEPING) == []
    # bookkeeping only: a Lease renewal and one status patch per cycle
    assert sorted({(r.method, r.path.rsplit("/", 1)[-1]) for r in writes(kube.server)}) == [("PATCH", "status"), ("PUT", "gpupool-controller")]


def test_events_only_for_changes_while_waiting(kube, tmp_path):
    """Cycles that wait (grace period) re-check each step but write no Events and no patches."""
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    ctl.cycle()
    kube.server.clear_requests()
    clock.advance(60)
    r = ctl.cycle()
    assert {o.status for o in r.applied.outcomes} == {"done", "waiting", "skipped"}
    assert writes(kube.server, exclude=BOOKKEEPING) == []


def test_mig_manager_failed_is_stalled(kube, tmp_path):
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    for _ in range(4):
        ctl.cycle()
        clock.advance(120)
    assert mig_manager_step(kube, "a100-2") == "pending"
    assert mig_manager_step(kube, "a100-2", outcome="failed") == "failed"
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}
    assert out["mig-reconfigure:a100-2"].status == "failed"
    assert out["uncordon:a100-2"].status == "skipped"
    conds = conditions(kube)
    assert conds["Stalled"]["status"] == "True" and "mig-manager reports failed" in conds["Stalled"]["message"]
    assert conds["Ready"]["status"] == "False"
    assert kube.core.read_node("a100-2").spec.unschedulable  # not put back into service half-configured


def test_mig_manager_stuck_times_out(kube, tmp_path):
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock, mig_timeout=600)
    for _ in range(4):
        ctl.cycle()
        clock.advance(120)
    mig_manager_step(kube, "a100-2")  # pending, and then nothing
    r = ctl.cycle()
    assert {o.action: o.status for o in r.applied.outcomes}["mig-reconfigure:a100-2"] == "waiting"
    clock.advance(700)
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}["mig-reconfigure:a100-2"]
    assert out.status == "failed" and "stuck" in out.message
    assert conditions(kube)["Stalled"]["status"] == "True"


def test_uncordon_waits_while_mig_manager_pending(kube, tmp_path):
    """The agent already shows the new layout but mig-manager has not said success: stay cordoned."""
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    for _ in range(4):
        ctl.cycle()
        clock.advance(120)
    mig_manager_step(kube, "a100-2")  # pending
    gpus = node_state(kube, "a100-2")["status"]["gpus"]
    gpus[4].update({"migEnabled": True, "migInstances": [{"profile": "3g.40gb", "start": 0}, {"profile": "3g.40gb", "start": 4}]})
    from .harness import publish_state

    publish_state(kube, "a100-2", gpus)
    r = ctl.cycle()
    assert {o.action: o.status for o in r.applied.outcomes}["uncordon:a100-2"] == "waiting"
    assert kube.core.read_node("a100-2").spec.unschedulable
    mig_manager_step(kube, "a100-2")  # success
    converge(ctl, kube, clock=clock)
    assert not kube.core.read_node("a100-2").spec.unschedulable


def test_dry_run_changes_nothing(kube, tmp_path):
    clock = Clock()
    base(kube, tmp_path, clock)
    kube.server.clear_requests()
    ctl = controller(kube, tmp_path, clock, dry_run=True)
    for _ in range(2):
        r = ctl.cycle()
        assert r.applied is None and "MIG reconfiguration" in r.summary
        clock.advance(600)
    assert writes(kube.server, exclude=BOOKKEEPING) == []
    conds = conditions(kube)
    assert conds["Ready"]["reason"] == "DryRun" and conds["Ready"]["status"] == "False"
    assert "MIG reconfiguration" in conds["Ready"]["message"]


def test_suspend_changes_nothing_then_resumes(kube, tmp_path):
    clock = Clock()
    base(kube, tmp_path, clock)
    kube.custom.create_namespaced_custom_object("gpupool.io", "v1alpha1", kube.namespace, "reconcilerstatuses", {
        "apiVersion": "gpupool.io/v1alpha1", "kind": "ReconcilerStatus", "metadata": {"name": "gpupool"}, "spec": {"suspend": True}})
    kube.server.clear_requests()
    ctl = controller(kube, tmp_path, clock)
    r = ctl.cycle()
    assert r.leader and r.applied is None
    assert writes(kube.server, exclude=BOOKKEEPING) == []
    assert conditions(kube)["Ready"]["reason"] == "Suspended"
    from .harness import set_suspend

    set_suspend(kube, False)
    converge(ctl, kube, nodes=("a100-2",), clock=clock)
    assert conditions(kube)["Ready"]["status"] == "True"


def test_invalid_desired_state_is_stalled_and_applies_nothing(kube, tmp_path):
    clock = Clock()
    base(kube, tmp_path, clock)
    (tmp_path / "policies" / "desired.yaml").write_text("apiVersion: gpupool.io/v1alpha1\nkind: Pool\nmetadata: {name: a100}\nspec: {}\n")
    kube.server.clear_requests()
    r = controller(kube, tmp_path, clock).cycle()
    assert r.error
    assert writes(kube.server, exclude=BOOKKEEPING) == []
    conds = conditions(kube)
    assert conds["Stalled"]["status"] == "True" and conds["Stalled"]["reason"] == "InvalidDesiredState"


def test_mig_success_waits_for_the_agent(kube, tmp_path):
    """mig-manager says success before the node agent republished: the node stays cordoned
    (the next plan would otherwise see the old layout and repartition again)."""
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    for _ in range(4):
        ctl.cycle()
        clock.advance(120)
    mig_manager_step(kube, "a100-2")
    mig_manager_step(kube, "a100-2", publish=False)  # success, GpuNodeState still old
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}
    assert out["mig-reconfigure:a100-2"].status == "waiting" and "node agent" in out["mig-reconfigure:a100-2"].message
    assert out["uncordon:a100-2"].status == "skipped"
    from .harness import gpu_state, publish_state

    gpus = node_state(kube, "a100-2")["status"]["gpus"]
    gpus[4] = gpu_state(4, mig=["3g.40gb", "3g.40gb"])
    publish_state(kube, "a100-2", gpus)
    converge(ctl, kube, clock=clock)
    assert not kube.core.read_node("a100-2").spec.unschedulable
