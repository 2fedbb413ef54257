"""What bench/admission_openb.py compares gpupool's admission with, and what the comparison
shares: the workload (an openb slice, its arrivals packed to a target load), the results and
their metrics (allocation, FGD's fragmentation rate, waits), the simulator's runs (the
planner's placement code without a cluster), and kube-scheduler's bin-packing profile (a
second profile of the control plane's one scheduler, chosen by `spec.schedulerName`).

Not a benchmark of its own: admission_openb.py runs it (its docstring and bench/README.md).
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reconciler.conventions import GPU_RESOURCE
from reconciler.plan.placement import (
    GPU_MILLI,
    NodeState,
    Placement,
    PlacementContext,
    PodDemand,
    allocate,
    choose,
    cluster_fragmentation,
    release,
    typical_workload,
)
from reconciler.sim.timeline import BUSY_FROM
from reconciler.sim.trace import NodeSpec, Pod

MODEL = "H100-SXM5-80GB"
UNMETERED = 10**9
UNSATURATED = 0.8  # creation -> binding is also shown for pods created below this allocation

# --------------------------------------------------------------------------- kube-scheduler

BINPACK_SCHEDULER = "binpack-scheduler"  # the bin-packing profile's schedulerName

# kube-scheduler's configuration (kubescheduler.config.k8s.io/v1, as v1.37 reads it): the
# default profile as it is (LeastAllocated; the default run, and what binds gpupool's admitted
# pods), and a second profile a platform engineer would configure for bin packing GPUs
# (kubernetes.io "Resource Bin Packing": NodeResourcesFit, scoringStrategy MostAllocated,
# weighted on nvidia.com/gpu). One scheduler serves both; a pod picks one by spec.schedulerName.
# With --config, kube-scheduler ignores --kubeconfig: the client connection is set here.
SCHEDULER_CONFIG = """\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {{kubeconfig: "{kubeconfig}"}}
leaderElection: {{leaderElect: false}}
profiles:
  - schedulerName: default-scheduler
  - schedulerName: {binpack}
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources:
              - {{name: {gpu}, weight: 10}}
              - {{name: cpu, weight: 1}}
              - {{name: memory, weight: 1}}
"""


# --------------------------------------------------------------------------- inputs


@dataclass
class Job:
    idx: int
    name: str
    gpus: int
    arrival: float  # trace seconds after the first arrival, packed by the density
    work: float  # trace seconds of work once running


@dataclass
class Workload:
    jobs: list[Job]
    nodes: list[NodeSpec]
    density: float
    speed: float
    t_last: float  # trace seconds: the last arrival
    t_end: float  # trace seconds: when the replay stops
    offered: float  # offered GPU demand / capacity over [0, t_last]
    trace_from: int  # creation time of the slice's first pod
    trace_to: int

    @property
    def capacity(self) -> int:
        return sum(n.gpus for n in self.nodes)


def offered_load(raw: list[Pod], density: float, capacity: int) -> float:
    """Mean GPU demand over [first, last arrival] / capacity, each pod counted from its arrival
    for its whole work time, with the arrivals packed `density` times closer."""
    c0 = raw[0].creation_time
    span = (raw[-1].creation_time - c0) / density
    if span <= 0:
        return float("inf")
    busy = 0.0
    for p in raw:
        a = (p.creation_time - c0) / density
        busy += p.req.num_gpu * max(0.0, min(float(p.deletion_time - p.creation_time), span - a))
    return busy / span / capacity


def build_workload(args: argparse.Namespace, nodes: list[NodeSpec], pods: list[Pod]) -> Workload:
    rng = random.Random(args.seed)
    gpu_nodes = [n for n in nodes if n.gpus > 0]
    if args.nodes > len(gpu_nodes):
        raise SystemExit(f"--nodes {args.nodes}: the trace has {len(gpu_nodes)} GPU nodes")
    chosen = sorted(rng.sample(gpu_nodes, args.nodes), key=lambda n: n.name)
    whole = sorted(
        (
            p
            for p in pods
            if p.req.num_gpu >= 1
            and p.req.gpu_milli == GPU_MILLI
            and p.creation_time is not None
            and p.deletion_time is not None
            and p.creation_time >= BUSY_FROM
        ),
        key=lambda p: (p.creation_time, p.name),
    )
    largest = max(n.gpus for n in chosen)
    whole = [p for p in whole if p.req.num_gpu <= largest]  # never placeable otherwise
    if len(whole) < 2:
        raise SystemExit("the pod trace has fewer than 2 whole-card pods in its busy period")
    count = min(args.pods, len(whole))
    start = rng.randrange(len(whole) - count + 1)
    raw = whole[start : start + count]
    capacity = sum(n.gpus for n in chosen)
    lo, hi = 1e-3, 1e7
    if offered_load(raw, hi, capacity) < args.load:
        density = hi
    else:
        for _ in range(80):  # offered load grows with the density: bisect in log space
            mid = (lo * hi) ** 0.5
            if offered_load(raw, mid, capacity) < args.load:
                lo = mid
            else:
                hi = mid
        density = hi
    c0 = raw[0].creation_time
    jobs = [
        Job(
            i,
            p.name,
            p.req.num_gpu,
            (p.creation_time - c0) / density,
            float(max(1, p.deletion_time - p.creation_time)),
        )
        for i, p in enumerate(raw)
    ]
    t_last = jobs[-1].arrival
    speed = args.speed or t_last / args.window
    return Workload(
        jobs=jobs,
        nodes=[NodeSpec(n.name, n.cpu_milli, n.memory_mib, n.gpus, MODEL) for n in chosen],
        density=density,
        speed=speed,
        t_last=t_last,
        t_end=t_last + args.tail * speed,
        offered=offered_load(raw, density, capacity),
        trace_from=raw[0].creation_time,
        trace_to=raw[-1].creation_time,
    )


# --------------------------------------------------------------------------- metrics

GRID = 40  # fragmentation is measured at t_last * k / GRID, k = 1..GRID


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def target_ctx(jobs: list[Job]) -> PlacementContext:
    """FGD's target workload: the slice's own whole-card demand (as the planner takes its
    pool's observed requests)."""
    return PlacementContext(
        target=typical_workload(PodDemand(num_gpu=j.gpus, gpu_milli=GPU_MILLI) for j in jobs)
    )


def frag_rate(free: list[tuple[str, int, int]], ctx: PlacementContext) -> float:
    """FGD's fragmentation rate over (node, cards, free cards): the free GPU a task drawn from
    the target workload could not use, over the free GPU."""
    states = [
        NodeState(n, MODEL, UNMETERED, UNMETERED, [GPU_MILLI] * f + [0] * (c - f))
        for n, c, f in free
    ]
    frag, total = cluster_fragmentation(states, ctx)
    return frag / total if total else 0.0


@dataclass
class Result:
    name: str
    alloc: list[tuple[float, float]] = field(default_factory=list)  # (trace t, ratio)
    frag: list[tuple[float, float]] = field(default_factory=list)  # (trace t, FGD rate)
    waits: list[float] = field(default_factory=list)  # trace seconds, creation -> binding
    waits_wall: list[float] | None = None
    never: Counter = field(default_factory=Counter)  # cards per pod -> pods never started
    notes: dict[str, Any] = field(default_factory=dict)

    def mean_alloc(self, t_last: float) -> float:
        """Time-weighted mean between 0 and t_last of the allocation (a step function)."""
        pts = [(t, a) for t, a in self.alloc if t <= t_last]
        if not pts or t_last <= 0:
            return 0.0
        area = 0.0
        for (t0, a0), (t1, _) in zip(pts, [*pts[1:], (t_last, 0.0)], strict=True):
            area += a0 * (t1 - t0)
        return area / t_last

    def alloc_at(self, t: float) -> float:
        i = bisect.bisect_right([s[0] for s in self.alloc], t) - 1
        return self.alloc[i][1] if i >= 0 else 0.0

    def mean_frag(self) -> float:
        return sum(f for _, f in self.frag) / len(self.frag) if self.frag else 0.0


# --------------------------------------------------------------------------- simulator


def simulate(wl: Workload, policy: str, seed: int) -> Result:
    """The same pods, nodes, arrivals and work times through the planner's placement code: at
    every arrival or finish the waiting pods, in arrival order, are placed where they fit
    (backfill), as `reconciler.sim.timeline` does, without preemption or migration."""
    states = [
        NodeState(n.name, MODEL, UNMETERED, UNMETERED, [GPU_MILLI] * n.gpus) for n in wl.nodes
    ]
    by_name = {s.name: s for s in states}
    cap = wl.capacity
    ctx = target_ctx(wl.jobs)
    ctx.rng, ctx.memo = random.Random(f"{policy}/{seed}"), True
    frag_ctx = target_ctx(wl.jobs)
    res = Result(f"sim {policy}")
    events: list[tuple[float, int, int]] = [(j.arrival, 1, j.idx) for j in wl.jobs]
    heapq.heapify(events)
    pending: list[Job] = []
    placed: dict[int, Placement] = {}
    started: dict[int, float] = {}
    used = releases = 0
    failed_at: dict[int, int] = {}  # cards -> releases when it last failed
    busy_at: dict[int, float] = {}  # job -> allocation when it arrived
    grid = [wl.t_last * k / GRID for k in range(1, GRID + 1)]

    def measure_until(t: float) -> None:
        while grid and grid[0] <= t:
            free = [(s.name, s.num_gpus, s.gpu_free_milli.count(GPU_MILLI)) for s in states]
            res.frag.append((grid.pop(0), frag_rate(free, frag_ctx)))

    while events and events[0][0] <= wl.t_end:
        t = events[0][0]
        measure_until(t - 1e-9)  # the state just before t
        while events and events[0][0] == t:
            _, kind, idx = heapq.heappop(events)
            job = wl.jobs[idx]
            if kind == 1:
                pending.append(job)
                busy_at[idx] = used / cap
            else:
                release(by_name[placed[idx].node], PodDemand(job.gpus, GPU_MILLI), placed.pop(idx))
                used -= job.gpus
                releases += 1
        keep = []
        for job in pending:
            req = PodDemand(job.gpus, GPU_MILLI)
            got = None if failed_at.get(job.gpus) == releases else choose(policy, states, req, ctx)
            if got is None:
                failed_at[job.gpus] = releases
                keep.append(job)
                continue
            allocate(by_name[got.node], req, got)
            placed[job.idx] = got
            started[job.idx] = t
            used += job.gpus
            heapq.heappush(events, (t + job.work, 0, job.idx))
        pending = keep
        res.alloc.append((t, used / cap))
    measure_until(wl.t_end)
    res.waits = [started[j.idx] - j.arrival for j in wl.jobs if j.idx in started]
    res.waits_wall = [w / wl.speed for w in res.waits]  # what the trace time takes at --speed
    res.notes["unsaturated_waits"] = [
        (started[j.idx] - j.arrival) / wl.speed
        for j in wl.jobs
        if j.idx in started and busy_at[j.idx] < UNSATURATED
    ]
    res.never = Counter(j.gpus for j in wl.jobs if j.idx not in started)
    return res


def write_scheduler_config(path: Path, kubeconfig: Path) -> Path:
    """kube-scheduler's --config with both profiles, connecting with `kubeconfig`."""
    path.write_text(
        SCHEDULER_CONFIG.format(kubeconfig=kubeconfig, binpack=BINPACK_SCHEDULER, gpu=GPU_RESOURCE)
    )
    return path
