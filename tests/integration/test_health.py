"""Honest health on the real API server (issue 16): no API call or watch waits forever, a watch
that hangs is broken and relisted, every failed cycle is on the status object, and readiness
follows the last successful observation of the cluster. The hangs and errors are the
FaultProxy's; everything else is the server's own."""

from __future__ import annotations

import threading
import time

import pytest
import urllib3

from reconciler.loop.informer import Informer
from reconciler.observe.kube import bound_requests
from tests.faultproxy.proxy import FaultProxy

from .harness import CONTROLLER_SA, NS, controller, write_policy
from .scenario import TEXT, base

PODS = r"^/api/v1/pods$"


@pytest.fixture
def proxy(kube):
    pki = kube.plane.cert_dir
    with FaultProxy(kube.plane.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key") as p:
        yield p


def through(proxy, kube, retries=0):
    api = proxy.api_client(
        kube.plane.service_account_token(NS, CONTROLLER_SA, create=False), retries=retries
    )
    kube.cleanup(api.close)
    return api


def status(kube) -> dict:
    return kube.custom.get_namespaced_custom_object(
        "gpupool.io", "v1alpha1", NS, "reconcilerstatuses", "gpupool"
    )["status"]


def test_a_call_that_gets_no_answer_times_out(kube, proxy):
    """The official client waits forever by default; `bound_requests` gives every call that
    names no timeout a (connect, read) bound, and a call's own timeout still wins."""
    from kubernetes import client

    api = bound_requests(through(proxy, kube), timeout=(2.0, 1.0))
    core = client.CoreV1Api(api)
    with proxy.delay(30, "GET", r"^/api/v1/nodes$"):
        started = time.monotonic()
        with pytest.raises(urllib3.exceptions.HTTPError):
            core.list_node()
        assert time.monotonic() - started < 10
        with proxy.delay(2, "GET", r"^/api/v1/namespaces$", times=1):
            assert core.list_namespace(_request_timeout=(2.0, 10.0)).items  # its own bound


def test_a_hung_watch_is_broken_and_relisted(kube, proxy):
    """A watch that stays open and says nothing (a proxy that forwards nothing) would leave the
    cache stale for good: past the server's timeout plus the grace, the read times out and the
    informer relists, and sees what changed meanwhile."""
    from kubernetes import client

    core = client.CoreV1Api(through(proxy, kube))
    stop = threading.Event()
    kube.cleanup(stop.set)
    hang = proxy.hang_watch("GET", PODS, times=1)
    informer = Informer(
        core.list_pod_for_all_namespaces, name="pods", timeout_seconds=1, read_grace_seconds=1
    ).start(stop)
    assert informer.synced.wait(10) and hang.wait(10)
    ns = kube.new_namespace()
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "while-hung"},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
        },
    )
    deadline = time.monotonic() + 15
    while f"{ns}/while-hung" not in {Informer._key(o) for o in informer.items() or []}:
        assert time.monotonic() < deadline, "the hung watch was never broken"
        time.sleep(0.1)
    assert informer.relists >= 2  # the first list, and the one after the hung watch


def test_a_failed_cycle_is_on_the_status_and_readiness_follows_observation(kube, proxy, tmp_path):
    """An API error in the middle of a cycle (not an unreachable server) used to leave
    `Ready=True` with an old time: now the status says Ready=False / Stalled=True with the error
    and when, and keeps the preemption budget; readiness goes once no observation has succeeded
    for its bound, and both come back with the next good cycle."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock, api_client=through(proxy, kube, retries=None))
    assert ctl.cycle().error is None and ctl.ready()
    good = status(kube)
    assert {c["type"]: c["status"] for c in good["conditions"]}["Stalled"] == "False"
    clock.advance(60)
    with proxy.fail(500, "GET", r"^/apis/apps/v1/deployments$"):
        r = ctl.cycle()
        clock.advance(400)
        assert not ctl.ready()  # 400 s since the last good observation
        ctl.cycle()
    assert r.error and "500" in r.error, r.error
    bad = status(kube)
    conds = {c["type"]: c for c in bad["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "ReconcileError"
    assert conds["Stalled"]["status"] == "True" and "500" in conds["Stalled"]["message"]
    assert bad["lastReconcileTime"] > good["lastReconcileTime"]
    assert bad.get("recentPreemptions", []) == good.get("recentPreemptions", [])
    clock.advance(60)
    assert ctl.cycle().error is None and ctl.ready()
    conds = {c["type"]: c["status"] for c in status(kube)["conditions"]}
    assert conds["Stalled"] == "False"


def test_a_desired_state_error_keeps_readiness(kube, tmp_path):
    """Broken policy in git is reported (Stalled, InvalidDesiredState), but the controller can
    still see the cluster: readiness does not fail a rollout for it."""
    clock = kube.clock
    write_policy(tmp_path, TEXT + "\n---\nkind: Nonsense\n")
    ctl = controller(kube, tmp_path, clock)
    r = ctl.cycle()
    assert r.error and ctl.ready()
    conds = {c["type"]: c for c in status(kube)["conditions"]}
    assert conds["Stalled"]["reason"] == "InvalidDesiredState"
