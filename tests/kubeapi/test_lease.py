"""Lease-based leader election semantics: optimistic concurrency decides the race."""

import datetime
import threading
import time

import pytest
from kubernetes import client

from .util import expect_status

pytestmark = pytest.mark.kube


def _now():
    return datetime.datetime.now(datetime.UTC)


def _try_acquire(api: client.CoordinationV1Api, ns: str, name: str, me: str, duration: int = 15) -> bool:
    """One round of a client-go style leader election against the Lease."""
    try:
        lease = api.read_namespaced_lease(name, ns)
    except client.ApiException as e:
        if e.status != 404:
            raise
        try:
            api.create_namespaced_lease(ns, {"metadata": {"name": name}, "spec": {
                "holderIdentity": me, "leaseDurationSeconds": duration,
                "acquireTime": _now(), "renewTime": _now(), "leaseTransitions": 0}})
            return True
        except client.ApiException as e2:
            if e2.status == 409:
                return False
            raise
    spec = lease.spec
    expired = spec.renew_time + datetime.timedelta(seconds=spec.lease_duration_seconds) < _now()
    if spec.holder_identity not in (me, None, "") and not expired:
        return False
    if spec.holder_identity != me:
        spec.lease_transitions = (spec.lease_transitions or 0) + 1
        spec.acquire_time = _now()
    spec.holder_identity = me
    spec.renew_time = _now()
    try:
        api.replace_namespaced_lease(name, ns, lease)
        return True
    except client.ApiException as e:
        if e.status == 409:
            return False
        raise


def test_two_clients_race_one_wins(kube):
    ns = kube.namespace
    kube.coordination.create_namespaced_lease(ns, {"metadata": {"name": "gpupool"}, "spec": {
        "holderIdentity": "old", "leaseDurationSeconds": 1,
        "renewTime": _now() - datetime.timedelta(seconds=60)}})
    # both candidates read the same (expired) lease, then both try to write it
    api_a = client.CoordinationV1Api(kube.api_client)
    lease_a = api_a.read_namespaced_lease("gpupool", ns)
    lease_b = api_a.read_namespaced_lease("gpupool", ns)
    lease_a.spec.holder_identity = "a"
    lease_b.spec.holder_identity = "b"
    api_a.replace_namespaced_lease("gpupool", ns, lease_a)
    expect_status(409, api_a.replace_namespaced_lease, "gpupool", ns, lease_b)
    assert api_a.read_namespaced_lease("gpupool", ns).spec.holder_identity == "a"


def test_concurrent_elections_have_exactly_one_leader(kube):
    server = kube.require_fake()
    ns = kube.namespace
    clients = [server.api_client() for _ in range(4)]
    results: dict[str, bool] = {}
    barrier = threading.Barrier(len(clients))

    def run(i):
        api = client.CoordinationV1Api(clients[i])
        barrier.wait()
        results[f"c{i}"] = _try_acquire(api, ns, "leader", f"c{i}")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [k for k, won in results.items() if won]
    assert len(winners) == 1
    holder = kube.coordination.read_namespaced_lease("leader", ns).spec.holder_identity
    assert holder == winners[0]
    # the leader renews; the others keep failing while the lease is fresh
    assert _try_acquire(client.CoordinationV1Api(kube.api_client), ns, "leader", holder)
    loser = next(k for k in results if k != holder)
    assert not _try_acquire(client.CoordinationV1Api(kube.api_client), ns, "leader", loser)
    for c in clients:
        c.close()


def test_lease_put_creates_when_absent(kube):
    # leases allow create-on-update, like the real registry
    lease = kube.coordination.replace_namespaced_lease(
        "fresh", kube.namespace, {"metadata": {"name": "fresh"}, "spec": {"holderIdentity": "x"}})
    assert lease.spec.holder_identity == "x"


def test_client_leader_election_module_against_the_server(kube):
    """The official client's own LeaseLock/LeaderElection (which uses the default configuration)."""
    kube.require_fake()  # swaps the process-wide default client configuration
    from kubernetes.leaderelection import electionconfig, leaderelection
    from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

    previous = client.Configuration.get_default_copy()
    client.Configuration.set_default(kube.api_client.configuration)
    try:
        ns = kube.namespace
        started = threading.Event()

        def lead():
            started.set()
            raise RuntimeError("stop leading")  # ends run() after the first renewal round

        def elector(identity):
            cfg = electionconfig.Config(LeaseLock("gpupool-leader", ns, identity), lease_duration=2,
                                        renew_deadline=1.5, retry_period=1, onstarted_leading=lead,
                                        onstopped_leading=lambda: None)
            return leaderelection.LeaderElection(cfg)

        a = elector("a")
        a.run()
        assert started.is_set()
        lease = kube.coordination.read_namespaced_lease("gpupool-leader", ns)
        assert lease.spec.holder_identity == "a" and lease.spec.lease_duration_seconds == 2
        b = elector("b")
        assert not b.try_acquire_or_renew()  # a's lease is fresh
        # like client-go, expiry is judged on b's own clock since it last saw the record change
        time.sleep(2.1)
        assert b.try_acquire_or_renew()
        assert kube.coordination.read_namespaced_lease("gpupool-leader", ns).spec.holder_identity == "b"
    finally:
        client.Configuration.set_default(previous)
