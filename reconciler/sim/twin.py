"""A digital twin of the pool: the real planner, cycle by cycle, over a load curve and a job list.

Each cycle (`TwinConfig.period`, default 60 s) the twin

1. adds the training jobs that arrived as pending, gated pods (owned by a Job, in the
   training namespace and class, pinned to the training pool);
2. calls the real `reconciler.plan.planner.plan(desired, observed, now)` with the user's
   desired state;
3. lets the plan take effect with the shared effect model (`reconciler.sim.effects.step`:
   apply, kube-scheduler stand-in, clock), so every decision is the planner's and every
   effect the effect model's;
4. runs the interval until the next cycle: requests arrive from the load curve and queue for
   the service's *ready* replicas; running training jobs make progress; and writes what the
   serving stack and the jobs would export into the next snapshot (the service's
   `queue_length`, `pending_seconds_p99`, `ready_replicas`; each job's `last_checkpoint_at`).

Delays the effect model does not have are time during which capacity is held but not useful:
a new replica serves `load_time` after it is bound; a repartitioned node's cards serve
`repartition_time` after the repartition (MIG reconfiguration, sharing conversion); a card
freed by evicting a job the planner asked to checkpoint is ready `checkpoint_time` later
(a checkpointable job) or after the PriorityPolicy's checkpointGracePeriod (any other); a
preempted job loses the work since its last checkpoint (its own, every `checkpoint_period` of
progress; or the one the plan asks for, when the job `checkpointable`) and pays
`restart_cost` seconds before it progresses again.

Queue model (per load bin, 10 s in the Azure trace): `capacity = ready x service_rate x
width`; what is not served is carried over. The signals the next snapshot gets:
`queue_length` = carried-over requests + requests in service (served rate x
`concurrency / service_rate`, Little's law), as a queue-length signal summed from vLLM's
gauges `vllm:num_requests_running` + `vllm:num_requests_waiting` would read (vllm-project/vllm
vllm/v1/metrics/loggers.py, PrometheusStatLogger, set from the scheduler's running and
waiting request counts);
`pending_seconds_p99` ~ backlog / (ready x service_rate).

Metrics (`TwinResult`) cover the steady state, from `warmup` (default one day) on; see
docs/simulator.md "Digital twin". Idle cards are sorted by why they idle (`IDLE_WHY`,
`TwinResult.idle`, `idle_rows`; bench/twin.py --idle).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconciler.observe.model import (
    InferenceService,
    ObservedState,
    Request,
    SignalReading,
    SignalSample,
    Workload,
)
from reconciler.plan.actions import MigReconfigure, SetSharing
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan
from reconciler.plan.signals import FORECAST_LEVEL, forecast_plan
from reconciler.policy.state import DesiredState
from reconciler.sim.effects import finish, step
from reconciler.sim.failures import FailureClock
from reconciler.sim.load import JobSpec, LoadCurve, scaled
from reconciler.sim.twin_setup import (  # noqa: F401 - re-exported
    DAY,
    FLAG,
    OptionError,
    Progress,
    TwinConfig,
    _default_classes,
    pool_nodes,
    service_target,
    static_split,
)


# ----------------------------------------------------------------------------- the run
@dataclass
class _Job:
    spec: JobSpec
    key: str
    progress: float = 0.0  # seconds of work done (saved or not)
    saved: float = 0.0  # seconds of work a restart resumes from
    saved_at: float | None = None  # twin time of the last checkpoint
    restarts: int = 0
    overhead_until: float = 0.0
    first_start: float | None = None
    done_at: float | None = None
    running: bool = False
    pod: str = ""  # the key of the pod running it now (a resumed Job's pod has a new name)


@dataclass
class TwinResult:
    """Totals over the measured window [warmup, horizon) (GPU-seconds unless named)."""

    label: str
    pool_gpus: int
    window_seconds: float
    window_start: float = 0.0
    inference_needed: float = 0.0  # cards' time serving requests (served / rate)
    inference_allocated: float = 0.0
    training_allocated: float = 0.0
    training_progress: float = 0.0  # work done (lost or not)
    training_lost: float = 0.0  # progress later lost to a preemption
    restart_overhead: float = 0.0  # allocated while restarting or waiting for a repartition
    jobs_done: int = 0
    jobs_started: int = 0
    waits: list[float] = field(default_factory=list)
    waiting_at_end: int = 0
    bins: int = 0
    bins_met: int = 0
    shortfall: float = 0.0
    evictions: int = 0
    training_evictions: int = 0
    scale_ups: int = 0
    scale_downs: int = 0
    cycles: int = 0
    seconds: float = 0.0
    series: list[tuple[float, float, float, float]] = field(default_factory=list)
    """(hours, inference cards, inference cards needed, training cards) per cycle."""
    failure: dict = field(default_factory=dict)
    """Node failures (`FailureClock.summary`), when the run has them."""
    idle: dict[tuple[int, str], float] = field(default_factory=dict)
    """Idle card-seconds (no running pod) by (day, why): `IDLE_WHY`."""
    idle_detail: dict[str, float] = field(default_factory=dict)
    """The idle while training waited, card-seconds by detail: the message the planner held
    the first waiting job that fitted one node with (its `held`), or the smallest waiting
    job's size and the free cards."""

    @property
    def allocated(self) -> float:
        return self.inference_allocated + self.training_allocated

    def idle_rows(self) -> list[dict]:
        """The idle breakdown (`IDLE_WHY`) per day of the window and over it, as % of the
        pool's card-time."""
        days = sorted({d for d, _ in self.idle})
        rows = []
        for d in [*days, None]:
            span = DAY if d is not None else self.window_seconds
            if d is not None:  # a partial first or last day counts its measured part
                lo = max(d * DAY, self.window_start)
                span = max(1.0, min((d + 1) * DAY, self.window_start + self.window_seconds) - lo)
            cap = self.pool_gpus * span
            row = {"run": self.label, "day": d + 1 if d is not None else "all"}
            total = 0.0
            for why in IDLE_WHY:
                v = sum(x for (dd, w), x in self.idle.items() if w == why and d in (None, dd))
                row[why] = f"{v / cap:.1%}"
                total += v
            row["idle"] = f"{total / cap:.1%}"
            rows.append(row)
        return rows

    def record(self) -> dict:
        cap = self.pool_gpus * self.window_seconds or 1.0
        hours = self.window_seconds / 3600 or 1.0
        useful = self.inference_needed + self.training_progress - self.training_lost
        done = self.training_progress - self.training_lost
        waits = sorted(self.waits)

        def pct(q: float) -> float:
            return waits[min(len(waits) - 1, int(q * (len(waits) - 1) + 0.5))] if waits else 0.0

        return {
            "run": self.label,
            "gpus": self.pool_gpus,
            "hours": round(self.window_seconds / 3600, 2),
            "useful_utilisation": round(useful / cap, 4),
            "allocation": round(self.allocated / cap, 4),
            "inference_needed": round(self.inference_needed / cap, 4),
            "inference_overprovisioned": round(
                (self.inference_allocated - self.inference_needed) / cap, 4
            ),
            "training": round(self.training_allocated / cap, 4),
            "slo_attainment": round(self.bins_met / self.bins, 5) if self.bins else 1.0,
            "shortfall_gpu_s": round(self.shortfall, 1),
            "training_gpu_h_done": round(done / 3600, 2),
            "jobs_done": self.jobs_done,
            "jobs_started": self.jobs_started,
            "queue_wait_p50_s": round(pct(0.5), 1),
            "queue_wait_p99_s": round(pct(0.99), 1),
            "jobs_waiting_at_end": self.waiting_at_end,
            "preemptions_per_hour": round(self.training_evictions / hours, 3),
            "evictions": self.evictions,
            "gpu_h_lost": round((self.training_lost + self.restart_overhead) / 3600, 2),
            "lost_share": round((self.training_lost + self.restart_overhead) / done, 4)
            if done > 0
            else 0.0,
            "scale_ups": self.scale_ups,
            "scale_downs": self.scale_downs,
            "cycles": self.cycles,
            "seconds": round(self.seconds, 2),
            **self.failure,
        }


IDLE_WHY = {
    "finished": "a job finished during the interval (its cards wait for the next cycle)",
    "dry": "no training job waiting (the queue ran dry)",
    "fits": "a waiting job fitted the free cards of one node, not placed",
    "fragmented": "the free cards sum to a waiting job's size, on no single node",
    "short": "fewer free cards than the smallest waiting job",
    "down": "the node is down or fenced",
}
"""Why a card is idle over a cycle's interval, judged after the plan and the scheduler:
what waited then (training pods pending, suspended Jobs, jobs arrived but not yet pods)."""


@dataclass
class _RunState:
    """What one run of the twin carries from cycle to cycle."""

    res: TwinResult
    snap: ObservedState
    nxt: int = 0  # next job to arrive
    backlog: float = 0.0
    # running replica -> when it serves
    ready_at: dict[str, float] = field(default_factory=dict)
    # node -> when its repartitioned cards serve
    node_ready: dict[str, float] = field(default_factory=dict)
    # card -> when a checkpointing victim leaves
    card_free: dict[tuple[str, int], float] = field(default_factory=dict)
    running: dict[str, _Job] = field(default_factory=dict)


class Twin:
    """One run of the twin; `run()` returns its `TwinResult`."""

    def __init__(
        self,
        desired: DesiredState,
        load: LoadCurve,
        jobs: Sequence[JobSpec],
        cfg: TwinConfig,
        *,
        label: str = "unified",
    ) -> None:
        self.desired = desired
        self.load = load
        self.cfg = cfg
        self.label = label
        pol, target = service_target(desired, cfg.service)
        self.forecast = forecast_plan(pol.metadata.name, pol, target)
        fc = pol.spec.forecast
        if fc is not None and fc.query is not None:
            raise ValueError(
                f"ScalingPolicy/{pol.metadata.name}: the twin answers the default forecast "
                "query only (forecast.statistic), not forecast.query"
            )
        self.statistic = fc.statistic if fc is not None else "max"
        svc_class, self.training_class = _default_classes(desired, cfg)
        self.training_pool = cfg.training_pool or pol.spec.pool
        for name in (pol.spec.pool, self.training_pool):
            if name not in desired.pools:
                raise ValueError(f"pool {name} is not in the desired state")
        self.start = cfg.start or load.start
        self.horizon = min(cfg.horizon or load.seconds, load.seconds)
        if cfg.warmup >= self.horizon:
            raise OptionError(
                f"{FLAG}: the warm-up ({cfg.warmup:g} s) leaves nothing of the "
                f"{self.horizon:g} s simulated; give a shorter one",
                "warmup",
            )
        pp = desired.priority
        self.grace = pp.spec.preemption.checkpoint_grace_period.total_seconds() if pp else 0.0
        self.nodes = pool_nodes(desired)
        self.pool_gpus = sum(len(n.gpus) for n in self.nodes)
        self.service = InferenceService(
            namespace=target.namespace,
            name=target.name,
            kind=target.kind,
            replicas=0,
            replica_request=Request(gpus=cfg.replica_gpus),
            priority_class=svc_class,
            pool=pol.spec.pool,
            queue_length=0.0,
            pending_seconds_p99=0.0,
        )
        self.jobs = [
            _Job(j, f"{cfg.training_namespace}/{j.name}")
            for j in sorted(jobs, key=lambda j: j.arrival)
        ]
        self.by_key = {j.key: j for j in self.jobs}
        if len(self.by_key) != len(self.jobs):
            raise ValueError("training job names must be unique")
        self.failures = None
        if cfg.failure_rate > 0:
            self.failures = FailureClock(
                self.nodes, self.horizon, cfg.failure_rate, cfg.repair_time, cfg.failure_seed
            )

    def job_of(self, w: Workload) -> _Job | None:
        """The training job `w` is a pod of (by its owning Job: a Job the planner suspended
        and resumed runs again in a pod of another name)."""
        if w.owner_kind != "Job" or w.namespace != self.cfg.training_namespace:
            return None
        return self.by_key.get(f"{w.namespace}/{w.owner_name}")

    def at(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    def _pod(self, j: _Job) -> Workload:
        return Workload(
            namespace=self.cfg.training_namespace,
            name=j.spec.name,
            priority_class=self.training_class,
            phase="Pending",
            request=Request(gpus=j.spec.gpus),
            pool=self.training_pool,
            created_at=self.at(j.spec.arrival),
            owner_kind="Job",
            owner_name=j.spec.name,
            checkpointable=j.spec.checkpointable,
        )

    def run(self, progress: Progress | None = None) -> TwinResult:
        cfg, P = self.cfg, self.cfg.period
        res = TwinResult(
            self.label, self.pool_gpus, max(0.0, self.horizon - cfg.warmup), cfg.warmup
        )
        wall = time.perf_counter()
        snap = ObservedState(observed_at=self.start, nodes=self.nodes, services=[self.service])
        s = _RunState(res, snap)
        n_cycles = math.ceil(self.horizon / P)
        for k in range(n_cycles):
            self._cycle(s, k * P)
            res.cycles += 1
            if progress is not None:
                progress(k + 1, n_cycles)
        end = self.horizon
        res.waiting_at_end = sum(
            1 for j in self.jobs if j.spec.arrival < end and j.first_start is None
        )
        res.seconds = time.perf_counter() - wall
        if self.failures is not None:
            res.failure = self.failures.summary(cfg.warmup, self.horizon)
        return res

    def _cycle(self, s: _RunState, t: float) -> None:
        """One controller cycle at twin time `t` and the interval [t, t + period) after it."""
        cfg, P = self.cfg, self.cfg.period
        res = s.res
        measured = t >= cfg.warmup
        now = self.at(t)
        if self.failures is not None:  # nodes fail and return (before the planner looks)
            self.failures.cycle(self, s, t, measured)
        # 1. arrivals
        self._arrive(s, t)
        # 2. the real planner (with the history a forecast reads)
        if self.forecast:
            s.snap = s.snap.model_copy(update={"signals": self._history(t)})
        p = plan(self.desired, s.snap, now)
        asked = self._count_plan(s, p, t, measured)
        before = {w.key: w for w in s.snap.workloads if w.phase == "Running"}
        # 3. the shared effect model
        s.snap = step(self.desired, s.snap, p, now=now, period=timedelta(seconds=P))
        after = {w.key: w for w in s.snap.workloads}
        self._stopped(s, before, after, asked, t, measured)
        self._bound(s, before, t, measured)
        # 4. the interval [t, t + P)
        t1 = min(t + P, self.horizon)
        svc = next(x for x in s.snap.services if x.key == self.service.key)
        replicas = [w for w in s.snap.workloads if w.phase == "Running" and svc.owns(w)]
        alloc_inf = len(replicas) * cfg.replica_gpus
        served_rate, needed_cards, ready = self._serve(s, replicas, t, t1, measured)
        done, train_cards = self._train(s, after, t, t1, measured)
        if measured:
            self._idle(s, t, t1, done)
            res.series.append((round(t / 3600, 4), alloc_inf, round(needed_cards, 3), train_cards))
        # 5. what the next snapshot shows
        if done:
            s.snap = finish(self.desired, s.snap, done, now=self.at(t1))
        self._export(s, svc, replicas, served_rate, ready, t1)

    def _history(self, t: float) -> list[SignalReading]:
        """The readings of the policy's forecast queries at `t`, as Prometheus would answer
        them from the serving stack's recorded queue: per previous day, the highest queue (the
        mean, with statistic avg) the load curve gives over that day's window (requests/s x
        concurrency / service rate: the queue with enough replicas, as the twin exports it
        without backlog); with forecast.model scaled, the mean over the level window that
        ended now and on each previous day at this time. A window before the curve starts is
        an empty result (no history)."""
        cfg = self.cfg
        per = cfg.concurrency / cfg.service_rate
        out = []
        for f in self.forecast:
            lo = t + f.start
            bins = self.load.window(lo, lo + f.window) if lo >= 0 else []
            samples = []
            if bins:
                stat = "avg" if f.signal == FORECAST_LEVEL else self.statistic
                samples = [SignalSample(value=self._statistic(bins, stat) * per)]
            out.append(SignalReading(id=f.query.id, query=f.query.query, samples=samples))
        return out

    @staticmethod
    def _statistic(bins: list[tuple[float, float, float]], statistic: str) -> float:
        """Requests/s over `bins` as the default query sums up a window: the highest bin
        (max_over_time) or the mean (avg_over_time)."""
        if statistic == "avg":
            return sum(req for _, _, req in bins) / sum(width for _, width, _ in bins)
        return max(req / width for _, width, req in bins)

    def _arrive(self, s: _RunState, t: float) -> None:
        """The jobs that have arrived by `t` become pending pods, at most `max_pending`."""
        new = []
        pending = sum(
            1 for w in s.snap.workloads if w.phase == "Pending" and self.job_of(w) is not None
        ) + len(s.snap.suspended_jobs)
        while (
            s.nxt < len(self.jobs)
            and self.jobs[s.nxt].spec.arrival <= t
            and pending + len(new) < self.cfg.max_pending
        ):
            new.append(self._pod(self.jobs[s.nxt]))
            s.nxt += 1
        if new:
            s.snap = s.snap.model_copy(update={"workloads": [*s.snap.workloads, *new]})

    def _count_plan(self, s: _RunState, p: Plan, t: float, measured: bool) -> set[str]:
        """The plan's actions counted and its repartitions timed; returns the workloads it
        asks to checkpoint."""
        res = s.res
        asked = set()
        for a in p.actions:
            if a.kind == "checkpoint":
                asked.add(a.target)
            elif isinstance(a, MigReconfigure | SetSharing):
                s.node_ready[a.target] = t + self.cfg.repartition_time
            elif a.kind in ("preempt", "reclaim", "move") and measured:
                res.evictions += 1
            elif a.kind == "scale" and measured:
                if a.to_replicas > a.from_replicas:
                    res.scale_ups += 1
                else:
                    res.scale_downs += 1
        return asked

    def _stopped(
        self,
        s: _RunState,
        before: dict[str, Workload],
        after: dict[str, Workload],
        asked: set[str],
        t: float,
        measured: bool,
    ) -> None:
        """The pods that ran before the step and do not any more: a replica stops serving, a
        job loses the work since its last checkpoint."""
        cfg, res = self.cfg, s.res
        for key, w in before.items():
            if key in after and after[key].phase == "Running":
                continue
            j = self.job_of(w)
            if j is None:
                s.ready_at.pop(key, None)
                continue
            if key in asked:
                # the executor asks for a checkpoint and evicts once the pod marks it
                # done or the grace period is over (apply/handlers/workloads.py,
                # _grace_left): a checkpointable job saves its work and frees the cards
                # after checkpoint_time, another holds them for the whole grace period
                if j.spec.checkpointable:
                    j.saved, j.saved_at = j.progress, t
                wait = min(cfg.checkpoint_time, self.grace) if j.spec.checkpointable else self.grace
                for al in w.allocations:
                    s.card_free[(w.node or "", al.gpu)] = t + wait
            lost = j.progress - j.saved
            if measured:
                res.training_evictions += 1
                res.training_lost += lost * j.spec.gpus
            j.progress = j.saved
            j.restarts += 1
            j.running = False

    def _bound(self, s: _RunState, before: dict[str, Workload], t: float, measured: bool) -> None:
        """Newly bound pods: a job starts (after its restart cost and any wait for its cards),
        a replica serves after its load time."""
        cfg, res = self.cfg, s.res
        for w in s.snap.workloads:
            if w.phase != "Running" or w.key in before:
                continue
            delay = max(
                [s.node_ready.get(w.node or "", 0.0)]
                + [s.card_free.get((w.node or "", al.gpu), 0.0) for al in w.allocations]
            )
            j = self.job_of(w)
            if j is not None:
                j.running = True
                j.pod = w.key
                s.running[j.key] = j
                j.overhead_until = max(t + (cfg.restart_cost if j.restarts else 0.0), delay)
                if j.first_start is None:
                    j.first_start = t
                    if measured or j.spec.arrival >= cfg.warmup:
                        res.jobs_started += 1
                        res.waits.append(t - j.spec.arrival)
            elif self.service.owns(w):
                s.ready_at[w.key] = max(t, delay) + cfg.load_time

    def _serve(
        self, s: _RunState, replicas: list[Workload], t: float, t1: float, measured: bool
    ) -> tuple[float, float, int]:
        """The load's bins in [t, t1) served by the ready replicas, the rest carried over.
        Returns the last bin's served rate, the cards it needed and the replicas ready."""
        cfg, res = self.cfg, s.res
        g = cfg.replica_gpus
        alloc_inf = len(replicas) * g
        served_rate = 0.0
        needed_cards = 0.0
        ready = 0
        for lo, width, req in self.load.window(t, t1):
            ready = sum(1 for w in replicas if s.ready_at.get(w.key, math.inf) <= lo)
            cap = ready * cfg.service_rate * width
            total = s.backlog + req
            served = min(total, cap)
            s.backlog = total - served
            served_rate = served / width
            needed_cards = served / (cfg.service_rate * width) * g
            if measured:
                res.bins += 1
                res.bins_met += s.backlog <= 1e-9
                demand = req / (cfg.service_rate * width) * g
                res.shortfall += max(0.0, demand - ready * g) * width
                res.inference_needed += needed_cards * width
                res.inference_allocated += alloc_inf * width
        return served_rate, needed_cards, ready

    def _train(
        self, s: _RunState, after: dict[str, Workload], t: float, t1: float, measured: bool
    ) -> tuple[list[str], int]:
        """The running jobs progress over [t, t1) and checkpoint on their own. Returns the
        pods of the jobs that finished and the cards training held."""
        res = s.res
        done: list[str] = []
        train_cards = 0
        for j in list(s.running.values()):
            w = after.get(j.pod)
            if not j.running or w is None or w.phase != "Running":
                j.running = False
                del s.running[j.key]
                continue
            train_cards += j.spec.gpus
            begin = min(max(t, j.overhead_until), t1)
            left = j.spec.duration - j.progress
            end = min(t1, begin + left)
            ran = max(0.0, end - begin)
            old = j.progress
            j.progress += ran
            if j.progress >= j.spec.duration - 1e-9:
                j.done_at = end
                j.saved = j.progress
                done.append(j.pod)
                j.running = False
                del s.running[j.key]
            else:
                cp = j.spec.checkpoint_period
                mark = math.floor(j.progress / cp) * cp
                if mark > j.saved:
                    j.saved = mark
                    j.saved_at = begin + (mark - old)
            if measured:
                res.training_allocated += j.spec.gpus * ((end if j.done_at is not None else t1) - t)
                res.training_progress += j.spec.gpus * ran
                res.restart_overhead += j.spec.gpus * (begin - t)
                res.jobs_done += j.done_at is not None
        return done, train_cards

    def _idle(self, s: _RunState, t: float, t1: float, done: list[str]) -> None:
        """Sorts the interval's idle cards by why they idle (`IDLE_WHY`), per day."""
        res = s.res
        day = int(t // DAY)
        held: dict[str, set[int]] = {}
        for w in s.snap.workloads:
            if w.node and w.phase == "Running":
                held.setdefault(w.node, set()).update(al.gpu for al in w.allocations)
        gone = set(done)
        for w in s.snap.workloads:  # a finished job's cards idle from its end to t1
            j = self.job_of(w) if w.key in gone else None
            if j is not None and j.done_at is not None:
                k = (day, "finished")
                res.idle[k] = res.idle.get(k, 0.0) + j.spec.gpus * (t1 - j.done_at)
        up: dict[str, int] = {}
        down = 0
        for n in s.snap.nodes:
            free = len(n.gpus) - len(held.get(n.name, ()))
            if not n.ready or n.unschedulable:
                down += free
            else:
                up[n.name] = free
        width = t1 - t

        def add(why: str, cards: float) -> None:
            if cards > 0:
                res.idle[(day, why)] = res.idle.get((day, why), 0.0) + cards * width

        add("down", down)
        free = sum(up.values())
        if free <= 0:
            return
        waiting: list[tuple[int, str]] = [
            (w.request.gpus, w.held)
            for w in s.snap.workloads
            if w.phase == "Pending" and self.job_of(w) is not None
        ]
        waiting += [(sj.request.gpus * sj.parallelism, "suspended") for sj in s.snap.suspended_jobs]
        waiting += [
            (j.spec.gpus, "not yet a pod")
            for j in itertools.takewhile(
                lambda j: j.spec.arrival <= t, itertools.islice(self.jobs, s.nxt, None)
            )
        ]
        if not waiting:
            add("dry", free)
            return
        most = max(up.values(), default=0)
        fits = [(g, h) for g, h in waiting if g <= most]
        least = min(g for g, _ in waiting)
        if fits:
            why, detail = "fits", "fits: " + (fits[0][1] or "").split(":")[0][:60]
        else:
            why = "fragmented" if free >= least else "short"
            first = next((h for g, h in waiting if g == least), "")
            inf_nodes = len(
                {w.node for w in s.snap.workloads if w.phase == "Running" and self.service.owns(w)}
            )
            detail = (
                f"{why}: smallest waiting {least}, inference on {inf_nodes} nodes; "
                + (first or "").split(":", 1)[-1][:90]
            )
        add(why, free)
        res.idle_detail[detail] = res.idle_detail.get(detail, 0.0) + free * width

    def _export(
        self,
        s: _RunState,
        svc: InferenceService,
        replicas: list[Workload],
        served_rate: float,
        ready: int,
        t1: float,
    ) -> None:
        """What the serving stack and the jobs export into the next snapshot."""
        cfg = self.cfg
        wait = (
            s.backlog / (ready * cfg.service_rate)
            if ready
            else (s.backlog / cfg.service_rate if s.backlog > 0 else 0.0)
        )
        svc = svc.model_copy(
            update={
                "queue_length": s.backlog + served_rate * cfg.concurrency / cfg.service_rate,
                "pending_seconds_p99": wait,
                "ready_replicas": sum(1 for w in replicas if s.ready_at.get(w.key, math.inf) <= t1),
            }
        )
        # each job exports its own periodic checkpoints (`last-checkpoint`, as a job
        # that writes them does); one the plan asked for is the effect model's (only a
        # checkpointable job answers it, actions._checkpoint), the same time as saved_at
        workloads = []
        for w in s.snap.workloads:
            j = self.job_of(w)
            if j is not None and j.saved_at is not None and w.phase == "Running":
                w = w.model_copy(update={"last_checkpoint_at": self.at(j.saved_at)})
            workloads.append(w)
        s.snap = s.snap.model_copy(
            update={
                "services": [svc if x.key == self.service.key else x for x in s.snap.services],
                "workloads": workloads,
            }
        )


def run_twin(
    desired: DesiredState,
    load: LoadCurve,
    jobs: Sequence[JobSpec],
    cfg: TwinConfig,
    *,
    label: str = "unified",
    progress: Progress | None = None,
) -> TwinResult:
    return Twin(desired, load, jobs, cfg, label=label).run(progress)


# ----------------------------------------------------------------------------- the comparison
def inference_mean_gpus(load: LoadCurve, cfg: TwinConfig, horizon: float) -> float:
    """Mean cards the load needs over [0, horizon) at the service rate."""
    return load.mean_rate(horizon) / cfg.service_rate * cfg.replica_gpus


def static_sizes(desired: DesiredState, pool: str) -> list[int]:
    """Every static inference partition of `pool` on whole nodes (at least one node each)."""
    cap = desired.pools[pool].spec.capacity
    return [n * cap.gpus_per_node for n in range(1, cap.nodes)]


@dataclass
class Comparison:
    unified: TwinResult
    static: list[tuple[int, TwinResult]]
    best: int | None
    """The smallest static inference partition whose SLO attainment meets the unified
    pool's (None: no static split does)."""
    training_gpus: float
    """The capacity the training load is relative to: pool cards - mean inference need."""
    jobs: int

    def records(self) -> list[dict]:
        out = [{**self.unified.record(), "inference_cards": "elastic", "best": ""}]
        for n, r in self.static:
            out.append(
                {**r.record(), "inference_cards": n, "best": "best" if n == self.best else ""}
            )
        return out


def training_jobs(
    desired: DesiredState,
    load: LoadCurve,
    base_jobs: Sequence[JobSpec],
    cfg: TwinConfig,
    *,
    training_load: float,
) -> tuple[list[JobSpec], float]:
    """The jobs with arrivals scaled so that they offer `training_load` x (the service
    pool's cards - the load's mean inference need) over the span, durations kept; jobs
    larger than a node left out. Returns them and that training capacity."""
    pol, _ = service_target(desired, cfg.service)
    pool = pol.spec.pool
    horizon = min(cfg.horizon or load.seconds, load.seconds)
    cap = desired.pools[pool].spec.capacity
    gpus = cap.nodes * cap.gpus_per_node
    train_gpus = gpus - inference_mean_gpus(load, cfg, horizon)
    if train_gpus <= 0:
        raise OptionError(
            f"the load needs {gpus - train_gpus:.1f} cards on average, more than {pool}'s {gpus}:"
            f" raise {FLAG} (requests/s one replica serves)",
            "service_rate",
        )
    jobs = scaled(base_jobs, load=training_load, gpus=train_gpus, horizon=horizon)
    biggest = cap.gpus_per_node
    return [j for j in jobs if j.gpus <= biggest], train_gpus


def compare(
    desired: DesiredState,
    load: LoadCurve,
    base_jobs: Sequence[JobSpec],
    cfg: TwinConfig,
    *,
    training_load: float,
    sizes: Sequence[int] | None = None,
    progress: Callable[[str], Progress | None] | None = None,
) -> Comparison:
    """The unified pool and the static splits of the service's pool (`sizes`: inference
    cards; default every whole-node split), on the same load and the same jobs: the
    jobs' arrivals scaled so that they offer `training_load` x (pool cards - mean inference
    need), durations kept."""
    pol, _ = service_target(desired, cfg.service)
    pool = pol.spec.pool
    jobs, train_gpus = training_jobs(desired, load, base_jobs, cfg, training_load=training_load)

    def bar(label: str) -> Progress | None:
        return progress(label) if progress is not None else None

    unified = run_twin(desired, load, jobs, cfg, label="unified", progress=bar("unified"))
    target = unified.record()["slo_attainment"]
    static = []
    for n in sizes if sizes is not None else static_sizes(desired, pool):
        d, train_pool = static_split(desired, pool, n)
        c = dataclasses.replace(cfg, training_pool=train_pool)
        static.append(
            (n, run_twin(d, load, jobs, c, label=f"static-{n}", progress=bar(f"static {n}")))
        )
    best = next((n for n, r in sorted(static) if r.record()["slo_attainment"] >= target), None)
    return Comparison(unified, static, best, train_gpus, len(jobs))
