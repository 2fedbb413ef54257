"""The controller: read desired state, observe, plan, apply (if leader), report. Repeat.

Each cycle works on one fresh snapshot and one plan; nothing is remembered between cycles
except what the cluster itself holds (annotations, labels, the status object), so a restart at
any point picks up where the cluster is (the one thing carried over, the resourceVersions of
gpupool's own last writes, only decides whether the watch cache is fresh enough to plan from;
the memos of observation and planning only save work: each cycle's snapshot and plan equal
those made without them).
Only the Lease holder applies; the others observe and report. Dry-run observes and reports
drift; `spec.suspend` on the status object stops applying.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from reconciler.apply.executor import ApplyResult, Executor
from reconciler.apply.handlers import ApplyConfig
from reconciler.apply.kube import KubeOps
from reconciler.conventions import GROUP, VERSION
from reconciler.loop import metrics
from reconciler.loop.collector import paused_collector
from reconciler.loop.leader import LeaseElector
from reconciler.loop.signals import with_signals
from reconciler.loop.status import (
    STATUS_REFRESH_SECONDS,
    PreemptionIntent,
    StatusPacer,
    StatusStore,
    StatusView,
    condition,
    resolve_intents,
)
from reconciler.observe.kube import (
    LIST_WORKERS,
    CardMemo,
    WorkloadMemo,
    admission_event,
    bound_requests,
    observe_cluster,
    terminating_event,
)
from reconciler.observe.prometheus import Transport, urllib_transport
from reconciler.plan.incremental import PlanMemo, plan_incremental
from reconciler.plan.model import Plan
from reconciler.plan.planner import PlanFacts
from reconciler.policy.files import SourceError
from reconciler.policy.loader import LoadMemo
from reconciler.policy.problems import InvalidDesiredState
from reconciler.policy.state import DesiredState

log = logging.getLogger("gpupool.controller")
WAKE_GAP_SECONDS = 0.05
"""Least time between two cycle starts when an event wakes the loop (`--wake-gap`): long
enough to batch a burst of pods into one cycle (and to bound the cycles, each with its status
write, to 20 a second), short enough that a freed card waits for the cycle, not for the gap.
Since observe reads everything from the watch cache a cycle at 100 nodes takes about 0.03 s,
and 0.1 s left most of a hand-off to the gap: bench/admission_openb.py at 100 nodes (2026-12-06)
gave GPU allocation 79.958 % at 0.1 s, 79.980 % at 0.05 s, 79.984 % at 0.02 s (bin packing
79.996 %). Only the gap: a rest after each cycle as well (half its length,
to bound the controller's CPU on large clusters) was tried on 2026-12-06 and slowed the
reaction at 1,000 nodes from 1.8 to 2.8 s p50 (spike -> bound, bench/reaction.py)."""
LEASE_NAME = "gpupool-controller"


def _connection_failed(exc: BaseException) -> bool:
    """No (whole) answer from the API server: refused, closed unanswered, reset mid-response,
    timed out, retries spent. Which server failed is not known: one call's connection says
    nothing of the next, and the status write after it is tried all the same."""
    import urllib3

    return isinstance(exc, urllib3.exceptions.HTTPError | ConnectionError | TimeoutError)


STATUS_REPORT_TIMEOUT = (5.0, 10.0)
"""(connect, read) seconds for each request of a failed cycle's status write: the server may be
what failed, and the report must not hold the loop for the client's default (60 s a read, a GET
tried four times). At most a GET (tried up to four times), a create and a merge patch."""


def _api_refused(exc: BaseException) -> bool:
    """An error answer of the API server (RBAC's 403, a conflict, a 5xx): operational, not a
    defect of gpupool, so one log line says it."""
    from kubernetes.client.exceptions import ApiException

    return isinstance(exc, ApiException)


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
    plan: Plan | None = None
    """The cycle's plan (None: no plan was made)."""

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
        wake_gap_seconds: float = WAKE_GAP_SECONDS,
        ready_max_age_seconds: float = 300.0,
        stuck_after_seconds: float = 900.0,
        trigger_poll_seconds: float = 5.0,
        prometheus_url: str | None = None,
        prometheus_timeout: float = 5.0,
        prometheus_transport: Transport | None = None,
        signal_poll_seconds: float = 5.0,
        full_plan_every: int = 1,
        status_report_timeout: float | tuple[float, float] = STATUS_REPORT_TIMEOUT,
    ):
        self.source = source
        self.api = bound_requests(api_client)  # no call may wait forever
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
        self.status_pacer = StatusPacer()
        """Which cycle reports are written: each, until a loop paces them (`pace_status`)."""
        self.ops = KubeOps(api_client)
        self.executor = Executor(
            self.ops,
            apply_config or ApplyConfig(),
            clock=clock,
        )
        self.list_pool = ThreadPoolExecutor(LIST_WORKERS, thread_name_prefix="gpupool-observe")
        """The threads each observation's lists go out on, kept across cycles."""
        self.last_ok: datetime | None = None
        """The end of the last cycle without an error."""
        self.last_observed: datetime | None = None
        """When a cycle last read the cluster successfully (readiness)."""
        self.last_desired: DesiredState | None = None
        """The desired state the last cycle loaded; None before one, or when the last source
        snapshot did not load (the signal wake reads its policies from here, never a load of
        its own)."""
        # incremental planning (reconciler/plan/incremental.py): the memo is the previous
        # cycle's inputs and plan, and what it was made under
        self.full_plan_every = full_plan_every
        """`--full-plan-every`: every this many cycles the plan is made afresh (1: always)."""
        self._plan_memo: PlanMemo | None = None
        self._memo_leader: bool | None = None
        self._memo_relists = 0
        self._view_serves: bool | None = None
        """Whether a view memo kept between cycles was read (None: not tried yet): with
        `--full-plan-every 1` the memo is kept only for that, so it is dropped for good
        when a cycle found none of its objects again (the snapshot rebuilt every object)."""
        self.ready_max_age_seconds = ready_max_age_seconds
        self.stuck_after_seconds = stuck_after_seconds
        self._unreadable_reported: dict[str, datetime] = {}
        self._cycle_started: float | None = None
        self.cache = None  # a ClusterCache once `run` starts the watches; lists until then
        self.policy_memo = LoadMemo()
        """The policies, parsed and checked once per content of the source (`LoadMemo`): an
        unchanged repository is the same DesiredState cycle after cycle, which the planner's
        memo then recognises by identity."""
        self.card_memo = CardMemo()
        """Each node's published cards, converted once per version of its GpuNodeState."""
        self.workload_memo = WorkloadMemo()
        """Each GPU pod's `Workload`, made once per version of the pod and of what it is read
        with: an unchanged pod is the same object cycle after cycle."""
        self._dra_left = True
        """Whether the last observation of resource.k8s.io found objects gpupool made (or none
        was made yet): read DRA again, even with no pool on it, until they are pruned."""
        self.dra_watch = True
        """Read DRA through the watch cache's informers (`ClusterCache.watch_dra`) while it is
        read (False: list the five resource.k8s.io resources every cycle, as before the
        cache). It was off while admission_openb.py's DRA runs showed claims allocated without
        gpupool's plan; the cause was exact admission's delete-then-create of a claim, not the
        cache (handlers/dra_admit.py `_replace`; bench/README.md, dra_cycle.py's section)."""
        self.cache_wait_seconds = cache_wait_seconds
        self.wake_gap_seconds = wake_gap_seconds
        """Least time between two cycle starts when a pod event wakes the loop: a burst of
        pods is admitted in one cycle, and the cycle's own writes cannot spin the loop."""
        self.trigger_poll_seconds = trigger_poll_seconds
        """How often `run` reads the status object for the trigger annotation (one GET of one
        object: a watch would need list/watch rights and a relisting informer for a value
        that changes a few times a day)."""
        self._wake = threading.Event()
        self._generation: int | None = None  # what this cycle read; for `_report_error`
        self.prometheus_url = prometheus_url
        """Where policies with Prometheus signals are read (None: they get a finding each)."""
        self.prometheus_timeout = prometheus_timeout
        self.prometheus_transport = prometheus_transport or urllib_transport
        self.status_report_timeout = status_report_timeout
        """Each request of a failed cycle's status write (`_report_error`)."""
        self.signal_poll_seconds = signal_poll_seconds
        """How often `run` reads the ScalingPolicies' Prometheus queries between cycles, to
        wake the loop on a threshold crossing (`loop/wake.py`); 0: only the cycles read them."""
        self.signal_wake: Any = None  # a SignalWake once `run` starts it

    def wake(self) -> None:
        """Start a cycle now (at most once per `wake_gap_seconds`) instead of at the end of
        the interval: the webhook receiver and the trigger annotation call this; the cycle
        fetches the git source afresh."""
        self._wake.set()

    def cycle(self) -> CycleResult:
        self._cycle_started = time.monotonic()
        try:
            return self._timed_cycle()
        finally:
            self._cycle_started = None

    def _timed_cycle(self) -> CycleResult:
        with metrics.RECONCILE_DURATION.time():
            try:
                result = self._cycle()
            except Exception as exc:  # noqa: BLE001 - a cycle must never kill the loop
                error = f"{type(exc).__name__}: {exc}"
                # on the status whatever failed: a lost connection says nothing of the next one
                note = self._report_error(error)
                said = f" ({note})" if note else ""
                if _connection_failed(exc):  # an operational condition: one line, no traceback
                    log.error(
                        "reconcile cycle failed: connection to the API server failed: %s%s",
                        exc,
                        said,
                    )
                elif _api_refused(exc):  # the API server answered no (403, 409, 500...): a line
                    log.error(
                        "reconcile cycle failed: the API server answered HTTP %s %s%s",
                        getattr(exc, "status", "?"),
                        getattr(exc, "reason", ""),
                        said,
                    )
                else:  # a defect, or an answer nobody expected: with its traceback
                    log.error("reconcile cycle failed%s", said, exc_info=exc)
                metrics.RECONCILES.labels("error").inc()
                return CycleResult(None, "", self.elector.is_leader, None, error=error)
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
        self._generation = None
        view = self.status.read()
        self._generation = view.generation
        handled = {"observedGeneration": view.generation}
        if view.requested_at is not None:  # recorded after the cycle, Flux's way
            handled["lastHandledReconcileAt"] = view.requested_at
        metrics.SUSPENDED.set(1 if view.suspend else 0)
        try:
            # a reconcile asked for reads the source afresh (a git source otherwise polls)
            snap = self.source.read(fresh=view.requested)
            desired = self.last_desired = self.policy_memo.load(snap.files, revision=snap.revision)
        except (SourceError, InvalidDesiredState) as exc:
            if isinstance(exc, InvalidDesiredState):  # a failed fetch keeps the last policies
                self.last_desired = None
            return self._invalid_desired_state(exc, leader, view, handled, now)
        # the hourly budget: settled times, plus intents left by an earlier cycle that a read of
        # their pod now settles (a follower cannot settle them: it counts them, the safe side)
        preempted = [t.isoformat() for t in view.recent_preemptions]
        settle = leader and not view.suspend and not self.dry_run
        if settle:
            preempted += resolve_intents(view.preemption_intents, self.ops.read_pod)
        else:
            preempted += [i.at for i in view.preemption_intents]
        cache = self._cache()
        # exact admission may take a claim's spec and a class's owner from the cache this
        # cycle observed through (`ClusterOps.peek_dra_object`), never from one that is behind
        self.ops.dra_peek = cache.dra_object if cache is not None else None
        # and an Admit step its pods (`ClusterOps.peek_pod`: its writes are conditional)
        self.ops.pod_peek = cache.pod if cache is not None else None
        observed = observe_cluster(
            self.api,
            now=now,
            recent_preemptions=preempted,
            cache=cache,
            cards=self.card_memo,
            workloads=self.workload_memo,
            dra=self._reads_dra(desired),
            pool=self.list_pool,
        )
        self._dra_left = observed.dra is not None and observed.dra.gpupool_objects()
        if self.cache is not None:  # the next cycle's DRA reads come from watches, or lists
            self.cache.watch_dra(self.dra_watch and self._reads_dra(desired))
        self.last_observed = self.clock()
        observed = with_signals(
            desired,
            observed,
            self.prometheus_url,
            timeout=self.prometheus_timeout,
            transport=self.prometheus_transport,
        )
        if leader:
            self._report_unreadable(observed.unreadable, now)
        p, facts = self._plan(desired, observed, now, leader)
        metrics.DRIFT.set(len(p.actions))
        self._gauges(desired, p, facts)
        applied = None
        intents: dict[str, PreemptionIntent] = {}
        if settle and p.actions:
            applied = self._apply(p, preempted, intents, now)
            if applied.by_status("failed"):
                self._plan_memo = None  # an apply error: the next cycle plans afresh
        if leader and self.elector.is_leader:
            report = self._status(p, applied, snap.revision, view, preempted, now)
            report.update(handled)
            if settle:  # settled and open intents are written with the times, in one patch
                report["preemptionIntents"] = [i.to_json() for i in intents.values()]
            else:  # not settled here: left as they are
                report["recentPreemptions"] = [t.isoformat() for t in view.recent_preemptions]
            if self.status_pacer.admit(report, now, view):
                self.status.write(report, now, read=view)
        elif leader:
            # leadership lapsed mid-apply: writes stopped; preemptions sent were recorded ahead
            log.warning("leadership lost during the cycle; the next leader plans from the cluster")
        return CycleResult(
            snap.revision, p.summary, leader, applied, actions=len(p.actions), plan=p
        )

    def _plan(
        self, desired: Any, observed: Any, now: datetime, leader: bool
    ) -> tuple[Plan, PlanFacts]:
        """This cycle's plan, through the memo of the last one: reused when nothing it was made
        from changed; made afresh on a doubt (a relist of the watch cache, a change of
        leadership, an apply error last cycle: the memo is dropped then), every
        `full_plan_every` cycles, and whenever anything changed. The memo is kept whatever
        `full_plan_every` says: a plan made afresh builds its working view from the view memo
        in it (`reconciler.plan.kept`), which is what makes a live cycle (whose clock moved)
        cheaper."""
        relists = sum(
            getattr(getattr(self.cache, i, None), "relists", 0)
            for i in ("node_informer", "pod_informer", "node_state_informer")
        )
        doubt = ""
        if self._memo_leader is not None and self._memo_leader != leader:
            doubt = "leadership changed"
        elif relists != self._memo_relists:
            doubt = "the watch cache relisted"
        with paused_collector():  # the plan's allocations make it rescan the snapshot
            out = plan_incremental(
                desired,
                observed,
                now,
                self._plan_memo,
                full_every=self.full_plan_every,
                doubt=doubt,
            )
        # the memo holds the last snapshot (and its working view's answers) until the next plan
        self._plan_memo = out.memo if self._keep_memo(out) else None
        self._memo_leader, self._memo_relists = leader, relists
        metrics.PLANS.labels(out.mode).inc()
        log.debug("plan: %s (%s; pools reached: %s)", out.mode, out.why, sorted(out.reached))
        return out.plan, out.facts

    def _keep_memo(self, out: Any) -> bool:
        """Keep this cycle's memo for the next? Always when plans may be reused
        (`full_plan_every` > 1); else for its view memo, as long as it serves: a plan that
        built its view from a kept one and read no answer of it (every object of the snapshot
        a new one) ends the trial, since holding the last snapshot then only costs memory."""
        if self.full_plan_every > 1:
            return True
        view = out.memo.view
        if out.mode == "full" and view is not None and view.read_kept and view.misses > 0:
            self._view_serves = view.hits > 0
        return self._view_serves is not False

    def _invalid_desired_state(
        self,
        exc: SourceError | InvalidDesiredState,
        leader: bool,
        view: StatusView,
        handled: dict,
        now: datetime,
    ) -> CycleResult:
        """The cycle of a desired state that cannot be read or does not validate: nothing is
        planned; the leader says why on the status object."""
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if leader:
            self.status_pacer.forget()
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
                    "lastReconcileTime": now.isoformat(),
                    **handled,
                },
                now,
                read=view,
            )
        self.last_observed = self.clock()  # the cluster answered; nothing to plan
        return CycleResult(None, "", leader, None, error=msg)

    def _apply(
        self,
        p: Plan,
        preempted: list[str],
        intents: dict[str, PreemptionIntent],
        now: datetime,
    ) -> ApplyResult:
        """Apply `p` as the leader, settling preemptions as it goes: each one's intent is
        added to `intents` (and written) before its stop is sent, and moved into `preempted`
        once the stop is known done."""
        stamp = now.isoformat()

        def before_preempt(action, pod):
            # write-ahead: the intent is on the status object before the stop is sent
            intents[action.id] = PreemptionIntent(pod.key, pod.uid, stamp)
            self.status.record_preemptions(preempted, list(intents.values()))

        def record(action, out):
            metrics.ACTIONS.labels(action.kind, out.status).inc()
            if action.id in intents and out.stopped:  # known done: settled now
                preempted.append(intents.pop(action.id).at)
            # otherwise (blocked, failed, no reply) the intent stays for the next cycle,
            # which reads the pod to settle it (`resolve_intents`)

        return self.executor.apply(
            p,
            on_outcome=record,
            before_preempt=before_preempt,
            may_continue=lambda: self.elector.is_leader,
        )

    def _report_unreadable(self, found, now: datetime) -> None:
        """An Event on each object the snapshot left out or read in part (the plan has a
        finding for each too), once an hour per object and problem: its owner sees it in
        `kubectl describe`, and the rest of the cluster is reconciled meanwhile."""
        for u in found:
            key = f"{u.ref}: {u.message}"
            last = self._unreadable_reported.get(key)
            if last is not None and (now - last).total_seconds() < 3600:
                continue
            self._unreadable_reported[key] = now
            self.executor.emit_event(
                u.kind,
                u.namespace,
                u.name,
                reason="GpuPoolUnreadable",
                message=f"gpupool could not read this object and left it out: {u.message}",
                key=key,
                api_version=f"{GROUP}/{VERSION}" if u.kind == "GpuNodeState" else None,
            )
        metrics.UNREADABLE.set(len(found))

    def _report_error(self, error: str) -> str | None:
        """A failed cycle is on the status object, not only in the log: Ready=False and
        Stalled=True with the error, and `lastReconcileTime` the attempt's time (the
        conditions' transition times say since when). Leader only. Tried whatever failed (a
        dropped connection on one list does not mean the status cannot be written), each
        request bounded by `status_report_timeout`; given up only when this write fails.
        Preemption times are left as they are. Returns what became of the report, for the
        cycle's one log line (None: not the leader, nothing to say)."""
        if not self.elector.is_leader:
            return None
        now = self.clock()
        msg = error.splitlines()[0] if error else "error"
        self.status_pacer.forget()
        try:
            self.status.write(
                {
                    "conditions": [
                        condition("Ready", False, "ReconcileError", msg, now),
                        condition("Stalled", True, "ReconcileError", msg, now),
                        condition("Reconciling", False, "ReconcileError", "nothing applied", now),
                    ],
                    "lastReconcileTime": now.isoformat(),
                    **(
                        {"observedGeneration": self._generation}
                        if self._generation is not None
                        else {}
                    ),
                },
                now,
                timeout=self.status_report_timeout,
            )
        except Exception as exc:  # noqa: BLE001 - reporting must not fail the loop either
            return f"the status could not be written either: {type(exc).__name__}: {exc}"
        return "reported on the status"

    def _reads_dra(self, desired: DesiredState) -> bool:
        """Whether this cycle reads resource.k8s.io (ResourceSlices, DeviceClasses, claims,
        templates, taint rules: four or five lists over the cluster): while a pool of the
        desired state is on DRA, or objects gpupool made there are still to be pruned (the
        first cycle reads to know). A cluster with no DRA pool lists none of it after that.
        Under `run`, the cycle after one that read DRA and will read it again reads through
        the watch cache's DRA informers (`ClusterCache.watch_dra`: started then, stopped when
        DRA is no longer read)."""
        return self._dra_left or any(p.spec.backend == "dra" for p in desired.pools.values())

    def _cache(self) -> Any:
        """The watch cache if it has seen gpupool's own last writes, else None (list afresh):
        planning from a cache that has not seen a pod's admission would take the pod for
        gated and its cards for free, and admit another pod onto them."""
        if self.cache is None or self.cache.caught_up(
            self.ops.written, self.cache_wait_seconds, getattr(self.ops, "deleted", None)
        ):
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

    def ready(self) -> bool:
        """The last successful observation of the cluster is at most `ready_max_age_seconds`
        old. A cycle that cannot reach the API server, or plans from nothing because every
        read fails or hangs (each is bounded in time), stops refreshing it."""
        return (
            self.last_observed is not None
            and (self.clock() - self.last_observed).total_seconds() < self.ready_max_age_seconds
        )

    def alive(self) -> bool:
        """No cycle has been running for longer than `stuck_after_seconds` (`/healthz`: the
        kubelet restarts a controller whose loop is stuck; every API call, watch and git
        operation is bounded, so only a defect gets here)."""
        started = self._cycle_started
        return started is None or time.monotonic() - started < self.stuck_after_seconds

    def pace_status(self) -> None:
        """From now on a report that says nothing new is written at most once per
        `STATUS_REFRESH_SECONDS` (`StatusPacer`); whoever calls this writes what is held back
        when it rests (`rest`) or stops (`flush_status`): `run`, and the admission benchmark's
        controller child, which loops as `run` does."""
        self.status_pacer.refresh_seconds = STATUS_REFRESH_SECONDS

    def flush_status(self) -> None:
        """Write the cycle report `status_pacer` held back, if any, while this replica leads
        (the loop calls this when it rests; a failed write is logged, and the next cycle's
        report is written whatever it says)."""
        held = self.status_pacer.take()
        if held is None or not self.elector.is_leader:
            return
        report, now, view = held
        try:
            self.status.write(report, now, read=view, timeout=self.status_report_timeout)
        except Exception as exc:  # noqa: BLE001 - the next cycle writes its own report
            self.status_pacer.forget()
            log.warning("status write held back since the last cycle failed: %s", exc)

    def rest(self, wake: threading.Event, stop: threading.Event, seconds: float) -> None:
        """`_sleep` for `seconds`, writing on the way the report held back when it is due and
        nothing woke the loop before (a cycle woken first writes its own report)."""
        due = self.status_pacer.due_in()
        if due is not None and due < seconds:
            _sleep(wake, stop, due)
            if wake.is_set() or stop.is_set():
                return
            self.flush_status()
            seconds -= due
        _sleep(wake, stop, seconds)

    def _poll_trigger(self, stop: threading.Event) -> None:
        """Wake the loop when the trigger annotation holds a token no cycle has handled; each
        token wakes it once (a follower never records it, and must not spin)."""
        seen: str | None = None
        while not stop.wait(self.trigger_poll_seconds):
            try:
                view = self.status.read()
            except Exception as exc:  # noqa: BLE001 - the cycle reports the API server's state
                log.debug("trigger poll: %s", exc)
                continue
            if view.requested and view.requested_at != seen:
                seen = view.requested_at
                log.info("reconcile requested (%s)", seen)
                self.wake()

    def _start_signal_wake(self, stop: threading.Event) -> None:
        """Wake the loop when a ScalingPolicy's signal crosses a threshold: the inference
        workloads' queue annotations, seen through the watch cache's Deployments and
        StatefulSets informers (`self.cache`: one watch per resource, not a second), and a
        Prometheus poller (`loop/wake.py`). The policies are those the last cycle loaded
        (`last_desired`)."""
        from reconciler.loop.wake import SignalWake

        self.signal_wake = SignalWake(
            lambda: self.last_desired,
            self._wake.set,
            prometheus_url=self.prometheus_url,
            prometheus_timeout=self.prometheus_timeout,
            transport=self.prometheus_transport,
            poll_seconds=self.signal_poll_seconds,
            clock=self.clock,
        ).start(stop, cache=self.cache)

    def wakes_on(self, kind: str, pod: Any) -> bool:
        """Whether a pod watch event starts the next cycle now (`run`): one admission acts on
        (`admission_event`), but for the delete or end of a DRA pod that still owns an allocated
        claim: it frees its cards with that claim's release, a moment after it goes, which wakes
        the loop (a cycle woken by the pod's going would find the cards fenced, and the release
        would then wait for the wake gap). Its turning terminating does wake it: the plan gives
        its cards to the next holder then, whose admission waits in its step for the pod gone
        and the claim released."""
        if not admission_event(kind, pod):
            return False
        held = self.cache is not None and self.cache.claims_held_by(pod)
        return not held or terminating_event(kind, pod)

    def run(self, stop: threading.Event, interval_seconds: float) -> None:
        """Cycle until `stop`, every `interval_seconds`; a change in a watched source, a pod
        event admission should act on (`observe.kube.admission_event`: a gated GPU pod, a GPU
        pod that stops holding cards), a DRA claim that stops holding devices (its pod went
        before: the cards it fenced are free now), or a scaling signal crossing a threshold
        (`_start_signal_wake`) wakes the loop early, at most once per `wake_gap_seconds`.
        A report that says nothing new is written at most once per `STATUS_REFRESH_SECONDS`
        (`pace_status`); the last one held back is written when the loop rests, or stops."""
        from reconciler.loop.informer import ClusterCache

        self.pace_status()

        wake = self._wake
        # elected (at start, or taking over): cycle now, not an interval later as a follower
        self.elector.start(stop, on_elected=wake.set)
        # readiness allows a few intervals without an observation before it fails
        self.ready_max_age_seconds = max(self.ready_max_age_seconds, 3 * interval_seconds)

        def pod_event(kind: str, pod: Any) -> None:
            if self.wakes_on(kind, pod):
                wake.set()

        self.cache = ClusterCache(self.api, on_pod_event=pod_event, on_claim_release=wake.set)
        self._start_signal_wake(stop)  # on the cache's informers: listening before they start
        self.cache.start(stop)
        self.cache.wait_synced(30)
        self.signal_wake.wait_synced(10)

        def watch() -> None:
            for _ in self.source.changes(stop):
                wake.set()

        threading.Thread(target=watch, name="gpupool-source-watch", daemon=True).start()
        threading.Thread(
            target=self._poll_trigger, args=(stop,), name="gpupool-trigger", daemon=True
        ).start()
        started = 0.0
        while not stop.is_set():
            gap = self.wake_gap_seconds - (time.monotonic() - started)
            if gap > 0 and stop.wait(gap):
                break
            wake.clear()  # what woke the loop so far is seen by this cycle
            started = time.monotonic()
            result = self.cycle()
            self.signal_wake.rebase()  # the cycle planned from these readings
            log.info(
                "cycle: leader=%s revision=%s %s%s",
                result.leader,
                result.revision,
                result.summary,
                f" error={result.error}" if result.error else "",
            )
            self.rest(wake, stop, interval_seconds)
        self.flush_status()
        self.elector.join(10.0)


def _sleep(wake: threading.Event, stop: threading.Event, seconds: float) -> None:
    """Wait until `wake`, `stop` or `seconds` have passed, in slices of at most a second.

    A signal handler (SIGTERM sets `stop`) runs only when the main thread executes Python,
    and the kernel may deliver the signal to any thread (the informers' sockets among them):
    a main thread blocked on one long `Event.wait` would sleep through it, outlive the pod's
    grace period and be killed with its Lease still held."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0 or wake.wait(min(left, 1.0)):
            return
