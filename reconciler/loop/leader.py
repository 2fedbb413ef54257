"""Leader election with a coordination.k8s.io/v1 Lease: only the leader applies.

Optimistic concurrency does the work: every write carries the resourceVersion that was read,
so of two controllers racing for an expired lease exactly one update succeeds (the other gets
409 Conflict and stays a follower).

The timing follows client-go's leaderelection package (k8s.io/client-go/tools/leaderelection:
LeaseDuration > RenewDeadline > RetryPeriod): the holder renews every `retry` seconds in a
background thread, independent of how long a reconcile cycle or an apply takes, and considers
itself leader only while its last successful renewal is younger than `renew_deadline`. That is
shorter than the lease others wait out, so a leader cut off from the API server stops applying
before anyone else can acquire the lease: two replicas never apply at once.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from reconciler.conventions import MANAGED_BY, MANAGED_BY_LABEL

log = logging.getLogger("gpupool.leader")


def _now() -> datetime:
    return datetime.now(UTC)


def micro_time(t: datetime) -> str:
    """A Lease's acquireTime/renewTime is a MicroTime, which the API server parses with exactly
    six fractional digits (apimachinery's RFC3339Micro): it refuses `2026-12-02T10:00:00+00:00`.
    The official client (v37) turns the body into its models and writes datetimes back with
    `isoformat()`, which drops a zero fraction; so a time on a whole second is sent 1 µs later."""
    t = t.astimezone(UTC)
    if t.microsecond == 0:
        t += timedelta(microseconds=1)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        api_client: Any,
        *,
        name: str,
        namespace: str,
        identity: str,
        lease_seconds: int = 15,
        clock: Callable[[], datetime] = _now,
        renew_deadline: float | None = None,
        retry: float | None = None,
    ):
        from kubernetes import client

        self.k = client
        self.api = client.CoordinationV1Api(api_client)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_seconds = lease_seconds
        self.renew_deadline = (
            renew_deadline if renew_deadline is not None else lease_seconds * 2 / 3
        )
        self.retry = retry if retry is not None else lease_seconds / 5
        if not 0 < self.retry < self.renew_deadline < lease_seconds:
            raise ValueError("need 0 < retry < renew_deadline < lease_seconds")
        self.clock = clock
        self._renewed_at: datetime | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- the leader check every caller uses -------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """Held, and renewed recently enough that no one else can have acquired it since."""
        with self._lock:
            at = self._renewed_at
        return at is not None and (self.clock() - at).total_seconds() < self.renew_deadline

    @property
    def renewing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(
        self, stop: threading.Event, on_elected: Callable[[], None] | None = None
    ) -> LeaseElector:
        """Renew (or try to acquire) every `retry` seconds until `stop`, then step down.
        `on_elected` is called each time this replica becomes leader (at start, or taking
        over from a leader that left), so the loop acts then, not at its next interval."""

        def loop() -> None:
            leading = False
            while not stop.is_set():
                now_leading = self.try_acquire_or_renew()
                if now_leading and not leading and on_elected is not None:
                    on_elected()
                leading = now_leading
                stop.wait(self.retry)
            self.release()

        self._thread = threading.Thread(target=loop, name="gpupool-lease", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        """Wait (at most `timeout` seconds) for the renew thread to step down after `stop`:
        a process that exits first leaves its Lease held until it expires."""
        if self._thread is not None:
            self._thread.join(timeout)

    def try_acquire_or_renew(self) -> bool:
        started = self.clock()
        try:
            ok = self._attempt()
        except Exception as exc:  # noqa: BLE001 - an unreachable server is "not renewed", never a crash
            log.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            ok = False
        with self._lock:
            if ok:
                self._renewed_at = started  # measured from before the request: conservative
        return self.is_leader if ok else False

    # -- one attempt ------------------------------------------------------------------------
    def _spec(self, transitions: int, acquired: datetime | None) -> dict:
        now = self.clock()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": micro_time(acquired or now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        }

    def _attempt(self) -> bool:
        k = self.k
        try:
            lease = self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.retry
            )
        except k.ApiException as exc:
            if exc.status != 404:
                return False
            body = {
                "metadata": {
                    "name": self.name,
                    "namespace": self.namespace,
                    "labels": {MANAGED_BY_LABEL: MANAGED_BY},
                },
                "spec": self._spec(0, None),
            }
            try:
                self.api.create_namespaced_lease(self.namespace, body, _request_timeout=self.retry)
                return True
            except k.ApiException:
                return False  # someone created it first
        spec = lease.spec
        holder = spec.holder_identity if spec else None
        renew = spec.renew_time if spec else None
        if renew is not None and renew.tzinfo is None:
            renew = renew.replace(tzinfo=UTC)
        duration = (
            spec.lease_duration_seconds
            if spec and spec.lease_duration_seconds
            else self.lease_seconds
        )
        expired = renew is None or self.clock() > renew + timedelta(seconds=duration)
        if holder and holder != self.identity and not expired:
            return False
        transitions = (spec.lease_transitions or 0) if spec else 0
        acquired = spec.acquire_time if holder == self.identity and spec else None
        if holder != self.identity:
            transitions += 1
        body = {
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": lease.metadata.resource_version,
            },
            "spec": self._spec(transitions, acquired),
        }
        try:
            self.api.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self.retry
            )
            return True
        except k.ApiException:
            return False  # 409: another controller won the race

    def holder(self) -> str | None:
        """Who holds the lease now (None: free or expired)."""
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except self.k.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        spec = lease.spec
        if spec is None or not spec.holder_identity or spec.renew_time is None:
            return None
        renew = spec.renew_time if spec.renew_time.tzinfo else spec.renew_time.replace(tzinfo=UTC)
        if self.clock() > renew + timedelta(
            seconds=spec.lease_duration_seconds or self.lease_seconds
        ):
            return None
        return spec.holder_identity

    def release(self) -> None:
        """Step down (on shutdown) so a standby takes over without waiting for expiry."""
        with self._lock:
            held, self._renewed_at = self._renewed_at is not None, None
        if not held:
            return
        with contextlib.suppress(Exception):  # best effort: the lease expires anyway
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                body = {
                    "metadata": {
                        "name": self.name,
                        "namespace": self.namespace,
                        "resourceVersion": lease.metadata.resource_version,
                    },
                    "spec": {
                        "holderIdentity": None,
                        "leaseDurationSeconds": 1,
                        "leaseTransitions": lease.spec.lease_transitions or 0,
                    },
                }
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
