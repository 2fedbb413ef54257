"""Faults on the real control plane: a controller killed after any write, API errors and lost
replies (the FaultProxy between the controller and the API server), an API server restart
mid-cycle, natural 409s from a concurrent writer, a PodDisruptionBudget that blocks an eviction
through the real Eviction API, two controllers and one Lease, the API server down.

What the controller wrote is read from the API server's audit log (its ServiceAccount's
requests and their response codes), so "exactly once" means once at the server, whatever the
client saw. Evictions are counted where the server carried them out (code < 300).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from datetime import datetime, timedelta

import pytest

from tests.faultproxy.proxy import FaultProxy
from tests.plan.scenarios import SCALING

from .harness import (
    CONTROLLER_SA,
    NS,
    audit_mark,
    conditions,
    controller,
    converge,
    create_inference_deployment,
    create_pdb,
    evictions,
    write_policy,
    writes,
)
from .scenario import TEXT, base, seed_priority_classes

BOOKKEEPING = ("leases", "reconcilerstatuses")  # the Lease renewal and the status report
BERT = "team-b/bert-new"
EVICTION = r"/api/v1/namespaces/team-b/pods/bert-new/eviction$"

# What the scenario's convergence writes at the API server, each exactly once (the Lease, the
# status object and Events aside): h100-2 is patched four times (cordon; the mark saying when
# its mig-parted config was written; mig-manager's label; uncordon).
EXPECTED = Counter(
    {
        "patch nodes h100-2": 4,
        "patch pods team-b/bert-new": 1,  # the checkpoint request
        "create pods/eviction team-b/bert-new": 1,
        "patch configmaps gpu-operator/gpupool-mig-parted-config": 1,
        "patch resourcequotas team-a/gpupool-team-a": 1,  # server-side apply (creates: 201)
        "patch resourcequotas team-b/gpupool-team-b": 1,
    }
)


def effects(kube, since: int) -> Counter:
    """What the controller changed at the server: its successful writes by verb and object."""
    c: Counter = Counter()
    for e in writes(kube, since=since, exclude=(*BOOKKEEPING, "events")):
        if e.code is None or e.code >= 300:
            continue
        res = e.resource + (f"/{e.subresource}" if e.subresource else "")
        c[f"{e.verb} {res} {e.namespace + '/' if e.namespace else ''}{e.name}"] += 1
    return c


@pytest.fixture
def proxy(kube):
    """A FaultProxy in front of the session's API server (token passthrough)."""
    pki = kube.plane.cert_dir
    with FaultProxy(kube.plane.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key") as p:
        yield p


def pods(kube, ns: str) -> list[str]:
    return sorted(p.metadata.name for p in kube.core.list_namespaced_pod(ns).items)


def status(kube) -> dict:
    return kube.custom.get_namespaced_custom_object(
        "gpupool.io", "v1alpha1", NS, "reconcilerstatuses", "gpupool"
    )["status"]


def outcomes(result) -> dict:
    return {o.action: o for o in (result.applied.outcomes if result.applied else [])}


def through(proxy, kube, tmp_path, clock, **kw):
    """The controller as its ServiceAccount, talking to the API server through `proxy`."""
    token = kube.plane.service_account_token(NS, CONTROLLER_SA, create=False)
    api = proxy.api_client(token)
    kube.cleanup(api.close)
    return controller(kube, tmp_path, clock, api_client=api, **kw)


def assert_converged_once(kube, mark: int, counted: tuple[int, ...] = (1,)) -> None:
    assert effects(kube, mark) == EXPECTED
    assert evictions(kube, since=mark) == [BERT]
    # and nothing was sent for it after the one that was carried out (a second Eviction of a
    # terminating pod is answered without effect, so only the request log shows it)
    sent = [
        e.code
        for e in writes(kube, since=mark)
        if e.subresource == "eviction" and e.code is not None
    ]
    assert sent[sent.index(next(c for c in sent if c < 300)) + 1 :] == [], sent
    assert pods(kube, "team-b") == ["bert-old", "ranker-0", "ranker-1"]
    assert not kube.core.read_node("h100-2").spec.unschedulable
    assert [o for _, o in kube.nodes["h100-2"].mig_manager.runs] == ["success"]
    # the hourly preemption budget counts the one preemption, once
    assert len(status(kube).get("recentPreemptions", [])) in counted


# ------------------------------------------------------------------ killed between any two writes


class Killed(Exception):
    """The controller process dies here (SIGKILL): nothing after this runs."""


WRITES = (
    "patch_node",
    "annotate_pod",
    "evict_pod",
    "scale_workload",
    "write_config_map",
    "server_side_apply",
    "delete_priority_class",
)


def die_after_first_write(ctl) -> list[str]:
    """Make `ctl` die right after its first write to the cluster has been carried out (the
    reply read), before it records an outcome, reports status or writes an Event."""
    ops, done = ctl.executor.ops, []
    for name in WRITES:
        real = getattr(ops, name)

        def write(*a, _real=real, _name=name, **kw):
            _real(*a, **kw)
            done.append(f"{_name}{a}")
            raise Killed(done[-1])

        setattr(ops, name, write)
    return done


def test_killed_after_every_write_converges_without_repeats(kube, tmp_path):
    """A chain of controllers, each killed right after its first write: every write of the
    scenario is followed by a kill, and the next replica (a new identity, once the dead one's
    Lease has expired) must pick up from the cluster alone, repeating nothing."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    mark = audit_mark(kube)
    killed: list[str] = []
    ctl, n = None, 0
    for _ in range(40):
        if ctl is None:
            n += 1
            ctl = controller(kube, tmp_path, clock, identity=f"gpupool-{n}")
            done = die_after_first_write(ctl)
        r = ctl.cycle()
        if done:
            assert r.error and "Killed" in r.error, r.error
            killed += done
            ctl = None
            clock.advance(16)  # the dead replica's Lease (15 s) runs out
            continue
        assert r.error is None, r.error
        if r.converged:
            break
        kube.settle()
        kube.step_nodes()
        kube.settle()
        clock.advance(60)
    else:
        raise AssertionError(f"no convergence; killed after {killed}")
    # every changing step was interrupted once: the writes, in order
    assert [k.split("(")[0] for k in killed] == [
        "patch_node",  # cordon
        "annotate_pod",  # checkpoint request
        "server_side_apply",
        "server_side_apply",  # the two team quotas
        "evict_pod",
        "write_config_map",  # mig-parted config
        "patch_node",  # the config-written mark (the label waits for the mounted copy)
        "patch_node",  # mig-manager's label
        "patch_node",  # uncordon
    ], killed
    assert_converged_once(kube, mark)


# ------------------------------------------------------------------ API errors and lost replies

# Each of the scenario's writes, as the proxy sees it.
WRITE_PATHS = [
    ("PATCH", r"/api/v1/nodes/h100-2$"),
    ("PATCH", r"/api/v1/namespaces/team-b/pods/bert-new$"),
    ("PATCH", r"/api/v1/namespaces/team-b/resourcequotas/gpupool-team-b$"),
    ("POST", EVICTION),
    ("PATCH", r"/api/v1/namespaces/gpu-operator/configmaps/gpupool-mig-parted-config$"),
]
STATUS = ("PATCH", r"/reconcilerstatuses/gpupool/status$")


def test_each_write_fails_twice_then_is_done_once(kube, tmp_path, proxy):
    """Every write of the scenario fails twice before it goes through: first with a 500 (not
    carried out), then with a lost reply (carried out, the connection closed before the
    answer). The cycle that meets one says so and goes on with what does not depend on it;
    later cycles converge, and each effect happened once at the server."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    rules = []
    for method, path in WRITE_PATHS:  # the first matching rule answers: the 500 first
        rules += [
            proxy.fail(500, method, path, times=1),
            proxy.drop_response(method, path, times=1),
        ]
    ctl = through(proxy, kube, tmp_path, clock)
    mark = audit_mark(kube)
    first = ctl.cycle()
    # the first write (the cordon) failed: its dependants wait, the independent quotas go on
    assert first.error is None, first.error
    out = outcomes(first)
    assert out["cordon:h100-2"].status == "waiting" and "500" in out["cordon:h100-2"].message
    assert out["mig-reconfigure:h100-2"].status == "skipped"
    assert out["quota:team-a/gpupool-team-a"].status == "done"
    assert out["quota:team-b/gpupool-team-b"].status == "waiting"
    second = ctl.cycle()  # the cordon is carried out, its reply lost: not known to be done
    assert outcomes(second)["cordon:h100-2"].status == "waiting"
    assert kube.core.read_node("h100-2").spec.unschedulable
    rules += [
        proxy.fail(500, *STATUS, times=1),
        proxy.drop_response(*STATUS, times=1),
    ]  # the status too
    results = converge(ctl, kube, clock=clock, step=150)
    assert results[-1].converged
    assert [r.hits for r in rules] == [1] * len(rules)
    assert all(not r.forwarded for r in proxy.requests(fault="fail"))
    assert len([r for r in proxy.requests(fault="drop_response") if r.forwarded]) == len(rules) // 2
    # a lost Eviction reply, a failed write-ahead and a lost status report: counted once
    assert_converged_once(kube, mark)


def lose_eviction_reply(kube, tmp_path, proxy):
    """The scenario up to the preemption, whose Eviction is carried out while its reply is
    lost; then one more cycle at once, while the pod is still terminating. Returns the
    controller and the audit mark."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    kube.kubelets.grace_scale, old = 0.1, kube.kubelets.grace_scale  # terminating for 3 s, not 0.6
    kube.cleanup(lambda: setattr(kube.kubelets, "grace_scale", old))
    ctl = through(proxy, kube, tmp_path, clock)
    mark = audit_mark(kube)
    ctl.cycle()
    clock.advance(400)  # past the checkpoint grace period
    lost = proxy.drop_response("POST", EVICTION, times=1)
    r = ctl.cycle()
    assert lost.hits == 1 and r.error is None
    assert outcomes(r)[f"preempt:{BERT}"].status == "waiting"  # no answer: not known to be done
    assert kube.core.read_namespaced_pod(
        "bert-new", "team-b"
    ).metadata.deletion_timestamp  # but it was
    r = ctl.cycle()
    assert r.error is None
    assert kube.core.read_namespaced_pod(
        "bert-new", "team-b"
    ).metadata.deletion_timestamp  # still going
    return ctl, mark


def test_eviction_reply_lost_is_not_repeated(kube, tmp_path, proxy):
    """Written, but the reply was lost: neither the cycle that follows at once (the pod still
    terminating) nor one after the pod is gone evicts it again. (Convergence after a lost
    Eviction reply: test_each_write_fails_twice_then_is_done_once.)"""
    ctl, mark = lose_eviction_reply(kube, tmp_path, proxy)
    assert evictions(kube, since=mark) == [BERT]
    kube.settle()
    r = ctl.cycle()
    assert r.error is None and f"preempt:{BERT}" not in outcomes(r)
    assert evictions(kube, since=mark) == [BERT]
    assert len(status(kube).get("recentPreemptions", [])) == 1  # never twice


def test_eviction_reply_lost_is_still_counted(kube, tmp_path, proxy):
    """...and the preemption that did happen stays in the hourly budget, once."""
    lose_eviction_reply(kube, tmp_path, proxy)
    assert len(status(kube).get("recentPreemptions", [])) == 1


# ------------------------------------------------------------------ the API server restarts


def test_apiserver_restart_mid_cycle(kube, tmp_path):
    """The API server goes down just as the Eviction is sent (etcd keeps the state) and comes
    back while the cycle goes on against it: the cycle reports the error, the next ones
    converge, and the pod is evicted once."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    mark = audit_mark(kube)
    ctl.cycle()
    clock.advance(400)
    real, back = ctl.executor.ops.evict_pod, threading.Event()

    def evict(ns, name):
        ctl.executor.ops.evict_pod = real
        kube.plane.stop_apiserver()
        threading.Thread(
            target=lambda: (kube.plane.start_apiserver(), back.set()), daemon=True
        ).start()
        return real(ns, name)

    ctl.executor.ops.evict_pod = evict
    r = ctl.cycle()
    assert back.wait(60)
    # the Eviction met a closed port; so did the status report at the end: the cycle says so
    assert r.error and "Connection refused" in r.error, r.error
    assert evictions(kube, since=mark) == []
    clock.advance(60)
    converge(ctl, kube, clock=clock)
    assert_converged_once(kube, mark)


def test_preemption_written_ahead_of_a_failed_eviction_is_counted_once(kube, tmp_path, proxy):
    """The restart's effect on the budget without the restart: the Eviction gets a 500 (not
    carried out) and the end-of-cycle status report is lost; a minute later the retry evicts."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = through(proxy, kube, tmp_path, clock)
    ctl.cycle()
    clock.advance(400)
    proxy.fail(500, "POST", EVICTION, times=1)
    report = proxy.drop_request(*STATUS, times=1, when=lambda req: b"conditions" in req.body)
    r = ctl.cycle()
    assert r.error and report.hits == 1
    clock.advance(60)
    r = ctl.cycle()
    assert outcomes(r)[f"preempt:{BERT}"].message == "evicted"
    assert len(status(kube)["recentPreemptions"]) == 1


@pytest.mark.parametrize(
    ("sent", "status_object"),
    [(True, True), (True, False), (False, True), (False, False)],
    ids=[
        "after-eviction",
        "after-eviction-no-status-yet",
        "after-write-ahead",
        "after-write-ahead-no-status-yet",
    ],
)
def test_killed_at_the_eviction_counts_it_once(kube, tmp_path, sent, status_object):
    """The controller dies right after the Eviction is carried out, or right after the
    write-ahead but before the Eviction is sent; with or without a status object existing yet
    (the write-ahead must create it, not be swallowed). The next replica settles the intent by
    reading the pod: the preemption is in the budget exactly once, and sent once."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock, identity="gpupool-1")
    mark = audit_mark(kube)
    ctl.cycle()
    clock.advance(400)
    if not status_object:
        kube.custom.delete_namespaced_custom_object(
            "gpupool.io", "v1alpha1", NS, "reconcilerstatuses", "gpupool"
        )
    real = ctl.executor.ops.evict_pod

    def evict(ns, name):
        if sent:
            real(ns, name)
        raise Killed(f"{ns}/{name}")

    ctl.executor.ops.evict_pod = evict
    ctl._report_error = lambda error: None  # a killed process reports nothing
    r = ctl.cycle()
    assert r.error and "Killed" in r.error, r.error
    intents = status(kube)["preemptionIntents"]
    assert [i["pod"] for i in intents] == [BERT] and not status(kube).get("recentPreemptions")
    clock.advance(16)  # the dead replica's Lease runs out
    nxt = controller(kube, tmp_path, clock, identity="gpupool-2")
    converge(nxt, kube, clock=clock)
    assert_converged_once(kube, mark)
    assert status(kube)["preemptionIntents"] == []


# ------------------------------------------------------------------ natural 409s


def scaling_setup(kube, tmp_path, clock) -> str:
    """The scenario's nodes, no training work, two inference Deployments: `chat` with a long
    queue (scale up 2 -> 4), `summarize` with none (scale down 2 -> 1)."""
    text = TEXT + SCALING.replace("pool: a100", "pool: h100")
    base(kube, tmp_path, clock, text=text, workloads=False)
    seed_priority_classes(kube, text)
    hour_ago = clock.now - timedelta(hours=1)
    create_inference_deployment(kube, "team-b", "chat", replicas=2, queue=60, last_scale=hour_ago)
    create_inference_deployment(
        kube, "team-b", "summarize", replicas=2, queue=0, last_scale=hour_ago
    )
    kube.settle()
    return text


def test_scale_with_a_concurrent_writer_gets_a_real_409(kube, tmp_path, proxy):
    """Between the controller's read of `chat` and its patch (guarded by the resourceVersion it
    read), someone else (an HPA, a person) sets its replicas to 3. The API server refuses the
    patch with 409; nothing is overwritten, and the next cycle plans from 3."""
    clock = kube.clock
    scaling_setup(kube, tmp_path, clock)

    def other_writer(req) -> bool:  # runs as the patch reaches the proxy, before it is forwarded
        kube.apps.patch_namespaced_deployment(
            "chat", "team-b", {"metadata": {"labels": {"touched": "yes"}}, "spec": {"replicas": 3}}
        )
        return False  # no fault: the real server answers the patch

    race = proxy.delay(
        0, "PATCH", r"/namespaces/team-b/deployments/chat$", times=1, when=other_writer
    )
    ctl = through(proxy, kube, tmp_path, clock)
    mark = audit_mark(kube)
    r = ctl.cycle()
    assert race.hits == 0  # the predicate said no: the request went through untouched
    out = outcomes(r)
    assert (
        out["scale:team-b/chat"].status == "waiting" and "409" in out["scale:team-b/chat"].message
    )
    assert out["scale:team-b/summarize"].status == "done"
    chat_patches = [
        e.code for e in writes(kube, since=mark) if e.resource == "deployments" and e.name == "chat"
    ]
    assert chat_patches == [409]  # refused by the server itself
    conds = conditions(kube)  # a conflict is progress to retry, not a stall
    assert conds["Stalled"]["status"] == "False" and conds["Reconciling"]["status"] == "True"
    # the replicas need shared slices: a node is shared whole, which waits out the device
    # plugin's mounted-config delay, so the clock moves on between cycles
    start = clock.now
    converge(ctl, kube, clock=clock, step=30)
    chat = kube.apps.read_namespaced_deployment("chat", "team-b")
    assert chat.spec.replicas == 5 and chat.metadata.labels["touched"] == "yes"  # 3 + step 2
    scaled = datetime.fromisoformat(chat.metadata.annotations["gpupool.io/last-scale"])
    assert start <= scaled <= clock.now
    assert kube.apps.read_namespaced_deployment("summarize", "team-b").spec.replicas == 1
    mark = audit_mark(kube)
    assert ctl.cycle().converged  # within the cooldown: no flapping
    assert writes(kube, since=mark, exclude=BOOKKEEPING) == []


def test_replicas_changed_between_plan_and_apply_is_replanned(kube, tmp_path):
    """Someone scales `chat` after the plan was made and before its step runs: the step sees
    replicas it did not plan from and leaves them alone; the next cycle plans again."""
    clock = kube.clock
    scaling_setup(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    real = ctl.executor.ops.read_workload

    def read(kind, ns, name):
        if name == "chat":
            kube.apps.patch_namespaced_deployment(
                "chat", "team-b", {"spec": {"replicas": 7}}
            )  # 60/7 in band
            ctl.executor.ops.read_workload = real
        return real(kind, ns, name)

    ctl.executor.ops.read_workload = read
    mark = audit_mark(kube)
    out = outcomes(ctl.cycle())
    assert out["scale:team-b/chat"].status == "skipped" and "7" in out["scale:team-b/chat"].message
    assert out["scale:team-b/summarize"].status == "done"
    r = ctl.cycle()  # plans from 7: 60 queued / 7 replicas is within the band
    assert r.error is None and "scale:team-b/chat" not in outcomes(r)
    assert not [
        e for e in writes(kube, since=mark) if e.resource == "deployments" and e.name == "chat"
    ]
    assert (
        kube.apps.read_namespaced_deployment("chat", "team-b").spec.replicas == 7
    )  # not the stale plan's 4


# ------------------------------------------------------------------ PodDisruptionBudget


def test_pdb_blocked_eviction_is_retried_not_forced(kube, tmp_path):
    """The real Eviction API refuses (429) while the PDB allows no disruption: the step is
    blocked, retried every cycle, never forced; once the budget allows it, one eviction."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    create_pdb(kube, "team-b", "bert-new", {"app": "bert-new"}, min_available=1)
    ctl = controller(kube, tmp_path, clock)
    mark = audit_mark(kube)
    ctl.cycle()
    clock.advance(400)
    for _ in range(3):
        r = ctl.cycle()
        out = outcomes(r)
        assert out[f"preempt:{BERT}"].status == "blocked"
        assert "PodDisruptionBudget" in out[f"preempt:{BERT}"].message
        assert out["mig-reconfigure:h100-2"].status == "skipped"
        conds = conditions(kube)
        assert (
            conds["Reconciling"]["status"] == "True"
            and "PodDisruptionBudget" in conds["Reconciling"]["message"]
        )
        assert conds["Stalled"]["status"] == "False"
        clock.advance(60)
    assert "bert-new" in pods(kube, "team-b")
    attempts = lambda: [e.code for e in writes(kube, since=mark) if e.subresource == "eviction"]  # noqa: E731
    assert attempts() == [429, 429, 429]  # the real Eviction API said no, each time
    assert not [
        e for e in writes(kube, since=mark) if e.verb == "delete"
    ]  # never deleted behind its back
    assert status(kube).get("recentPreemptions", []) == []  # blocked: not counted
    kube.policy.patch_namespaced_pod_disruption_budget(
        "bert-new", "team-b", {"spec": {"minAvailable": 0}}
    )
    converge(ctl, kube, clock=clock)
    assert pods(kube, "team-b") == ["bert-old", "ranker-0", "ranker-1"]
    codes = attempts()
    assert codes[:3] == [429, 429, 429] and codes[-1] == 201 and codes.count(201) == 1
    assert set(codes[3:-1]) <= {429}  # until the disruption controller recomputed the budget
    assert len(status(kube)["recentPreemptions"]) == 1


# ------------------------------------------------------------------ two controllers, one Lease


def test_two_controllers_one_leader(kube, tmp_path):
    clock = kube.clock
    write_policy(tmp_path, TEXT)  # nothing to observe but the policy: leadership is the point
    a = controller(kube, tmp_path, clock, identity="gpupool-a")
    b = controller(kube, tmp_path, clock, identity="gpupool-b")
    ra = a.cycle()
    mark = audit_mark(kube)
    rb = b.cycle()
    assert ra.leader and not rb.leader and rb.applied is None
    assert writes(kube, since=mark) == []  # a follower writes nothing, not even status
    for _ in range(3):
        clock.advance(5)
        mark = audit_mark(kube)
        assert not b.cycle().leader
        assert writes(kube, since=mark) == []
        assert a.cycle().leader
    # the leader stops renewing (killed): after the lease duration the other one takes over
    clock.advance(16)
    assert b.cycle().leader
    assert not a.cycle().leader
    lease = kube.coordination.read_namespaced_lease("gpupool-controller", NS)
    assert lease.spec.holder_identity == "gpupool-b" and lease.spec.lease_transitions == 1
    # handing over on shutdown: release, and the standby leads at once
    b.elector.release()
    assert a.cycle().leader
    assert (
        kube.coordination.read_namespaced_lease("gpupool-controller", NS).spec.holder_identity
        == "gpupool-a"
    )


def test_lease_race_exactly_one_wins(kube, tmp_path, proxy):
    """a and b both find the Lease expired; b takes it between a's read and a's update. a's
    update carries the resourceVersion it read, and the real server refuses it (409)."""
    clock = kube.clock
    write_policy(tmp_path, TEXT)
    a = through(proxy, kube, tmp_path, clock, identity="gpupool-a")
    b = controller(kube, tmp_path, clock, identity="gpupool-b")  # straight to the server
    c = controller(kube, tmp_path, clock, identity="gpupool-c")
    assert c.elector.try_acquire_or_renew()
    clock.advance(30)  # c died
    won = {}

    def b_first(req) -> bool:  # a's PUT has reached the proxy: b acquires before it goes on
        won["b"] = b.elector.try_acquire_or_renew()
        return False

    proxy.delay(0, "PUT", r"/leases/gpupool-controller$", times=1, when=b_first)
    mark = audit_mark(kube)
    won["a"] = a.elector.try_acquire_or_renew()
    assert won == {"b": True, "a": False}
    updates = [e.code for e in writes(kube, since=mark) if e.resource == "leases"]
    assert updates == [200, 409]
    assert (
        kube.coordination.read_namespaced_lease("gpupool-controller", NS).spec.holder_identity
        == "gpupool-b"
    )


# ------------------------------------------------------------------ the API server is down


def test_api_down_cycle_reports_error_and_recovers(kube, tmp_path):
    """The API server stops (connection refused): each cycle returns its error (the loop never
    dies), leadership is not claimed, readiness goes once no cycle succeeded for 5 minutes;
    when the server is back the controller converges and is ready again."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    assert ctl.cycle().error is None and ctl.ready()
    kube.plane.stop_apiserver()
    try:
        down = []
        for _ in range(2):
            clock.advance(200)
            down.append(ctl.cycle())
    finally:
        kube.plane.start_apiserver()
    for r in down:
        assert r.error and not r.leader and r.applied is None
        assert "Connection refused" in r.error, r.error
    assert not ctl.ready()  # 400 s without a successful cycle
    converge(ctl, kube, clock=clock)
    assert ctl.ready()


def test_api_down_is_logged_without_a_traceback(kube, tmp_path, proxy, caplog):
    """The API server unreachable (every connection closed unanswered): one line, no trace."""
    write_policy(tmp_path, TEXT)
    ctl = through(proxy, kube, tmp_path, kube.clock)
    with proxy.drop_request(), caplog.at_level(logging.INFO, logger="gpupool"):
        r = ctl.cycle()
    assert r.error
    ours = [rec for rec in caplog.records if rec.name.startswith("gpupool")]
    assert ours and any(rec.levelno >= logging.WARNING for rec in ours)
    assert not [rec for rec in ours if rec.exc_info], [
        rec.getMessage() for rec in ours if rec.exc_info
    ]
