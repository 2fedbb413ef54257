"""Faults: a controller killed between any two actions, failed writes, an API server restart
mid-cycle, 409 conflicts, two controllers, a PodDisruptionBudget that blocks an eviction.
All need the fake API server (fault injection, request log)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from .harness import (
    Clock,
    conditions,
    controller,
    converge,
    create_inference_deployment,
    create_pdb,
    evictions,
    mig_manager_step,
    writes,
)
from .scenario import base
from .test_converge import BOOKKEEPING, pods

# The scenario's writes, one per action: cordon, checkpoint, 2 quotas, evict, mig config + label, uncordon.
CHANGING_STEPS = 7


class Killed(Exception):
    """The controller process dies here."""


def kill_after(ctl, n: int) -> None:
    """Make the controller die right after its n-th step that wrote something (before it
    records the outcome or reports status), as a SIGKILL between two actions would."""
    real = ctl.executor.apply
    seen = {"n": 0}

    def apply(plan, *, on_outcome=None, **kw):
        def hook(action, out):
            if out.changed:
                seen["n"] += 1
                if seen["n"] == n:
                    raise Killed(action.id)
            if on_outcome:
                on_outcome(action, out)
        return real(plan, on_outcome=hook, **kw)

    ctl.executor.apply = apply


def effect_counts(server) -> Counter:
    """How many times each cluster-changing write happened (bookkeeping and Events aside)."""
    c: Counter = Counter()
    for r in writes(server, exclude=(*BOOKKEEPING, "/events")):
        if r.injected or not r.status or r.status >= 300:
            continue
        body = r.body if isinstance(r.body, dict) else {}
        if r.path.endswith("/eviction"):
            c["evict " + r.path.split("/")[-2]] += 1
        elif r.path.startswith("/api/v1/nodes/"):
            spec = body.get("spec") or {}
            labels = (body.get("metadata") or {}).get("labels") or {}
            if "unschedulable" in spec:
                c["cordon" if spec["unschedulable"] else "uncordon"] += 1
            if "nvidia.com/mig.config" in labels:
                c["mig label"] += 1
            if labels.get("nvidia.com/mig.config.state"):
                continue  # the mig-manager stand-in
        elif "/pods/" in r.path:
            c["annotate " + r.path.split("/")[-1]] += 1
        elif "/configmaps" in r.path:
            c["mig config"] += 1
        elif "gpunodestates" in r.path:
            continue  # the mig-manager stand-in republishing as the agent
        else:
            c[f"{r.method} {r.path.split('/')[-1]}"] += 1
    return c


EXPECTED = Counter({"cordon": 1, "annotate bert-new": 1, "evict bert-new": 1, "mig config": 1, "mig label": 1, "uncordon": 1,
                    "PATCH gpupool-team-a": 1, "PATCH gpupool-team-b": 1})


@pytest.mark.parametrize("n", range(1, CHANGING_STEPS + 1))
def test_killed_after_any_action_converges_without_repeats(kube, tmp_path, n):
    kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock)
    kube.server.clear_requests()
    ctl = controller(kube, tmp_path, clock, identity="gpupool-0")
    kill_after(ctl, n)
    died = False
    for _ in range(8):
        r = ctl.cycle()
        if r.error and "Killed" in r.error:
            died = True
            break
        clock.advance(120)
        mig_manager_step(kube, "a100-2")
    assert died
    # a new replica (new identity) takes over once the dead one's Lease expires
    clock.advance(16)
    fresh = controller(kube, tmp_path, clock, identity="gpupool-1")
    converge(fresh, kube, nodes=("a100-2",), clock=clock)
    assert effect_counts(kube.server) == EXPECTED
    assert pods(kube, "team-b") == ["bert-old", "ranker-0", "ranker-1"]
    assert not kube.core.read_node("a100-2").spec.unschedulable
    # the hourly budget still counts the one preemption, even when the kill came right after it
    status = kube.custom.get_namespaced_custom_object("gpupool.io", "v1alpha1", kube.namespace, "reconcilerstatuses", "gpupool")
    assert len(status["status"]["recentPreemptions"]) == 1


WRITES = [
    ("PATCH", r"/api/v1/nodes/a100-2"),
    ("PATCH", r"/api/v1/namespaces/team-b/pods/bert-new"),
    ("POST", r"/api/v1/namespaces/team-b/pods/bert-new/eviction"),
    ("POST", r"/api/v1/namespaces/[^/]+/configmaps"),
    ("PATCH", r"/api/v1/namespaces/team-b/resourcequotas/.*"),
]


@pytest.mark.parametrize(("method", "path"), WRITES, ids=[w[1].rsplit("/", 1)[-1] for w in WRITES])
@pytest.mark.parametrize("fault", ["500", "drop"])
def test_failed_write_is_retried_next_cycle(kube, tmp_path, method, path, fault):
    server = kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock)
    server.clear_requests()
    f = server.fail_next(method, path, status=500, drop=fault == "drop")
    ctl = controller(kube, tmp_path, clock)
    converge(ctl, kube, nodes=("a100-2",), clock=clock)
    assert f.hits == 1
    assert effect_counts(server) == EXPECTED
    assert evictions(server) == ["/api/v1/namespaces/team-b/pods/bert-new/eviction"]


def test_apiserver_restart_mid_cycle(kube, tmp_path):
    """The server goes away while the controller evicts (state kept); the next cycles converge."""
    server = kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    ctl.cycle()
    clock.advance(400)
    restarted = threading.Event()

    def restart(srv, req):
        threading.Thread(target=lambda: (srv.restart(downtime=0.5), restarted.set()), daemon=True).start()

    server.before("POST", r".*/pods/bert-new/eviction", restart)
    results = [ctl.cycle()]
    assert restarted.wait(10)
    results += converge(ctl, kube, nodes=("a100-2",), clock=clock)
    assert results[-1].converged
    assert evictions(server).count("/api/v1/namespaces/team-b/pods/bert-new/eviction") == 1
    assert pods(kube, "team-b") == ["bert-old", "ranker-0", "ranker-1"]


def test_conflict_on_update_is_retried_next_cycle(kube, tmp_path):
    server = kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock)
    server.fail_next("PATCH", r"/api/v1/nodes/a100-2", status=409, reason="Conflict",
                     message='Operation cannot be fulfilled on nodes "a100-2": the object has been modified')
    ctl = controller(kube, tmp_path, clock)
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}
    assert out["cordon:a100-2"].status == "waiting" and "409" in out["cordon:a100-2"].message
    assert out["mig-reconfigure:a100-2"].status == "skipped"
    conds = conditions(kube)
    assert conds["Stalled"]["status"] == "False" and conds["Reconciling"]["status"] == "True"
    converge(ctl, kube, nodes=("a100-2",), clock=clock)
    assert not kube.core.read_node("a100-2").spec.unschedulable




def scaling_setup(kube, tmp_path, clock):
    from tests.plan.scenarios import SCALING, desired_text

    from .harness import add_gpu_node, publish_state  # noqa: F401
    from .scenario import seed_priority_classes

    text = desired_text(extra=SCALING)
    base(kube, tmp_path, clock, text=text, workloads=False)
    seed_priority_classes(kube, text)
    from .harness import gpu_state

    gpus = [gpu_state(i) for i in range(8)]
    gpus[0]["sharedSlices"] = 4
    publish_state(kube, "a100-1", gpus)
    hour_ago = clock.now.replace(microsecond=0) - __import__("datetime").timedelta(hours=1)
    create_inference_deployment(kube, "team-b", "chat", replicas=2, queue=60, last_scale=hour_ago)
    create_inference_deployment(kube, "team-b", "summarize", replicas=2, queue=0, last_scale=hour_ago)


def test_scale_up_and_down_with_a_conflicting_writer(kube, tmp_path):
    """Replicas and the last-scale annotation change in one patch guarded by the
    resourceVersion read: a writer in between gets the patch a 409; the next cycle replans."""
    server = kube.require_fake()
    clock = Clock()
    scaling_setup(kube, tmp_path, clock)

    def other_writer(srv, req):  # someone (an HPA, a person) touches chat between our read and patch
        kube.apps.patch_namespaced_deployment("chat", "team-b", {"metadata": {"labels": {"touched": "yes"}}})

    server.before("PATCH", r"/apis/apps/v1/namespaces/team-b/deployments/chat", other_writer)
    ctl = controller(kube, tmp_path, clock)
    r = ctl.cycle()
    out = {o.action: o for o in r.applied.outcomes}
    assert out["scale:team-b/chat"].status == "waiting" and "409" in out["scale:team-b/chat"].message
    assert out["scale:team-b/summarize"].status == "done"
    converge(ctl, kube, clock=clock, step=0)
    chat = kube.apps.read_namespaced_deployment("chat", "team-b")
    assert chat.spec.replicas == 4 and chat.metadata.labels["touched"] == "yes"
    assert chat.metadata.annotations["gpupool.io/last-scale"] == clock.now.isoformat()
    assert kube.apps.read_namespaced_deployment("summarize", "team-b").spec.replicas == 1
    server.clear_requests()
    assert ctl.cycle().converged  # within the cooldown: no flapping
    assert writes(server, exclude=BOOKKEEPING) == []


def test_two_controllers_one_leader(kube, tmp_path):
    server = kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock)
    a = controller(kube, tmp_path, clock, identity="gpupool-a")
    b = controller(kube, tmp_path, clock, identity="gpupool-b")
    ra = a.cycle()
    server.clear_requests()
    rb = b.cycle()
    assert ra.leader and not rb.leader and rb.applied is None
    assert writes(server) == []  # a follower writes nothing, not even status
    for _ in range(3):
        clock.advance(5)
        server.clear_requests()
        assert not b.cycle().leader
        assert writes(server) == []
        assert a.cycle().leader
    # the leader stops renewing (killed): after the lease duration the other one takes over
    clock.advance(16)
    rb = b.cycle()
    assert rb.leader
    assert not a.cycle().leader
    lease = kube.coordination.read_namespaced_lease("gpupool-controller", kube.namespace)
    assert lease.spec.holder_identity == "gpupool-b" and lease.spec.lease_transitions == 1
    # handing over on shutdown: release, and the standby leads at once
    b.elector.release()
    assert a.cycle().leader


def test_lease_race_exactly_one_wins(kube, tmp_path):
    """Two controllers read the expired Lease, both try to take it: the resourceVersion lets one."""
    server = kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock, workloads=False)
    a = controller(kube, tmp_path, clock, identity="gpupool-a")
    b = controller(kube, tmp_path, clock, identity="gpupool-b")
    c = controller(kube, tmp_path, clock, identity="gpupool-c")
    assert c.elector.try_acquire_or_renew()
    clock.advance(30)  # c died
    won = {}

    def b_takes_it_first(srv, req):  # between a's GET and a's PUT, b takes the lease
        won["b"] = b.elector.try_acquire_or_renew()

    server.before("PUT", r".*/leases/gpupool-controller", b_takes_it_first)
    won["a"] = a.elector.try_acquire_or_renew()
    assert won == {"b": True, "a": False}
    assert sorted(r.status for r in server.requests("PUT")[-2:]) == [200, 409]


def test_pdb_blocked_eviction_is_retried_not_forced(kube, tmp_path):
    server = kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock)
    create_pdb(kube, "team-b", "bert-new", {"app": "bert-new"}, min_available=1)
    ctl = controller(kube, tmp_path, clock)
    ctl.cycle()
    clock.advance(400)
    for _ in range(3):
        r = ctl.cycle()
        out = {o.action: o for o in r.applied.outcomes}
        assert out["preempt:team-b/bert-new"].status == "blocked"
        assert "PodDisruptionBudget" in out["preempt:team-b/bert-new"].message
        assert out["mig-reconfigure:a100-2"].status == "skipped"
        conds = conditions(kube)
        assert conds["Reconciling"]["status"] == "True" and "PodDisruptionBudget" in conds["Reconciling"]["message"]
        assert conds["Stalled"]["status"] == "False"
        clock.advance(60)
    assert "bert-new" in pods(kube, "team-b")
    attempts = [r for r in server.requests("POST") if r.path.endswith("/bert-new/eviction")]
    assert [r.status for r in attempts] == [429, 429, 429]
    assert not [r for r in server.requests("DELETE") if "/pods/" in r.path]  # never deleted behind the PDB's back
    kube.policy.patch_namespaced_pod_disruption_budget("bert-new", "team-b", {"spec": {"minAvailable": 0}})
    converge(ctl, kube, nodes=("a100-2",), clock=clock)
    assert pods(kube, "team-b") == ["bert-old", "ranker-0", "ranker-1"]
    assert [r.status for r in server.requests("POST") if r.path.endswith("/bert-new/eviction")] == [429, 429, 429, 201]


def test_api_unreachable_cycle_reports_error_and_recovers(kube, tmp_path):
    server = kube.require_fake()
    clock = Clock()
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    with server.down():
        r = ctl.cycle()
    assert r.error and not ctl.ready()
    converge(ctl, kube, nodes=("a100-2",), clock=clock)
    assert ctl.ready()
