"""The controller against the real control plane: convergence, idempotence, status, events,
mig-manager (the stand-in of tests/nvidia, which acts only on label changes and reads a mounted
copy of its ConfigMap)."""

from __future__ import annotations

import pynvml
import yaml

from reconciler.apply.configs import MIG_CONFIG_KEY
from reconciler.conventions import CHECKPOINT_REQUESTED_ANN as CHECKPOINT_ANN
from reconciler.conventions import CORDONED_FOR_ANN as CORDON_ANNOTATION
from reconciler.conventions import MIG_CONFIG_LABEL, MIG_STATE_LABEL

from .harness import (
    OPERATOR_NS,
    audit_mark,
    conditions,
    controller,
    converge,
    evictions,
    node_state,
    writes,
)
from .scenario import base

BOOKKEEPING = (
    "leases",
    "reconcilerstatuses",
)  # the Lease renewal and the status report, every cycle


def until_label(ctl, kube, clock, node: str = "h100-2", cycles: int = 12) -> None:
    """Cycle (and let the world move) until the controller has pointed mig-manager's label at
    the new config: grace period, eviction, config written, propagation wait."""
    for _ in range(cycles):
        ctl.cycle()
        kube.settle()
        if (
            (kube.core.read_node(node).metadata.labels or {})
            .get(MIG_CONFIG_LABEL, "")
            .startswith("gpupool-")
        ):
            return
        clock.advance(120)
    raise AssertionError("the controller never set the mig-manager label")


def pods(kube, ns):
    return sorted(p.metadata.name for p in kube.core.list_namespaced_pod(ns).items)


def test_converges_checkpoint_preempt_mig_uncordon(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)

    first = ctl.cycle()
    assert first.leader and first.error is None
    out = {o.action: o for o in first.applied.outcomes}
    assert out["cordon:h100-2"].status == "done"
    assert out["checkpoint:team-b/bert-new"].status == "done"
    assert out["preempt:team-b/bert-new"].status == "waiting"  # the 5m grace period
    assert out["mig-reconfigure:h100-2"].status == "skipped"
    assert "bert-new" in pods(kube, "team-b")
    assert (
        CHECKPOINT_ANN in kube.core.read_namespaced_pod("bert-new", "team-b").metadata.annotations
    )
    assert conditions(kube)["Reconciling"]["status"] == "True"
    assert "grace period" in conditions(kube)["Reconciling"]["message"]

    converge(ctl, kube, clock=clock)

    # the younger low-priority job was checkpointed, then evicted once; the others run on, and
    # the scheduler placed the MIG pods on the new instances, which the kubelet allocated
    assert pods(kube, "team-b") == ["bert-old", "ranker-0", "ranker-1"]
    assert pods(kube, "team-a") == ["resnet"]
    assert evictions(kube, since=mark) == ["team-b/bert-new"]
    log = writes(kube, since=mark)
    ck = next(
        i
        for i, e in enumerate(log)
        if e.verb == "patch" and e.resource == "pods" and e.name == "bert-new"
    )
    ev = next(i for i, e in enumerate(log) if e.subresource == "eviction")
    assert ck < ev
    for name in ("ranker-0", "ranker-1"):
        pod = kube.core.read_namespaced_pod(name, "team-b")
        assert pod.status.phase == "Running" and pod.spec.node_name == "h100-2"
        held = next(e for e in node_state(kube, "h100-2")["status"]["pods"] if e["name"] == name)
        assert [a["gpu"] for a in held["allocations"]] == [4] and "migStart" in held["allocations"][
            0
        ]
    # the node went cordoned -> mig-manager -> uncordoned; its agent shows the new layout;
    # mig-manager ran once, on a config its mounted copy already held
    assert kube.nodes["h100-2"].mig_manager.runs[-1][1] == "success"
    assert [o for _, o in kube.nodes["h100-2"].mig_manager.runs].count("failed") == 0
    node = kube.core.read_node("h100-2")
    assert not node.spec.unschedulable and CORDON_ANNOTATION not in (
        node.metadata.annotations or {}
    )
    config = node.metadata.labels[MIG_CONFIG_LABEL]
    assert node.metadata.labels[MIG_STATE_LABEL] == "success"
    parted = yaml.safe_load(
        kube.core.read_namespaced_config_map("gpupool-mig-parted-config", OPERATOR_NS).data[
            MIG_CONFIG_KEY
        ]
    )
    assert parted["version"] == "v1"
    entry = {e["devices"][0]: e for e in parted["mig-configs"][config]}
    assert entry[4] == {"devices": [4], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}
    assert entry[0] == {"devices": [0], "mig-enabled": False}
    assert "all-disabled" in parted["mig-configs"]  # the operator's default is kept
    gpu4 = node_state(kube, "h100-2")["status"]["gpus"][4]
    assert gpu4["migEnabled"] and sorted(i["profile"] for i in gpu4["migInstances"]) == [
        "3g.40gb",
        "3g.40gb",
    ]
    # quotas (server-side applied) and the PriorityClasses
    quota = kube.core.read_namespaced_resource_quota("gpupool-team-b", "team-b")
    assert quota.spec.hard["requests.nvidia.com/gpu"] == "16"
    assert quota.metadata.labels["app.kubernetes.io/managed-by"] == "gpupool"
    assert kube.scheduling.read_priority_class("serving").preemption_policy == "Never"
    # status: Ready, revision recorded
    conds = conditions(kube)
    assert (
        conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "ReconciliationSucceeded"
    )
    assert conds["Stalled"]["status"] == "False" and conds["Reconciling"]["status"] == "False"
    st = kube.custom.get_namespaced_custom_object(
        "gpupool.io", "v1alpha1", kube.namespace, "reconcilerstatuses", "gpupool"
    )["status"]
    assert st["lastAppliedRevision"].startswith("dir:") and len(st["recentPreemptions"]) == 1
    # one Event per disruptive step, no more
    reasons = sorted(
        e.reason
        for e in kube.core.list_event_for_all_namespaces().items
        if e.reason.startswith("GpuPool") and e.source.component == "gpupool"
    )
    # the MIG step wrote twice: the config (and waited for the mounted copy), then the label
    assert reasons == [
        "GpuPoolCheckpoint",
        "GpuPoolCordon",
        "GpuPoolMigReconfigure",
        "GpuPoolMigReconfigure",
        "GpuPoolPreempt",
    ]
    preempt = next(
        e for e in kube.core.list_namespaced_event("team-b").items if e.reason == "GpuPoolPreempt"
    )
    assert (
        preempt.involved_object.kind == "Pod"
        and preempt.involved_object.name == "bert-new"
        and preempt.type == "Warning"
    )


def test_second_apply_writes_nothing(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    converge(ctl, kube, clock=clock)
    mark = audit_mark(kube)
    for _ in range(2):
        r = ctl.cycle()
        assert r.converged and r.applied is None
        clock.advance(30)
    assert writes(kube, since=mark, exclude=BOOKKEEPING) == []
    # bookkeeping only: a Lease renewal and one status patch per cycle
    assert sorted({(e.verb, e.resource, e.subresource) for e in writes(kube, since=mark)}) == [
        ("patch", "reconcilerstatuses", "status"),
        ("update", "leases", None),
    ]


def test_events_only_for_changes_while_waiting(kube, tmp_path):
    """Cycles that wait (grace period) re-check each step but write no Events and no patches."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    ctl.cycle()
    mark = audit_mark(kube)
    clock.advance(60)
    r = ctl.cycle()
    assert {o.status for o in r.applied.outcomes} == {"done", "waiting", "skipped"}
    assert writes(kube, since=mark, exclude=BOOKKEEPING) == []


def test_mig_manager_failed_is_stalled(kube, tmp_path):
    """A driver error while mig-parted applies the layout, every time: mig-manager reports
    failed; the controller retries under new label values (mig-manager re-runs only on a label
    change), twice, then stalls with the reason and leaves the node cordoned."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    until_label(ctl, kube, clock)
    sim = kube.nodes["h100-2"]
    sim.gpus.nvml.failures["nvmlDeviceSetMigMode"] = pynvml.NVML_ERROR_UNKNOWN
    out = None
    for _ in range(20):
        sim.step()
        r = ctl.cycle()
        out = {o.action: o for o in r.applied.outcomes}
        if out["mig-reconfigure:h100-2"].status == "failed":
            break
        clock.advance(60)
    label = kube.core.read_node("h100-2").metadata.labels[MIG_CONFIG_LABEL]
    first = label.removesuffix("-r2")
    assert [o for _, o in sim.mig_manager.runs] == ["failed"] * 3
    assert [c for c, _ in sim.mig_manager.runs] == [first, f"{first}-r1", f"{first}-r2"]
    assert out["mig-reconfigure:h100-2"].status == "failed"
    assert out["uncordon:h100-2"].status == "skipped"
    conds = conditions(kube)
    assert (
        conds["Stalled"]["status"] == "True"
        and "mig-manager reports failed" in conds["Stalled"]["message"]
        and "attempt 3 of 3" in conds["Stalled"]["message"]
    )
    assert conds["Ready"]["status"] == "False"
    assert kube.core.read_node(
        "h100-2"
    ).spec.unschedulable  # not put back into service half-configured


def test_mig_manager_stuck_times_out(kube, tmp_path):
    """mig-manager said pending and then its pod died: after the timeout the controller tries
    a new label value (a mig-manager that gave up leaves `pending` and waits for a change);
    nobody answers that one either, and the change fails after the timeout."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock, mig_timeout=600)
    until_label(ctl, kube, clock)
    assert kube.nodes["h100-2"].mig_manager.step() == "pending"  # and then nothing
    r = ctl.cycle()
    assert {o.action: o.status for o in r.applied.outcomes}["mig-reconfigure:h100-2"] == "waiting"
    clock.advance(700)
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}["mig-reconfigure:h100-2"]
    assert out.status == "waiting" and "pending for over 600s; retry 1 of 2" in out.message
    assert kube.core.read_node("h100-2").metadata.labels[MIG_CONFIG_LABEL].endswith("-r1")
    clock.advance(700)
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}["mig-reconfigure:h100-2"]
    assert out.status == "failed" and "stuck" in out.message and "running" in out.message
    assert conditions(kube)["Stalled"]["status"] == "True"


def test_uncordon_waits_while_mig_manager_pending(kube, tmp_path):
    """The agent already shows the new layout; mig-manager has not said success: stay cordoned
    (the plan holds the uncordon back, `repartition-unresolved`; the handler would wait too)."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    until_label(ctl, kube, clock)
    sim = kube.nodes["h100-2"]
    assert sim.mig_manager.step() == "pending"
    sim.gpus.set_mig(
        4, True, ["3g.40gb", "3g.40gb"]
    )  # the change is on the card before the label says so
    sim.publish()
    r = ctl.cycle()
    assert "uncordon:h100-2" not in {a.id for a in r.plan.actions}
    assert "repartition-unresolved" in {f.code for f in r.plan.findings}
    assert kube.core.read_node("h100-2").spec.unschedulable
    assert sim.mig_manager.step() == "success"
    converge(ctl, kube, clock=clock)
    assert not kube.core.read_node("h100-2").spec.unschedulable


def test_config_waits_for_the_mounted_copy(kube, tmp_path):
    """The config is written first; the label names it only once mig-manager's mounted copy
    must hold it. A controller that set both at once would see mig-manager fail (the stand-in
    validates against the late copy) and stay failed, since it re-runs only on a label change."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    written = None
    for _ in range(12):
        r = ctl.cycle()
        kube.settle()
        outs = {o.action: o for o in (r.applied.outcomes if r.applied else [])}
        o = outs.get("mig-reconfigure:h100-2")
        if o is not None and o.status == "waiting" and "mounted copy" in o.message:
            written = written or clock.now
            assert MIG_CONFIG_LABEL not in (kube.core.read_node("h100-2").metadata.labels or {})
            kube.nodes["h100-2"].step()
        if (kube.core.read_node("h100-2").metadata.labels or {}).get(MIG_CONFIG_LABEL):
            break
        clock.advance(60)
    assert written is not None and (clock.now - written).total_seconds() >= 120
    converge(ctl, kube, clock=clock)
    assert [o for _, o in kube.nodes["h100-2"].mig_manager.runs] == [
        "success"
    ]  # one run, on a config it could see


def test_dry_run_changes_nothing(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock, dry_run=True)
    for _ in range(2):
        r = ctl.cycle()
        assert r.applied is None and "MIG reconfiguration" in r.summary
        clock.advance(600)
    assert writes(kube, since=mark, exclude=BOOKKEEPING) == []
    conds = conditions(kube)
    assert conds["Ready"]["reason"] == "DryRun" and conds["Ready"]["status"] == "False"
    assert "MIG reconfiguration" in conds["Ready"]["message"]


def test_suspend_changes_nothing_then_resumes(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    kube.custom.create_namespaced_custom_object(
        "gpupool.io",
        "v1alpha1",
        kube.namespace,
        "reconcilerstatuses",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "ReconcilerStatus",
            "metadata": {"name": "gpupool"},
            "spec": {"suspend": True},
        },
    )
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)
    r = ctl.cycle()
    assert r.leader and r.applied is None
    assert writes(kube, since=mark, exclude=BOOKKEEPING) == []
    assert conditions(kube)["Ready"]["reason"] == "Suspended"
    from .harness import set_suspend

    set_suspend(kube, False)
    converge(ctl, kube, clock=clock)
    assert conditions(kube)["Ready"]["status"] == "True"


def test_invalid_desired_state_is_stalled_and_applies_nothing(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    (tmp_path / "policies" / "desired.yaml").write_text(
        "apiVersion: gpupool.io/v1alpha1\nkind: Pool\nmetadata: {name: h100}\nspec: {}\n"
    )
    mark = audit_mark(kube)
    r = controller(kube, tmp_path, clock).cycle()
    assert r.error
    assert writes(kube, since=mark, exclude=BOOKKEEPING) == []
    conds = conditions(kube)
    assert (
        conds["Stalled"]["status"] == "True" and conds["Stalled"]["reason"] == "InvalidDesiredState"
    )


def test_mig_success_waits_for_the_agent(kube, tmp_path):
    """mig-manager says success before the node agent republished: the node stays cordoned
    (the next plan would otherwise see the old layout and repartition again)."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    until_label(ctl, kube, clock)
    sim = kube.nodes["h100-2"]
    sim.mig_manager.publish = lambda: sim.advertise(
        sim.gpus.advertised()
    )  # the agent has not run yet
    assert sim.mig_manager.step() == "pending"
    assert sim.mig_manager.step() == "success"
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}
    assert (
        out["mig-reconfigure:h100-2"].status == "waiting"
        and "node agent" in out["mig-reconfigure:h100-2"].message
    )
    assert out["uncordon:h100-2"].status == "skipped"
    sim.publish()
    converge(ctl, kube, clock=clock)
    assert not kube.core.read_node("h100-2").spec.unschedulable
    gpu4 = node_state(kube, "h100-2")["status"]["gpus"][4]
    assert gpu4["migEnabled"]
