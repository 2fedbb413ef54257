"""gpupool's admission against kube-scheduler alone, on the real control plane (issue 13, item 7;
the bin-packing baseline: issue 28, item 4; the DRA runs: issue 32, item 7).

    .venv/bin/python bench/admission_openb.py                       # 200 nodes, 3,000 pods, ~27 min
    .venv/bin/python bench/admission_openb.py --nodes 40 --pods 600 --window 90   # ~6 min
    .venv/bin/python bench/admission_openb.py --runs gpupool --dump /tmp/failed   # gpupool only
    .venv/bin/python bench/admission_openb.py --runs binpack,gpupool   # against bin packing only
    .venv/bin/python bench/admission_openb.py --runs ""             # the simulator alone
    .venv/bin/python bench/admission_openb.py --runs dra-scheduler,dra-gpupool   # DRA only
    .venv/bin/python bench/admission_openb.py --runs dra-dynmig-scheduler,dra-dynmig-gpupool
    .venv/bin/python bench/admission_openb.py --smoke               # 4 nodes, 40 pods, ~220 s

A slice of the openb trace (../shared/data/openb, or $GPUPOOL_OPENB_DIR) is replayed three times
through the same control plane (tests/cluster: kube-apiserver, kube-scheduler and
kube-controller-manager v1.37.2, built from Go and cached; simulated kubelets; per GPU node the
NVIDIA stand-ins and gpupool's node agent, `World.add_gpu_node` of tests/integration/world.py):

1. **default**: the pods are created in a namespace without the admission label, so
   kube-scheduler alone places them with its default profile (NodeResourcesFit scoring
   LeastAllocated: it spreads);
2. **binpack**: the same, but the pods name a second profile of the same kube-scheduler
   (`spec.schedulerName`; the scheduler runs with `--config`, openb_baselines.py's
   SCHEDULER_CONFIG) that bin-packs GPUs as kubernetes documents it ("Resource Bin Packing"):
   NodeResourcesFit with `scoringStrategy` MostAllocated, `nvidia.com/gpu` weight 10, cpu and
   memory weight 1. The baseline a platform engineer would run for a GPU cluster;
3. **gpupool**: the same pods in a namespace labelled `gpupool.io/admission=gated`
   (deploy/admission-gate.yaml, installed by `world.install`, gates them), with gpupool's
   controller (`reconciler.loop.controller.Controller` as tests/integration/harness.py builds
   it: its ServiceAccount, its informers as `Controller.run` starts them) cycling in this
   script's main thread: `ctl.cycle()`, then `world.settle()` and `world.step_nodes()`, its
   injected clock set to the replay's trace time before each cycle; so gpupool admits every pod;
4. **dra-scheduler**: the pool turned to `spec.backend: dra` (`prepare_dra`: every node
   publishes its cards as a ResourceSlice as NVIDIA's DRA driver does, bench/dra_setup.py; the
   policy gains a Quota naming the DRA namespaces; one controller cycle renders the
   DeviceClass `gpupool-bench-gpu` and the ResourceClaimTemplates `gpupool-bench-gpu-<n>`):
   the same pods ask for their n cards through one claim from that template (no
   `nvidia.com/gpu`), in a namespace without the admission label: kube-scheduler's DRA
   allocator (DynamicResources) alone picks the devices;
5. **dra-gpupool**: the same in a gated namespace with gpupool's controller cycling as in 3:
   exact admission writes each pod's claim for the planned cards before releasing the gate.
   With `--dra-admission allocate` (the default) the pool says `dra: {admission: allocate}`
   and, before this run, the Quota names the gated namespace only, so the pool's guard goes in
   place (`guard_dra`) and gpupool writes the planned cards as the allocation of the claim
   made from the template; with `pin` (the runs before 2026-12-06 22:34 UTC) the pool is not
   guarded and each claim is replaced by one whose CEL selector names the planned cards, which
   kube-scheduler's allocator allocates. Also measured: the share of admitted pods whose allocated
   devices (`status.allocation.devices.results`) are the planned ones (the claim's
   `gpupool.io/planned-devices`), each claim checked when a watch of the namespace's claims
   first shows it allocated. The cards in use are the devices those claims' allocations name,
   as the same watch delivers them (no list per sample: bench/dra_setup.py `Claims`).
   The DRA runs come after the others (the policy changes backend for them);
6. **dra-dynmig-scheduler** and 7. **dra-dynmig-gpupool**: 4 and 5 on a pool under the DRA
   driver's alpha `DynamicMIG` gate (`spec.dra: {mig: dynamic}`; the nodes republish their
   cards as the driver does then: every possible MIG partition of each card beside the whole
   card, all consuming the card's shared counters, kubernetes-sigs/dra-driver-nvidia-gpu
   v0.4.1 cmd/gpu-kubelet-plugin/partitions.go, simulated by tests/cluster/dra_slices.py
   `dynamic_slices`), with a workload of their own: the slice's whole-card pods and the
   trace's fractional pods created in the same trace window, each asking for one MIG
   partition through gpupool's template `gpupool-<pool>-mig-<profile>` (the smallest H100
   profile whose compute slices cover its `gpu_milli`: bench/dra_setup.py `profile_for`),
   the arrivals packed again to `--load` (a partition counted as its memory slices of 8, as
   gpupool's cap and the driver's counters count it) over `--window`. kube-scheduler's
   allocator picks a partition the counters allow, or gpupool's exact admission writes each
   claim's allocation as the planned partition, placement included (no selector can pick a
   placement: apply/handlers/dra_allocate.py; the scheduler reserves the claim and binds the
   pod where it says). The simulated kubelets do not prepare claims
   (no MIG instance is made on the node's fake NVML): gpupool reads a card's layout from what
   is allocated on it, as it does between allocation and prepare. Allocation counts each
   partition as its share of the card; FGD's rate is over the cards nothing is allocated on.
   Printed in a second table (their workload is not the others').

Then the simulator places the same pods on the same nodes with the same arrivals and work
times through the planner's placement code (`reconciler.plan.placement.choose`; policy `ours`,
the planner's, and `random` as a rough stand-in for a scheduler that does not look at cards),
and one table compares the seven (the dynamic-MIG runs: a second table). The workload, the
metrics, the simulator and the scheduler's configuration are in bench/openb_baselines.py.

**Workload.** Whole-card pods of the trace (num_gpu >= 1, gpu_milli 1000) from its busy period
(creation >= 10,000,000 s, as `reconciler.sim.timeline` uses), `--pods` consecutive ones from a
point drawn with `--seed`. Each needs `deletion_time - creation_time` trace seconds of work
from the moment it runs (a job: waiting does not shorten it), then it is deleted; a pod that
has not started by the end counts as never started. The trace's own concurrency of
whole-card pods is at most 58 GPUs, far below a few hundred nodes, so the arrivals are packed
`density` times closer than the trace has them (the work times are kept), `density` chosen so
that the offered demand over the window (each pod counted from its arrival) is `--load` x the
cluster's cards. `--speed` trace seconds pass per wall second (default: what makes the
arrivals last `--window` wall seconds), then `--tail` wall seconds more. All pods have one
priority class; no quota, no preemption, maintenance off: placement quality alone.

**Cluster.** `--nodes` GPU nodes drawn with `--seed` from the trace's node list, each with
its trace GPU count (1, 2, 4 or 8) but all as H100-SXM5-80GB (one Pool has one model; the
whole-card pods of the trace name no model). The pods ask for `nvidia.com/gpu` only (no CPU or
memory: gpupool's planner does not meter those, so the comparison stays on cards).

**Measured** (the real runs from the kubelets' device managers: cards really handed out; the
DRA runs from the devices in their namespace's claims' allocations): the GPU allocation
(time-weighted mean between the first and the last arrival, of the cards in use sampled every
0.25 s of wall time, and at 25/50/75/100 % of that window; for the replayed runs also from the
watch's times of each pod, no sampling: the device plugin's cards from the pod running to the
pod gone, DRA's from the claim allocated to its allocation gone, and with every pod's cards
counted to the pod gone, on DRA without the claim's release after it:
`admission_stages.card_time`), FGD's fragmentation rate (`cluster_fragmentation`: the free GPU
a task drawn from the slice's own demand could not use, over the free GPU; mean of 40 points,
and at the last arrival), pods never started (by size, and their cards; --json names the
multi-card ones), creation -> binding p50/p95 (wall seconds and the trace seconds they stand
for; also for the pods created while < 80 % of the cards were in use, i.e. the latency of
admission itself), and gpupool's cycles; for the gated runs also where the time between cards
freed and the pod running goes, stage by stage (bench/admission_stages.py: the controller's
cycle and Admit step, its requests per admitted pod, the pod ungated, on DRA the claim
allocated, bound, running; on the way out the pod gone and on DRA its claim freed), and whether
the two gated runs admitted the same pods in the same order to the same nodes. What would be a
fault of admission is counted and listed: a node asked for more cards than it has by the pods
bound or admitted to it, pods bound without gpupool's admission, admitted but never bound,
refused by the kubelet (Failed), controller cycles that failed (`--dump DIR` writes the
observed state of up to three of them, for `gpupool plan DIR/policy.yaml --observed ...`).

**What limits the size.** The pods per second, more than the nodes: gpupool's executor sends
its admissions one request after another (Admit: the reservation, the admission, on DRA the
claim's two writes before it, each pod taken from the watch cache since 2026-12-07, read
before; a Hold: the condition written, on the cache's copy since that afternoon, read before),
so a cycle's length grows with the pods that arrived during the previous one. Keeping a cluster
busy with departures needs more pods as it has more cards (3-4 pods a card here). Measured on
the 2-core machine with other test suites running: 6-7 pods/s keep cycles at p50 0.5 s (100-200
nodes); 13 pods/s (200 nodes, 3,951 pods in 300 s) ran away: cycles of 10, 23, 45, 80 s, and
gpupool's allocation fell to 44 % against 75 % for kube-scheduler. Everything but the control
plane is Python in this one process (the controller shares its interpreter lock with the
simulated kubelets, unlike in a cluster). `World.settle()` and `World.step_nodes()` go over
every node (about 45 and 85 ms a node here), so this script's world publishes only the nodes
whose device assignments changed and steps the NVIDIA stand-ins only within the mount delay
after their ConfigMaps changed (the same calls, where they can change something). The simulated
kubelets give pod ranges to at most 1,024 nodes (`tests/cluster/kubelets.py: pod_cidr`).
Heartbeats are slowed (20 s, node-monitor grace 300 s) so that idle nodes do not load the API
server.

Exits 0 with a message when the trace or the control-plane binary is missing (this script
never builds it: `scripts/build-control-plane.sh` does, in minutes).

`--smoke` is `--nodes 4 --pods 40 --window 20 --tail 5`: the seven real runs and both
simulations, the same code and tables, in about 220 s (the control plane takes 10-12 s to start);
tests/test_bench_smoke.py runs it so that the benchmark cannot rot. 40 pods, not fewer: with
38 or fewer this slice cannot offer 0.9 of the 19 cards even with every arrival packed into
one instant, and the replay degenerates (all arrivals at trace time 0, speed 0).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import heapq
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import admission_stages, cluster_setup  # noqa: E402
from bench.cluster_setup import add_nodes, cached_binary, held_cards, pool_doc, priority_doc  # noqa: E402
from bench.dra_setup import (  # noqa: E402
    Claims,
    claim_pod_spec,
    dynmig_pool_spec,
    mig_workload,
    profile_share,
    publish_slices,
    quota_doc,
    template,
)
from bench.openb_baselines import (  # noqa: E402
    BINPACK_SCHEDULER,
    GRID,
    MODEL,
    UNSATURATED,
    Job,
    Result,
    Workload,
    build_workload,
    frag_rate,
    pct,
    simulate,
    target_ctx,
    write_scheduler_config,
)
from reconciler.sim.trace import (  # noqa: E402
    DEFAULT_NODES,
    DEFAULT_PODS,
    TraceError,
    openb_dir,
    read_nodes,
    read_pods,
)

POOL = "bench"
CLASS = "batch"
POINTS = (0.25, 0.5, 0.75, 1.0)
MAX_NODES = 1024  # tests/cluster/kubelets.py: pod_cidr
LATE = 2.0  # wall s: a pod created later than this after its arrival time marks a starved run
PRIORITY_VALUE = 10000
SMOKE = {"nodes": 4, "pods": 40, "window": 20.0, "tail": 5.0}  # --smoke (explicit flags win)
DRA_RUNS = ("dra-scheduler", "dra-gpupool")  # on the DRA backend: after the others
DYNMIG_RUNS = ("dra-dynmig-scheduler", "dra-dynmig-gpupool")  # DRA with dynamic MIG: last
RUNS = ("default", "binpack", "gpupool", *DRA_RUNS, *DYNMIG_RUNS)  # the real runs, in order


def say(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------- inputs


# --------------------------------------------------------------------------- the real cluster


class Replay:
    """Creates the slice's pods at their (sped-up) arrival times in `ns`, deletes each when its
    work is done (counted from when it runs), and records creation, binding, start, failure
    and the cards in use; a watch of the namespace and the kubelets' device managers are the
    sources."""

    def __init__(
        self, world: Any, ns: str, wl: Workload, name: str, gated: bool, scheduler: str = ""
    ):
        self.world, self.ns, self.wl, self.name, self.gated = world, ns, wl, name, gated
        self.scheduler = scheduler  # spec.schedulerName ("": the default profile)
        self.jobs = {j.name: j for j in wl.jobs}
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.admitted: dict[str, float] = {}  # gated run: when gpupool's admission was seen
        self.claimed: dict[str, float] = {}  # DRA: when the pod's status first named a claim
        self.running: dict[str, float] = {}
        self.deleted: dict[str, float] = {}  # the delete sent
        self.gone: dict[str, float] = {}  # the pod's DELETED event
        self.node_of: dict[str, str] = {}  # pod -> the node it was bound or admitted to
        self.failed: dict[str, str] = {}
        self.unadmitted: set[str] = set()  # gated run: bound without gpupool's admission
        self.cards_of = {n.name: n.gpus for n in wl.nodes}
        self.placed_on: dict[str, str] = {}  # pod -> node it is bound or admitted to (until gone)
        self.overbooked: list[str] = []  # a pod bound/admitted to a node its pods overfill
        self.on_terminating: list[str] = []  # ... counting pods still terminating there
        self.terminating: set[str] = set()
        self.departures: list[tuple[float, str]] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.done = threading.Event()
        self.t0 = 0.0
        self.lag = 0.0  # the most a creation came late (wall s)
        self.busy_at_creation: dict[str, float] = {}  # cards in use when the pod was created
        self.result = Result(name)
        self.ctx = target_ctx(wl.jobs)
        self.api = world.plane.api_client()
        self.watched = threading.Event()

    def wall(self) -> float:
        return time.monotonic() - self.t0

    def trace_now(self) -> float:
        return self.wall() * self.wl.speed

    # -- the watch ---------------------------------------------------------------------------
    def watch(self) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        admission_stages.watch_list(
            functools.partial(core.list_namespaced_pod, self.ns),
            self.stop,
            self._listed,
            self._event,
        )

    def _listed(self, items: list[dict]) -> None:
        listed = {p["metadata"]["name"] for p in items}
        with self.lock:  # deletions missed while the watch was down
            for gone in set(self.placed_on) - listed:
                del self.placed_on[gone]
            self.terminating &= listed
        for pod in items:
            self.seen(pod)
        self.watched.set()

    def _event(self, kind: str, obj: dict) -> None:
        if kind != "DELETED":
            self.seen(obj)
            return
        gone = (obj.get("metadata") or {}).get("name")
        with self.lock:
            self.gone.setdefault(gone, self.wall())
            self.placed_on.pop(gone, None)
            self.terminating.discard(gone)

    def seen(self, pod: dict) -> None:
        from reconciler.conventions import ADMISSION_GATE, ADMITTED_ANN

        now = self.wall()
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        name = meta["name"]
        job = self.jobs.get(name)
        if job is None:
            return
        gates = {g.get("name") for g in spec.get("schedulingGates") or []}
        admitted = ADMITTED_ANN in (meta.get("annotations") or {}) and ADMISSION_GATE not in gates
        target = spec.get("nodeName") or (
            (meta.get("annotations") or {}).get(ADMITTED_ANN) if admitted else None
        )
        with self.lock:
            if meta.get("deletionTimestamp"):
                self.terminating.add(name)
            if target and name not in self.placed_on:
                self.placed_on[name] = target
                self.node_of[name] = target
                there = [n for n, t in self.placed_on.items() if t == target]
                live = sum(self.jobs[n].gpus for n in there if n not in self.terminating)
                held = sum(self.jobs[n].gpus for n in there)
                cards = self.cards_of.get(target, 0)
                if held > cards:
                    how = "bound" if spec.get("nodeName") else "admitted"
                    (self.overbooked if live > cards else self.on_terminating).append(
                        f"{name} {how} to {target} at {now:.0f}s: {live} cards asked there "
                        f"by live pods, {held - live} by terminating ones, {cards} exist"
                    )
            if name not in self.claimed and any(
                c.get("resourceClaimName") for c in status.get("resourceClaimStatuses") or []
            ):
                self.claimed[name] = now
            if self.gated and admitted and name not in self.admitted:
                self.admitted[name] = now
            if spec.get("nodeName") and name not in self.bound:
                self.bound[name] = now
                if self.gated and ADMITTED_ANN not in (meta.get("annotations") or {}):
                    self.unadmitted.add(name)
            phase = status.get("phase")
            if phase == "Running" and name not in self.running:
                self.running[name] = now
                heapq.heappush(self.departures, (now + job.work / self.wl.speed, name))
            if phase == "Failed" and name not in self.failed:
                self.failed[name] = f"{status.get('reason')}: {status.get('message')}"

    # -- arrivals, departures, samples ----------------------------------------------------------
    def pod_body(self, job: Job) -> dict:
        from reconciler.conventions import GPU_RESOURCE, POOL_LABEL

        extra = {"schedulerName": self.scheduler} if self.scheduler else {}
        return {
            "metadata": {"name": job.name, "labels": {"app": "openb-bench"}},
            "spec": {
                **extra,
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.example/train:1",
                        "resources": {"limits": {GPU_RESOURCE: str(job.gpus)}},
                    }
                ],
                "priorityClassName": CLASS,
                "nodeSelector": {POOL_LABEL: POOL},
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
            },
        }

    def create(self, job: Job) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api)
        now = self.wall()
        with self.lock:
            self.created[job.name] = now
            self.busy_at_creation[job.name] = self.result.alloc[-1][1] if self.result.alloc else 0
            self.lag = max(self.lag, now - job.arrival / self.wl.speed)
        try:
            core.create_namespaced_pod(self.ns, self.pod_body(job))
        except Exception as exc:  # noqa: BLE001 - counted, the replay goes on
            with self.lock:
                self.failed[job.name] = f"create: {exc}"

    def delete(self, name: str) -> None:
        from kubernetes import client

        with self.lock:
            self.deleted[name] = self.wall()
        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(self.api).delete_namespaced_pod(name, self.ns)

    def cards(self) -> list[tuple[str, int, int]]:
        out = []
        for name, sim in list(self.world.nodes.items()):
            used = sum(len(ids) for _, ids in held_cards(sim.gpus))
            out.append((name, sim.gpus.count, sim.gpus.count - used))
        return out

    def sample(self, grid: list[float]) -> None:
        t = self.trace_now()
        cards = self.cards()
        used = sum(c - f for _, c, f in cards)
        self.result.alloc.append((t, used / self.wl.capacity))
        if grid and t >= grid[0]:
            while grid and t >= grid[0]:
                grid.pop(0)
            self.result.frag.append((t, frag_rate(cards, self.ctx)))

    def drive(self, progress_every: float = 15.0) -> None:
        """The replay itself, until t_end (trace seconds)."""
        jobs = sorted(self.wl.jobs, key=lambda j: (j.arrival, j.idx))
        grid = [self.wl.t_last * k / GRID for k in range(1, GRID + 1)]
        end = self.wl.t_end / self.wl.speed
        i, next_sample, next_progress = 0, 0.0, progress_every
        with ThreadPoolExecutor(4) as pool:
            while True:
                now = self.wall()
                if now >= end:
                    break
                while i < len(jobs) and jobs[i].arrival / self.wl.speed <= now:
                    pool.submit(self.create, jobs[i])
                    i += 1
                due = []
                with self.lock:
                    while self.departures and self.departures[0][0] <= now:
                        due.append(heapq.heappop(self.departures)[1])
                for name in due:
                    pool.submit(self.delete, name)
                if now >= next_sample:
                    self.sample(grid)
                    next_sample = now + 0.25
                if now >= next_progress:
                    self.progress(i)
                    next_progress = now + progress_every
                nxt = min(
                    next_sample,
                    jobs[i].arrival / self.wl.speed if i < len(jobs) else end,
                    self.departures[0][0] if self.departures else end,
                    end,
                )
                time.sleep(min(0.05, max(0.0, nxt - self.wall())))
        self.sample(grid)
        self.done.set()

    def progress(self, created: int) -> None:
        with self.lock:
            bound, running = len(self.bound), len(self.running)
        alloc = self.result.alloc[-1][1] if self.result.alloc else 0.0
        extra = self.result.notes.get("progress", "")
        say(
            f"  [{self.name}] {self.wall():5.0f}s/{self.wl.t_end / self.wl.speed:.0f}s  "
            f"created {created}/{len(self.wl.jobs)}  bound {bound}  started {running}  "
            f"cards in use {alloc:.1%}{extra}"
        )

    def finish(self) -> Result:
        res = self.result
        end = self.wl.t_end / self.wl.speed
        with self.lock:
            res.waits_wall = [
                self.bound[n] - self.created[n] for n in self.bound if n in self.created
            ]
            res.notes["unsaturated_waits"] = [
                self.bound[n] - self.created[n]
                for n in self.bound
                if n in self.created and self.busy_at_creation.get(n, 1) < UNSATURATED
            ]
            never = [
                j for j in self.wl.jobs if j.name not in self.running or self.running[j.name] > end
            ]
            res.never = Counter(j.gpus for j in never)
            res.notes["never_started"] = {
                n: sorted(j.name for j in never if j.gpus == n) for n in sorted(res.never) if n > 1
            }
            res.notes["failed"] = dict(self.failed)
            res.notes["unadmitted"] = sorted(self.unadmitted)
            res.notes["overbooked"] = list(self.overbooked)
            res.notes["on_terminating"] = list(self.on_terminating)
            res.notes["lag"] = self.lag
            if self.gated:
                to_admit = [self.admitted[n] - self.created[n] for n in self.admitted]
                to_bind = [
                    self.bound[n] - self.admitted[n] for n in self.admitted if n in self.bound
                ]
                res.notes["creation_to_admission"] = (pct(to_admit, 0.5), pct(to_admit, 0.95))
                res.notes["admission_to_binding"] = (pct(to_bind, 0.5), pct(to_bind, 0.95))
            res.notes["timeline"] = {
                j.name: {
                    k: v[j.name]
                    for k, v in (
                        ("created", self.created),
                        ("claimed", self.claimed),
                        ("admitted", self.admitted),
                        ("bound", self.bound),
                        ("running", self.running),
                        ("deleted", self.deleted),
                        ("gone", self.gone),
                    )
                    if j.name in v
                }
                for j in self.wl.jobs
            }
            res.notes["node_of"] = dict(self.node_of)
            res.notes["cards_of"] = {j.name: j.gpus for j in self.wl.jobs}
        res.waits = [w * self.wl.speed for w in res.waits_wall]
        return res


class DraReplay(Replay):
    """The same replay on the DRA backend: each pod asks for its cards through one claim from
    gpupool's ResourceClaimTemplate `gpupool-<pool>-gpu-<n>` (no `nvidia.com/gpu`), and the
    cards in use are the devices in the namespace's claims' allocations (bench/dra_setup.py
    `Claims`, which also checks each allocated claim against gpupool's plan)."""

    def __init__(self, *a: Any, **kw: Any):
        super().__init__(*a, **kw)
        from reconciler.conventions import DRA_PLANNED_ANN

        self.claims = Claims(planned_key=DRA_PLANNED_ANN)
        self.claim_watch = admission_stages.ClaimWatch(
            self.world.plane.api_client(), self.ns, DRA_PLANNED_ANN, self.wall, sink=self.claims
        )

    def watch(self) -> None:
        threading.Thread(
            target=self.claim_watch.run, name=f"claims-{self.name}", daemon=True
        ).start()
        try:
            super().watch()
        finally:
            self.claim_watch.stop.set()

    def pod_body(self, job: Job) -> dict:
        body = super().pod_body(job)
        dra = claim_pod_spec(POOL, job.gpus)
        body["spec"]["resourceClaims"] = dra["resourceClaims"]
        body["spec"]["containers"][0]["resources"] = dra["resources"]
        return body

    def cards(self) -> list[tuple[str, int, int]]:
        held = self.claims.held
        return [(n.name, n.gpus, n.gpus - held.get(n.name, 0)) for n in self.wl.nodes]

    def finish(self) -> Result:
        res = super().finish()
        c = self.claims
        res.notes["dra_exact"] = (sum(c.checked.values()), len(c.checked))
        res.notes["dra_mismatches"] = list(c.mismatches)
        res.notes["dra_unplanned"] = sorted(c.unplanned)
        w = self.claim_watch
        for pod, t in (res.notes.get("timeline") or {}).items():
            for key, seen in (("pinned", w.pinned), ("allocated", w.allocated), ("freed", w.freed)):
                if pod in seen:
                    t[key] = seen[pod]
        return res


class DynMigReplay(DraReplay):
    """The DRA replay on a pool under the driver's DynamicMIG: the whole-card pods as before,
    and each fractional pod asks for one MIG partition of its profile through gpupool's
    template `gpupool-<pool>-mig-<profile>` (`profiles`: pod -> profile). The allocation is
    the cards' worth of the devices allocated (a partition its memory slices of 8); the
    fragmentation rate is FGD's over the cards nothing is allocated on, against the slice's
    whole-card demand."""

    def __init__(self, *a: Any, profiles: dict[str, str], **kw: Any):
        super().__init__(*a, **kw)
        self.profiles = profiles
        self.claims.shares = {p: profile_share(MODEL, p) for p in set(profiles.values())}
        self.ctx = target_ctx([j for j in self.wl.jobs if j.gpus])

    def pod_body(self, job: Job) -> dict:
        body = super().pod_body(job)
        profile = self.profiles.get(job.name)
        if profile:
            dra = claim_pod_spec(POOL, 0, profile)
            body["spec"]["resourceClaims"] = dra["resourceClaims"]
            body["spec"]["containers"][0]["resources"] = dra["resources"]
        return body

    def sample(self, grid: list[float]) -> None:
        super().sample(grid)
        t, _ = self.result.alloc[-1]
        self.result.alloc[-1] = (t, sum(self.claims.used.values()) / self.wl.capacity)


def cleanup(world: Any, ns: str, timeout: float = 300.0) -> None:
    """Delete every pod of the run and wait until the kubelets have handed back every card.
    The delete is sent again while pods without a deletion timestamp are left: on a loaded
    control plane one DeleteCollection of some 2,000 pods can end in a timeout part way (seen
    at 200 nodes: 654 pods left running, which the next run then found on its cards)."""
    from kubernetes import client

    core = world.core
    deadline = time.monotonic() + timeout
    while True:
        left = core.list_namespaced_pod(ns, _preload_content=False)
        pods = json.loads(left.data).get("items") or []
        if any(not p["metadata"].get("deletionTimestamp") for p in pods):
            with contextlib.suppress(client.ApiException, OSError, ValueError):
                core.delete_collection_namespaced_pod(ns, _request_timeout=60)
        held = {n: held_cards(sim.gpus) for n, sim in world.nodes.items()}
        held = {n: h for n, h in held.items() if h}
        if not pods and not held:
            return
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    say(
        f"  cleanup: {len(pods)} pod(s) and cards on {len(held)} node(s) left after "
        f"{timeout:.0f}s; WARNING: the next run starts with them on its cards (figures void)"
    )
    for p in pods[:5]:
        m, st = p["metadata"], p.get("status") or {}
        say(
            f"    pod {m['name']}: node {p['spec'].get('nodeName')} phase {st.get('phase')} "
            f"deleting {m.get('deletionTimestamp')}"
        )
    for n, h in list(held.items())[:5]:
        say(f"    {n}: {h}")


def run_kube_scheduler(
    world: Any, wl: Workload, name: str, scheduler: str = "", replay_cls: type = Replay
) -> Result:
    """kube-scheduler alone places the pods (namespace without the admission label), with its
    default profile or the one named `scheduler`."""
    ns = f"openb-{name}"
    world.ensure_namespace(ns)
    replay = replay_cls(world, ns, wl, name, gated=False, scheduler=scheduler)
    watcher = threading.Thread(target=replay.watch, name=f"watch-{name}", daemon=True)
    watcher.start()
    replay.watched.wait(30)
    replay.t0 = time.monotonic()
    try:
        replay.drive()
        return replay.finish()
    finally:
        replay.stop.set()
        cleanup(world, ns)


def keep_observations() -> dict[str, Any]:
    """Keep the controller's last observed state (for --dump): wraps the module-level
    `observe_cluster` the controller calls, in this process only."""
    import reconciler.loop.controller as loop

    last: dict[str, Any] = {}
    observe = loop.observe_cluster

    def keeping(*a: Any, **kw: Any) -> Any:
        last["state"] = observe(*a, **kw)
        return last["state"]

    loop.observe_cluster = keeping
    return last


def dump_failure(dump: Path, n: int, observed: Any, policy_root: Path, error: str) -> str:
    from reconciler.observe.snapshot import dump_snapshot

    dump.mkdir(parents=True, exist_ok=True)
    snap = dump / f"failed-cycle-{n}.yaml"
    snap.write_text(dump_snapshot(observed))
    policy = dump / "policy.yaml"
    shutil.copy(policy_root / "policies" / "desired.yaml", policy)
    (dump / f"failed-cycle-{n}.error.txt").write_text(error + "\n")
    return str(snap)


class CycleStats:
    """What the controller's cycles did, and the observed state of failed ones (--dump)."""

    def __init__(self, dump: Path | None, policy_root: Path):
        self.dump, self.policy_root = dump, policy_root
        self.last = keep_observations() if dump else {}
        self.kinds: Counter = Counter()
        self.statuses: Counter = Counter()
        self.messages: Counter = Counter()
        self.durations: list[float] = []
        self.spent: Counter = Counter()  # wall s: cycle, settle (agents), step (NVIDIA stand-ins)
        self.slow: list[str] = []
        self.errors: list[str] = []
        self.dumped: list[str] = []
        self.progress = ""
        self.steps = admission_stages.StepClock()
        self.installed = False

    def cycle(self, ctl: Any, at: float) -> None:
        if not self.installed:
            self.steps.install(ctl)
            self.installed = True
        self.steps.start_cycle(at)
        t = time.monotonic()
        r = ctl.cycle()
        dt = time.monotonic() - t
        self.steps.end_cycle(dt)
        self.durations.append(dt)
        self.spent["cycle"] += dt
        if dt > 3 and len(self.slow) < 5:
            self.slow.append(f"at {at:.0f}s: {dt:.1f}s, {r.actions} actions")
        if r.error:
            self.errors.append(r.error)
            if self.dump and "state" in self.last and len(self.dumped) < 3:
                self.dumped.append(
                    dump_failure(
                        self.dump,
                        len(self.durations),
                        self.last["state"],
                        self.policy_root,
                        r.error,
                    )
                )
        for o in r.applied.outcomes if r.applied else []:
            kind = o.action.split(":", 1)[0]
            self.kinds[kind] += 1
            self.statuses[(kind, o.status)] += 1
            if o.status in ("failed", "blocked") or (kind == "admit" and o.status != "done"):
                self.messages[f"{kind} {o.status}: {o.message[:160]}"] += 1
        self.progress = f"  cycles {len(self.durations)} (last {dt:.1f}s, {r.actions or 0} actions)"

    def timed(self, what: str, fn: Any) -> None:
        t = time.monotonic()
        fn()
        self.spent[what] += time.monotonic() - t

    def notes(self) -> dict[str, Any]:
        return {
            "cycles": len(self.durations),
            "cycle_p50": pct(self.durations, 0.5),
            "cycle_p95": pct(self.durations, 0.95),
            "spent": {k: round(v, 1) for k, v in self.spent.items()},
            "slow": self.slow,
            "actions": dict(self.kinds),
            "statuses": {f"{k} {s}": v for (k, s), v in sorted(self.statuses.items())},
            "messages": self.messages.most_common(8),
            "errors": Counter(self.errors).most_common(5),
            "dumped": self.dumped,
            **self.steps.notes(),
        }


def sleep_rest(started: float, interval: float) -> None:
    """Sleep out what is left of `interval` since `started` (time.monotonic()), computed once
    and clamped at 0. Checked first and computed again for `time.sleep`, it could cross zero in
    between: sleep raised ValueError, which ended the controller process of a 200-node run and
    left the benchmark without its table."""
    time.sleep(max(0.0, interval - (time.monotonic() - started)))


def make_controller(api: Any, policy_root: Path, clock: Any) -> Any:
    """tests/integration/harness.py's `controller()` (its ServiceAccount's client `api`)."""
    from tests.integration.harness import controller

    return controller(None, policy_root, clock, api_client=api)


def run_gpupool(
    world: Any,
    wl: Workload,
    policy_root: Path,
    min_interval: float,
    dump: Path | None = None,
    process: bool = False,
    name: str = "gpupool",
    ns: str = "",
    replay_cls: type = Replay,
    wake_gap: float | None = None,
) -> Result:
    """gpupool admits. In-process (the default): the controller cycles in this thread while the
    replay runs in another, `world.settle()` and `world.step_nodes()` after each cycle, its
    injected clock set to the replay's trace time before each. With `process`, the same loop
    runs in a child process (its own interpreter, as the controller has its own pod in a
    cluster) and this thread runs the node agents' `settle()`/`step_nodes()` every
    `min_interval`. `ns`: a gated namespace made already ("": one is made). `wake_gap`: the
    controller's `wake_gap_seconds` in the child (None: its default, `--wake-gap` of
    `gpupool reconcile`)."""
    from reconciler.loop.informer import ClusterCache
    from tests.integration.gating import gated_namespace
    from tests.integration.world import NS

    ns = ns or gated_namespace(world)
    stats = CycleStats(dump, policy_root)
    stop = threading.Event()
    replay = replay_cls(world, ns, wl, name, gated=True)
    child = run_dir = None
    base = world.clock.now
    if process:
        from tests.integration.world import CONTROLLER_SA

        run_dir = Path(tempfile.mkdtemp(prefix="gpupool-bench-controller-"))
        token = world.plane.service_account_token(NS, CONTROLLER_SA, create=False)
        config = {
            "server": world.plane.server,
            "ca": str(world.plane.cert_dir / "ca.crt"),
            "token": token,
            "policy_root": str(policy_root),
            "base": base.isoformat(),
            "speed": wl.speed,
            "min_interval": min_interval,
            "wake_gap": wake_gap,
            "dump": str(dump) if dump else "",
            "dir": str(run_dir),
        }
        (run_dir / "config.json").write_text(json.dumps(config))
        child = subprocess.Popen(
            [sys.executable, __file__, "--controller-child", str(run_dir / "config.json")]
        )
        deadline = time.monotonic() + 90
        while not (run_dir / "ready").exists():
            if child.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the controller process did not start")
            time.sleep(0.2)
    else:
        ctl = make_controller(world.controller_client(), policy_root, world.clock)
        ctl.cache = ClusterCache(ctl.api).start(stop)
        ctl.cache.wait_synced(60)
    watcher = threading.Thread(target=replay.watch, name=f"watch-{name}", daemon=True)
    watcher.start()
    replay.watched.wait(30)
    replay.t0 = stats.steps.zero = time.monotonic()
    if child is not None:  # the child counts trace time from this wall-clock instant
        (run_dir / "start").write_text(str(time.time()))
    driver = threading.Thread(target=replay.drive, name=f"replay-{name}", daemon=True)
    driver.start()
    try:
        while not replay.done.is_set():
            t = time.monotonic()
            world.clock.now = base + timedelta(seconds=replay.trace_now())
            if child is None:
                stats.cycle(ctl, replay.wall())
                replay.result.notes["progress"] = stats.progress
            else:
                with contextlib.suppress(OSError, ValueError):
                    replay.result.notes["progress"] = (run_dir / "progress").read_text()
            stats.timed("settle", world.settle)
            stats.timed("step", world.step_nodes)
            sleep_rest(t, min_interval)
        driver.join()
        res = replay.finish()
        if child is not None:
            (run_dir / "stop").touch()
            child.wait(120)
            notes = json.loads((run_dir / "result.json").read_text())
            notes["spent"] = {**notes["spent"], **{k: round(v, 1) for k, v in stats.spent.items()}}
            res.notes.update(notes)
        else:
            res.notes.update(stats.notes())
        res.notes["stuck"] = stuck_pods(world, ns)
        for pod, (cycle, step, end, requests) in (res.notes.get("admits") or {}).items():
            t = res.notes["timeline"].setdefault(pod, {})
            t.update(cycle=cycle, step=step, step_end=end, requests=requests)
        admission_stages.timeline(
            res.notes["timeline"], res.notes["node_of"], dra=replay_cls is not Replay
        )
        return res
    finally:
        replay.stop.set()
        stop.set()
        if child is not None and child.poll() is None:
            child.kill()
        if run_dir is not None:
            shutil.rmtree(run_dir, ignore_errors=True)
        cleanup(world, ns)


def prepare_dra(
    world: Any,
    wl: Workload,
    policy_root: Path,
    priority: str,
    runs: tuple[str, str] = DRA_RUNS,
    profiles: dict[str, str] | None = None,
) -> str:
    """Turn the pool to the DRA backend for the DRA runs `runs` (scheduler, gpupool): every
    node publishes its cards as ResourceSlices, the policy says `backend: dra` with a Quota
    naming the runs' namespaces, and one controller cycle renders the DeviceClasses and the
    ResourceClaimTemplates there; -> the gated namespace of the gpupool run (the scheduler
    run's is `openb-<its name>`). With `profiles` (pod -> MIG profile): the dynamic-MIG runs,
    the slices as the driver publishes them under DynamicMIG and the pool on dynamic MIG."""
    from tests.integration.gating import gated_namespace
    from tests.integration.harness import write_policy
    from tests.support.wait import wait_for

    ungated = f"openb-{runs[0]}"
    world.ensure_namespace(ungated)
    gated = gated_namespace(world)
    dynamic = profiles is not None
    publish_slices(world.custom, [(n.name, n.gpus) for n in wl.nodes], MODEL, dynamic=dynamic)
    write_policy(policy_root, dra_policy(wl, priority, runs, [ungated, gated], dynamic))
    ctl = make_controller(world.controller_client(), policy_root, world.clock)
    r = ctl.cycle()
    if r.error:
        raise RuntimeError(f"the DRA policy's first cycle failed: {r.error}")
    from reconciler.conventions import DRA_GROUP, DRA_VERSION

    sizes = sorted({j.gpus for j in wl.jobs if j.gpus})
    wanted = [template(POOL, n) for n in sizes]
    wanted += [template(POOL, 0, p) for p in sorted(set((profiles or {}).values()))]

    def rendered() -> bool:
        have = {
            (ns, t["metadata"]["name"])
            for ns in (ungated, gated)
            for t in world.custom.list_namespaced_custom_object(
                DRA_GROUP, DRA_VERSION, ns, "resourceclaimtemplates"
            )["items"]
        }
        return all((ns, t) in have for ns in (ungated, gated) for t in wanted)

    wait_for("gpupool's ResourceClaimTemplates", rendered, timeout=60)
    say(
        f"  DRA backend{' with dynamic MIG' if dynamic else ''}: {len(wl.nodes)} nodes' slices "
        f"published, templates {', '.join(wanted)}"
    )
    return gated


def dra_policy(
    wl: Workload,
    priority: str,
    runs: tuple[str, str],
    namespaces: list[str],
    dynamic: bool,
    admission: str = "pin",
) -> str:
    """The DRA runs' policy: the pool on DRA (dynamic MIG with `dynamic`; `spec.dra.admission`
    `admission`), the priority classes, and a Quota naming `namespaces`."""
    spec = dynmig_pool_spec(admission) if dynamic else "  backend: dra\n"
    if not dynamic and admission != "pin":
        spec += f"  dra: {{admission: {admission}}}\n"
    quota = f"bench-{runs[0].removesuffix('-scheduler')}"
    return (
        pool_doc(POOL, MODEL, len(wl.nodes), spec)
        + priority
        + quota_doc(quota, POOL, namespaces, wl.capacity)
    )


def guard_dra(
    world: Any,
    wl: Workload,
    policy_root: Path,
    priority: str,
    gated: str,
    runs: tuple[str, str],
    dynamic: bool,
    admission: str,
) -> None:
    """Before a gpupool DRA run with `admission` allocate: the Quota names the gated namespace
    only (the scheduler run's is done), so the pool's guard goes in place (a DeviceTaintRule per
    node: plan/stages/drain_taints.py `_guards`), which `dra.admission: allocate` needs; one
    controller cycle writes it. With pin: nothing (the runs as before, unguarded)."""
    if admission == "pin":
        return
    from reconciler.conventions import DRA_GROUP, DRA_VERSION
    from tests.integration.harness import write_policy
    from tests.support.wait import wait_for

    write_policy(policy_root, dra_policy(wl, priority, runs, [gated], dynamic, admission))
    ctl = make_controller(world.controller_client(), policy_root, world.clock)
    want = {f"gpupool-guard-{n.name}" for n in wl.nodes}

    def guarded() -> bool:
        r = ctl.cycle()
        if r.error:
            raise RuntimeError(f"the guarding cycle failed: {r.error}")
        rules = world.custom.list_cluster_custom_object(DRA_GROUP, DRA_VERSION, "devicetaintrules")
        return want <= {t["metadata"]["name"] for t in rules["items"]}

    wait_for("the DRA pool's guard", guarded, timeout=60, interval=1)
    say(f"  DRA admission {admission}: the pool guarded ({len(want)} DeviceTaintRules)")


def claims_gone(world: Any, ns: str, timeout: float = 120.0) -> None:
    """Wait until the run's claims are gone (the resourceclaim controller deletes a pod's)."""
    from reconciler.conventions import DRA_GROUP, DRA_VERSION

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = world.custom.list_namespaced_custom_object(
            DRA_GROUP, DRA_VERSION, ns, "resourceclaims"
        )["items"]
        if not left:
            return
        time.sleep(0.5)
    say(f"  cleanup: {len(left)} claim(s) left in {ns} after {timeout:.0f}s")


def controller_child(config_path: Path) -> int:
    """The controller's loop in its own process (--controller-process): the same cycle, clock
    and statistics; trace time counted from the instant the parent writes to `start`. Like
    `Controller.run`, a pod event that wakes it (`Controller.wakes_on`) or a DRA claim that
    stops holding devices (`ClusterCache`'s `on_claim_release`) starts the next cycle at once,
    at most once per `wake_gap_seconds`; otherwise a cycle every `min_interval`."""
    from datetime import UTC, datetime

    from kubernetes import client

    from reconciler.loop.informer import ClusterCache
    from tests.integration.world import Clock

    cfg = json.loads(config_path.read_text())
    run_dir = Path(cfg["dir"])
    conf = client.Configuration()
    conf.host, conf.ssl_ca_cert, conf.verify_ssl = cfg["server"], cfg["ca"], True
    conf.api_key = {"authorization": cfg["token"]}
    conf.api_key_prefix = {"authorization": "Bearer"}
    base = datetime.fromisoformat(cfg["base"])
    clock = Clock(now=base)
    policy_root = Path(cfg["policy_root"])
    ctl = make_controller(client.ApiClient(conf), policy_root, clock)
    if cfg.get("wake_gap") is not None:
        ctl.wake_gap_seconds = cfg["wake_gap"]
    ctl.pace_status()  # as `Controller.run` paces its status writes
    stop, wake = threading.Event(), threading.Event()

    def pod_event(kind: str, pod: Any) -> None:  # as `Controller.run` wakes its loop
        if ctl.wakes_on(kind, pod):
            wake.set()

    ctl.cache = ClusterCache(ctl.api, on_pod_event=pod_event, on_claim_release=wake.set)
    ctl.cache.start(stop)
    ctl.cache.wait_synced(60)
    # the Lease renewed beside the cycles on the wall clock, as `Controller.run` has it (not
    # once per cycle, on its path, nor on the trace clock, which runs `speed` times faster)
    ctl.elector.clock = lambda: datetime.now(UTC)
    ctl.elector.start(stop)
    stats = CycleStats(Path(cfg["dump"]) if cfg["dump"] else None, policy_root)
    (run_dir / "ready").touch()
    while not (run_dir / "start").exists():
        time.sleep(0.05)
    t0 = float((run_dir / "start").read_text())
    mono0 = stats.steps.zero = time.monotonic() - (time.time() - t0)
    while not (run_dir / "stop").exists():
        t = time.monotonic()
        wall = t - mono0
        clock.now = base + timedelta(seconds=wall * cfg["speed"])
        wake.clear()  # what woke the loop so far is seen by this cycle
        stats.cycle(ctl, wall)
        (run_dir / "progress").write_text(stats.progress)
        sleep_rest(t, ctl.wake_gap_seconds)
        ctl.rest(wake, stop, max(0.0, cfg["min_interval"] - (time.monotonic() - t)))
    stop.set()
    (run_dir / "result.json").write_text(json.dumps(stats.notes(), default=str))
    return 0


def stuck_pods(world: Any, ns: str) -> dict[str, Any]:
    """At the end: pods gpupool admitted that are not bound (and why the scheduler says so),
    and why the gated ones wait (the hold condition's reason)."""
    from reconciler.conventions import ADMISSION_GATE, ADMITTED_ANN, ADMITTED_CONDITION

    items = json.loads(world.core.list_namespaced_pod(ns, _preload_content=False).data)["items"]
    admitted_unbound: list[str] = []
    held: Counter = Counter()
    gated = 0
    for p in items:
        spec, meta = p.get("spec") or {}, p["metadata"]
        conds = {c["type"]: c for c in (p.get("status") or {}).get("conditions") or []}
        gates = [g["name"] for g in spec.get("schedulingGates") or []]
        if spec.get("nodeName") or meta.get("deletionTimestamp"):
            continue
        if ADMISSION_GATE in gates:
            gated += 1
            c = conds.get(ADMITTED_CONDITION)
            held[c.get("reason") if c else "(no condition yet)"] += 1
        elif ADMITTED_ANN in (meta.get("annotations") or {}):
            sched = conds.get("PodScheduled") or {}
            admitted_unbound.append(
                f"{meta['name']} -> {meta['annotations'][ADMITTED_ANN]}: "
                f"{sched.get('reason')} {sched.get('message')}"
            )
    return {"gated": gated, "held": dict(held), "admitted_unbound": admitted_unbound}


def start_cluster(binary: Path, workdir: Path, wl: Workload, policy: str) -> tuple:
    plane_dir = workdir / "control-plane"
    config = write_scheduler_config(  # ControlPlane.start writes the kubeconfig
        workdir / "scheduler-config.yaml", plane_dir / "scheduler.kubeconfig"
    )
    plane, kubelets, world = cluster_setup.start_cluster(
        binary, workdir, policy, scheduler_args=[f"--config={config}"], say=say
    )
    add_nodes(world, [(n.name, POOL, n.gpus) for n in wl.nodes], MODEL, say=say)
    return plane, kubelets, world


# --------------------------------------------------------------------------- the table


def fmt_pct(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{100 * v:.{digits}f}%"


def fmt_s(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 1 else f"{v:.2f}"


def exact_share(r: Result) -> str:
    """`k of n` for a gated DRA run: claims allocated (as seen) with devices == plan."""
    if "dra_exact" not in r.notes or not r.notes.get("admission_to_binding"):
        return "–"
    same, seen = r.notes["dra_exact"]
    return f"{same} of {seen}" + (f" ({same / seen:.0%})" if seen else "")


def watched_alloc(wl: Workload, r: Result, to_pod_end: bool = False) -> float | None:
    """A replayed run's time-weighted allocation from the watch's times of each pod
    (`admission_stages.run_card_time`); None for a run without a timeline (the simulator's)
    or with MIG partitions (a dynamic MIG run)."""
    return admission_stages.run_card_time(
        r.name,
        r.notes.get("timeline"),
        r.notes.get("cards_of"),
        wl.t_last / wl.speed,
        wl.capacity,
        to_pod_end,
    )


def table(wl: Workload, results: list[Result]) -> str:
    rows: list[tuple[str, list[str]]] = []
    t_last = wl.t_last
    rows.append(
        ("GPU allocation, time-weighted mean", [fmt_pct(r.mean_alloc(t_last)) for r in results])
    )
    if any(r.notes.get("timeline") for r in results):
        rows.append(
            (
                "  the same from the watch's times (no sampling)",
                [fmt_pct(watched_alloc(wl, r), 3) for r in results],
            )
        )
        rows.append(
            (
                "  the same, each pod's cards to its end (DRA: not to its claim's release)",
                [fmt_pct(watched_alloc(wl, r, to_pod_end=True), 3) for r in results],
            )
        )
    for f in POINTS:
        rows.append(
            (
                f"GPU allocation at {int(f * 100)}% of the arrivals",
                [fmt_pct(r.alloc_at(t_last * f)) for r in results],
            )
        )
    rows.append(("FGD fragmentation rate, mean", [fmt_pct(r.mean_frag()) for r in results]))
    rows.append(
        (
            "FGD fragmentation rate at the last arrival",
            [fmt_pct(r.frag[-1][1] if r.frag else None) for r in results],
        )
    )
    sizes = sorted({j.gpus for j in wl.jobs})
    total = Counter(j.gpus for j in wl.jobs)
    rows.append(
        (
            "pods never started (of " + f"{len(wl.jobs):,})",
            [f"{sum(r.never.values()):,}" for r in results],
        )
    )
    for n in sizes:
        what = f"{n}-card pods" if n >= 1 else "MIG-partition pods"
        rows.append(
            (f"  {what} never started (of {total[n]})", [str(r.never.get(n, 0)) for r in results])
        )
    if any("dra_exact" in r.notes for r in results):
        rows.append(
            (
                "admitted pods whose allocated devices are the planned ones",
                [exact_share(r) for r in results],
            )
        )
    rows.append(
        (
            "cards of the pods never started",
            [f"{sum(k * v for k, v in r.never.items()):,}" for r in results],
        )
    )
    for q in (0.5, 0.95):
        rows.append(
            (
                f"creation -> binding p{int(q * 100)}, wall s (sim: trace s / speed)",
                [fmt_s(pct(r.waits_wall, q)) if r.waits_wall is not None else "–" for r in results],
            )
        )
        rows.append(
            (
                f"creation -> binding p{int(q * 100)}, trace s",
                [fmt_s(pct(r.waits, q)) for r in results],
            )
        )
    for q in (0.5, 0.95):
        rows.append(
            (
                f"  p{int(q * 100)} of the pods created below {UNSATURATED:.0%} in use, wall s",
                [fmt_s(pct(r.notes.get("unsaturated_waits") or [], q)) for r in results],
            )
        )
    head = "| | " + " | ".join(r.name for r in results) + " |"
    sep = "|---|" + "---:|" * len(results)
    body = "\n".join(f"| {label} | " + " | ".join(vals) + " |" for label, vals in rows)
    return "\n".join([head, sep, body])


# --------------------------------------------------------------------------- main


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=200, help=f"GPU nodes, at most {MAX_NODES}")
    ap.add_argument("--pods", type=int, default=3000, help="whole-card pods of the slice")
    ap.add_argument(
        "--speed",
        type=float,
        default=None,
        help="trace seconds per wall second (default: what makes the arrivals last --window)",
    )
    ap.add_argument("--window", type=float, default=450.0, help="wall seconds of arrivals")
    ap.add_argument("--tail", type=float, default=15.0, help="wall seconds after the last arrival")
    ap.add_argument(
        "--load", type=float, default=0.9, help="offered GPU demand / GPUs over the window"
    )
    ap.add_argument("--seed", type=int, default=42, help="draws the nodes and the slice")
    ap.add_argument(
        "--min-interval", type=float, default=0.5, help="least wall seconds between cycles"
    )
    ap.add_argument(
        "--wake-gap",
        type=float,
        default=None,
        help="with --controller-process: least wall seconds between two cycle starts when an "
        "event wakes the loop (the controller's --wake-gap; default: its default, 0.1)",
    )
    ap.add_argument(
        "--runs",
        default=",".join(RUNS),
        help="which real runs: default (kube-scheduler, LeastAllocated), binpack "
        "(kube-scheduler, MostAllocated on GPUs), gpupool, dra-scheduler (kube-scheduler's "
        "DRA allocator), dra-gpupool (gpupool's exact admission on DRA), "
        "dra-dynmig-scheduler and dra-dynmig-gpupool (the same on dynamic MIG, with the "
        "slice's fractional pods as MIG partitions)",
    )
    ap.add_argument(
        "--sim",
        type=lambda v: [p.strip() for p in v.split(",") if p.strip()],
        default=["ours", "random"],
        help="the simulator's placement policies, comma-separated (reconciler.plan.placement."
        "POLICIES; bestfit, packing and fgd are bin packers)",
    )
    ap.add_argument("--keep", type=Path, default=None, help="keep the work dir (logs) here")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument(
        "--controller-process",
        action="store_true",
        help="run gpupool's controller loop in a process of its own (default: this one)",
    )
    ap.add_argument(
        "--dra-admission",
        choices=("pin", "allocate"),
        default="allocate",
        help="the DRA pool's spec.dra.admission in the gpupool runs (allocate: its guard put in "
        "place first, the Quota naming the gated namespace only)",
    )
    ap.add_argument(
        "--dump",
        type=Path,
        default=None,
        help="write the observed state of (up to 3) failed controller cycles here",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="--nodes 4 --pods 40 --window 20 --tail 5: ~220 s (the test suite runs it)",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke sizes become the defaults; flags given explicitly still win
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    if not 1 <= args.nodes <= MAX_NODES:
        ap.error(f"--nodes must be 1..{MAX_NODES} (tests/cluster/kubelets.py numbers node CIDRs)")
    from reconciler.plan.placement import POLICIES

    if unknown := [p for p in args.sim if p not in POLICIES]:
        ap.error(f"--sim: unknown placement policy {', '.join(unknown)} ({', '.join(POLICIES)})")
    if args.pods < 2 or args.load <= 0 or args.window <= 0 or (args.speed or 1) <= 0:
        ap.error("--pods >= 2, --load, --window and --speed > 0")
    return args


def describe(wl: Workload) -> None:
    sizes = Counter(j.gpus for j in wl.jobs)
    node_sizes = Counter(n.gpus for n in wl.nodes)
    works = sorted(j.work for j in wl.jobs)
    say(
        f"slice: {len(wl.jobs):,} whole-card pods created {wl.trace_from:,}..{wl.trace_to:,} s "
        f"in the trace ({', '.join(f'{v} x {k} card' for k, v in sorted(sizes.items()))}); "
        f"work p50 {pct(works, 0.5):,.0f} s, p95 {pct(works, 0.95):,.0f} s"
    )
    say(
        f"cluster: {len(wl.nodes)} GPU nodes, {wl.capacity:,} cards "
        f"({', '.join(f'{v} x {k}' for k, v in sorted(node_sizes.items()))})"
    )
    say(
        f"arrivals packed x{wl.density:,.1f} -> offered load {wl.offered:.2f}; "
        f"{wl.t_last:,.0f} trace s of arrivals at {wl.speed:,.1f} trace s per wall s = "
        f"{wl.t_last / wl.speed:.0f} s wall, then {(wl.t_end - wl.t_last) / wl.speed:.0f} s"
    )


def describe_mig(wl: Workload, profiles: dict[str, str]) -> None:
    by = Counter(profiles.values())
    say(
        f"dynamic-MIG slice: {len(wl.jobs) - len(profiles):,} whole-card pods and "
        f"{len(profiles):,} fractional ones as MIG partitions "
        f"({', '.join(f'{v} x {k}' for k, v in sorted(by.items()))}); arrivals packed "
        f"x{wl.density:,.1f} -> offered load {wl.offered:.2f}; {wl.t_last:,.0f} trace s of "
        f"arrivals at {wl.speed:,.1f} trace s per wall s"
    )


def notes(results: list[Result]) -> str:
    out = []
    for r in results:
        n = r.notes
        if "lag" in n:
            out.append(f"{r.name}: creations at most {n['lag']:.2f} s late")
            if n["lag"] > LATE:
                out.append(
                    f"    WARNING: more than {LATE:.0f} s late: the replay could not keep up (the "
                    f"machine is too loaded); {r.name}'s figures measure the machine"
                )
        failed = n.get("failed") or {}
        if failed:
            reasons = Counter(v.split(":")[0] for v in failed.values())
            out.append(f"{r.name}: {len(failed)} pod(s) failed: {dict(reasons)}")
            out += [f"    {k}: {v[:200]}" for k, v in list(failed.items())[:3]]
        if n.get("overbooked"):
            out.append(
                f"{r.name}: {len(n['overbooked'])} time(s) a node was asked for more cards than "
                f"it has (bound + admitted pods, until deleted): {n['overbooked'][:3]}"
            )
        if n.get("on_terminating"):
            out.append(
                f"{r.name}: {len(n['on_terminating'])} time(s) a pod went to a node whose cards "
                f"were free only once its terminating pods were gone: {n['on_terminating'][:2]}"
            )
        if n.get("dra_mismatches"):
            out.append(f"{r.name}: allocated devices NOT the planned ones: {n['dra_mismatches']}")
        if n.get("dra_unplanned") and "cycles" in n:
            out.append(
                f"{r.name}: {len(n['dra_unplanned'])} claim(s) allocated without a plan: "
                f"{', '.join(n['dra_unplanned'][:5])}"
            )
        if n.get("unadmitted"):
            out.append(
                f"{r.name}: {len(n['unadmitted'])} pod(s) bound WITHOUT gpupool's admission: "
                f"{', '.join(n['unadmitted'][:5])}"
            )
        if "cycles" in n:
            out.append(
                f"{r.name}: {n['cycles']} cycles, p50 {fmt_s(n['cycle_p50'])} s, "
                f"p95 {fmt_s(n['cycle_p95'])} s; outcomes {n['statuses']}"
            )
            out.append(f"    wall seconds spent: {n.get('spent')}; slow cycles: {n.get('slow')}")
            if n.get("creation_to_admission"):
                a, b = n["creation_to_admission"], n["admission_to_binding"]
                out.append(
                    f"    creation -> admission p50/p95 {fmt_s(a[0])}/{fmt_s(a[1])} s wall, "
                    f"admission -> binding p50/p95 {fmt_s(b[0])}/{fmt_s(b[1])} s wall"
                )
            for msg, k in n.get("messages") or []:
                out.append(f"    {k} x {msg}")
            for err, k in n.get("errors") or []:
                out.append(f"    cycle error x{k}: {err[:300]}")
            for path in n.get("dumped") or []:
                out.append(f"    observed state of a failed cycle: {path}")
            stuck = n.get("stuck") or {}
            out.append(
                f"{r.name}: at the end {stuck.get('gated', 0)} pod(s) still gated "
                f"(hold reasons {stuck.get('held')}), "
                f"{len(stuck.get('admitted_unbound') or [])} admitted but not bound"
            )
            out += [f"    {s[:240]}" for s in (stuck.get("admitted_unbound") or [])[:5]]
            out += admission_stages.report(r.name, n)
    pair = [r for r in results if r.name in ("gpupool", "dra-gpupool") and r.notes.get("timeline")]
    for a, b in zip(pair, pair[1:], strict=False):  # the same workload on the two backends
        for t in (a, b):
            for pod, node in t.notes["node_of"].items():
                t.notes["timeline"].get(pod, {})["node"] = node
        out.append(
            f"{a.name} vs {b.name}: "
            + admission_stages.compare_orders(a.notes["timeline"], b.notes["timeline"])
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--controller-child"]:
        return controller_child(Path(argv[1]))
    args = parse(argv)
    data = openb_dir()
    if not (data / DEFAULT_NODES).is_file() or not (data / DEFAULT_PODS).is_file():
        say(
            f"skipped: the openb trace is not in {data} (set $GPUPOOL_OPENB_DIR; "
            f"../shared/data/openb/README.md says where it comes from)"
        )
        return 0
    try:
        nodes = read_nodes(data / DEFAULT_NODES)
        pods = read_pods(data / DEFAULT_PODS)
    except TraceError as exc:
        say(f"error: {exc}")
        return 1
    names = [r.strip() for r in args.runs.split(",") if r.strip()]
    if unknown := [n for n in names if n not in RUNS]:
        say(f"error: --runs: unknown run(s) {', '.join(unknown)} ({', '.join(RUNS)})")
        return 2
    names = sorted(set(names), key=RUNS.index)  # the DRA backend comes after the others
    binary = cached_binary() if names else None
    if names and binary is None:
        say(
            "skipped: the kcp control-plane binary is not built (scripts/build-control-plane.sh "
            "builds it into ~/.cache/gpupool/control-plane, minutes; or set $KCP_BINARY)"
        )
        return 0
    started = time.monotonic()
    wl = build_workload(args, nodes, pods)
    describe(wl)
    wl_mig, profiles = None, {}
    if set(names) & set(DYNMIG_RUNS):
        wl_mig, profiles = mig_workload(wl, pods, MODEL, args.load, args.window, args.tail)
        describe_mig(wl_mig, profiles)
    sims = []
    for policy in args.sim:
        t = time.monotonic()
        sims.append(simulate(wl, policy, args.seed))
        say(f"simulator, {policy}: {time.monotonic() - t:.1f}s")
    priority = priority_doc("bench", CLASS, [(CLASS, PRIORITY_VALUE, "training", False)])
    policy = pool_doc(POOL, MODEL, len(wl.nodes)) + priority
    workdir = Path(tempfile.mkdtemp(prefix="gpupool-admission-bench-"))
    plane = kubelets = None
    real: list[Result] = []
    real_mig: list[Result] = []
    wall: dict[str, float] = {}
    dra_ns: str | None = None
    dyn_ns: str | None = None
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if names:
            plane, kubelets, world = start_cluster(binary, workdir, wl, policy)
        for name in names:
            say(f"run {name}:")
            t = time.monotonic()
            if name in DRA_RUNS and dra_ns is None:
                dra_ns = prepare_dra(world, wl, workdir / "policy", priority)
            if name in DYNMIG_RUNS and wl_mig is not None:
                if dyn_ns is None:
                    dyn_ns = prepare_dra(
                        world, wl_mig, workdir / "policy", priority, DYNMIG_RUNS, profiles
                    )
                replay = functools.partial(DynMigReplay, profiles=profiles)
                if name == DYNMIG_RUNS[0]:
                    real_mig.append(run_kube_scheduler(world, wl_mig, name, replay_cls=replay))
                    claims_gone(world, f"openb-{name}")
                else:
                    guard_dra(
                        world,
                        wl_mig,
                        workdir / "policy",
                        priority,
                        dyn_ns,
                        DYNMIG_RUNS,
                        True,
                        args.dra_admission,
                    )
                    real_mig.append(
                        run_gpupool(
                            world,
                            wl_mig,
                            workdir / "policy",
                            args.min_interval,
                            args.dump,
                            process=args.controller_process,
                            name=name,
                            ns=dyn_ns,
                            replay_cls=replay,
                            wake_gap=args.wake_gap,
                        )
                    )
                    claims_gone(world, dyn_ns)
            elif name == "default":
                real.append(run_kube_scheduler(world, wl, name))
            elif name == "binpack":
                real.append(run_kube_scheduler(world, wl, name, BINPACK_SCHEDULER))
            elif name == "dra-scheduler":
                real.append(run_kube_scheduler(world, wl, name, replay_cls=DraReplay))
                claims_gone(world, f"openb-{name}")
            else:
                if name == DRA_RUNS[1] and dra_ns:
                    guard_dra(
                        world,
                        wl,
                        workdir / "policy",
                        priority,
                        dra_ns,
                        DRA_RUNS,
                        False,
                        args.dra_admission,
                    )
                real.append(
                    run_gpupool(
                        world,
                        wl,
                        workdir / "policy",
                        args.min_interval,
                        args.dump,
                        process=args.controller_process,
                        name=name,
                        ns=dra_ns or "",
                        replay_cls=DraReplay if name in DRA_RUNS else Replay,
                        wake_gap=args.wake_gap,
                    )
                )
                if dra_ns:
                    claims_gone(world, dra_ns)
            wall[name] = time.monotonic() - t
            say(f"run {name}: {wall[name]:.0f}s wall")
        if kubelets is not None and kubelets.errors:
            errs = kubelets.errors
            say(f"simulated kubelets reported {len(errs)} error(s): {errs[:3]}")
    finally:
        if kubelets is not None:
            kubelets.stop()
        if plane is not None:
            plane.stop()
        if args.keep:
            shutil.copytree(workdir, args.keep, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    results = real + [r for r in sims]
    say("")
    say(
        f"openb default trace, seed {args.seed}: {len(wl.nodes)} nodes / {wl.capacity:,} cards, "
        f"{len(wl.jobs):,} pods, load {wl.offered:.2f}, speed {wl.speed:,.1f}; "
        f"total {time.monotonic() - started:.0f}s wall "
        f"({', '.join(f'{k} run {v:.0f}s' for k, v in wall.items())})"
    )
    say("")
    say(table(wl, results))
    if wl_mig is not None and real_mig:
        say("")
        say(
            f"DRA with dynamic MIG: the slice's {len(wl.jobs):,} whole-card pods and its "
            f"{len(profiles):,} fractional pods as MIG partitions, {len(wl_mig.jobs):,} pods, "
            f"load {wl_mig.offered:.2f} (a partition counted as its memory slices of 8), "
            f"speed {wl_mig.speed:,.1f}"
        )
        say("")
        say(table(wl_mig, real_mig))
    say("")
    say(notes(results + real_mig))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "args": {k: str(v) for k, v in vars(args).items()},
                    "workload": {
                        "pods": len(wl.jobs),
                        "nodes": len(wl.nodes),
                        "cards": wl.capacity,
                        "density": wl.density,
                        "speed": wl.speed,
                        "offered": wl.offered,
                        "t_last": wl.t_last,
                    },
                    "dynmig_workload": {
                        "pods": len(wl_mig.jobs),
                        "mig_pods": len(profiles),
                        "profiles": dict(Counter(profiles.values())),
                        "density": wl_mig.density,
                        "speed": wl_mig.speed,
                        "offered": wl_mig.offered,
                        "t_last": wl_mig.t_last,
                    }
                    if wl_mig is not None
                    else None,
                    "results": [
                        {
                            "name": r.name,
                            "mean_alloc": r.mean_alloc(wl.t_last),
                            # (a dynamic MIG run's pods include partitions: None there)
                            "watched_alloc": watched_alloc(wl, r),
                            "watched_alloc_to_pod_end": watched_alloc(wl, r, to_pod_end=True),
                            "mean_frag": r.mean_frag(),
                            "never": dict(r.never),
                            "waits_p50": pct(r.waits, 0.5),
                            "waits_p95": pct(r.waits, 0.95),
                            "alloc": r.alloc[:: max(1, len(r.alloc) // 400)],
                            "notes": {k: v for k, v in r.notes.items() if k != "progress"},
                        }
                        for r in results + real_mig
                    ],
                },
                indent=1,
                default=str,
            )
        )
    return 0


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
