"""Wake the loop when a ScalingPolicy's signal crosses a threshold (issue 28), instead of letting
the scale decision wait for the interval.

Two feeds, one rule:
- the watch (list + watch) of the inference workloads, the Deployments and StatefulSets
  labelled `gpupool.io/inference=true` (`observe/kube_services.py`): their queue annotations,
  and their replicas (the queue is judged per replica). It is the watch cache's
  (`ClusterCache.on_object_event`): the wake listens to the cache's two informers and starts no
  watch of its own, so each resource is listed and watched once;
- a Prometheus poller on an interval of its own (`--signal-poll-interval`) that runs only the
  ScalingPolicies' queries (`plan/signals.scaling_signal_queries`), none of the utilization ones.

After each change the planner's own rule (`plan/signals.target_directions`: scale up, scale down
or hold, bounds included, cooldowns left to the planner) is asked for every target; a target
whose direction moves to scale-up or scale-down since the last reading wakes the loop. A change
that keeps the direction (the queue grows while already over the threshold, a reading inside
the band) wakes nothing, and neither does a move back to hold: a cycle would change nothing.
The first direction seen of a target (at start, a new policy or workload) is its baseline: the
cycle that follows a start or a source change plans it anyway.

Cooldowns are the planner's: a wake inside one plans, and the plan holds the scale. The loop's
`wake_gap_seconds` still bounds how often cycles start.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from reconciler import conventions as C
from reconciler.observe.model import InferenceService, ObservedState, SignalReading
from reconciler.observe.prometheus import Transport, read_all, urllib_transport
from reconciler.plan.signals import HOLD, scaling_signal_queries, target_directions
from reconciler.policy.state import DesiredState

log = logging.getLogger("gpupool.wake")
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
WORKLOAD_RESOURCES = (C.DEPLOYMENTS, C.STATEFUL_SETS)
"""The watch cache's resources of `WORKLOAD_KINDS`, in the same order."""


class Directions:
    """The last direction of each target; `moved` says which targets a new set of directions
    moves to scale-up or scale-down (a first sighting is a baseline, never a move)."""

    def __init__(self) -> None:
        self.last: dict[str, str] = {}

    def moved(self, now: dict[str, str]) -> list[str]:
        out = [
            k for k, d in sorted(now.items()) if d != HOLD and k in self.last and self.last[k] != d
        ]
        self.last = dict(now)
        return out


def _now() -> datetime:
    return datetime.now(UTC)


class SignalWake:
    def __init__(
        self,
        desired: Callable[[], DesiredState | None],
        wake: Callable[[], None],
        *,
        prometheus_url: str | None = None,
        prometheus_timeout: float = 5.0,
        transport: Transport = urllib_transport,
        poll_seconds: float = 5.0,
        clock: Callable[[], datetime] = _now,
    ):
        self.desired = desired
        self.wake = wake
        self.prometheus_url = prometheus_url
        self.prometheus_timeout = prometheus_timeout
        self.transport = transport
        self.poll_seconds = poll_seconds
        """Between two Prometheus polls (0: no polling; the cycles still read them)."""
        self.clock = clock
        self.services: dict[tuple[str, str], InferenceService] = {}
        """The inference workloads as the watch last saw them, by (kind, namespace/name)."""
        self.readings: list[SignalReading] = []
        """The last poll's readings."""
        self.directions = Directions()
        self.wakes = 0
        self._lock = threading.Lock()
        self.informers: list[Any] = []
        """The cache's Deployments and StatefulSets informers, once `start` added the wake."""

    # ------------------------------------------------------------------ what changed

    def put(self, svc: InferenceService) -> None:
        with self._lock:
            self.services[(svc.kind, svc.key)] = svc
        self.check(f"{svc.kind} {svc.key}")

    def drop(self, kind: str, key: str) -> None:
        with self._lock:
            self.services.pop((kind, key), None)
        self.check(f"{kind} {key} deleted")

    def workload_event(self, kind: str, event: str, obj: Any) -> None:
        """An informer's event on a Deployment or StatefulSet (`kind`)."""
        from reconciler.observe.kube_common import _each
        from reconciler.observe.kube_services import _service

        key = f"{obj.metadata.namespace}/{obj.metadata.name}"
        if event == "DELETED":
            self.drop(kind, key)
            return
        found = _each(kind, [obj], lambda o: _service(o, kind))  # a malformed one: logged
        if found:
            self.put(found[0])

    def rebase(self) -> None:
        """Take the directions now as the baseline, waking nothing: the loop calls this after
        each cycle, which planned from (about) this state."""
        self.check("after a cycle", wake=False)

    def check(self, why: str, *, wake: bool = True) -> bool:
        """Ask the planner's rule about every target; wake the loop when one moved to
        scale-up or scale-down. True when it woke it."""
        desired = self.desired()
        if desired is None or not desired.scaling:
            return False
        with self._lock:
            try:
                observed = ObservedState(
                    observed_at=self.clock(),
                    services=list(self.services.values()),
                    signals=list(self.readings),
                )
                moved = self.directions.moved(target_directions(desired, observed))
            except Exception as exc:  # noqa: BLE001 - a wake must never fail the loop
                log.warning("signal check (%s): %s: %s", why, type(exc).__name__, exc)
                return False
        if not moved or not wake:
            return False
        self.wakes += 1
        log.info("signal crossing (%s): %s; waking the loop", why, ", ".join(moved))
        self.wake()
        return True

    def poll(self) -> bool:
        """Run the ScalingPolicies' Prometheus queries once and check them (True: woke)."""
        desired = self.desired()
        if desired is None or not self.prometheus_url:
            return False
        with self._lock:
            probe = ObservedState(observed_at=self.clock(), services=list(self.services.values()))
        queries = scaling_signal_queries(desired, probe)
        if not queries:
            return False
        readings = read_all(
            self.prometheus_url,
            [(q.id, q.query) for q in queries],
            timeout=self.prometheus_timeout,
            transport=self.transport,
        )
        with self._lock:
            self.readings = readings
        return self.check("prometheus poll")

    # ------------------------------------------------------------------ threads

    def start(self, stop: threading.Event, *, cache: Any) -> SignalWake:
        """Listen to the inference workloads and poll Prometheus until `stop`. The workloads
        come from `cache` (a `ClusterCache`, started or not): its Deployments and StatefulSets
        informers and their events (`ClusterCache.on_object_event`), which the cache starts and
        stops; add the wake before the cache starts, so no event falls between its list and
        the wake."""
        for kind, resource in zip(WORKLOAD_KINDS, WORKLOAD_RESOURCES, strict=True):
            on_event = functools.partial(self.workload_event, kind)
            self.informers.append(cache.on_object_event(resource, on_event))
        if self.poll_seconds > 0 and self.prometheus_url:
            threading.Thread(
                target=self._poll_loop, args=(stop,), name="gpupool-signal-poll", daemon=True
            ).start()
        return self

    def wait_synced(self, timeout: float) -> bool:
        """Wait for the cache's first lists, then take the workloads they hold (a list calls
        no `on_event`) and their directions as the baseline."""
        from reconciler.observe.kube_common import _each
        from reconciler.observe.kube_services import _service

        if not all(i.synced.wait(timeout) for i in self.informers):
            return False
        for kind, inf in zip(WORKLOAD_KINDS, self.informers, strict=True):
            for svc in _each(kind, inf.items() or [], lambda o, k=kind: _service(o, k)):
                with self._lock:
                    self.services.setdefault((svc.kind, svc.key), svc)
        self.check("start")
        return True

    def _poll_loop(self, stop: threading.Event) -> None:
        while not stop.wait(self.poll_seconds):
            try:
                self.poll()
            except Exception as exc:  # noqa: BLE001 - the cycles read the signals all the same
                log.warning("signal poll failed: %s: %s", type(exc).__name__, exc)
