"""The controller's status object: a `ReconcilerStatus` custom resource with Flux-style
conditions (Ready / Reconciling / Stalled), the last applied revision and plan summary, and
the recent preemptions the hourly budget counts (with the intents not yet settled:
`resolve_intents`). `spec.suspend: true` pauses applying.

Each status write carries `observedGeneration`, the object's `metadata.generation` as the cycle
read it (on the status and on each condition, as the Kubernetes API conventions put it), and
`lastHandledReconcileAt`, the last value of the trigger annotation
(`conventions.RECONCILE_REQUESTED_ANN`) a cycle acted on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from reconciler.conventions import (
    GROUP,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    RECONCILE_REQUESTED_ANN,
    VERSION,
)
from reconciler.conventions import STATUS_KIND as KIND
from reconciler.conventions import STATUS_PLURAL as PLURAL

Timeout = float | tuple[float, float]
"""Seconds for one request: (connect, read), or one number for both."""


@dataclass(frozen=True)
class PreemptionIntent:
    """A stop about to be sent (write-ahead), kept in `status.preemptionIntents` until a later
    read of the pod says whether it happened (`resolve_intents`)."""

    pod: str
    """namespace/name."""
    uid: str
    at: str
    """When it was decided (RFC 3339): the time the budget counts if it happened."""

    def to_json(self) -> dict:
        return {"pod": self.pod, "uid": self.uid, "at": self.at}

    @staticmethod
    def from_json(entry: object) -> PreemptionIntent | None:
        if not isinstance(entry, dict) or not isinstance(entry.get("pod"), str):
            return None
        at = _time(entry.get("at"))
        if at is None or "/" not in entry["pod"]:
            return None
        return PreemptionIntent(entry["pod"], str(entry.get("uid") or ""), at.isoformat())


@dataclass
class StatusView:
    suspend: bool = False
    recent_preemptions: list[datetime] = field(default_factory=list)
    last_applied_revision: str | None = None
    preemption_intents: list[PreemptionIntent] = field(default_factory=list)
    generation: int | None = None
    """`metadata.generation` as read (None: no object yet)."""
    requested_at: str | None = None
    """The trigger annotation's value (an opaque token), if set."""
    last_handled: str | None = None
    """`status.lastHandledReconcileAt`: the last token a cycle acted on."""
    raw: dict | None = field(default=None, repr=False, compare=False)
    """The object as read (None: none found), for the cycle's `StatusStore.write`."""

    @property
    def requested(self) -> bool:
        """A reconcile was asked for that no cycle has handled yet."""
        return self.requested_at is not None and self.requested_at != self.last_handled


STATUS_REFRESH_SECONDS = 1.0
"""Under `Controller.run`, how often at most a cycle writes a report that says nothing new
(`StatusPacer`): at a 50 ms wake gap a busy loop runs 10-20 cycles a second, and each wrote
its status (one etcd write; 7 % of a cycle at 100 nodes, py-spy, 2026-12-06)."""

_EVERY_CYCLE = ("lastReconcileTime", "lastPlanSummary")
"""What every cycle's report changes: its time and the plan's summary."""


def _news(report: dict) -> str:
    """What a report says beyond what every cycle changes: everything but `_EVERY_CYCLE` and
    the conditions' messages and times (their type, status and reason are kept)."""
    kept = {k: v for k, v in report.items() if k not in _EVERY_CYCLE and k != "conditions"}
    kept["conditions"] = [
        (c.get("type"), c.get("status"), c.get("reason")) for c in report.get("conditions", [])
    ]
    return json.dumps(kept, sort_keys=True, default=str)


class StatusPacer:
    """Which of the loop's cycle reports are written now. One that says something new (a
    condition's status or reason, a revision, the generation or trigger handled, a preemption
    time or intent: `_news`) at once; one that differs from the last written only in its time,
    the plan's summary and the conditions' messages is held back while the last write is less
    than `refresh_seconds` old, and the one held last is written when the loop rests
    (`due_in`, `take`). `refresh_seconds` 0 writes every report (a lone cycle: nothing
    would write what it held back)."""

    def __init__(
        self, refresh_seconds: float = 0.0, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.refresh_seconds = refresh_seconds
        self._monotonic = monotonic
        self._last: tuple[str, float] | None = None
        """The last report written: what it said (`_news`), when."""
        self._held: tuple[dict, datetime, StatusView] | None = None

    def admit(self, report: dict, now: datetime, view: StatusView) -> bool:
        """True: write `report` now; False: it is held back (written by `take`'s caller unless
        a later report replaces it)."""
        news, at = _news(report), self._monotonic()
        last = self._last
        if (
            self.refresh_seconds > 0
            and last is not None
            and last[0] == news
            and at - last[1] < self.refresh_seconds
        ):
            self._held = (report, now, view)
            return False
        self._held, self._last = None, (news, at)
        return True

    def due_in(self) -> float | None:
        """Seconds until the report held back is due (None: none is held)."""
        if self._held is None or self._last is None:
            return None
        return max(0.0, self._last[1] + self.refresh_seconds - self._monotonic())

    def take(self) -> tuple[dict, datetime, StatusView] | None:
        """The report held back, with its cycle's time and status view, counted as written."""
        held, self._held = self._held, None
        if held is not None:
            self._last = (_news(held[0]), self._monotonic())
        return held

    def forget(self) -> None:
        """Something else was written (an error's report) or a write failed: the next report
        is written whatever it says."""
        self._last = self._held = None


def resolve_intents(
    intents: list[PreemptionIntent], read_pod: Callable[[str, str], Any]
) -> list[str]:
    """The times of the intents that were carried out, judged by reading each pod now.

    Budget bookkeeping exactly once, whatever point a crash or a lost reply hits: a stop is
    recorded as an intent before its write is sent (keyed by the pod's UID), and a later cycle
    reads the pod. Gone, terminating, or replaced by a pod of the same name with another UID:
    the stop happened (or the pod ended on its own at that moment: counted, the safe side of a
    budget). Still there and not terminating: it did not happen, and the intent is dropped; a
    retry records a new one. Either way the intent is settled in the same status write that
    adds its time to `recentPreemptions`, so it is never counted twice."""
    done = []
    for intent in intents:
        ns, name = intent.pod.split("/", 1)
        pod = read_pod(ns, name)
        if pod is None or pod.deleting or (intent.uid and pod.uid and pod.uid != intent.uid):
            done.append(intent.at)
    return done


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
        raw = st.get("preemptionIntents")
        intents = [
            i
            for i in map(PreemptionIntent.from_json, raw if isinstance(raw, list) else [])
            if i is not None
        ]
        meta = obj.get("metadata") or {}
        token = (meta.get("annotations") or {}).get(RECONCILE_REQUESTED_ANN)
        generation = meta.get("generation")
        handled = st.get("lastHandledReconcileAt")
        return StatusView(
            bool((obj.get("spec") or {}).get("suspend")),
            recent,
            st.get("lastAppliedRevision"),
            intents,
            generation if isinstance(generation, int) else None,
            token if isinstance(token, str) else None,
            handled if isinstance(handled, str) else None,
            raw=obj,
        )

    def write(
        self,
        status: dict,
        now: datetime,
        *,
        timeout: Timeout | None = None,
        read: StatusView | None = None,
    ) -> None:
        """Merge `status` into the status subresource. An `observedGeneration` in it (the
        generation the cycle read) is also set on each condition; None there means the cycle
        found no object, and this write creates it: the generation created is the one acted
        on (its spec is the default one the cycle assumed). `timeout` ((connect, read) seconds,
        or one number) bounds each of its requests (None: the client's default). `read`: the
        view the cycle read at its start; the write starts from its object instead of reading
        it again (gpupool alone writes the status, and of what it read only the conditions'
        transition times are taken), else reads it."""
        prev = read.raw if read is not None and read.raw is not None else self._get(timeout)
        created = prev is None
        if created:
            prev = self._create(timeout)
        if "observedGeneration" in status:
            gen = status["observedGeneration"]
            if gen is None and created:
                gen = ((prev or {}).get("metadata") or {}).get("generation")
            if isinstance(gen, int):
                status["observedGeneration"] = gen
                for c in status.get("conditions", []):
                    c["observedGeneration"] = gen
            else:
                del status["observedGeneration"]
        old = {c["type"]: c for c in ((prev or {}).get("status") or {}).get("conditions", [])}
        for c in status.get("conditions", []):  # keep the transition time while the status holds
            o = old.get(c["type"])
            if o and o.get("status") == c["status"]:
                c["lastTransitionTime"] = o.get("lastTransitionTime", c["lastTransitionTime"])
        if "recentPreemptions" in status:  # a merge patch without the key leaves it as is
            cutoff = now - timedelta(hours=1)
            status["recentPreemptions"] = sorted(
                {
                    t
                    for t in status["recentPreemptions"]
                    if (at := _time(t)) is not None and at > cutoff
                }
            )
        self._patch(status, timeout)

    def record_preemptions(self, times: list[str], intents: list[PreemptionIntent]) -> None:
        """Persist the preemption times and the open intents at once, in one patch (before a
        stop is sent: write-ahead). Creates the status object if there is none yet: a crash
        right after the stop must not lose it."""
        if self._get() is None:
            self._create()
        self._patch(
            {
                "recentPreemptions": sorted({t for t in times if t}),
                "preemptionIntents": [i.to_json() for i in intents],
            }
        )

    def _patch(self, status: dict, timeout: Timeout | None = None) -> None:
        """A merge patch of the status subresource: keys left out stay as they are."""
        self.api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            {"status": status},
            _content_type="application/merge-patch+json",
            **_bounded(timeout),
        )

    def _create(self, timeout: Timeout | None = None) -> dict | None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY},
            },
            "spec": {"suspend": False},
        }
        try:
            return self.api.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, body, **_bounded(timeout)
            )
        except self.k.ApiException as exc:
            if exc.status != 409:
                raise
            return self._get(timeout)

    def _get(self, timeout: Timeout | None = None) -> dict | None:
        try:
            return self.api.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, self.name, **_bounded(timeout)
            )
        except self.k.ApiException as exc:
            if exc.status == 404:
                return None
            raise


def _bounded(timeout: Timeout | None) -> dict:
    """The official client's per-call timeout argument (none: its default applies)."""
    return {} if timeout is None else {"_request_timeout": timeout}


def _time(text: object) -> datetime | None:
    """A stored time; one without a timezone (hand-edited) is read as UTC, junk as absent."""
    try:
        at = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
