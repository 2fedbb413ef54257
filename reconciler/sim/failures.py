"""Node failures in the digital twin (issue 29, item 5): nodes fail at a rate per node-day and
come back after a repair time; what ran on them is lost.

The schedule (`outages`) is drawn once per run from a seed and the node's *position* in the
twin's node list (`twin_setup.pool_nodes`: pools in name order, nodes in index order), so the
unified pool and a static split of it (the same 8 machines, named after the pool each belongs
to) lose the same machines at the same times. Between failures a node's up time is
exponential with mean 1 / rate (a Poisson process per node, as independent hardware faults
are usually modelled); each outage lasts `repair_time`.

A failed node, as the planner sees it (`FailureClock.cycle`, at the start of each twin
cycle, before the planner runs):

* it is `ready: false` in the observed snapshot (what the observe adapter reports for a node
  whose Ready condition is not True: `reconciler/observe/model.py` `Node.ready`), so the
  planner fences it (`reconciler/plan/cluster.py` `node_fence`: "NotReady") and the
  kube-scheduler stand-in binds nothing there (`reconciler/sim/scheduler.py`);
* every pod placed on it (running, or admitted and about to bind) is gone at once: the taint
  eviction of the unreachable node and the pod GC are not modelled as delays. A pod with an
  owner is created again Pending by its owner (`actions.recreated`: a Job's pod, a
  replica of the service), so a training job resumes from its last checkpoint when it is
  admitted again (the work since is lost and counted), and a lost replica counts against the
  SLO until its replacement serves;
* after `repair_time` it is Ready again, its cards idle.

Per outage the twin records the GPU-seconds of training work lost (progress since the last
checkpoint x cards), what was lost, and the recovery time: from the failure until the last
thing it lost progresses again (a job: running again after its restart cost and any wait for
its cards; a replica: its replacement serving after its load time, or the replica scaled
away). Outages that lost nothing recover in 0 s.

Pure apart from the seeded random draw (no clock, no I/O).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reconciler.observe.model import ObservedState, Workload
from reconciler.policy.state import DesiredState
from reconciler.sim.actions import recreated
from reconciler.sim.world import World

DAY = 86400.0


@dataclass(frozen=True)
class Outage:
    node: str
    start: float  # twin seconds
    end: float


def outages(
    nodes: Sequence[str], horizon: float, rate: float, repair_time: float, seed: int
) -> list[Outage]:
    """The outages of `nodes` within [0, horizon): `rate` failures per node-day of up time,
    each lasting `repair_time` seconds; node i's draws depend only on (seed, i)."""
    if rate <= 0 or horizon <= 0:
        return []
    out = []
    for i, node in enumerate(nodes):
        rng = random.Random(f"gpupool-twin-failures:{seed}:{i}")
        t = rng.expovariate(rate / DAY)
        while t < horizon:
            out.append(Outage(node, t, t + repair_time))
            t += repair_time + rng.expovariate(rate / DAY)
    return sorted(out, key=lambda o: (o.start, o.node))


def take_down(
    desired: DesiredState, snap: ObservedState, nodes: set[str], now: datetime
) -> tuple[ObservedState, list[Workload]]:
    """`nodes` NotReady, and the pods placed on them gone: those with an owner created again
    Pending (same name, as `recreated` does for an eviction), the others lost for good.
    Returns the new snapshot and the pods that were lost."""
    world = World.of(desired, snap)
    for name in nodes:
        if name in world.nodes:
            world.nodes[name] = world.nodes[name].model_copy(update={"ready": False})
    lost = [w for w in world.workloads if w.placed and w.node in nodes]
    for w in lost:
        world.leave_cards(w, now)
    gone = {w.key for w in lost}
    kept = [w for w in world.workloads if w.key not in gone]
    again = [recreated(desired, w, None, now) for w in lost if w.owner_kind]
    world.workloads = kept + again
    return world.state(), lost


def bring_back(snap: ObservedState, nodes: set[str]) -> ObservedState:
    """`nodes` are Ready again (their cards idle since the failure)."""
    return snap.model_copy(
        update={
            "nodes": [
                n.model_copy(update={"ready": True}) if n.name in nodes else n for n in snap.nodes
            ]
        }
    )


@dataclass
class OutageRecord:
    outage: Outage
    cards: int
    measured: bool
    lost_work: float = 0.0  # GPU-seconds of training progress lost
    jobs: set[str] = field(default_factory=set)  # job keys to see progressing again
    replicas: set[str] = field(default_factory=set)  # replica pod keys to see serving again
    recovered_at: float | None = None
    last: float = 0.0  # latest recovery seen among its items so far


class FailureClock:
    """The outages of one twin run, applied cycle by cycle (`cycle`); `records` per outage."""

    def __init__(self, nodes: Sequence[Any], horizon: float, rate: float, repair: float, seed: int):
        self.cards = {n.name: len(n.gpus) for n in nodes}
        self.pending = outages([n.name for n in nodes], horizon, rate, repair, seed)
        self.down: dict[str, Outage] = {}
        self.records: list[OutageRecord] = []

    def cycle(self, twin: Any, s: Any, t: float, measured: bool) -> None:
        """At twin time `t`, before the planner: nodes whose repair is over come back, nodes
        whose failure is due go down (their pods lost: jobs roll back to their checkpoint),
        and the recoveries so far are noted. `twin` is the `Twin`, `s` its run state."""
        back = {n for n, o in self.down.items() if o.end <= t}
        if back:
            s.snap = bring_back(s.snap, back)
            for n in back:
                del self.down[n]
        due = []
        while self.pending and self.pending[0].start <= t:
            o = self.pending.pop(0)
            if o.node not in self.down and o.end > t:
                due.append(o)
        if due:
            self._fail(twin, s, due, t, measured)
        self._recoveries(twin, s, t)

    def _fail(self, twin: Any, s: Any, due: list[Outage], t: float, measured: bool) -> None:
        nodes = {o.node for o in due}
        s.snap, lost = take_down(twin.desired, s.snap, nodes, twin.at(t))
        recs = {}
        for o in due:
            self.down[o.node] = o
            recs[o.node] = OutageRecord(o, self.cards.get(o.node, 0), measured)
            self.records.append(recs[o.node])
        for w in lost:
            rec = recs[w.node or ""]
            j = twin.job_of(w)
            if j is None:
                s.ready_at.pop(w.key, None)
                if twin.service.owns(w):
                    rec.replicas.add(w.key)
                continue
            # progress since the last checkpoint is lost; the job resumes from `saved`
            rec.lost_work += (j.progress - j.saved) * j.spec.gpus
            rec.jobs.add(j.key)
            j.progress = j.saved
            j.restarts += 1
            j.running = False
            s.running.pop(j.key, None)
        if measured:
            res = s.res
            res.training_lost += sum(recs[n].lost_work for n in recs)

    def _recoveries(self, twin: Any, s: Any, t: float) -> None:
        present = {w.key: w for w in s.snap.workloads}
        for rec in self.records:
            if rec.recovered_at is not None:
                continue
            for key in list(rec.jobs):
                j = twin.by_key[key]
                if j.running:
                    rec.last = max(rec.last, j.overhead_until)
                    rec.jobs.discard(key)
                elif j.done_at is not None:
                    rec.last = max(rec.last, j.done_at)
                    rec.jobs.discard(key)
            for key in list(rec.replicas):
                w = present.get(key)
                if w is None:  # scaled away: nothing left to replace
                    rec.last = max(rec.last, t)
                    rec.replicas.discard(key)
                elif w.phase == "Running" and key in s.ready_at:
                    rec.last = max(rec.last, s.ready_at[key])
                    rec.replicas.discard(key)
            if not rec.jobs and not rec.replicas:
                rec.recovered_at = max(rec.last, rec.outage.start)

    def summary(self, warmup: float, horizon: float) -> dict[str, float]:
        """Over the measured window: outages, GPU-hours of work lost and of cards down, and
        the recovery times (p50, max, not recovered by the end)."""
        recs = [r for r in self.records if r.measured]
        rec_times = sorted(
            r.recovered_at - r.outage.start for r in recs if r.recovered_at is not None
        )
        down = sum(
            r.cards * max(0.0, min(r.outage.end, horizon) - max(r.outage.start, warmup))
            for r in self.records
        )

        def pct(q: float) -> float:
            if not rec_times:
                return 0.0
            return rec_times[min(len(rec_times) - 1, int(q * (len(rec_times) - 1) + 0.5))]

        return {
            "failures": len(recs),
            "failure_gpu_h_lost": round(sum(r.lost_work for r in recs) / 3600, 2),
            "failure_gpu_h_down": round(down / 3600, 2),
            "recovery_p50_s": round(pct(0.5), 1),
            "recovery_max_s": round(rec_times[-1], 1) if rec_times else 0.0,
            "not_recovered": sum(1 for r in recs if r.recovered_at is None),
        }
