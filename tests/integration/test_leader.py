"""Leadership on the real control plane: the Lease is renewed in the background while a long
apply runs, a leader cut off from renewing stops applying before anyone else can take over,
and `gpupool apply` honours the Lease and `spec.suspend`.

Real time here (short leases), not the test clock: leader election is about wall-clock races.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime

from reconciler.commands.apply import _apply_as_leader
from reconciler.plan.actions import ApplyQuota
from reconciler.plan.model import Plan

from .harness import NS, controller, write_policy

LEASE = 3  # seconds: renew deadline 2 s, a renewal every 0.6 s
SLOW = 0.5  # seconds each quota write takes through the proxy


def _now() -> datetime:
    return datetime.now(UTC)


def _policy(namespaces: list[str]) -> str:
    return f"""\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: h100}}
spec:
  gpuModel: H100-SXM5-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: h100}}}}
  capacity: {{nodes: 1, gpusPerNode: 8}}
  training: {{minGPUs: 0}}
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {{name: many}}
spec:
  namespaces: {json.dumps(namespaces)}
  maxGPUs: 8
  pools: [{{pool: h100, whole: {{guaranteed: 4, borrowingLimit: 4}}}}]
"""


def _setup(kube, tmp_path, fault_proxy, n: int = 8):
    namespaces = [kube.new_namespace("lease") for _ in range(n)]
    write_policy(tmp_path, _policy(namespaces))
    token = kube.plane.service_account_token(NS, "gpupool-controller", create=False)
    a = controller(
        kube,
        tmp_path,
        _now,
        identity="gpupool-a",
        lease_seconds=LEASE,
        api_client=fault_proxy.api_client(token=token),
    )
    b = controller(kube, tmp_path, _now, identity="gpupool-b", lease_seconds=LEASE)
    return namespaces, a, b


def _become_leader(ctl, stop: threading.Event, timeout: float = 10) -> None:
    ctl.elector.start(stop)
    deadline = time.monotonic() + timeout
    while not ctl.elector.is_leader:
        assert time.monotonic() < deadline, "never became leader"
        time.sleep(0.05)


def _watch_leadership(ctl, stop: threading.Event) -> list[float]:
    """Monotonic times at which `ctl` held the lease (sampled every 20 ms)."""
    seen: list[float] = []

    def loop() -> None:
        while not stop.is_set():
            if ctl.elector.is_leader:
                seen.append(time.monotonic())
            time.sleep(0.02)

    threading.Thread(target=loop, daemon=True).start()
    return seen


def test_a_long_apply_keeps_the_lease(kube, tmp_path, fault_proxy):
    """An apply four times longer than the lease: renewal goes on in the background, the other
    replica never becomes leader, every step is applied."""
    namespaces, a, b = _setup(kube, tmp_path, fault_proxy)
    fault_proxy.delay(SLOW, "PATCH", r"/resourcequotas/")
    stop = threading.Event()
    try:
        _become_leader(a, stop)
        b.elector.start(stop)
        b_leader = _watch_leadership(b, stop)
        started = time.monotonic()
        r = a.cycle()
        took = time.monotonic() - started
        assert took > LEASE * 1.3, took
        assert r.leader and r.applied is not None
        assert {o.status for o in r.applied.outcomes} == {"done"}
        assert len(r.applied.outcomes) == len(namespaces)
        assert not b_leader
        assert b.cycle().applied is None  # the follower observes and applies nothing
    finally:
        stop.set()


def test_a_leader_that_cannot_renew_stops_before_anyone_takes_over(kube, tmp_path, fault_proxy):
    """Cut the leader off from its Lease (its renewals fail) in the middle of a long apply: it
    stops applying within the renew deadline, which is before the lease can expire for the other
    replica; the other then takes over and finishes the work."""
    namespaces, a, b = _setup(kube, tmp_path, fault_proxy)
    slow = fault_proxy.delay(SLOW, "PATCH", r"/resourcequotas/")
    stop = threading.Event()
    try:
        _become_leader(a, stop)
        b.elector.start(stop)
        b_leader = _watch_leadership(b, stop)
        done: dict = {}
        t = threading.Thread(target=lambda: done.update(r=a.cycle()))
        t.start()
        time.sleep(SLOW * 2.5)
        fault_proxy.drop_request(path=r"/leases/")  # partition: only the Lease is unreachable
        cut = time.monotonic()
        t.join(timeout=60)
        r = done["r"]
        outcomes = [o.status for o in r.applied.outcomes]
        assert "skipped" in outcomes and outcomes.count("done") < len(namespaces), outcomes
        assert all(s == "skipped" for s in outcomes[outcomes.index("skipped") :])
        writes = [q for q in fault_proxy.requests("PATCH", r"/resourcequotas/") if q.forwarded]
        last_write = max(q.started for q in writes)
        assert last_write < cut + LEASE * 2 / 3 + 0.1  # stopped within the renew deadline
        deadline = time.monotonic() + 20
        while not b_leader:
            assert time.monotonic() < deadline, "the follower never took over"
            time.sleep(0.05)
        assert last_write < b_leader[0]  # never two appliers at once
        slow.remove()
        r2 = b.cycle()
        assert r2.leader and {o.status for o in r2.applied.outcomes} == {"done"}
        assert len(r2.applied.outcomes) == len(namespaces) - outcomes.count("done")
    finally:
        stop.set()


def _quota_plan(ns: str) -> Plan:
    return Plan(
        observed_at=_now().isoformat(),
        actions=(
            ApplyQuota(
                id=f"quota:{ns}/manual",
                target=f"{ns}/manual",
                reason="by hand",
                verb="create",
                hard={"requests.nvidia.com/gpu": "1"},
            ),
        ),
    )


def test_gpupool_apply_refuses_while_the_controller_holds_the_lease(
    kube, tmp_path, fault_proxy, capsys
):
    namespaces, a, _ = _setup(kube, tmp_path, fault_proxy, n=1)
    stop = threading.Event()
    try:
        _become_leader(a, stop)
        rc = _apply_as_leader(kube.controller_client(), _quota_plan(namespaces[0]), NS)
        assert rc == 1 and "gpupool-a holds the lease" in capsys.readouterr().err
    finally:
        stop.set()
    deadline = time.monotonic() + 10  # the controller stepped down on stop (released the lease)
    while a.elector.renewing and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _apply_as_leader(kube.controller_client(), _quota_plan(namespaces[0]), NS) == 0
    assert kube.core.read_namespaced_resource_quota("manual", namespaces[0]).spec.hard == {
        "requests.nvidia.com/gpu": "1"
    }


def test_gpupool_apply_refuses_while_suspended(kube, tmp_path, capsys):
    ns = kube.new_namespace()
    kube.custom.create_namespaced_custom_object(
        "gpupool.io",
        "v1alpha1",
        NS,
        "reconcilerstatuses",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "ReconcilerStatus",
            "metadata": {"name": "gpupool"},
            "spec": {"suspend": True},
        },
    )
    rc = _apply_as_leader(kube.controller_client(), _quota_plan(ns), NS)
    assert rc == 1 and "suspended" in capsys.readouterr().err
    assert kube.core.list_namespaced_resource_quota(ns).items == []


def test_a_standby_that_takes_over_acts_at_once_not_an_interval_later(kube, tmp_path, fault_proxy):
    """A standby's loop runs with a 10-minute interval: its first cycle, as a follower, applies
    nothing. When the leader steps down, the standby is elected and cycles within seconds
    (the election wakes its loop); before, it slept out the interval and the pool went
    unmanaged for up to 10 minutes after every failover."""
    namespaces, a, b = _setup(kube, tmp_path, fault_proxy, n=1)
    stop_a, stop_b = threading.Event(), threading.Event()
    try:
        _become_leader(a, stop_a)
        b.wake_gap_seconds = 0.5
        threading.Thread(target=b.run, args=(stop_b, 600.0), daemon=True).start()
        deadline = time.monotonic() + 30
        while b.last_observed is None:  # its first cycle, as a follower
            assert time.monotonic() < deadline, "the standby's first cycle did not finish"
            time.sleep(0.05)
        time.sleep(1.0)
        assert kube.core.list_namespaced_resource_quota(namespaces[0]).items == []
        stop_a.set()  # the leader steps down (releases the Lease)
        deadline = time.monotonic() + 15
        while not kube.core.list_namespaced_resource_quota(namespaces[0]).items:
            assert time.monotonic() < deadline, "the new leader did not act within 15 s"
            time.sleep(0.1)
        assert b.elector.is_leader
    finally:
        stop_a.set()
        stop_b.set()
