"""plan(desired, observed) -> Plan: the pure heart of gpupool.

No I/O, no clock (time is an input), no globals: the same inputs give a byte-identical plan.
The steps, in order (each one explains itself in the actions it emits):

1. scale inference services whose queue/wait signals cross their ScalingPolicy thresholds;
2. bring teams that run over their hard cap back under it (preempting their own preemptible work);
3. reclaim GPUs idle longer than the MaintenancePolicy allows;
4. place pending inference on free MIG instances / shared slices; when none is left,
   repartition whole cards (empty ones first, then by preempting what the priority rules allow);
5. keep the pool's warm inference minimum;
6. place pending training on whole cards; when none fits, give back surplus empty inference
   cards, preempt what the rules allow, or defragment by moving migratable work;
7. quota objects, priority classes and pool labels that differ from the desired state;
8. per node, the repartitions: cordon -> (checkpoint -> preempt) -> reconfigure -> uncordon.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction

from reconciler.conventions import CORDONED_FOR_ANN, POOL_LABEL
from reconciler.observe.model import InferenceService, ObservedState, Request, Workload
from reconciler.plan import placement
from reconciler.plan.actions import (
    KIND_ORDER,
    Action,
    ApplyPriorityClass,
    ApplyQuota,
    CardChange,
    CardLayout,
    CardSlices,
    Checkpoint,
    Cordon,
    Eviction,
    LabelNode,
    MigReconfigure,
    Move,
    Preempt,
    Reclaim,
    Scale,
    SetSharing,
    Uncordon,
)
from reconciler.plan.cluster import (
    ClusterView,
    GpuSlot,
    PoolView,
    build_cluster,
    card_equivalents,
)
from reconciler.plan.model import Finding, Plan
from reconciler.plan.quotas import desired_priority_classes, desired_resource_quotas
from reconciler.plan.victims import Candidate, order_victims
from reconciler.policy.models import PriorityClassSpec, ScalingPolicy
from reconciler.policy.quantity import format_duration
from reconciler.policy.state import DesiredState

INF_PRIORITY = 2**31
PLACEMENT_POLICY = "ours"  # the simulator's best policy (docs/simulator.md); FGD plus look-ahead
SHORTLIST = 16  # nodes scored per placement, tightest fits first (like percentageOfNodesToScore)
UNMETERED = 10**9  # the planner does not meter CPU/memory; the scheduler checks those


@dataclass
class Pending:
    """A unit of demand the plan tries to place: a pending pod or a replica it scales up."""

    key: str
    namespace: str
    request: Request
    priority_class: str | None
    pool: str | None
    created: datetime | None
    borrow_from: tuple[str, ...] = ()  # extra victim classes (ScalingPolicy.borrowFrom)
    origin: str = "pending pod"


@dataclass
class _Run:
    desired: DesiredState
    observed: ObservedState
    now: datetime
    cluster: ClusterView
    actions: dict[str, Action] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    evicted: set[str] = field(default_factory=set)
    evictions_on: dict[tuple[str, int], set[str]] = field(
        default_factory=dict
    )  # (node, gpu) -> eviction ids
    budget_left: int = 0
    team_usage: dict[str, Fraction] = field(default_factory=dict)
    pool_whole_usage: dict[tuple[str, str], int] = field(
        default_factory=dict
    )  # (team, pool) -> cards
    generation: int = 0  # bumped whenever capacity is freed or repartitioned
    failed: dict[tuple, int] = field(
        default_factory=dict
    )  # demand shape -> generation it failed at
    _hosts: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    _placement: dict[str, placement.PlacementContext] = field(default_factory=dict)

    def placement_ctx(self, pv: PoolView) -> placement.PlacementContext:
        """FGD's target workload for a pool: the GPU requests observed there (whole cards as
        1000 milli, shared slices as their share of a card); a fixed seed for ties."""
        if pv.name not in self._placement:
            slices = (
                pv.pool.spec.inference.shared.slices_per_gpu if pv.pool.spec.inference.shared else 1
            )
            reqs = []
            for w in self.cluster.workloads.values():
                if self.cluster.pool_of(w) != pv.name:
                    continue
                if w.request.gpus:
                    reqs.append(placement.PodDemand(num_gpu=w.request.gpus, gpu_milli=1000))
                elif w.request.shared_slices:
                    reqs.append(
                        placement.PodDemand(
                            num_gpu=1, gpu_milli=-(-w.request.shared_slices * 1000 // slices)
                        )
                    )
            self._placement[pv.name] = placement.PlacementContext(
                target=placement.typical_workload(reqs), rng=random.Random(0)
            )
        return self._placement[pv.name]

    # -- small helpers ---------------------------------------------------------------
    def add(self, action: Action) -> str:
        if action.id not in self.actions:
            self.actions[action.id] = action
        return action.id

    def find(self, severity: str, code: str, subject: str, message: str) -> None:
        self.findings.append(
            Finding(severity=severity, code=code, subject=subject, message=message)
        )

    def pclass(self, name: str | None) -> PriorityClassSpec | None:
        return self.desired.priority_class(name)

    def priority(self, name: str | None) -> int:
        c = self.pclass(name)
        return c.value if c else 0

    def team(self, namespace: str) -> str | None:
        q = self.desired.quota_for_namespace(namespace)
        return q.team if q else None

    def pool_view(self, name: str | None) -> PoolView | None:
        return self.cluster.pools.get(name) if name else None

    def seconds_since(self, t: datetime | None) -> float | None:
        return None if t is None else (self.now - t).total_seconds()

    # -- victims -----------------------------------------------------------------------
    def victim_classes(self, preemptor: str | None, extra: tuple[str, ...] = ()) -> set[str]:
        out = set(extra)
        if self.desired.priority:
            for r in self.desired.priority.spec.preemption.rules:
                if r.preemptor == (preemptor or self.desired.priority.spec.default_class):
                    out.update(r.victims)
        return out

    def candidate(self, w: Workload) -> Candidate:
        cls = self.pclass(w.priority_class)
        spot = bool(cls and cls.spot)
        running = self.seconds_since(w.started_at)
        since_ckpt = self.seconds_since(w.last_checkpoint_at or w.started_at)
        return Candidate(
            key=w.key,
            priority=cls.value if cls else 0,
            # unknown class or unknown start: never preempted (safe default)
            preemptible=bool(cls and cls.preemptible and running is not None),
            over_quota=self._over_guarantee(w),
            running_seconds=math.inf if spot else (running or 0.0),
            seconds_since_checkpoint=since_ckpt or 0.0,
            gpus=float(len(w.allocations) or w.request.gpus or 1),
        )

    def min_runtime(self) -> float:
        return (
            self.desired.priority.spec.preemption.min_runtime.total_seconds()
            if self.desired.priority
            else math.inf
        )

    def _over_guarantee(self, w: Workload) -> bool:
        q = self.desired.quota_for_namespace(w.namespace)
        pool = self.cluster.pool_of(w)
        if q is None or pool is None:
            return True
        pq = next((p for p in q.spec.pools if p.pool == pool), None)
        used = self.pool_whole_usage.get((q.team, pool), 0)
        return pq is None or used > pq.whole.guaranteed

    def victims_for(
        self, workloads: list[Workload], preemptor_priority: int, classes: set[str]
    ) -> list[Candidate]:
        cands = [
            self.candidate(w)
            for w in workloads
            if w.key not in self.evicted and (w.priority_class or self._default_class()) in classes
        ]
        return order_victims(
            cands, preemptor_priority=preemptor_priority, min_runtime_seconds=self.min_runtime()
        )

    def _default_class(self) -> str | None:
        return self.desired.priority.spec.default_class if self.desired.priority else None

    # -- evictions ---------------------------------------------------------------------
    def evict(
        self, w: Workload, kind: str, reason: str, pool: str | None, target: str | None = None
    ) -> str:
        """checkpoint (grace period) -> evict; frees the workload's GPUs in the working view."""
        cls = self.pclass(w.priority_class)
        deps: tuple[str, ...] = ()
        if not (cls and cls.spot):
            grace = (
                self.desired.priority.spec.preemption.checkpoint_grace_period
                if self.desired.priority
                else timedelta(0)
            )
            lost = self.seconds_since(w.last_checkpoint_at or w.started_at)
            ck = self.add(
                Checkpoint(
                    id=f"checkpoint:{w.key}",
                    target=w.key,
                    pool=pool,
                    reason=(
                        f"ask {w.key} to checkpoint before it is stopped "
                        f"({format_duration(lost or 0)} since its last checkpoint)"
                    ),
                    grace_period_seconds=int(grace.total_seconds()),
                    checkpointable=w.checkpointable,
                )
            )
            deps = (ck,)
        fields = {
            "id": f"{kind}:{w.key}",
            "target": w.key,
            "pool": pool,
            "reason": reason,
            "depends_on": deps,
            "node": w.node,
            "gpus": tuple(sorted(a.gpu for a in w.allocations)),
            "priority_class": w.priority_class,
        }
        if kind == "move":
            action: Eviction = Move(**fields, to_node=target or "")
        else:
            action = Preempt(**fields) if kind == "preempt" else Reclaim(**fields)
        aid = self.add(action)
        for a in w.allocations:
            self.evictions_on.setdefault((w.node or "", a.gpu), set()).add(aid)
        self.evicted.add(w.key)
        if kind == "preempt":
            self.budget_left -= 1
        team = self.team(w.namespace)
        pv = self.pool_view(pool)
        if team is not None:
            self.team_usage[team] = self.team_usage.get(team, Fraction(0)) - card_equivalents(w, pv)
            if w.request.gpus and pool:
                self.pool_whole_usage[(team, pool)] = (
                    self.pool_whole_usage.get((team, pool), 0) - w.request.gpus
                )
        self.cluster.release(w)
        self.freed()
        return aid

    def nodes_hosting(self, pv: PoolView, classes: set[str]) -> list[str]:
        """Nodes of the pool where a running whole-card workload of one of `classes` is placed
        (from the snapshot; evictions only ever shrink this, so it never misses one)."""
        if pv.name not in self._hosts:
            hosts: dict[str, set[str]] = {}
            default = self._default_class()
            for w in self.cluster.workloads.values():
                if (
                    w.phase == "Running"
                    and w.request.gpus
                    and self.cluster.node_pool.get(w.node or "") == pv.name
                ):
                    hosts.setdefault(w.priority_class or default or "", set()).add(w.node)
            self._hosts[pv.name] = hosts
        hosts = self._hosts[pv.name]
        return sorted(set().union(*(hosts.get(c, set()) for c in classes)))

    def freed(self) -> None:
        """Capacity came free: demand that failed before may fit now."""
        self.generation += 1


@dataclass(frozen=True)
class PlanFacts:
    """What a plan leaves besides its actions, as data (the working view stays inside)."""

    targets: dict[tuple[str, str, int], str]
    """(pool, node, index) -> the card's partitioning after the plan."""
    team_usage: dict[str, Fraction]
    """Team -> card equivalents its running workloads hold, as observed."""


def plan(desired: DesiredState, observed: ObservedState, now: datetime | None = None) -> Plan:
    """The ordered, explained actions that move `observed` towards `desired`."""
    return plan_state(desired, observed, now)[0]


def plan_state(
    desired: DesiredState, observed: ObservedState, now: datetime | None = None
) -> tuple[Plan, PlanFacts]:
    """The plan, and the facts the controller's gauges and the change report read."""
    run = _Run(desired, observed, now or observed.observed_at, build_cluster(desired, observed))
    _init_usage(run)
    observed_usage = dict(run.team_usage)
    pending = _pending(run)
    pending += _scale(run)
    _team_caps(run)
    _idle_reclaim(run)
    pending = _admit(run, pending)
    for pv in run.cluster.pools.values():
        mine = [p for p in pending if _pending_pool(run, p) == pv.name]
        # Higher priority first, whatever the kind: a high-priority training run is not
        # squeezed out by lower-priority inference taking the last free cards, nor vice versa.
        for level in sorted({run.priority(p.priority_class) for p in mine}, reverse=True):
            batch = [p for p in mine if run.priority(p.priority_class) == level]
            _training(run, pv, [p for p in batch if p.request.kind == "whole"])
            _inference(run, pv, [p for p in batch if p.request.kind in ("mig", "shared")])
        _warm_minimum(run, pv)
    for p in pending:
        if _pending_pool(run, p) is None:
            run.find(
                "warning",
                "no-pool",
                p.key,
                f"no pool can run it ({_describe_request(p.request)}); it stays pending",
            )
    _objects(run)
    _repartitions(run)
    _finish_drains(run)
    _check_no_overcommit(run.cluster)
    for node in run.cluster.unmatched_nodes:
        run.find(
            "info",
            "unmatched-node",
            node,
            "GPU node matches no pool's selector; gpupool leaves it alone",
        )
    result = Plan(
        revision=desired.revision,
        observed_at=run.now.isoformat(),
        actions=tuple(_ordered(run.actions)),
        findings=tuple(
            sorted(run.findings, key=lambda f: (f.severity != "warning", f.subject, f.message))
        ),
        capacity={
            pv.name: {
                **{f"{k}Now": v for k, v in pv.capacity(False).items()},
                **{f"{k}After": v for k, v in pv.capacity(True).items()},
            }
            for pv in run.cluster.pools.values()
        },
    )
    return result, PlanFacts(targets=run.cluster.targets(), team_usage=observed_usage)


def _check_no_overcommit(cluster: ClusterView) -> None:
    """The planner's own guard: a bug here must fail loudly, never reach a cluster."""
    for g in cluster.slot.values():
        live = set(g.holders)
        if g.target_mode == "whole" and len(live) > 1:
            raise AssertionError(f"{g.key}: whole card held by {sorted(live)}")
        if g.target_mode == "shared" and g.used_slices > g.target_slices:
            raise AssertionError(f"{g.key}: {g.used_slices} slices used of {g.target_slices}")
        if g.target_mode == "mig" and not g.used_instances <= set(g.target_instances):
            raise AssertionError(
                f"{g.key}: instances {sorted(g.used_instances)} not in layout {g.target_instances}"
            )
        running = sorted(
            h
            for h in g.holders
            if h in cluster.workloads and cluster.workloads[h].phase == "Running"
        )
        if g.changes and running:
            raise AssertionError(f"{g.key}: repartitioned while {running} still run on it")


# --------------------------------------------------------------------------- setup


def _init_usage(run: _Run) -> None:
    pol = run.desired.priority
    if pol is not None:
        hour_ago = run.now - timedelta(hours=1)
        recent = sum(1 for t in run.observed.recent_preemptions if hour_ago < t <= run.now)
        run.budget_left = max(0, pol.spec.preemption.budget_per_hour - recent)
    for w in run.cluster.workloads.values():
        if w.phase != "Running":
            continue
        team = run.team(w.namespace)
        if team is None:
            continue
        pool = run.cluster.pool_of(w)
        run.team_usage[team] = run.team_usage.get(team, Fraction(0)) + card_equivalents(
            w, run.pool_view(pool)
        )
        if w.request.gpus and pool:
            run.pool_whole_usage[(team, pool)] = (
                run.pool_whole_usage.get((team, pool), 0) + w.request.gpus
            )


def _pending(run: _Run) -> list[Pending]:
    out = []
    for w in run.cluster.workloads.values():
        if w.phase == "Pending" and w.request.kind != "none":
            out.append(
                Pending(w.key, w.namespace, w.request, w.priority_class, w.pool, w.created_at)
            )
    return out


def _pending_pool(run: _Run, p: Pending) -> str | None:
    if p.pool:
        return p.pool if p.pool in run.cluster.pools else None
    for pv in run.cluster.pools.values():  # first pool (by name) that offers what it asks
        if pv.model is None:
            continue
        inf = pv.pool.spec.inference
        r = p.request
        if (
            r.gpus
            or (r.shared_slices and inf.shared)
            or (
                r.mig
                and inf.mig
                and all(any(prof in lay.profiles for lay in inf.mig.layouts) for prof in r.mig)
            )
        ):
            return pv.name
    return None


def _describe_request(r: Request) -> str:
    if r.gpus:
        return f"{r.gpus} whole GPU{'s' if r.gpus > 1 else ''}"
    if r.mig:
        return ", ".join(f"{n} x MIG {p}" for p, n in sorted(r.mig.items()))
    return f"{r.shared_slices} shared slice{'s' if r.shared_slices > 1 else ''}"


# --------------------------------------------------------------------------- 1. scaling


def _scale(run: _Run) -> list[Pending]:
    services = {s.key: s for s in run.observed.services}
    out: list[Pending] = []
    for name in sorted(run.desired.scaling):
        pol = run.desired.scaling[name]
        for t in pol.spec.targets:
            svc = services.get(f"{t.namespace}/{t.name}")
            if svc is None:
                run.find(
                    "warning",
                    "scale-target-missing",
                    f"{t.namespace}/{t.name}",
                    f"ScalingPolicy/{name} targets a {t.kind} that was not observed",
                )
                continue
            want, why = _desired_replicas(run, pol, svc, t.min_replicas, t.max_replicas)
            if want == svc.replicas:
                continue
            run.add(
                Scale(
                    id=f"scale:{svc.key}",
                    target=svc.key,
                    pool=pol.spec.pool,
                    reason=why,
                    workload_kind=svc.kind,
                    from_replicas=svc.replicas,
                    to_replicas=want,
                    policy=name,
                )
            )
            for i in range(svc.replicas, want):
                out.append(
                    Pending(
                        key=f"{svc.key}#replica-{i + 1}",
                        namespace=svc.namespace,
                        request=svc.replica_request,
                        priority_class=svc.priority_class,
                        pool=pol.spec.pool,
                        created=run.now,
                        borrow_from=tuple(pol.spec.borrow_from),
                        origin=f"scale-up of {svc.key}",
                    )
                )
    return out


def _desired_replicas(
    run: _Run, pol: ScalingPolicy, svc: InferenceService, lo: int, hi: int
) -> tuple[int, str]:
    up, down = pol.spec.scale_up, pol.spec.scale_down
    n = svc.replicas
    if n < lo:
        return lo, f"{svc.key} runs {n} replicas, below its minimum of {lo}"
    if n > hi:
        return hi, f"{svc.key} runs {n} replicas, above its maximum of {hi}"
    since = run.seconds_since(svc.last_scale_at)
    per = svc.queue_length / max(n, 1) if svc.queue_length is not None else None
    wait = svc.pending_seconds_p99
    hot = []
    if (
        up.queue_length_per_replica is not None
        and per is not None
        and per > up.queue_length_per_replica
    ):
        hot.append(f"queue {per:g}/replica > {up.queue_length_per_replica:g}")
    if up.pending_time is not None and wait is not None and wait > up.pending_time.total_seconds():
        hot.append(
            f"p99 wait {format_duration(wait)} > {format_duration(up.pending_time.total_seconds())}"
        )
    if hot:
        if n >= hi:
            run.find(
                "warning",
                "at-max-replicas",
                svc.key,
                f"wants to scale up ({'; '.join(hot)}) but is at its maximum of {hi} replicas",
            )
            return n, ""
        if since is not None and since < up.cooldown.total_seconds():
            return n, ""
        want = min(hi, n + up.step)
        return want, f"{'; '.join(hot)}: scale {svc.key} {n} -> {want}"
    calm = per is not None and per < down.queue_length_per_replica
    if calm and n > lo and (since is None or since >= down.cooldown.total_seconds()):
        want = max(lo, n - down.step)
        return (
            want,
            f"queue {per:g}/replica < {down.queue_length_per_replica:g} "
            f"for over {format_duration(down.cooldown.total_seconds())}: "
            f"scale {svc.key} {n} -> {want}",
        )
    return n, ""


# --------------------------------------------------------------------------- 2. caps, 3. idle


def _team_caps(run: _Run) -> None:
    for q in sorted(run.desired.quotas.values(), key=lambda q: q.team):
        cap = q.spec.max_gpus
        if cap is None or run.team_usage.get(q.team, 0) <= cap:
            continue
        mine = [
            w
            for w in run.cluster.workloads.values()
            if w.phase == "Running" and w.namespace in q.spec.namespaces
        ]
        all_classes = (
            {c.name for c in run.desired.priority.spec.classes} if run.desired.priority else set()
        )
        for c in run.victims_for(mine, INF_PRIORITY, all_classes):
            if run.team_usage[q.team] <= cap:
                break
            if run.budget_left <= 0:
                run.find(
                    "warning",
                    "budget-spent",
                    q.team,
                    "over its cap but the preemption budget for this hour is spent",
                )
                break
            w = run.cluster.workloads[c.key]
            used = run.team_usage[q.team]
            run.evict(
                w,
                "preempt",
                f"team {q.team} uses {float(used):g} GPUs, over its cap of {cap}; "
                f"{w.key} is its lowest-priority preemptible work",
                run.cluster.pool_of(w),
            )
        if run.team_usage[q.team] > cap:
            run.find(
                "warning",
                "over-cap",
                q.team,
                f"still uses {float(run.team_usage[q.team]):g} GPUs, over its cap of {cap}: "
                "the rest is not preemptible yet",
            )


def _idle_reclaim(run: _Run) -> None:
    for w in run.cluster.workloads.values():
        if w.phase != "Running" or w.key in run.evicted or not w.allocations:
            continue
        pool = run.cluster.pool_of(w)
        if pool is None:
            continue
        for m in run.desired.maintenance_for(pool):
            rule = m.spec.idle_reclaim
            if rule is None or not rule.enabled:
                continue
            slots = [run.cluster.slot.get((w.node or "", a.gpu)) for a in w.allocations]
            if any(s is None or s.holders != {w.key} or s.mode != "whole" for s in slots):
                continue  # MIG/shared cards: NVML's utilization is not this workload's alone
            limit = rule.idle_for.total_seconds()
            idle = [run.seconds_since(s.idle_since) for s in slots]
            if any(s.utilization >= rule.utilization_below for s in slots) or any(
                i is None or i < limit for i in idle
            ):
                continue
            cls = w.priority_class or run._default_class()
            if cls in rule.exclude_classes:
                continue
            pc = run.pclass(cls)
            if pc is None or not pc.preemptible:
                run.find(
                    "info",
                    "idle-protected",
                    w.key,
                    f"idle for {format_duration(min(idle))} but its class {cls} is not preemptible",
                )
                continue
            why = (
                f"{w.key} has used < {rule.utilization_below:g}% of its {len(slots)} GPU(s) "
                f"for {format_duration(min(idle))} (limit {format_duration(limit)})"
            )
            if rule.action == "report":
                run.find("info", "idle-report", w.key, why)
            else:
                run.evict(w, "reclaim", why + ": reclaim the cards", pool)
            break


# --------------------------------------------------------------------------- admission


def _admit(run: _Run, pending: list[Pending]) -> list[Pending]:
    """Drop demand that would break a team cap or borrowing limit; highest priority first."""
    out = []
    pending = sorted(
        pending, key=lambda p: (-run.priority(p.priority_class), p.created or run.now, p.key)
    )
    for p in pending:
        team = run.team(p.namespace)
        pool = _pending_pool(run, p)
        pv = run.pool_view(pool)
        need = card_equivalents(Workload(namespace=p.namespace, name="x", request=p.request), pv)
        if team is not None:
            q = run.desired.quota_for_namespace(p.namespace)
            used = run.team_usage.get(team, Fraction(0))
            if q.spec.max_gpus is not None and used + need > q.spec.max_gpus:
                run.find(
                    "info",
                    "held-cap",
                    p.key,
                    f"held: team {team} would use {float(used + need):g} GPUs, "
                    f"over its cap of {q.spec.max_gpus}",
                )
                continue
            pq = next((x for x in q.spec.pools if x.pool == pool), None)
            if p.request.gpus and pq is not None and pq.whole.borrowing_limit is not None:
                whole = run.pool_whole_usage.get((team, pool), 0)
                limit = pq.whole.guaranteed + pq.whole.borrowing_limit
                if whole + p.request.gpus > limit:
                    run.find(
                        "info",
                        "held-borrowing",
                        p.key,
                        f"held: team {team} would hold {whole + p.request.gpus} whole GPUs "
                        f"in {pool}, over guarantee + borrowing ({limit})",
                    )
                    continue
            run.team_usage[team] = used + need
            if p.request.gpus and pool:
                run.pool_whole_usage[(team, pool)] = (
                    run.pool_whole_usage.get((team, pool), 0) + p.request.gpus
                )
        out.append(p)
    return out


# --------------------------------------------------------------------------- 4. inference


def _place_inference(run: _Run, pv: PoolView, p: Pending) -> bool:
    r = p.request
    if r.mig:
        chosen: list[tuple[GpuSlot, tuple[str, int]]] = []
        for prof, n in sorted(r.mig.items()):
            for _ in range(n):
                # pack: the card with the fewest free instances first (the list is kept sorted)
                for _, g in pv.mig_with_free(prof):
                    free = [i for i in g.free_instances(prof) if (g, i) not in chosen]
                    if free:
                        chosen.append((g, free[0]))
                        break
                else:
                    return False
        for g, inst in chosen:
            pv.take_instance(g, inst, p.key)
        return True
    if r.shared_slices:
        g = _choose_shared(run, pv, r.shared_slices)
        if g is None:
            return False
        pv.take_slices(g, r.shared_slices, p.key)
        return True
    return False


def _choose_shared(run: _Run, pv: PoolView, k: int) -> GpuSlot | None:
    """A shared card with k free slices, chosen by the shared placement policy: each card's
    free slices are its free milli (slices x 1000 / slicesPerGPU), as the simulator models
    GPU sharing."""
    # shortlist: the tightest fits first, like kube-scheduler scoring a sample of nodes
    ranked: list[str] = []
    for bucket in pv.shared_buckets()[k:]:
        for g in bucket:
            if g.node not in ranked:
                ranked.append(g.node)
                if len(ranked) == SHORTLIST:
                    break
        if len(ranked) == SHORTLIST:
            break
    if not ranked:
        return None
    slices = pv.pool.spec.inference.shared.slices_per_gpu
    states, cards = [], {}
    for node in ranked:
        slots = pv.by_node()[node]
        states.append(
            placement.NodeState(
                node,
                pv.pool.spec.gpu_model,
                UNMETERED,
                UNMETERED,
                [g.free_slices * 1000 // slices if g.target_mode == "shared" else 0 for g in slots],
            )
        )
        cards[node] = slots
    req = placement.PodDemand(num_gpu=1, gpu_milli=-(-k * 1000 // slices))
    chosen = placement.choose(PLACEMENT_POLICY, states, req, run.placement_ctx(pv))
    if chosen is None:  # pragma: no cover - every shortlisted card fits
        return None
    return cards[chosen.node][chosen.gpus[0]]


def _layouts_for(pv: PoolView, unmet: Counter) -> list[tuple[str, ...]]:
    """Greedy: per new card, the layout (in policy order) covering most unmet memory slices."""
    mig = pv.pool.spec.inference.mig
    if mig is None or pv.model is None:
        return []
    unmet = Counter(unmet)
    out = []
    while +unmet:
        best, best_cover = None, 0
        for lay in mig.layouts:
            have = Counter(lay.profiles)
            cover = sum(min(unmet[p], have[p]) * pv.model.profiles[p].memory_slices for p in unmet)
            if cover > best_cover:
                best, best_cover = lay, cover
        if best is None:
            break
        out.append(tuple(sorted(best.profiles)))
        unmet -= Counter(best.profiles)
    return out


def _inference_budget(pv: PoolView) -> int:
    """How many more cards inference may take in this pool."""
    spec = pv.pool.spec
    now_inf = len(pv.inference_slots())
    whole = len(pv.gpus) - now_inf
    by_max = (
        (spec.inference.max_gpus - now_inf) if spec.inference.max_gpus is not None else len(pv.gpus)
    )
    return max(0, min(by_max, whole - spec.training.min_gpus))


def _convert(
    run: _Run, g: GpuSlot, pv: PoolView, mode: str, layout: tuple[str, ...] = (), *, why: str
) -> None:
    run.freed()
    if mode == "mig":
        pv.repartition(
            g,
            mode,
            layout=layout,
            instances=run.desired.catalog.place(pv.model, list(layout)) or [],
            why=why,
        )
    elif mode == "shared":
        pv.repartition(g, mode, slices=pv.pool.spec.inference.shared.slices_per_gpu, why=why)
    else:
        pv.repartition(g, mode, why=why)


def _free_cards(
    run: _Run, pv: PoolView, n: int, preemptor: Pending | None, why: str
) -> list[GpuSlot]:
    """Up to n whole cards to repartition: empty ones first, then by preemption if allowed."""
    inf_nodes = Counter(g.node for g in pv.gpus if g.target_mode != "whole")
    empty = [g for g in pv.gpus if g.free_whole]
    free_on = Counter(g.node for g in empty)
    # Next to existing inference first, then from the most fragmented nodes, so that whole
    # free nodes stay whole for multi-card training.
    drained = {
        n
        for n, node in pv.nodes.items()
        if node.unschedulable and CORDONED_FOR_ANN in node.annotations
    }
    # A node gpupool already drained for a repartition first: an interrupted change finishes
    # where it began instead of starting over elsewhere.
    empty.sort(
        key=lambda g: (g.node not in drained, -inf_nodes[g.node], free_on[g.node], g.node, g.index)
    )
    chosen = empty[:n]
    if len(chosen) >= n or preemptor is None:
        return chosen
    classes = run.victim_classes(preemptor.priority_class, preemptor.borrow_from)
    holders = sorted(
        {
            h
            for g in pv.gpus
            if g.target_mode == "whole"
            for h in g.holders
            if h in run.cluster.workloads
        }
    )
    workloads = [run.cluster.workloads[h] for h in holders]
    for c in run.victims_for(workloads, run.priority(preemptor.priority_class), classes):
        if len(chosen) >= n:
            break
        if run.budget_left <= 0:
            run.find(
                "warning",
                "budget-spent",
                preemptor.key,
                "needs preemption but the preemption budget for this hour is spent",
            )
            break
        w = run.cluster.workloads[c.key]
        slots = [
            run.cluster.slot[(w.node, a.gpu)]
            for a in w.allocations
            if (w.node, a.gpu) in run.cluster.slot
        ]
        run.evict(
            w,
            "preempt",
            f"{why}; {w.key} ({w.priority_class}) is the cheapest preemptible victim",
            pv.name,
        )
        chosen.extend(s for s in slots if s.free_whole and s not in chosen)
    return chosen[:n]


def _inference(run: _Run, pv: PoolView, pending: list[Pending]) -> None:
    if not pending:
        return
    unplaced = [p for p in pending if not _place_inference(run, pv, p)]
    if not unplaced:
        return
    inf = pv.pool.spec.inference
    mig_unmet: Counter = Counter()
    shared_unmet: list[int] = []
    for p in unplaced:
        if p.request.mig:
            mig_unmet.update(p.request.mig)
        else:
            shared_unmet.append(p.request.shared_slices)
    wants: list[tuple[str, tuple[str, ...]]] = [("mig", lay) for lay in _layouts_for(pv, mig_unmet)]
    if shared_unmet and inf.shared is not None:
        bins: list[int] = []  # first-fit decreasing over new shared cards
        for k in sorted(shared_unmet, reverse=True):
            for i, free in enumerate(bins):
                if free >= k:
                    bins[i] -= k
                    break
            else:
                bins.append(inf.shared.slices_per_gpu - k)
        wants += [("shared", ())] * len(bins)
    budget = _inference_budget(pv)
    if len(wants) > budget:
        run.find(
            "warning",
            "inference-limit",
            pv.name,
            f"inference needs {len(wants)} more cards but the pool allows {budget} more "
            "(maxGPUs / training minGPUs)",
        )
        wants = wants[:budget]
    if wants:
        top = unplaced[0]  # highest priority first (admission sorted them)
        demand = ", ".join(_describe_request(p.request) for p in unplaced[:3]) + (
            " ..." if len(unplaced) > 3 else ""
        )
        why = (
            f"{len(unplaced)} inference request(s) wait with no free MIG/shared capacity "
            f"in {pv.name} ({demand})"
        )
        cards = _free_cards(run, pv, len(wants), top, why)
        for g, (mode, layout) in zip(cards, wants, strict=False):
            _convert(run, g, pv, mode, layout, why=f"pending inference ({demand})")
    for p in unplaced:
        if not _place_inference(run, pv, p):
            run.find(
                "warning",
                "waits",
                p.key,
                f"{p.origin} ({_describe_request(p.request)}) stays pending: "
                f"no capacity in {pv.name} this cycle",
            )


def _warm_minimum(run: _Run, pv: PoolView) -> None:
    inf = pv.pool.spec.inference
    have = len(pv.inference_slots())
    short = inf.min_gpus - have
    if short <= 0 or pv.model is None:
        return
    if inf.prefer == "mig" and inf.mig is not None and pv.model.mig_capable:
        mode, layout = "mig", tuple(sorted(inf.mig.layouts[0].profiles))
    elif inf.shared is not None:
        mode, layout = "shared", ()
    elif inf.mig is not None and pv.model.mig_capable:
        mode, layout = "mig", tuple(sorted(inf.mig.layouts[0].profiles))
    else:
        return
    cards = _free_cards(
        run,
        pv,
        min(short, _inference_budget(pv)),
        _inference_preemptor(run, pv),
        f"Pool/{pv.name} keeps inference.minGPUs={inf.min_gpus} cards for inference and has {have}",
    )
    for g in cards:
        _convert(
            run,
            g,
            pv,
            mode,
            layout,
            why=f"keep Pool/{pv.name} inference.minGPUs={inf.min_gpus} cards warm",
        )
    if len(cards) < short:
        run.find(
            "info",
            "warm-short",
            pv.name,
            f"keeps {have + len(cards)} warm inference cards, "
            f"{short - len(cards)} short of minGPUs {inf.min_gpus}: no empty whole card to take",
        )


def _inference_preemptor(run: _Run, pv: PoolView) -> Pending | None:
    """The warm minimum acts for the pool's inference: it may displace what the priority rules
    already let the strongest inference class preempt, never more."""
    if run.desired.priority is None:
        return None
    preemptors = {r.preemptor for r in run.desired.priority.spec.preemption.rules}
    classes = [
        c
        for c in run.desired.priority.spec.classes
        if c.workload == "inference" and c.name in preemptors
    ]
    if not classes:
        return None
    top = max(classes, key=lambda c: (c.value, c.name))
    return Pending(
        key=f"Pool/{pv.name}",
        namespace="",
        request=Request(),
        priority_class=top.name,
        pool=pv.name,
        created=None,
    )


# --------------------------------------------------------------------------- 6. training


def _gang_on(slots: list[GpuSlot], n: int, topology: str) -> list[GpuSlot] | None:
    free = [g for g in slots if g.free_whole]
    if len(free) < n:
        return None
    if topology in ("nvlink", "numa"):
        groups: dict[int, list[GpuSlot]] = {}
        for g in free:
            groups.setdefault(g.island if topology == "nvlink" else g.numa, []).append(g)
        fitting = [grp for _, grp in sorted(groups.items()) if len(grp) >= n]
        if fitting:
            return min(fitting, key=len)[:n]
    return free[:n]


def _place_gang(run: _Run, pv: PoolView, p: Pending) -> list[GpuSlot] | None:
    """The node comes from the shared placement policy (the simulator's code) over a shortlist
    of nodes that can take the whole gang, best-fit first; the cards within it from the
    pool's topology preference."""
    n = p.request.gpus
    shortlist = pv.nodes_fitting(n, SHORTLIST)
    if not shortlist:
        return None
    states = [_whole_state(pv, node) for node in shortlist]
    chosen = placement.choose(
        PLACEMENT_POLICY,
        states,
        placement.PodDemand(num_gpu=n, gpu_milli=1000),
        run.placement_ctx(pv),
    )
    if chosen is None:  # pragma: no cover - every shortlisted node fits
        return None
    got = _gang_on(pv.by_node()[chosen.node], n, pv.pool.spec.training.topology)
    pv.reserve(got, p.key)
    return got


def _whole_state(pv: PoolView, node: str) -> placement.NodeState:
    """A node as the placement policies see it for whole-card demand: free cards are 1000 milli."""
    slots = pv.by_node()[node]
    return placement.NodeState(
        node,
        pv.pool.spec.gpu_model,
        UNMETERED,
        UNMETERED,
        [1000 if g.free_whole else 0 for g in slots],
    )


def _training(run: _Run, pv: PoolView, pending: list[Pending]) -> None:
    largest = max((len(s) for s in pv.by_node().values()), default=0)
    for p in pending:
        if _place_gang(run, pv, p):
            continue
        n = p.request.gpus
        if n > largest:
            run.find(
                "warning",
                "too-large",
                p.key,
                f"asks {n} GPUs on one node; {pv.name}'s nodes have fewer",
            )
            continue
        # The same shape of demand failed and nothing was freed since: it fails again.
        shape = (pv.name, n, p.priority_class, p.borrow_from)
        if run.failed.get(shape) != run.generation and (
            any(step(run, pv, p) for step in _gang_steps(run, p))
        ):
            continue
        run.failed[shape] = run.generation
        run.find(
            "info",
            "waits",
            p.key,
            f"pending training ({n} whole GPUs) waits: "
            f"nothing in {pv.name} can be freed for it this cycle",
        )


def _gang_steps(run: _Run, p: Pending) -> tuple:
    """How a gang that fits nowhere gets room, in order. A preemption rule with `when: always`
    for its class displaces victims before warm inference cards are given back."""
    rules = run.desired.priority.spec.preemption.rules if run.desired.priority else []
    cls = p.priority_class or run._default_class()
    if any(r.preemptor == cls and r.when == "always" for r in rules):
        return (_preempt_for_gang, _give_back_inference, _defragment)
    return (_give_back_inference, _preempt_for_gang, _defragment)


def _give_back_inference(run: _Run, pv: PoolView, p: Pending) -> bool:
    """Empty inference cards beyond the warm minimum return to training when training waits."""
    inf = pv.pool.spec.inference
    spare = len(pv.inference_slots()) - inf.min_gpus
    if spare <= 0:
        return False
    n = p.request.gpus
    options = []
    empty = pv.empty_inference_by_node()
    for node in pv.empty_inference_nodes():
        cards = empty[node]
        back = [g for g in cards if not g.holders and not g.converted and g.target_mode != "whole"]
        free = pv.free_whole_on(node)
        if free + min(len(back), spare) >= n and n - free > 0:
            options.append((n - free, node, back[: n - free]))
    if not options:
        return False
    _, node, back = min(options, key=lambda o: (o[0], o[1]))
    for g in back:
        _convert(
            run,
            g,
            pv,
            "whole",
            why=(
                f"pending training {p.key} needs {n} whole cards on one node "
                "and these inference cards are empty"
            ),
        )
    got = _place_gang(run, pv, p)
    assert got is not None
    return True


def _preempt_for_gang(run: _Run, pv: PoolView, p: Pending) -> bool:
    classes = run.victim_classes(p.priority_class)
    if not classes or run.budget_left <= 0:
        return False
    n = p.request.gpus
    prio = run.priority(p.priority_class)
    best = None
    for node in run.nodes_hosting(pv, classes):
        slots = pv.by_node()[node]
        free = pv.free_whole_on(node)
        ws = sorted(
            {
                h
                for g in slots
                if g.target_mode == "whole"
                for h in g.holders
                if h in run.cluster.workloads
            }
        )
        victims = run.victims_for([run.cluster.workloads[h] for h in ws], prio, classes)
        take, freed = [], free
        for c in victims:
            if freed >= n:
                break
            take.append(c)
            freed += sum(
                1
                for a in run.cluster.workloads[c.key].allocations
                if run.cluster.slot.get((node, a.gpu)) is not None
            )
        if freed < n or len(take) > run.budget_left:
            continue
        cost = (
            max(c.priority for c in take) if take else -INF_PRIORITY,
            len(take),
            sum(c.seconds_since_checkpoint for c in take),
            node,
        )
        if best is None or cost < best[0]:
            best = (cost, take)
    if best is None:
        return False
    for c in best[1]:
        w = run.cluster.workloads[c.key]
        run.evict(
            w,
            "preempt",
            f"pending {p.key} ({p.priority_class}, {p.request.gpus} GPUs) "
            f"outranks {w.key} ({w.priority_class}) "
            f"and no node has {p.request.gpus} free whole cards for it",
            pv.name,
        )
    return _place_gang(run, pv, p) is not None


def _defragment(run: _Run, pv: PoolView, p: Pending) -> bool:
    """Move a few one-card workloads off the node closest to fitting gang `p` (the shared
    defragmenter, `placement.defragment`), each to a free card elsewhere, then place `p`."""
    rules = [
        m.spec.defragmentation
        for m in run.desired.maintenance_for(pv.name)
        if m.spec.defragmentation and m.spec.defragmentation.enabled
    ]
    if not rules:
        return False
    rule = rules[0]
    if rule.when == "window" and not _in_window(run.now, rule.window.start, rule.window.end):
        return False
    n = p.request.gpus
    if pv.total_free_whole() < n:
        return False
    by_node = pv.by_node()
    moves = min(rule.max_migrations_per_cycle, n)
    names = pv.nodes_with_free(min(1, n - moves), len(pv.gpus))
    states = [_whole_state(pv, node) for node in names]
    residents: dict[str, list[placement.Resident]] = {}
    one_card = placement.PodDemand(num_gpu=1, gpu_milli=1000)
    for node in names:
        slots = by_node[node]
        for key in sorted(
            {
                h
                for g in slots
                if g.target_mode == "whole"
                for h in g.holders
                if h in run.cluster.workloads
            }
        ):
            w = run.cluster.workloads[key]
            if len(w.allocations) != 1 or w.key in run.evicted:
                continue
            at = next(i for i, g in enumerate(slots) if g.index == w.allocations[0].gpu)
            residents.setdefault(node, []).append(
                placement.Resident(
                    key,
                    one_card,
                    placement.Placement(node, (at,)),
                    # a move is an eviction: only what the priority policy lets be preempted
                    movable=(w.migratable or not rule.only_migratable) and _preemptible(run, w),
                )
            )

    def first_free(
        req: placement.PodDemand, others: list[placement.NodeState]
    ) -> placement.Placement | None:
        return next(
            (
                placement.Placement(o.name, (i,))
                for o in others
                for i, f in enumerate(o.gpu_free_milli)
                if f >= req.gpu_milli
            ),
            None,
        )

    found = placement.defragment(
        states,
        placement.PodDemand(num_gpu=n, gpu_milli=1000),
        residents,
        first_free,
        lambda trial, req: placement.Placement(trial.name, ()),
        max_moves=moves,
    )
    if found is None:
        return False
    _, migrations = found
    for m in migrations:
        w = run.cluster.workloads[m.key]
        dest = by_node[m.target.node][m.target.gpus[0]]
        pv.reserve([dest], w.key)
        run.evict(
            w,
            "move",
            f"defragment {m.source.node}: move {w.key} to {dest.key} "
            f"so pending {p.key} gets {n} GPUs on one node",
            pv.name,
            target=dest.node,
        )
    return _place_gang(run, pv, p) is not None


def _preemptible(run: _Run, w: Workload) -> bool:
    pc = run.pclass(w.priority_class)  # DesiredState.priority_class falls back to the default
    return pc is not None and pc.preemptible


def _in_window(now: datetime, start: str, end: str) -> bool:
    t = now.hour * 60 + now.minute
    s = int(start[:2]) * 60 + int(start[3:])
    e = int(end[:2]) * 60 + int(end[3:])
    return s <= t < e if s <= e else (t >= s or t < e)


# --------------------------------------------------------------------------- 7. objects


def _objects(run: _Run) -> None:
    have = {(q.namespace, q.name): q for q in run.observed.quotas}
    for (ns, name), hard in desired_resource_quotas(run.desired).items():
        cur = have.get((ns, name))
        if cur is not None and cur.hard == hard:
            continue
        verb = "create" if cur is None else "update"
        changed = sorted(
            k
            for k in set(hard) | set(cur.hard if cur else {})
            if (cur.hard.get(k) if cur else None) != hard.get(k)
        )
        run.add(
            ApplyQuota(
                id=f"quota:{ns}/{name}",
                target=f"{ns}/{name}",
                reason=f"{verb} ResourceQuota for team {run.team(ns)}: "
                + ", ".join(f"{k}={hard.get(k, '(removed)')}" for k in changed),
                verb=verb,
                hard=hard,
                previous=cur.hard if cur else None,
            )
        )
    classes = {c.name: c for c in run.observed.priority_classes}
    for name, (value, policy) in desired_priority_classes(run.desired).items():
        cur = classes.get(name)
        if cur is not None and cur.value == value and cur.preemption_policy == policy:
            continue
        run.add(
            ApplyPriorityClass(
                id=f"priority-class:{name}",
                target=name,
                reason=(
                    f"{'create' if cur is None else 'update'} PriorityClass {name} "
                    f"(value {value}, preemptionPolicy {policy})"
                ),
                value=value,
                preemption_policy=policy,
            )
        )
    for pv in run.cluster.pools.values():
        for node in sorted(pv.nodes):
            if pv.nodes[node].labels.get(POOL_LABEL) != pv.name:
                run.add(
                    LabelNode(
                        id=f"label-node:{node}",
                        target=node,
                        pool=pv.name,
                        reason=(
                            f"{node} matches Pool/{pv.name}'s selector; "
                            f"label it {POOL_LABEL}={pv.name}"
                        ),
                        labels={POOL_LABEL: pv.name},
                    )
                )


# --------------------------------------------------------------------------- 8. repartitions


def _repartitions(run: _Run) -> None:
    for pv in run.cluster.pools.values():
        for node, slots in pv.by_node().items():
            changed = [g for g in slots if g.changes]
            if not changed:
                continue
            evictions = sorted(
                set().union(*(run.evictions_on.get((node, g.index), set()) for g in changed))
            )
            mig = any("mig" in (g.mode, g.target_mode) for g in changed)
            cordon = run.add(
                Cordon(
                    id=f"cordon:{node}",
                    target=node,
                    pool=pv.name,
                    reason=f"stop new pods on {node} while {len(changed)} GPU(s) are repartitioned",
                )
            )
            cards = tuple(
                CardChange(gpu=g.index, before=g.describe(), after=g.describe(target=True))
                for g in changed
            )
            summary = "; ".join(f"gpu{c.gpu}: {c.before} -> {c.after}" for c in cards)
            shared = tuple(
                CardSlices(gpu=g.index, slices=g.target_slices)
                for g in slots
                if g.target_mode == "shared"
            )
            why = (
                "; ".join(dict.fromkeys(g.why for g in changed if g.why)) or "desired partitioning"
            )
            common = {
                "target": node,
                "pool": pv.name,
                "reason": f"{summary} ({why})",
                "depends_on": (cordon, *evictions),
                "cards": cards,
                "shared_slices": shared,
            }
            if mig:
                layout = tuple(
                    CardLayout(
                        gpu=g.index,
                        profiles=tuple(g.target_layout) if g.target_mode == "mig" else None,
                    )
                    for g in slots
                )
                rc = run.add(MigReconfigure(id=f"mig-reconfigure:{node}", layout=layout, **common))
            else:
                rc = run.add(SetSharing(id=f"set-sharing:{node}", **common))
            run.add(
                Uncordon(
                    id=f"uncordon:{node}",
                    target=node,
                    pool=pv.name,
                    reason=f"{node} is repartitioned; schedule on it again",
                    depends_on=(rc,),
                )
            )


def _finish_drains(run: _Run) -> None:
    """Nodes gpupool cordoned for a repartition that is now complete go back into service."""
    for pv in run.cluster.pools.values():
        for name, node in pv.nodes.items():
            if not (node.unschedulable and CORDONED_FOR_ANN in node.annotations):
                continue
            if f"cordon:{name}" in run.actions:
                continue
            run.add(
                Uncordon(
                    id=f"uncordon:{name}",
                    target=name,
                    pool=pv.name,
                    reason=(
                        f"{name} was cordoned by gpupool for a repartition that is complete; "
                        "schedule on it again"
                    ),
                )
            )


def _ordered(actions: dict[str, Action]) -> list[Action]:
    """Dependencies first; otherwise by kind (disruptive first) and id: a total, stable order."""
    rank = {k: i for i, k in enumerate(KIND_ORDER)}
    waiting = {aid: {d for d in a.depends_on if d in actions} for aid, a in actions.items()}
    users: dict[str, list[str]] = {}
    for aid, deps in waiting.items():
        for d in deps:
            users.setdefault(d, []).append(aid)
    ready = [(rank[a.kind], aid) for aid, a in actions.items() if not waiting[aid]]
    heapq.heapify(ready)
    out: list[Action] = []
    while ready:
        _, aid = heapq.heappop(ready)
        out.append(actions[aid])
        for u in users.get(aid, ()):
            waiting[u].discard(aid)
            if not waiting[u]:
                heapq.heappush(ready, (rank[actions[u].kind], u))
    if len(out) != len(actions):  # pragma: no cover - the planner never builds cycles
        raise RuntimeError("dependency cycle in plan")
    return out
