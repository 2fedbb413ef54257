"""The controller: read desired state, observe, plan, apply (if leader), report. Repeat.

Each cycle works on one fresh snapshot and one plan; nothing is remembered between cycles
except what the cluster itself holds (annotations, labels, the status object), so a restart at
any point picks up where the cluster is (the one thing carried over, the resourceVersions of
gpupool's own last writes, only decides whether the watch cache is fresh enough to plan from).
Only the Lease holder applies; the others observe and report. Dry-run observes and reports
drift; `spec.suspend` on the status object stops applying.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from reconciler.apply.executor import ApplyResult, Executor
from reconciler.apply.handlers import ApplyConfig
from reconciler.apply.kube import KubeOps
from reconciler.loop import metrics
from reconciler.loop.leader import LeaseElector
from reconciler.loop.status import StatusStore, condition
from reconciler.observe.kube import admission_event, observe_cluster
from reconciler.plan.planner import plan_state
from reconciler.policy.files import SourceError
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState

log = logging.getLogger("gpupool.controller")
LEASE_NAME = "gpupool-controller"


def _unreachable(exc: BaseException) -> bool:
    """No answer from the API server (refused, reset, timed out, retries spent)."""
    import urllib3

    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class CycleResult:
    revision: str | None
    summary: str
    leader: bool
    applied: ApplyResult | None
    error: str | None = None
    actions: int | None = None
    """How many actions the cycle's plan had (None: no plan was made)."""

    @property
    def converged(self) -> bool:
        """The plan had nothing to do (demand may still wait: the findings say so)."""
        return self.error is None and self.actions == 0


class Controller:
    def __init__(
        self,
        source: Any,
        api_client: Any,
        *,
        namespace: str,
        identity: str,
        dry_run: bool = False,
        apply_config: ApplyConfig | None = None,
        clock: Callable[[], datetime] = _now,
        lease_seconds: int = 15,
        cache_wait_seconds: float = 10.0,
        wake_gap_seconds: float = 1.0,
    ):
        self.source = source
        self.api = api_client
        self.dry_run = dry_run
        self.clock = clock
        self.elector = LeaseElector(
            api_client,
            name=LEASE_NAME,
            namespace=namespace,
            identity=identity,
            lease_seconds=lease_seconds,
            clock=clock,
        )
        self.status = StatusStore(api_client, namespace=namespace)
        self.ops = KubeOps(api_client)
        self.executor = Executor(
            self.ops,
            apply_config or ApplyConfig(),
            clock=clock,
        )
        self.last_ok: datetime | None = None
        self.cache = None  # a ClusterCache once `run` starts the watches; lists until then
        self.cache_wait_seconds = cache_wait_seconds
        self.wake_gap_seconds = wake_gap_seconds
        """Least time between two cycle starts when a pod event wakes the loop: a burst of
        pods is admitted in one cycle, and the cycle's own writes cannot spin the loop."""

    def cycle(self) -> CycleResult:
        with metrics.RECONCILE_DURATION.time():
            try:
                result = self._cycle()
            except Exception as exc:  # noqa: BLE001 - a cycle must never kill the loop
                if _unreachable(exc):  # an operational condition: one line, no traceback
                    log.error("reconcile cycle failed: API server unreachable: %s", exc)
                else:
                    log.exception("reconcile cycle failed")
                metrics.RECONCILES.labels("error").inc()
                return CycleResult(
                    None, "", self.elector.is_leader, None, error=f"{type(exc).__name__}: {exc}"
                )
        metrics.RECONCILES.labels("error" if result.error else "ok").inc()
        if not result.error:
            self.last_ok = self.clock()
            metrics.LAST_SUCCESS.set(self.last_ok.timestamp())
        return result

    def _cycle(self) -> CycleResult:
        now = self.clock()
        # with `run`, a background thread renews the lease; a lone `cycle()` (tests, --once) asks
        leader = (
            self.elector.is_leader if self.elector.renewing else self.elector.try_acquire_or_renew()
        )
        metrics.LEADER.set(1 if leader else 0)
        view = self.status.read()
        metrics.SUSPENDED.set(1 if view.suspend else 0)
        try:
            snap = self.source.read()
            desired = load(snap.files, revision=snap.revision)
        except (SourceError, InvalidDesiredState) as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if leader:
                self.status.write(
                    {
                        "conditions": [
                            condition("Ready", False, "InvalidDesiredState", msg, now),
                            condition("Stalled", True, "InvalidDesiredState", msg, now),
                            condition(
                                "Reconciling", False, "InvalidDesiredState", "nothing applied", now
                            ),
                        ],
                        "lastAttemptedRevision": getattr(exc, "revision", None) or "",
                        "lastAppliedRevision": view.last_applied_revision,
                        "recentPreemptions": [t.isoformat() for t in view.recent_preemptions],
                    },
                    now,
                )
            return CycleResult(None, "", leader, None, error=msg)
        observed = observe_cluster(
            self.api, now=now, recent_preemptions=view.recent_preemptions, cache=self._cache()
        )
        p, facts = plan_state(desired, observed, now=now)
        metrics.DRIFT.set(len(p.actions))
        self._gauges(desired, p, facts)
        applied = None
        preempted = [t.isoformat() for t in view.recent_preemptions]
        if leader and not view.suspend and not self.dry_run and p.actions:
            stamp = now.isoformat()
            intents: dict[str, int] = {}

            def before_preempt(action):
                # write-ahead: counted before the eviction is sent; taken back below if it is not
                intents[action.id] = len(preempted)
                preempted.append(stamp)
                self.status.record_preemptions(preempted)

            def record(action, out):
                metrics.ACTIONS.labels(action.kind, out.status).inc()
                if action.id in intents and not out.stopped:
                    # blocked, failed, or the pod was gone already: no preemption happened
                    preempted[intents.pop(action.id)] = ""

            applied = self.executor.apply(
                p,
                on_outcome=record,
                before_preempt=before_preempt,
                may_continue=lambda: self.elector.is_leader,
            )
            preempted[:] = [t for t in preempted if t]
        if leader and self.elector.is_leader:
            self.status.write(self._status(p, applied, snap.revision, view, preempted, now), now)
        elif leader:
            # leadership lapsed mid-apply: writes stopped; preemptions sent were recorded ahead
            log.warning("leadership lost during the cycle; the next leader plans from the cluster")
        return CycleResult(snap.revision, p.summary, leader, applied, actions=len(p.actions))

    def _cache(self) -> Any:
        """The watch cache if it has seen gpupool's own last writes, else None (list afresh):
        planning from a cache that has not seen a pod's admission would take the pod for
        gated and its cards for free, and admit another pod onto them."""
        if self.cache is None or self.cache.caught_up(self.ops.written, self.cache_wait_seconds):
            return self.cache
        metrics.CACHE_BEHIND.inc()
        log.warning(
            "the watch cache has not seen gpupool's last writes within %ss; listing afresh",
            self.cache_wait_seconds,
        )
        return None

    def _status(
        self,
        p,
        applied: ApplyResult | None,
        revision: str,
        view,
        preempted: list[str],
        now: datetime,
    ) -> dict:
        if view.suspend:
            conds = [
                condition("Ready", False, "Suspended", "spec.suspend is true: observing only", now),
                condition("Reconciling", False, "Suspended", p.summary, now),
                condition("Stalled", False, "Suspended", "", now),
            ]
        elif self.dry_run:
            conds = [
                condition("Ready", not p.actions, "DryRun", p.summary, now),
                condition("Reconciling", False, "DryRun", "dry-run: nothing applied", now),
                condition("Stalled", False, "DryRun", "", now),
            ]
        elif not p.actions:
            conds = [
                condition(
                    "Ready", True, "ReconciliationSucceeded", f"applied revision {revision}", now
                ),
                condition("Reconciling", False, "ReconciliationSucceeded", "", now),
                condition("Stalled", False, "ReconciliationSucceeded", "", now),
            ]
        else:
            failed = applied.by_status("failed") if applied else []
            blocked = applied.by_status("blocked") if applied else []
            waiting = applied.by_status("waiting") if applied else []
            if failed:
                msg = "; ".join(f"{o.action}: {o.message}" for o in failed[:5])
                conds = [
                    condition("Ready", False, "ApplyFailed", msg, now),
                    condition("Reconciling", True, "Progressing", p.summary, now),
                    condition("Stalled", True, "ApplyFailed", msg, now),
                ]
            else:
                msg = (
                    "; ".join(f"{o.action}: {o.message}" for o in (blocked + waiting)[:5])
                    or p.summary
                )
                conds = [
                    condition("Ready", False, "Progressing", p.summary, now),
                    condition("Reconciling", True, "Progressing", msg, now),
                    condition("Stalled", False, "Progressing", "", now),
                ]
        done = not p.actions or (applied is not None and applied.converged)
        return {
            "conditions": conds,
            "lastAttemptedRevision": revision,
            "lastAppliedRevision": revision
            if done and not view.suspend and not self.dry_run
            else view.last_applied_revision,
            "lastPlanSummary": p.summary,
            "lastReconcileTime": now.isoformat(),
            "recentPreemptions": preempted,
        }

    def _gauges(self, desired, p, facts) -> None:
        for pool, c in p.capacity.items():
            for mode in ("whole", "mig", "shared"):
                metrics.GPUS.labels(pool, mode).set(c[f"{mode}Now"])
        for q in desired.quotas.values():
            metrics.TEAM_USAGE.labels(q.team).set(float(facts.team_usage.get(q.team, 0)))
            if q.spec.max_gpus is not None:
                metrics.TEAM_QUOTA.labels(q.team).set(q.spec.max_gpus)

    def ready(self, max_age_seconds: float = 300) -> bool:
        return (
            self.last_ok is not None
            and (self.clock() - self.last_ok).total_seconds() < max_age_seconds
        )

    def run(self, stop: threading.Event, interval_seconds: float) -> None:
        """Cycle until `stop`, every `interval_seconds`; a change in a watched source, or a pod
        event admission should act on (`observe.kube.admission_event`: a gated GPU pod, a GPU
        pod that stops holding cards), wakes the loop early, at most once per
        `wake_gap_seconds`."""
        from reconciler.loop.informer import ClusterCache

        self.elector.start(stop)
        wake = threading.Event()

        def pod_event(kind: str, pod: Any) -> None:
            if admission_event(kind, pod):
                wake.set()

        self.cache = ClusterCache(self.api, on_pod_event=pod_event).start(stop)
        self.cache.wait_synced(30)

        def watch() -> None:
            for _ in self.source.changes(stop):
                wake.set()

        threading.Thread(target=watch, name="gpupool-source-watch", daemon=True).start()
        started = 0.0
        while not stop.is_set():
            gap = self.wake_gap_seconds - (time.monotonic() - started)
            if gap > 0 and stop.wait(gap):
                break
            wake.clear()  # what woke the loop so far is seen by this cycle
            started = time.monotonic()
            result = self.cycle()
            log.info(
                "cycle: leader=%s revision=%s %s%s",
                result.leader,
                result.revision,
                result.summary,
                f" error={result.error}" if result.error else "",
            )
            wake.wait(interval_seconds)
