"""Isolation per object (issue 16) on the real API server: one tenant's malformed pod, a node
agent newer than the controller, a broken agent entry, a foreign Job's broken annotation and a
hand-edited status object each used to stop every cycle. Now each malformed object is left out
(or read without the bad part) with a finding and an Event naming it, and the rest of the
cluster is reconciled as if it were not there."""

from __future__ import annotations

from reconciler.conventions import GROUP, NODE_STATE_PLURAL, VERSION
from reconciler.observe.kube import observe_cluster
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load

from .harness import NS, controller, converge, create_pod, node_state
from .scenario import TEXT, base


def events(kube, ns: str, name: str) -> list:
    return [
        e
        for e in kube.core.list_namespaced_event(ns).items
        if e.reason == "GpuPoolUnreadable" and e.involved_object.name == name
    ]


def test_malformed_objects_are_left_out_reported_and_the_rest_reconciled(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    # a tenant's pods: card indices that are not numbers, a memory declaration that is not one
    create_pod(kube, "team-a", "bad-gpus", gpus=1, annotations={"gpupool.io/gpus": "all"})
    create_pod(kube, "team-a", "bad-mem", shared=1, annotations={"gpupool.io/gpu-memory": "lots"})
    # a foreign Job whose next-pod reservation is junk
    kube.batch.create_namespaced_job(
        "team-a",
        {
            "metadata": {"name": "odd", "annotations": {"gpupool.io/next-pod-reserved": "x@y"}},
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "x"}],
                    }
                },
            },
        },
    )
    # a newer agent adds a field to every card of h100-1; h100-2 publishes one broken card
    state = node_state(kube, "h100-1")
    gpus = [{**g, "eccErrorsFromTheFuture": 3} for g in state["status"]["gpus"]]
    kube.custom.patch_cluster_custom_object_status(
        GROUP, VERSION, NODE_STATE_PLURAL, "h100-1", {"status": {"gpus": gpus}}
    )
    state = node_state(kube, "h100-2")
    broken = [{**state["status"]["gpus"][0], "utilization": 250}, *state["status"]["gpus"][1:]]
    kube.custom.patch_cluster_custom_object_status(
        GROUP, VERSION, NODE_STATE_PLURAL, "h100-2", {"status": {"gpus": broken}}
    )
    # a hand-edited status object: a time without a zone, intents that are not intents
    ctl = controller(kube, tmp_path, clock)
    assert ctl.cycle().error is None
    kube.custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NS,
        "reconcilerstatuses",
        "gpupool",
        {
            "status": {
                "recentPreemptions": ["2026-01-01T00:00:00", "yesterday"],
                "preemptionIntents": [{"pod": "no-slash", "at": "soon"}],
            }
        },
    )

    observed = observe_cluster(kube.controller_client(), now=clock.now)
    # the newer agent's cards are all read; the broken card alone is left out
    assert len(next(n for n in observed.nodes if n.name == "h100-1").gpus) == 8
    assert len(next(n for n in observed.nodes if n.name == "h100-2").gpus) == 7
    refs = {u.ref for u in observed.unreadable}
    assert refs == {
        "Pod team-a/bad-gpus",
        "Pod team-a/bad-mem",
        "Job team-a/odd",
        "GpuNodeState h100-2",
    }, observed.unreadable
    assert any(w.name == "bad-gpus" for w in observed.workloads)  # read, without the annotation
    plan, _ = plan_with_facts(load([SourceFile("d.yaml", TEXT)]), observed, now=clock.now)
    found = {f.subject for f in plan.findings if f.code == "unreadable-object"}
    assert found == refs

    r = ctl.cycle()
    assert r.error is None, r.error
    for ns, name in (("team-a", "bad-gpus"), ("team-a", "bad-mem"), ("team-a", "odd")):
        assert len(events(kube, ns, name)) == 1, (ns, name)
    [ev] = events(kube, "default", "h100-2")
    assert ev.involved_object.kind == "GpuNodeState" and "utilization" in ev.message
    ctl.cycle()  # once an hour per object, not once a cycle
    assert len(events(kube, "team-a", "bad-gpus")) == 1
    # and everything else converges
    assert converge(ctl, kube, clock=clock)[-1].converged
