"""Leader election with a coordination.k8s.io/v1 Lease: only the leader applies.

Optimistic concurrency does the work: every write carries the resourceVersion that was read,
so of two controllers racing for an expired lease exactly one update succeeds (the other gets
409 Conflict and stays a follower).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseElector:
    def __init__(self, api_client: Any, *, name: str, namespace: str, identity: str,
                 lease_seconds: int = 15, clock: Callable[[], datetime] = _now):
        from kubernetes import client

        self.k = client
        self.api = client.CoordinationV1Api(api_client)
        self.name, self.namespace, self.identity = name, namespace, identity
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.is_leader = False

    def _spec(self, transitions: int, acquired: datetime | None) -> dict:
        now = self.clock()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "acquireTime": (acquired or now).isoformat(),
            "renewTime": now.isoformat(),
            "leaseTransitions": transitions,
        }

    def try_acquire_or_renew(self) -> bool:
        self.is_leader = self._attempt()
        return self.is_leader

    def _attempt(self) -> bool:
        k = self.k
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
        except k.ApiException as exc:
            if exc.status != 404:
                return False
            body = {"metadata": {"name": self.name, "namespace": self.namespace}, "spec": self._spec(0, None)}
            try:
                self.api.create_namespaced_lease(self.namespace, body)
                return True
            except k.ApiException:
                return False  # someone created it first
        spec = lease.spec
        holder = spec.holder_identity if spec else None
        renew = spec.renew_time if spec else None
        if renew is not None and renew.tzinfo is None:
            renew = renew.replace(tzinfo=UTC)
        duration = (spec.lease_duration_seconds if spec and spec.lease_duration_seconds else self.lease_seconds)
        expired = renew is None or self.clock() > renew + timedelta(seconds=duration)
        if holder != self.identity and not expired:
            return False
        transitions = (spec.lease_transitions or 0) if spec else 0
        acquired = spec.acquire_time if holder == self.identity and spec else None
        if holder != self.identity:
            transitions += 1
        body = {
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": lease.metadata.resource_version},
            "spec": self._spec(transitions, acquired),
        }
        try:
            self.api.replace_namespaced_lease(self.name, self.namespace, body)
            return True
        except k.ApiException:
            return False  # 409: another controller won the race

    def release(self) -> None:
        """Step down (on shutdown) so a standby takes over without waiting for expiry."""
        if not self.is_leader:
            return
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                body = {"metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": lease.metadata.resource_version},
                        "spec": {"holderIdentity": None, "leaseDurationSeconds": 1, "leaseTransitions": lease.spec.lease_transitions or 0}}
                self.api.replace_namespaced_lease(self.name, self.namespace, body)
        except self.k.ApiException:
            pass
        self.is_leader = False
