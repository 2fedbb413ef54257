"""Unified pool versus static train/infer split, on the trace's arrivals and departures.

Scenario (assumptions, all stated in docs/simulator.md):

* GPU pods only (CPU-only pods are left out). Whole-card pods whose qos is not LS are
  *training*; fractional pods and LS pods are *inference* (LS = latency-sensitive serving).
* Each pod arrives at its creation_time and needs deletion_time - creation_time
  seconds of run time; only the busy period (creation >= 10,000,000 s) is used.
  The trace's own concurrency (tens of GPUs) is far below the 6,212-GPU cluster it
  describes, so the cluster is a random sample of the trace's nodes sized so that
  the mean offered GPU demand is `load` x its GPUs.
* **static**: nodes are split once, by the mean demand of each class: training gets
  whole nodes (largest first), inference the rest. Each class is placed with best-fit
  inside its own pool; a pod that does not fit waits (training FIFO with backfill).
* **unified**: one pool, placement by `policy` (default ``ours``). Inference has
  priority: a pending inference pod that fits nowhere preempts training pods, chosen
  with `reconciler.plan.victims.order_victims`; a preempted training pod loses the
  work since its last checkpoint and queues again. If no preemption helps, one
  running pod may be migrated to make room (defragmentation).
* Metrics: time-weighted GPU allocation between the first and the last arrival, the
  training queue wait (start - arrival) p50/p99, the inference pending time p99,
  preemptions and migrations.
"""

from __future__ import annotations

import heapq
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from reconciler.plan.placement import (
    GPU_MILLI,
    NodeState,
    Placement,
    PlacementContext,
    PodDemand,
    Resident,
    allocate,
    choose,
    choose_with_migration,
    fits,
    release,
    typical_workload,
)
from reconciler.plan.victims import Candidate, order_victims
from reconciler.sim.replay import Progress
from reconciler.sim.trace import NodeSpec, Pod

BUSY_FROM = 10_000_000  # seconds; 99% of the default trace's pods arrive after this
CHECKPOINT_EVERY = 1800.0  # seconds between training checkpoints (work lost on preemption)
MIN_RUNTIME = 60.0  # a training pod runs at least this long before it can be preempted
PRIO_INFER, PRIO_TRAIN = 1000, 100


@dataclass
class Job:
    idx: int
    name: str
    req: PodDemand
    training: bool
    arrival: float
    work: float  # seconds of work left
    start: float | None = None  # first start
    run_start: float = 0.0
    run_id: int = 0
    placement: Placement | None = None
    waited: float = 0.0


def classify(pod: Pod) -> bool:
    """True for training (whole cards, not latency-sensitive), False for inference."""
    return pod.req.gpu_milli >= GPU_MILLI and pod.qos != "LS"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))
    return s[k]


def build_jobs(pods: Sequence[Pod]) -> list[Job]:
    raw = []
    for p in pods:
        if p.req.num_gpu == 0 or p.creation_time is None or p.deletion_time is None:
            continue
        if p.creation_time < BUSY_FROM:
            continue
        raw.append(p)
    if not raw:
        raise ValueError(
            "the pod trace has no GPU pods with creation/deletion times after 10,000,000 s"
        )
    raw.sort(key=lambda p: (p.creation_time, p.name))
    t0 = raw[0].creation_time
    return [
        Job(
            i,
            p.name,
            p.req,
            classify(p),
            float(p.creation_time - t0),
            float(max(1, p.deletion_time - p.creation_time)),
        )
        for i, p in enumerate(raw)
    ]


def offered_gpus(jobs: Sequence[Job]) -> float:
    """Mean GPU demand between the first and the last arrival if every job started at once."""
    t_first, t_last = jobs[0].arrival, jobs[-1].arrival
    span = max(t_last - t_first, 1.0)
    busy = sum(
        max(0.0, min(j.arrival + j.work, t_last) - j.arrival) * j.req.total_gpu_milli for j in jobs
    )
    return busy / span / GPU_MILLI


def size_cluster(nodes: Sequence[NodeSpec], gpus: float, rng: random.Random) -> list[NodeSpec]:
    """A random sample of the nodes (GPU nodes only) with at least `gpus` GPUs."""
    pool = [n for n in nodes if n.gpus > 0]
    rng.shuffle(pool)
    out, have = [], 0
    for n in pool:
        if have >= gpus:
            break
        out.append(n)
        have += n.gpus
    return out


def _static_split(
    states: list[NodeState], jobs: Sequence[Job]
) -> tuple[list[NodeState], list[NodeState]]:
    train_work = sum(j.work * j.req.total_gpu_milli for j in jobs if j.training)
    all_work = sum(j.work * j.req.total_gpu_milli for j in jobs) or 1
    total = sum(n.num_gpus for n in states)
    want = round(total * train_work / all_work)
    train, infer, got = [], [], 0
    for n in sorted(states, key=lambda n: (-n.num_gpus, n.name)):
        if got < want:
            train.append(n)
            got += n.num_gpus
        else:
            infer.append(n)
    return train, infer


def timeline(
    nodes: Sequence[NodeSpec],
    pods: Sequence[Pod],
    seed: int = 42,
    policy: str = "ours",
    load: float = 0.9,
    progress: Progress | None = None,
) -> list[dict]:
    """Run the static split and the unified pool; one record each."""
    return [
        _run(nodes, pods, seed, policy, load, unified=False, progress=progress),
        _run(nodes, pods, seed, policy, load, unified=True, progress=progress),
    ]


@dataclass
class _Run:
    """One run's cluster, queues and counters, as its event loop keeps them."""

    jobs: list[Job]
    by_name: dict[str, NodeState]
    pools: dict[bool, list[NodeState]]  # training? -> the nodes its pods are placed on
    place_policy: str
    unified: bool
    ctx: PlacementContext
    capacity: int
    t_first: float
    t_last: float
    residents: dict[str, list[Resident]]
    running: dict[str, Job] = field(default_factory=dict)
    # (time, kind 0=finish 1=arrive, job, run_id)
    events: list[tuple[float, int, int, int]] = field(default_factory=list)
    pending_train: list[Job] = field(default_factory=list)
    pending_infer: list[Job] = field(default_factory=list)
    releases: int = 0
    failed_at: dict = field(default_factory=dict)  # (class, request) -> releases at last failure
    allocated: int = 0
    area: float = 0.0
    last_t: float = 0.0
    series: list[tuple[float, float]] = field(default_factory=list)
    preemptions: int = 0
    migrations: int = 0
    done: int = 0

    def account(self, t: float) -> None:
        lo, hi = max(self.last_t, self.t_first), min(t, self.t_last)
        if hi > lo:
            self.area += self.allocated * (hi - lo)
        self.last_t = max(self.last_t, t)

    def start(self, job: Job, placement: Placement, t: float) -> None:
        allocate(self.by_name[placement.node], job.req, placement)
        self.allocated += job.req.total_gpu_milli
        job.placement = placement
        job.run_start = t
        job.run_id += 1
        if job.start is None:
            job.start = t
        self.running[job.name] = job
        self.residents[placement.node].append(
            Resident(job.name, job.req, placement, movable=not job.training)
        )
        heapq.heappush(self.events, (t + job.work, 0, job.idx, job.run_id))

    def stop(self, job: Job) -> None:
        assert job.placement is not None
        release(self.by_name[job.placement.node], job.req, job.placement)
        self.allocated -= job.req.total_gpu_milli
        lst = self.residents[job.placement.node]
        lst[:] = [r for r in lst if r.key != job.name]
        self.running.pop(job.name, None)
        job.placement = None
        self.releases += 1

    def victims(self, job: Job, t: float) -> tuple[NodeState, list[Job]] | None:
        """The node and the training pods whose preemption frees room for inference `job`:
        the fewest pods, then the least work lost, then by node name."""
        running = self.running
        best = None
        for node in self.pools[False]:
            cands = [
                Candidate(
                    key=r.key,
                    priority=PRIO_TRAIN,
                    preemptible=True,
                    over_quota=False,
                    running_seconds=t - running[r.key].run_start,
                    seconds_since_checkpoint=(t - running[r.key].run_start) % CHECKPOINT_EVERY,
                    gpus=r.req.total_gpu_milli / GPU_MILLI,
                )
                for r in self.residents[node.name]
                if r.key in running and running[r.key].training
            ]
            if not cands:
                continue
            order = order_victims(
                cands,
                job.req.total_gpu_milli / GPU_MILLI,
                preemptor_priority=PRIO_INFER,
                min_runtime_seconds=MIN_RUNTIME,
            )
            trial = node.copy()
            victims = []
            for c in order:
                v = running[c.key]
                release(trial, v.req, v.placement)
                victims.append(v)
                if fits(trial, job.req):
                    break
            else:
                continue
            lost = sum((t - v.run_start) % CHECKPOINT_EVERY for v in victims)
            key = (len(victims), lost, node.name)
            if best is None or key < best[0]:
                best = (key, node, victims)
        return None if best is None else best[1:]

    def try_preempt(self, job: Job, t: float) -> bool:
        """Free room for inference `job` by preempting training pods on one node."""
        found = self.victims(job, t)
        if found is None:
            return False
        node, victims = found
        for v in victims:
            ran = t - v.run_start
            lost = ran % CHECKPOINT_EVERY
            self.stop(v)
            v.work = v.work - ran + lost
            self.pending_train.append(v)
            self.preemptions += 1
        placement = choose(self.place_policy, [node], job.req, self.ctx)
        assert placement is not None
        self.start(job, placement, t)
        return True

    def schedule(self, t: float) -> None:
        for queue, training in ((self.pending_infer, False), (self.pending_train, True)):
            keep = []
            for job in queue:
                key = (training, job.req)
                if self.failed_at.get(key) == self.releases:
                    keep.append(job)
                    continue
                placement = choose(self.place_policy, self.pools[training], job.req, self.ctx)
                if placement is None and self.unified and not training:
                    if self.try_preempt(job, t):
                        continue
                    got = choose_with_migration(
                        self.place_policy, self.pools[training], job.req, self.ctx, self.residents
                    )
                    if got is not None:
                        placement, moves = got
                        for mv in moves:
                            mover = self.running[mv.key]
                            self.stop(mover)
                            self.start(mover, mv.target, t)
                            self.migrations += 1
                if placement is None:
                    self.failed_at[key] = self.releases
                    keep.append(job)
                    continue
                self.start(job, placement, t)
            queue[:] = keep

    def play(self, progress: Progress | None) -> None:
        """The event loop: arrivals and finishes in time order, a scheduling pass after each
        instant."""
        jobs = self.jobs
        for j in jobs:
            heapq.heappush(self.events, (j.arrival, 1, j.idx, 0))
        n_events = 2 * len(jobs)
        step = max(1, n_events // 200)
        k = 0
        events = self.events
        while events:
            t = events[0][0]
            self.account(t)
            while events and events[0][0] == t:
                _, kind, idx, run_id = heapq.heappop(events)
                job = jobs[idx]
                k += 1
                if kind == 1:
                    (self.pending_train if job.training else self.pending_infer).append(job)
                elif job.run_id == run_id and job.placement is not None:
                    self.stop(job)
                    self.done += 1
            self.schedule(t)
            if self.t_first <= t <= self.t_last:
                self.series.append((t - self.t_first, self.allocated * 100 / self.capacity))
            if progress is not None and k % step == 0:
                progress(min(k, n_events), n_events)
        if progress is not None:
            progress(n_events, n_events)


def _run(nodes, pods, seed, policy, load, unified, progress) -> dict:
    started = time.perf_counter()
    jobs = build_jobs(pods)
    offered = offered_gpus(jobs)
    rng = random.Random(seed)
    chosen = size_cluster(nodes, offered / load, rng)
    states = [n.state() for n in chosen]
    capacity = sum(n.num_gpus for n in states) * GPU_MILLI
    # jitter arrivals inside their second (the trace has 1 s resolution)
    for j in jobs:
        j.arrival += rng.random()
    ctx = PlacementContext(
        target=typical_workload(j.req for j in jobs),
        rng=random.Random(f"timeline/{seed}"),
        memo=True,
    )
    if unified:
        pools = {True: states, False: states}
        place_policy = policy
    else:
        train_nodes, infer_nodes = _static_split(states, jobs)
        pools = {True: train_nodes, False: infer_nodes}
        place_policy = "bestfit"
    run = _Run(
        jobs=jobs,
        by_name={n.name: n for n in states},
        pools=pools,
        place_policy=place_policy,
        unified=unified,
        ctx=ctx,
        capacity=capacity,
        t_first=jobs[0].arrival,
        t_last=jobs[-1].arrival,
        residents={n.name: [] for n in states},
        last_t=jobs[0].arrival,
    )
    run.play(progress)
    return _record(run, policy, seed, len(states), offered, started)


def _record(run: _Run, policy: str, seed: int, nodes: int, offered: float, started: float) -> dict:
    """One run's record: the metrics of the module docstring and the allocation series."""
    jobs, capacity, series = run.jobs, run.capacity, run.series
    span = max(run.t_last - run.t_first, 1e-9)
    train_wait = [j.start - j.arrival for j in jobs if j.training and j.start is not None]
    infer_wait = [j.start - j.arrival for j in jobs if not j.training and j.start is not None]
    never = sum(1 for j in jobs if j.start is None)
    # thin the series for output
    if len(series) > 2000:
        stride = len(series) // 2000 + 1
        series = series[::stride]
    return {
        "policy": f"unified-{policy}" if run.unified else "static-bestfit",
        "seed": seed,
        "total_gpus": capacity // GPU_MILLI,
        "gpu_allocation_ratio": round(run.area / (capacity * span), 6),
        "fragmentation_rate": 0.0,
        "unscheduled_pods": never,
        "pods": len(jobs),
        "training_pods": sum(1 for j in jobs if j.training),
        "inference_pods": sum(1 for j in jobs if not j.training),
        "nodes": nodes,
        "offered_load": round(offered * GPU_MILLI / capacity, 3),
        "train_wait_p50_s": round(_pct(train_wait, 0.5), 1),
        "train_wait_p99_s": round(_pct(train_wait, 0.99), 1),
        "infer_pending_p99_s": round(_pct(infer_wait, 0.99), 1),
        "preemptions": run.preemptions,
        "migrations": run.migrations,
        "seconds": round(time.perf_counter() - started, 3),
        "series": [(round(x, 1), round(y, 2)) for x, y in series],
    }
