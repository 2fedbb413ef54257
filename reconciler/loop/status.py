"""The controller's status object: a `ReconcilerStatus` custom resource with Flux-style
conditions (Ready / Reconciling / Stalled), the last applied revision and plan summary, and
the recent preemptions the hourly budget counts. `spec.suspend: true` pauses applying."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from reconciler.conventions import GROUP, VERSION
from reconciler.conventions import STATUS_KIND as KIND
from reconciler.conventions import STATUS_PLURAL as PLURAL


@dataclass
class StatusView:
    suspend: bool = False
    recent_preemptions: list[datetime] = field(default_factory=list)
    last_applied_revision: str | None = None


def condition(type_: str, ok: bool, reason: str, message: str, now: datetime) -> dict:
    return {
        "type": type_,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message[:1000],
        "lastTransitionTime": now.isoformat(),
    }


class StatusStore:
    def __init__(self, api_client: Any, *, namespace: str, name: str = "gpupool"):
        from kubernetes import client

        self.k = client
        self.api = client.CustomObjectsApi(api_client)
        self.namespace, self.name = namespace, name

    def read(self) -> StatusView:
        try:
            obj = self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.name
            )
        except self.k.ApiException as exc:
            if exc.status == 404:
                return StatusView()
            raise
        st = obj.get("status") or {}
        recent = []
        for t in st.get("recentPreemptions", []):
            at = _time(t)
            if at is not None:
                recent.append(at)
        return StatusView(
            bool((obj.get("spec") or {}).get("suspend")), recent, st.get("lastAppliedRevision")
        )

    def write(self, status: dict, now: datetime) -> None:
        prev = self._get()
        if prev is None:
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"suspend": False},
            }
            try:
                prev = self.api.create_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, body
                )
            except self.k.ApiException as exc:
                if exc.status != 409:
                    raise
                prev = self._get()
        old = {c["type"]: c for c in ((prev or {}).get("status") or {}).get("conditions", [])}
        for c in status.get("conditions", []):  # keep the transition time while the status holds
            o = old.get(c["type"])
            if o and o.get("status") == c["status"]:
                c["lastTransitionTime"] = o.get("lastTransitionTime", c["lastTransitionTime"])
        cutoff = now - timedelta(hours=1)
        status["recentPreemptions"] = sorted(
            {
                t
                for t in status.get("recentPreemptions", [])
                if (at := _time(t)) is not None and at > cutoff
            }
        )
        self.api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )

    def record_preemptions(self, times: list[str]) -> None:
        """Persist the preemption times at once (before an eviction is sent)."""
        try:
            self.api.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                self.name,
                {"status": {"recentPreemptions": [t for t in times if t]}},
                _content_type="application/merge-patch+json",
            )
        except self.k.ApiException as exc:
            if exc.status != 404:  # no status object yet: the end-of-cycle write creates it
                raise

    def _get(self) -> dict | None:
        try:
            return self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.name
            )
        except self.k.ApiException as exc:
            if exc.status == 404:
                return None
            raise


def _time(text: object) -> datetime | None:
    """A stored time; one without a timezone (hand-edited) is read as UTC, junk as absent."""
    try:
        at = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
