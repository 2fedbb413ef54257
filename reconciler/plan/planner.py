"""plan(desired, observed) -> Plan: the pure heart of gpupool.

No I/O, no clock (time is an input), no globals: the same inputs give a byte-identical plan,
whatever order the snapshot lists things in (`consistency.canonical`). The rules an SRE can
hold it to are in docs/planner.md. The steps, in order (each explains itself in the actions
and findings it emits):

0. check the snapshot (`consistency.check`): cards the cluster itself over-committed and the
   cards of unavailable nodes are fenced; cards whose partition drifted from the policy are
   repartitioned when empty, closed to new work while busy;
1. scale inference services whose queue/wait signals cross their ScalingPolicy thresholds;
2. bring teams that run over their hard cap back under it (their own preemptible work);
3. reclaim GPUs idle longer than the MaintenancePolicy allows;
4. admit demand: reachable, within caps, borrowing/lending limits, training maxGPUs and, for
   new replicas, the ResourceQuota; then per pool and priority level, highest first:
5. place pending training on whole cards (a job's pods all or none); when none fits, give
   back empty inference cards, preempt the cheapest victims, or defragment by moving work;
6. place pending inference on free MIG instances / shared slices; when none is left, reshape
   empty inference cards, take empty whole cards, then preempt;
7. keep the pool's warm inference minimum, from empty cards only;
8. quota objects, priority classes and pool labels that differ from the desired state;
9. per node, the repartitions: cordon -> (checkpoint -> evict) -> reconfigure -> uncordon.

Every eviction (preempt, reclaim, move) passes one gate (`_Run.gate`) and spends the budget.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction

from reconciler.conventions import (
    ADMISSION_GATE,
    CORDONED_FOR_ANN,
    KUEUE_LOCAL_QUEUE,
    KUEUE_QUEUE_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POOL_LABEL,
)
from reconciler.observe.model import (
    Autoscaler,
    InferenceService,
    ObservedState,
    Request,
    Workload,
    scale_down_order,
)
from reconciler.plan import consistency, placement
from reconciler.plan import kueue as kueue_render
from reconciler.plan import signals as sig
from reconciler.plan.actions import (
    KIND_ORDER,
    Action,
    Admit,
    ApplyKueueObject,
    ApplyPriorityClass,
    ApplyQuota,
    CardChange,
    CardLayout,
    CardSlices,
    Checkpoint,
    Cordon,
    Eviction,
    Hold,
    LabelNode,
    MigReconfigure,
    Move,
    PodAdmission,
    Preempt,
    PruneKueueObject,
    PrunePriorityClass,
    PruneQuota,
    Reclaim,
    Resume,
    Scale,
    SetScaleEnvelope,
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
from reconciler.plan.quotas import (
    QUOTA_PREFIX,
    desired_priority_classes,
    desired_resource_quotas,
    quota_use,
)
from reconciler.plan.victims import Candidate, order_victims
from reconciler.policy.models import (
    MaintenancePolicy,
    PriorityClassSpec,
    ScaleTarget,
    ScalingPolicy,
)
from reconciler.policy.quantity import format_duration, quantity_bytes
from reconciler.policy.state import DesiredState

INF_PRIORITY = 2**31
PLACEMENT_POLICY = "ours"  # the simulator's best policy (docs/simulator.md); FGD plus look-ahead
SHORTLIST = 16  # nodes scored per placement, tightest fits first (like percentageOfNodesToScore)
UNMETERED = 10**9  # the planner does not meter CPU/memory; the scheduler checks those
BUDGET = "preemption budget for this hour"
ADMISSION_CODES = frozenset({"held-cap", "held-quota", "held-borrowing", "held-lending"})
SERVICE_OWNERS = frozenset({"", "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet"})
ADMITTED_ELSEWHERE = frozenset({"admitted", "other"})  # pending pods that are not demand


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
    order: int = 0  # tie-break among replicas of one scale-up (replica 2 before replica 10)
    members: tuple[str, ...] = ()  # the pods of the gang, each asking `request` (default: key)
    gated: bool = False  # every pod carries gpupool's gate: an Admit lets it run
    placed: bool = False  # its reservation was honoured before any other placement
    reserved: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    """member -> (node, cards) the pod's `gpupool.io/reserved` names: freed for it earlier."""

    def __post_init__(self) -> None:
        self.members = self.members or (self.key,)


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
    scale_signals: dict[str, tuple] = field(default_factory=dict)
    """Service key -> the Prometheus readings its scaling decision used (Scale.signals)."""
    signals_reported: set[str] = field(default_factory=set)
    """Utilization queries whose failure is already a finding (one per query, not per pod)."""
    budget_left: int = 0
    team_usage: dict[str, Fraction] = field(default_factory=dict)
    pool_whole_usage: dict[tuple[str, str], int] = field(
        default_factory=dict
    )  # (team, pool) -> cards
    running_whole: dict[tuple[str, str], int] = field(
        default_factory=dict
    )  # (team, pool) -> whole cards its running workloads hold (guarantees judge these)
    waiting: dict[str, str] = field(default_factory=dict)  # pending key -> why it waits
    blocked: dict[object, str] = field(default_factory=dict)  # what stopped a step, for `waits`
    inference_waits: set[str] = field(default_factory=set)  # pools whose inference demand waits
    generation: int = 0  # bumped whenever capacity is freed or repartitioned
    failed: dict[tuple, int] = field(
        default_factory=dict
    )  # demand shape -> generation it failed at
    stopping: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    """(node, gpu) -> pods terminating there: left out of the view (their cards are as good as
    free to the plan), but an admission onto those cards waits until they are gone."""
    _hosts: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    _gang_index: dict[tuple[str, str, str], list[Workload]] | None = None
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

    def demand_priority(self, p: Pending) -> int:
        """The priority kube-scheduler gives `p`. A pod that exists without a class was
        created while no class was globalDefault and has priority 0 for good (Priority
        admission stamps the default on create only); a replica not created yet will get
        the class its template names, or defaultClass (published as globalDefault)."""
        if p.priority_class is None and p.origin == "pending pod":
            return 0
        return self.priority(p.priority_class)

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

    def min_runtime(self) -> float:
        return (
            self.desired.priority.spec.preemption.min_runtime.total_seconds()
            if self.desired.priority
            else math.inf
        )

    def gang(self, w: Workload) -> list[Workload]:
        """The running pods that live and die together with `w` (pods of one job: stopping
        one stops the job), `w` first; a pod of a service stands alone."""
        key = gang_key(w)
        if key is None:
            return [w]
        members = self._gangs().get(key, [w])
        return [w] + [m for m in members if m.key != w.key]

    def _gangs(self) -> dict[tuple[str, str, str], list[Workload]]:
        if self._gang_index is None:
            out: dict[tuple[str, str, str], list[Workload]] = {}
            for w in self.cluster.workloads.values():
                k = gang_key(w)
                if k is not None and w.phase == "Running":
                    out.setdefault(k, []).append(w)
            self._gang_index = out
        return self._gang_index

    def gate(
        self, w: Workload, preemptor_priority: int | None = None, *, budget: bool = True
    ) -> str:
        """The one eviction gate every preemption, reclaim and move passes: '' when `w` (and
        its gang) may be stopped now, otherwise why not. Unknown class or start: never."""
        members = self.gang(w)
        for m in members:
            if m.key in self.evicted:
                return f"{m.key} is already stopped by this plan"
            cls = self.pclass(m.priority_class)
            if cls is None:
                return f"{m.key}'s class {m.priority_class or '(none)'} is unknown"
            if not cls.preemptible:
                return f"{m.key}'s class {cls.name} is not preemptible"
            running = self.seconds_since(m.started_at)
            if running is None:
                return f"{m.key}'s start time is unknown"
            if not cls.spot and running < self.min_runtime():
                return (
                    f"{m.key} has run {format_duration(max(running, 0))} of minRuntime "
                    f"{format_duration(self.min_runtime())}"
                )
            if preemptor_priority is not None and cls.value >= preemptor_priority:
                return f"{m.key}'s priority {cls.value} is not lower"
        if budget and self.budget_left < len(members):
            return f"the {BUDGET} is spent"
        return ""

    def candidate(self, w: Workload, pool: str | None) -> Candidate:
        members = self.gang(w)
        cls = self.pclass(w.priority_class)
        lost = 0.0
        gpus = 0.0
        for m in members:
            n = float(len(m.allocations) or m.request.gpus or 1)
            gpus += n
            lost += n * (self.seconds_since(m.last_checkpoint_at or m.started_at) or 0.0)
        return Candidate(
            key=w.key,
            priority=cls.value if cls else 0,
            preemptible=True,  # the gate decided
            over_quota=self.borrowing(w, pool),
            running_seconds=math.inf,
            seconds_since_checkpoint=lost / max(gpus, 1.0),
            gpus=gpus,
            lost_gpu_seconds=lost,
        )

    def borrowing(self, w: Workload, pool: str | None) -> bool:
        """`w`'s team holds more whole cards in `pool` than its guarantee (or has none there)."""
        q = self.desired.quota_for_namespace(w.namespace)
        if q is None or pool is None:
            return True
        pq = next((p for p in q.spec.pools if p.pool == pool), None)
        return pq is None or self.running_whole.get((q.team, pool), 0) > pq.whole.guaranteed

    def reclaims(self, p: Pending, pool: str) -> str | None:
        """The team `p` belongs to, when `p` only takes back its own guarantee in `pool`:
        then lower-priority work other teams run on borrowed cards may be preempted for it,
        whatever the class rules say (the Quota promise; Kueue's reclaimWithinCohort:
        LowerPriority). Not work of higher priority: nothing holds the recreated victim back,
        and kube-scheduler binds the higher priority first (Kueue's `Any` needs admission
        control: the recreated victim would have to stay unadmitted)."""
        q = self.desired.quota_for_namespace(p.namespace)
        if q is None or not p.request.gpus:
            return None
        pq = next((x for x in q.spec.pools if x.pool == pool), None)
        if pq is None:
            return None
        if self.running_whole.get((q.team, pool), 0) + p.request.gpus > pq.whole.guaranteed:
            return None
        return q.team

    def victims(
        self,
        workloads: list[Workload],
        preemptor: Pending | None,
        pool: str,
        classes: set[str],
        need: int,
    ) -> list[Candidate]:
        """Victims for `need` cards among `workloads`, cheapest first, each gang once: those
        the priority rules let `preemptor` displace (class in `classes`, lower priority), and
        lower-priority work of teams borrowing beyond their guarantee when `preemptor`
        reclaims its own."""
        prio = self.demand_priority(preemptor) if preemptor else INF_PRIORITY
        team = self.reclaims(preemptor, pool) if preemptor else None
        default = self._default_class()
        seen: set[str] = set()
        cands = []
        for w in workloads:
            head = self.gang(w)
            if any(m.key in seen for m in head):
                continue
            seen.update(m.key for m in head)
            in_rules = (w.priority_class or default) in classes and not self.gate(
                w, prio, budget=False
            )
            reclaim = (
                team is not None
                and self.team(w.namespace) not in (None, team)
                and self.borrowing(w, pool)
                and not self.gate(w, prio, budget=False)
            )
            if in_rules or reclaim:
                cands.append(self.candidate(w, pool))
        return order_victims(cands, need)

    def _default_class(self) -> str | None:
        return self.desired.priority.spec.default_class if self.desired.priority else None

    # -- evictions ---------------------------------------------------------------------
    def evict(
        self,
        w: Workload,
        kind: str,
        reason: str,
        pool: str | None,
        target: str | None = None,
        preemptor: str | None = None,
        to_gpus: tuple[int, ...] = (),
    ) -> str:
        """checkpoint (grace period) -> evict, for `w` and the rest of its gang; frees their
        GPUs in the working view. Each eviction spends one unit of the hourly budget."""
        first = ""
        for i, m in enumerate(self.gang(w)):
            why = reason if i == 0 else f"{m.key} belongs to the same job as {w.key}: {reason}"
            aid = self._evict_one(
                m, kind, why, self.cluster.pool_of(m) or pool, target, preemptor, to_gpus
            )
            first = first or aid
        self.freed()
        return first

    def _evict_one(
        self,
        w: Workload,
        kind: str,
        reason: str,
        pool: str | None,
        target: str | None,
        preemptor: str | None,
        to_gpus: tuple[int, ...] = (),
    ) -> str:
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
        job = suspended_job(w)
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
        if kind != "move" and job and not kueue_mode(self):
            # stop the gang by suspending its Job: no replacement pod, no retry spent (not in
            # kueue mode: Kueue unsuspends a suspended Job whose Workload it admitted,
            # kubernetes-sigs/kueue v0.17.0 pkg/controller/jobframework/reconciler.go "handle
            # job is suspended"; so the pods are evicted)
            fields["suspend_job"] = job
        if kind == "move":
            action: Eviction = Move(**fields, to_node=target or "", to_gpus=to_gpus)
        else:
            action = (
                Preempt(**fields, preemptor=preemptor) if kind == "preempt" else Reclaim(**fields)
            )
        aid = self.add(action)
        for a in w.allocations:
            self.evictions_on.setdefault((w.node or "", a.gpu), set()).add(aid)
        self.evicted.add(w.key)
        self.budget_left -= 1
        team = self.team(w.namespace)
        pv = self.pool_view(pool)
        if team is not None:
            self.team_usage[team] = self.team_usage.get(team, Fraction(0)) - card_equivalents(w, pv)
            if w.request.gpus and pool:
                for usage in (self.pool_whole_usage, self.running_whole):
                    usage[(team, pool)] = usage.get((team, pool), 0) - w.request.gpus
        self.cluster.release(w)
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
    if now is not None and now.tzinfo is None:
        raise ValueError(f"plan time {now.isoformat()} has no timezone; give it in UTC")
    stopping = [w for w in observed.workloads if w.terminating]
    if stopping:
        observed = observed.model_copy(
            update={"workloads": [w for w in observed.workloads if not w.terminating]}
        )
    observed = consistency.canonical(observed)
    checked = consistency.check(desired, observed)
    run = _Run(
        desired,
        observed,
        now or observed.observed_at,
        build_cluster(desired, observed, checked.suspect_cards),
    )
    run.findings.extend(checked.findings)
    for u in observed.unreadable:  # left out of the snapshot (or read in part) by the adapter
        run.find("warning", "unreadable-object", u.ref, u.message)
    for w in stopping:
        for a in w.allocations if w.node else ():
            run.stopping.setdefault((w.node or "", a.gpu), set()).add(w.key)
    _init_usage(run)
    _kueue_workloads(run)
    observed_usage = dict(run.team_usage)
    _fences(run)
    _drift(run)
    scaling, replicas, scaled_away = _scale(run)
    pending = (
        [p for p in _pending(run) if not set(p.members) <= scaled_away] + replicas + _suspended(run)
    )
    _team_caps(run)
    _idle_reclaim(run)
    pending = _admit(run, pending)
    _emit_scales(run, scaling, pending)
    _reservations(run, pending)
    for pv in run.cluster.pools.values():
        mine = [p for p in pending if p.pool == pv.name]
        # Higher priority first, whatever the kind: a high-priority training run is not
        # squeezed out by lower-priority inference taking the last free cards, nor vice versa.
        for level in sorted({run.demand_priority(p) for p in mine}, reverse=True):
            batch = [p for p in mine if run.demand_priority(p) == level]
            _training(run, pv, [p for p in batch if p.request.kind == "whole"])
            _inference(run, pv, [p for p in batch if p.request.kind in ("mig", "shared")])
        _warm_minimum(run, pv)
    _objects(run)
    _prune(run)
    _kueue(run)
    _repartitions(run)
    _finish_drains(run)
    _admissions(run, pending)
    _check_no_overcommit(run.cluster)
    for node in run.cluster.unmatched_nodes:
        run.find(
            "info",
            "unmatched-node",
            node,
            "GPU node matches no pool's selector; gpupool leaves it alone "
            "(but for removing a stale pool label)",
        )
    result = Plan(
        revision=desired.revision,
        observed_at=run.now.isoformat(),
        actions=tuple(_ordered(run.actions)),
        findings=tuple(
            sorted(
                run.findings,
                key=lambda f: (f.severity != "warning", f.subject, f.code, f.message),
            )
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


def _refuse_prune_all(run: _Run, kind: str, names: list[str], opt_in: str) -> None:
    run.find(
        "warning",
        "prune-everything-refused",
        kind,
        f"the desired state has no {kind} any more, and pruning would delete every one gpupool "
        f"made ({', '.join(names)}): an empty or unreadable policy directory looks the same, so "
        f"nothing is pruned. Set {opt_in}: true in the ChangePolicy to prune them all",
    )


def _prune(run: _Run) -> None:
    """Delete what gpupool made (label MANAGED_BY_LABEL=MANAGED_BY) and the desired state no
    longer has; never an object without the label. Pruning every object of a kind while the
    desired state has none of it is refused unless the ChangePolicy allows it (Argo CD's
    allow-empty): a lost policy directory must not wipe the cluster's quotas and classes."""
    change = run.desired.change.spec if run.desired.change else None
    wanted_quotas = _resource_quotas(run)
    stale = sorted(
        (q.namespace, q.name)
        for q in run.observed.quotas
        if q.managed_by == MANAGED_BY and (q.namespace, q.name) not in wanted_quotas
    )
    if stale and not run.desired.quotas and not (change and change.allow_delete_all_quotas):
        _refuse_prune_all(
            run, "ResourceQuota", [f"{ns}/{n}" for ns, n in stale], "allowDeleteAllQuotas"
        )
    else:
        for ns, name in stale:
            run.add(
                PruneQuota(
                    id=f"prune-quota:{ns}/{name}",
                    target=f"{ns}/{name}",
                    reason=(
                        f"prune ResourceQuota {ns}/{name}: no Quota in the desired state "
                        f"governs namespace {ns} with it any more (gpupool made it: "
                        f"{MANAGED_BY_LABEL}={MANAGED_BY})"
                    ),
                )
            )
    wanted_classes = desired_priority_classes(run.desired)
    # Who still names a class: running and pending pods (their owners recreate them with the
    # same priorityClassName), inference services' templates, Jobs gpupool suspended. Deleting
    # a class they name would make their next pod unadmittable: the Priority admission plugin
    # rejects a pod whose priorityClassName names no PriorityClass ("If the priority class is
    # not found, the Pod is rejected", kubernetes.io/docs/concepts/configuration/
    # pod-priority-preemption/#pod-priority; plugin/pkg/admission/priority/admission.go).
    users: dict[str, list[str]] = {}
    for who in (*run.observed.workloads, *run.observed.services, *run.observed.suspended_jobs):
        if who.priority_class:
            users.setdefault(who.priority_class, []).append(f"{who.namespace}/{who.name}")
    stale_classes: list[str] = []
    for c in sorted(run.observed.priority_classes, key=lambda c: c.name):
        if c.managed_by != MANAGED_BY or c.name in wanted_classes:
            continue
        if c.name in users:
            names = sorted(set(users[c.name]))
            run.find(
                "warning",
                "prune-class-in-use",
                c.name,
                f"PriorityClass {c.name} is no longer in the policy but is kept: "
                f"{', '.join(names[:5])}{' and others' if len(names) > 5 else ''} still name "
                "it, and a pod naming a missing class is rejected. It is pruned once none does",
            )
            continue
        stale_classes.append(c.name)
    if (
        stale_classes
        and not wanted_classes
        and not (change and change.allow_delete_all_priority_classes)
    ):
        _refuse_prune_all(run, "PriorityClass", stale_classes, "allowDeleteAllPriorityClasses")
        return
    for name in stale_classes:
        run.add(
            PrunePriorityClass(
                id=f"prune-priority-class:{name}",
                target=name,
                reason=(
                    f"prune PriorityClass {name}: the policy no longer names it and no pod, "
                    f"service or suspended Job uses it (gpupool made it: "
                    f"{MANAGED_BY_LABEL}={MANAGED_BY})"
                ),
            )
        )


def _resource_quotas(run: _Run) -> dict[tuple[str, str], dict[str, str]]:
    """The ResourceQuotas gpupool keeps: every team namespace's, except in namespaces gpupool
    gates. There admission enforces caps, borrowing and lending limits, holding a pod gated
    until it fits; a quota counts gated pods from their creation and would refuse pods
    admission would only queue, so it is kept empty."""
    if kueue_mode(run):
        return {}  # the Quotas are Kueue's ClusterQueues (reconciler/plan/kueue.py)
    gated = set(run.observed.gated_namespaces or ())
    return {
        (ns, name): ({} if ns in gated else hard)
        for (ns, name), hard in desired_resource_quotas(run.desired).items()
    }


def _check_no_overcommit(cluster: ClusterView) -> None:
    """The planner's own guard: a bug here must fail loudly, never reach a cluster. Cards
    the cluster itself over-committed (consistency findings) are fenced and not judged."""
    for g in cluster.slot.values():
        if g.fenced:
            continue
        live = set(g.holders)
        if g.target_mode == "whole" and len(live) > 1:
            raise AssertionError(f"{g.key}: whole card held by {sorted(live)}")
        if g.converted and g.target_mode == "shared" and g.used_slices > g.target_slices:
            raise AssertionError(f"{g.key}: {g.used_slices} slices used of {g.target_slices}")
        if g.target_mode == "mig" and not g.used_instances <= set(g.target_instances):
            raise AssertionError(
                f"{g.key}: instances {sorted(g.used_instances)} not in layout {g.target_instances}"
            )
        running = sorted(
            h for h in g.holders if h in cluster.workloads and cluster.workloads[h].placed
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
        if not w.placed:
            continue
        team = run.team(w.namespace)
        if team is None:
            continue
        pool = run.cluster.pool_of(w)
        run.team_usage[team] = run.team_usage.get(team, Fraction(0)) + card_equivalents(
            w, run.pool_view(pool)
        )
        if w.request.gpus and pool:
            for usage in (run.pool_whole_usage, run.running_whole):
                usage[(team, pool)] = usage.get((team, pool), 0) + w.request.gpus


def _fences(run: _Run) -> None:
    for name, why in sorted(run.cluster.fenced_nodes.items()):
        pool = run.cluster.node_pool.get(name)
        run.find(
            "info",
            "node-unavailable",
            name,
            f"{why}: its GPUs are not counted as capacity of {pool}; gpupool places, "
            "repartitions and uncordons nothing there until it is available again",
        )


def gang_key(w: Workload) -> tuple[str, str, str] | None:
    """Pods of one job run and stop together: an explicit gang or pod group (`w.gang`), else
    the pods of one owning job object; a pod owned by a ReplicaSet/StatefulSet (a service
    replica) or by nothing stands alone."""
    if w.gang:
        return (w.namespace, "gang", w.gang)
    if w.owner_kind in SERVICE_OWNERS or not w.owner_name:
        return None
    return (w.namespace, w.owner_kind, w.owner_name)


def suspended_job(w: Workload) -> str:
    """The Job whose suspension stops `w`'s gang ('' when its gang is not a Job's: an
    explicit gang or pod group, another owner, none)."""
    key = gang_key(w)
    return key[2] if key is not None and key[1] == "Job" and not w.gang else ""


def _pending(run: _Run) -> list[Pending]:
    """Pending pods as units of demand: the pending whole-card pods of one gang (`gang_key`)
    are one unit, placed, admitted and stopped all together or not at all. Pods admitted
    already, or still gated by another admission system, are not demand. A gang whose pods
    disagree (request, class, pool, size) or that is not complete yet (fewer pods than its
    size) waits, with a finding."""
    groups: dict[object, list[Workload]] = {}
    for w in run.cluster.workloads.values():
        if w.phase != "Pending" or w.request.kind == "none" or w.admission in ADMITTED_ELSEWHERE:
            continue
        if w.admission == "scheduler" and w.reserved_node:
            run.find(
                "warning",
                "gate-removed",
                w.key,
                f"gpupool's scheduling gate was removed by someone else before it admitted the "
                f"pod (cards were reserved for it on {w.reserved_node}): kube-scheduler places "
                "it outside gpupool's plan",
            )
        elif (
            w.admission == "gpupool"
            and run.observed.gated_namespaces is not None
            and w.namespace not in run.observed.gated_namespaces
        ):
            run.find(
                "warning",
                "gated-unmanaged-namespace",
                w.key,
                f"carries gpupool's scheduling gate in namespace {w.namespace}, which is not "
                "labelled for gpupool's admission (someone added the gate, or removed the "
                "label): gpupool admits it like any gated pod",
            )
        key = gang_key(w) if w.request.kind == "whole" else None
        groups.setdefault(key if key is not None else w.key, []).append(w)
    placed = Counter(gang_key(w) for w in run.cluster.workloads.values() if w.placed)
    out = []
    for key, ws in groups.items():
        head = ws[0]
        p = Pending(
            head.key, head.namespace, head.request, head.priority_class, head.pool, head.created_at
        )
        p.members = tuple(w.key for w in ws)
        p.gated = all(w.admission == "gpupool" for w in ws)
        p.reserved = {
            w.key: (w.reserved_node, tuple(w.reserved_gpus)) for w in ws if w.reserved_node
        }
        if not isinstance(key, tuple):
            out.append(p)
            continue
        if any(
            (w.request, w.priority_class, w.pool, w.gang_size)
            != (head.request, head.priority_class, head.pool, head.gang_size)
            for w in ws
        ):
            _wait(
                run,
                p,
                "gang-inconsistent",
                f"the pods of gang {key[2]} disagree on request, class, pool or size "
                f"({', '.join(w.name for w in ws)}): none is admitted until they agree",
                "warning",
            )
            continue
        size = head.gang_size
        if size is not None and len(ws) + placed[key] < size:
            _wait(
                run,
                p,
                "gang-incomplete",
                f"gang {key[2]} has {len(ws) + placed[key]} of its {size} pods: it is admitted "
                "once all exist",
            )
            continue
        out.append(p)
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


def _unreachable(run: _Run, pv: PoolView, p: Pending) -> str:
    """Why `p` can never run in `pv` whatever is freed or repartitioned ('' when it can).
    Judged before anything is disrupted for it, against every node of the pool (a node that
    is unavailable now may come back)."""
    r = p.request
    inf = pv.pool.spec.inference
    sizes = [len(s) for s in pv.by_node().values()]
    largest = max(sizes, default=0)
    if r.gpus:
        if r.gpus > largest:
            return f"asks {r.gpus} GPUs on one node; the largest node of {pv.name} has {largest}"
        return ""
    if r.shared_slices:
        if inf.shared is None:
            return f"asks shared slices; {pv.name} offers none"
        if r.shared_slices > inf.shared.slices_per_gpu:
            return (
                f"asks {r.shared_slices} shared slices of one card; "
                f"{pv.name}'s cards offer {inf.shared.slices_per_gpu}"
            )
        card_mib = pv.model.memory_gib * 1024 if pv.model is not None else 0
        if card_mib and r.gpu_memory_mib > card_mib:
            return (
                f"declares {r.gpu_memory_mib} MiB of GPU memory; a card of {pv.name} has "
                f"{card_mib} MiB"
            )
        if inf.shared.strategy == "mps" and r.shared_slices > 1:
            # the plugin fails a request for more than one shared replica under MPS
            # (failRequestsGreaterThanOne, NVIDIA/k8s-device-plugin api/config/v1/config.go)
            return f"asks {r.shared_slices} shared slices; under MPS a pod gets one"
        return ""
    if inf.mig is None or pv.model is None or not pv.model.mig_capable:
        return f"asks MIG instances; {pv.name} offers no MIG"
    for prof, n in sorted(r.mig.items()):
        most = max((lay.profiles.count(prof) for lay in inf.mig.layouts), default=0)
        if most == 0:
            return f"asks MIG {prof}; no layout of {pv.name} offers it"
        if n > most * largest:
            return f"asks {n} x MIG {prof} on one node; a node of {pv.name} offers at most " + str(
                most * largest
            )
    return ""


def _memory_beyond_share(run: _Run, pv: PoolView, p: Pending) -> None:
    """Shared work that declares more GPU memory than its slices' share (slices x
    memoryPerSlice): under time-slicing nothing stops it from taking its neighbours' memory
    (MPS caps it and the pod fails instead). Said, not held: the card has the memory."""
    sh = pv.pool.spec.inference.shared
    r = p.request
    if sh is None or not r.shared_slices or not r.gpu_memory_mib:
        return
    share = r.shared_slices * quantity_bytes(sh.memory_per_slice) // 2**20
    if r.gpu_memory_mib > share:
        run.find(
            "warning",
            "memory-over-share",
            p.key,
            f"declares {r.gpu_memory_mib} MiB of GPU memory for {r.shared_slices} slice(s) of "
            f"{sh.memory_per_slice}: "
            + (
                "MPS caps it at its share, so it will fail to allocate"
                if sh.strategy == "mps"
                else "time-slicing does not isolate memory, so its neighbours may run out"
            ),
        )


def _describe_request(r: Request) -> str:
    if r.gpus:
        return f"{r.gpus} whole GPU{'s' if r.gpus > 1 else ''}"
    if r.mig:
        return ", ".join(f"{n} x MIG {p}" for p, n in sorted(r.mig.items()))
    return f"{r.shared_slices} shared slice{'s' if r.shared_slices > 1 else ''}"


def _describe(p: Pending) -> str:
    each = _describe_request(p.request)
    return each if len(p.members) == 1 else f"{len(p.members)} pods x {each}"


def _wait(run: _Run, p: Pending, code: str, why: str, severity: str = "info") -> None:
    """`p` waits, and the finding says why; a wait the hourly budget causes says so by code."""
    if code == "waits" and BUDGET in why:
        code, severity = "budget-spent", "warning"
    run.waiting[p.key] = why
    if not p.origin.startswith("scale-up") or code not in ADMISSION_CODES:
        run.find(severity, code, p.key, why)
    # a replica admission holds is reported once, on its service (`_emit_scales`)
    if not p.gated or (kueue_mode(run) and p.request.kind == "whole"):
        return  # in kueue mode training is Kueue's to admit: no Hold
    for m in p.members:  # the pod stays gated: its owner sees why in `kubectl describe`
        w = run.cluster.workloads.get(m)
        if w is not None and w.held != why:
            run.add(
                Hold(
                    id=f"hold:{m}",
                    target=m,
                    pool=p.pool,
                    reason=f"{m} stays gated: {why}",
                    code=code,
                    message=why,
                )
            )


# --------------------------------------------------------------------------- 0. drift


def _policy_shape(pv: PoolView, g: GpuSlot) -> str:
    """Why `g`'s partition is not one its pool's policy offers ('' when it is)."""
    inf = pv.pool.spec.inference
    if g.mode == "shared":
        if inf.shared is None:
            return f"is shared x{g.slices}; Pool/{pv.name} offers no shared slices"
        if g.slices != inf.shared.slices_per_gpu:
            return f"is shared x{g.slices}; Pool/{pv.name} says x{inf.shared.slices_per_gpu}"
    if g.mode == "mig":
        if inf.mig is None or pv.model is None or not pv.model.mig_capable:
            return f"is MIG; Pool/{pv.name} offers no MIG"
        if g.layout not in {tuple(sorted(lay.profiles)) for lay in inf.mig.layouts}:
            return f"has MIG layout [{', '.join(g.layout)}], which Pool/{pv.name} does not offer"
    return ""


def _drift(run: _Run) -> None:
    """A card whose partition is not the policy's is repartitioned like any other change:
    at once when empty. While work runs on it, it stays what it is, to the planner as to
    kube-scheduler: the device plugin keeps advertising its instances or slices and nothing
    can close one card to the scheduler (the plugin advertises per node, a cordon stops the
    whole node), so its free capacity is counted where pods will really land."""
    for pv in run.cluster.pools.values():
        inf = pv.pool.spec.inference
        for g in pv.gpus:
            why = _policy_shape(pv, g) if not g.fenced else ""
            if not why:
                continue
            if g.holders:
                run.find(
                    "info",
                    "partition-drift",
                    g.key,
                    f"{g.key} {why}: it is repartitioned once its workloads finish; until "
                    "then kube-scheduler still binds pods to its free "
                    + (
                        "slices (time-slicing does not isolate memory)"
                        if g.mode == "shared"
                        else "capacity"
                    ),
                )
                continue
            if g.converted:
                continue  # reshaped with its node already
            mode, layout = _inference_shape(pv, prefer=g.mode)
            if not _reshape(run, g, pv, mode, layout, why=f"{g.key} {why}"):
                run.find(
                    "info",
                    "partition-drift",
                    g.key,
                    f"{g.key} {why}: it is repartitioned once the other shared cards of "
                    f"{g.node} are empty (the device plugin shares per node)",
                )
        cap = inf.max_gpus
        surplus = len(pv.inference_slots()) - cap if cap is not None else 0
        for g in list(pv.inference_slots()):
            if surplus <= 0:
                break
            if g.holders or g.fenced or g.target_mode == "whole":
                continue
            if g.target_mode == "shared":
                unit = [c for c in _plain_cards(pv, g.node) if c.target_mode == "shared"]
                if len(pv.inference_slots()) - len(unit) < inf.min_gpus:
                    continue  # unsharing the whole node would go below the warm minimum
            surplus -= len(
                _reshape(
                    run,
                    g,
                    pv,
                    "whole",
                    why=f"Pool/{pv.name} allows at most inference.maxGPUs={cap} inference cards",
                )
            )


def _inference_shape(pv: PoolView, prefer: str = "") -> tuple[str, tuple[str, ...]]:
    """The partition a new inference card of `pv` gets: the policy's preferred kind (or
    `prefer` when the policy offers it), MIG as its first layout; whole if none is offered."""
    inf = pv.pool.spec.inference
    mig_ok = inf.mig is not None and pv.model is not None and pv.model.mig_capable
    order = [prefer, inf.prefer, "mig", "shared"]
    for mode in order:
        if mode == "mig" and mig_ok:
            return "mig", tuple(sorted(inf.mig.layouts[0].profiles))
        if mode == "shared" and inf.shared is not None:
            return "shared", ()
    return "whole", ()


# --------------------------------------------------------------------------- 1. scaling


@dataclass
class _ScaleIntent:
    svc: InferenceService
    policy: str
    pool: str
    want: int
    why: str
    envelope: _Envelope | None = None
    """Set when an autoscaler scales the service: `want` is its new maxReplicas."""


def _scale(run: _Run) -> tuple[list[_ScaleIntent], list[Pending], set[str]]:
    """What each ScalingPolicy asks; a scale-up becomes pending replicas, and the Scale
    action is emitted after admission, for the replicas admission lets in. A scale-down
    deletes the service's pending pods first (`scale_down_order`): their keys come back
    as the third item, demand no longer."""
    # a Deployment and a StatefulSet may share a name: the target names its kind
    services = {(s.kind, s.key): s for s in run.observed.services}
    intents: list[_ScaleIntent] = []
    out: list[Pending] = []
    gone: set[str] = set()
    for name in sorted(run.desired.scaling):
        pol = run.desired.scaling[name]
        for t in pol.spec.targets:
            svc = services.get((t.kind, f"{t.namespace}/{t.name}"))
            if svc is None:
                run.find(
                    "warning",
                    "scale-target-missing",
                    f"{t.namespace}/{t.name}",
                    f"ScalingPolicy/{name} targets a {t.kind} that was not observed",
                )
                continue
            scaler = _autoscaler(run, name, svc)
            if scaler is _CONFLICT:
                continue
            if isinstance(scaler, Autoscaler):
                intent = _envelope_intent(run, name, pol, t, svc, scaler)
                if intent is None:
                    continue
                intents.append(intent)
                want = intent.want
            else:
                want, why = _desired_replicas(run, pol, svc, t.min_replicas, t.max_replicas)
                if want == svc.replicas:
                    continue
                intents.append(_ScaleIntent(svc, name, pol.spec.pool, want, why))
            if want < svc.replicas:
                pods = sorted(
                    (w for w in run.cluster.workloads.values() if svc.owns(w)),
                    key=scale_down_order,
                )
                doomed = pods[: max(0, len(pods) - want)]
                gone.update(w.key for w in doomed if w.phase == "Pending")
            grows = intents[-1].envelope is None or want > intents[-1].envelope.scaler.max_replicas
            for i in range(svc.replicas, want if grows else 0):
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
                        order=i,
                    )
                )
    return intents, out, gone


def _emit_scales(run: _Run, intents: list[_ScaleIntent], admitted: list[Pending]) -> None:
    keys = {p.key for p in admitted}
    for it in intents:
        if it.envelope is not None:
            _emit_envelope(run, it, it.envelope, keys)
            continue
        svc, want = it.svc, it.want
        if want > svc.replicas:
            ok = 0
            while svc.replicas + ok < want and f"{svc.key}#replica-{svc.replicas + ok + 1}" in keys:
                ok += 1
            held = run.waiting.get(f"{svc.key}#replica-{svc.replicas + ok + 1}")
            if ok < want - svc.replicas and held:
                run.find(
                    "info",
                    "scale-held",
                    svc.key,
                    f"scale-up to {want} stops at {svc.replicas + ok}: {held}",
                )
            if ok == 0:
                continue
            why = it.why if ok == want - svc.replicas else f"{it.why} (admission allows {ok})"
            want = svc.replicas + ok
        else:
            why = it.why
        run.add(
            Scale(
                id=f"scale:{svc.key}",
                target=svc.key,
                pool=it.pool,
                reason=why,
                workload_kind=svc.kind,
                from_replicas=svc.replicas,
                to_replicas=want,
                policy=it.policy,
                signals=run.scale_signals.get(svc.key, ()),
            )
        )


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
    read = _target_signals(run, pol, svc)
    per = read.queue_length / max(n, 1) if read.queue_length is not None else None
    wait = read.wait_seconds
    shown = f" [{sig.describe(read.evidence)}]" if read.evidence else ""
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
        return want, f"{'; '.join(hot)}: scale {svc.key} {n} -> {want}{shown}"
    # a signal that could not be read is not calm: never a scale-down on a missing reading
    calm = per is not None and per < down.queue_length_per_replica and not read.problems
    if calm and n > lo and (since is None or since >= down.cooldown.total_seconds()):
        want = max(lo, n - down.step)
        return (
            want,
            f"queue {per:g}/replica < {down.queue_length_per_replica:g} "
            f"for over {format_duration(down.cooldown.total_seconds())}: "
            f"scale {svc.key} {n} -> {want}{shown}",
        )
    return n, ""


# --------------------------------------------------------------------------- 1b. autoscalers
# A workload an HPA or a KEDA ScaledObject scales is never scaled through spec.replicas (the
# autoscaler would fight it); gpupool sets the autoscaler's envelope instead. The rules, with
# examples: docs/planner.md, "Beside an autoscaler".

_CONFLICT = object()  # two autoscalers target one workload: gpupool changes nothing


@dataclass
class _Envelope:
    scaler: Autoscaler
    to_min: int
    """The envelope's new minReplicas for the planned max (`_envelope_min`)."""


def _autoscaler(run: _Run, policy: str, svc: InferenceService) -> Autoscaler | object | None:
    """The one autoscaler that scales `svc`, None without one, `_CONFLICT` (after a finding)
    with two. The HPA KEDA made for a ScaledObject is the ScaledObject's (KEDA owns it and
    would revert a change: keda v2.19.0 controllers/keda/hpa.go, updateHPAIfNeeded), never
    one of its own."""
    mine = [a for a in svc.autoscalers if not a.owner]
    if len(mine) > 1:
        run.find(
            "warning",
            "autoscaler-conflict",
            svc.key,
            f"{svc.kind} {svc.key} is scaled by {' and '.join(a.ref for a in mine)}: they fight "
            f"each other, so gpupool changes neither (nor its replicas) for ScalingPolicy/"
            f"{policy}; remove one",
        )
        return _CONFLICT
    return mine[0] if mine else None


def _envelope_min(a: Autoscaler, lo: int, top: int) -> int:
    """The envelope's minReplicas: the target's minimum, at most `top` (the new max). An HPA
    refuses minReplicas 0 unless the HPAScaleToZero gate is on (kubernetes v1.37.2
    pkg/registry/autoscaling/horizontalpodautoscaler/strategy.go, MinReplicasLowerBound), so 0
    only where it is 0 already."""
    floor = 1 if a.kind == "HorizontalPodAutoscaler" and a.min_replicas > 0 else 0
    return max(floor, min(lo, top))


def _envelope_intent(
    run: _Run,
    policy: str,
    pol: ScalingPolicy,
    t: ScaleTarget,
    svc: InferenceService,
    a: Autoscaler,
) -> _ScaleIntent | None:
    """What the envelope of `a` should be: the scaling decision (`_desired_replicas`: same
    signals, cooldowns, steps and target bounds) taken for n = the autoscaler's maxReplicas,
    the capacity gpupool planned for the service; cooldowns count from gpupool's last
    envelope change. A max outside the target's bounds is brought inside them. None when
    nothing changes."""
    lo, hi = t.min_replicas, t.max_replicas
    if a.kind == "HorizontalPodAutoscaler" and svc.replicas == 0 and a.min_replicas > 0:
        # kubernetes v1.37.2 pkg/controller/podautoscaler/horizontal.go, reconcileAutoscaler:
        # "scaling is disabled since the replica count of the target is zero"
        run.find(
            "info",
            "autoscaling-disabled",
            svc.key,
            f"{svc.kind} {svc.key} has 0 replicas: {a.ref} does not scale it (the HPA controller "
            "disables scaling at 0) whatever its envelope; scale it to 1 to hand it back",
        )
    n = a.max_replicas
    if n < lo:
        want, why = lo, f"{a.ref} allows at most {n} replicas, below the target's minimum {lo}"
    elif n > hi:
        want, why = hi, f"{a.ref} allows {n} replicas, above the target's maximum {hi}"
    else:
        # the decision for a service running its envelope's max (its queue spread over them)
        view = svc.model_copy(update={"replicas": n, "last_scale_at": a.last_change_at})
        want, why = _desired_replicas(run, pol, view, lo, hi)
    want = max(want, 1)  # an HPA's maxReplicas is at least 1 (autoscaling validation)
    env = _Envelope(a, _envelope_min(a, lo, want))
    if want == n and env.to_min == a.min_replicas:
        return None
    why = why or f"{a.ref} has minReplicas {a.min_replicas}, the target's minimum is {lo}"
    return _ScaleIntent(svc, policy, pol.spec.pool, want, why, env)


def _emit_envelope(run: _Run, it: _ScaleIntent, env: _Envelope, keys: set[str]) -> None:
    """A SetScaleEnvelope for `it`: a max that grows, grows only as far as admission let the
    replicas between the workload's replicas and the new max in (so their cards exist)."""
    svc, a, want = it.svc, env.scaler, it.want
    why = it.why
    if want > a.max_replicas:
        ok = 0
        while svc.replicas + ok < want and f"{svc.key}#replica-{svc.replicas + ok + 1}" in keys:
            ok += 1
        allowed = max(a.max_replicas, svc.replicas + ok)
        if allowed < want:
            held = run.waiting.get(f"{svc.key}#replica-{svc.replicas + ok + 1}", "")
            run.find(
                "info",
                "scale-held",
                svc.key,
                f"{a.ref} maxReplicas {want} stops at {allowed}: {held}".rstrip(": "),
            )
            why = f"{why} (admission allows {allowed})"
            want = allowed
    to_min = _envelope_min(a, env.to_min, want)
    if (want, to_min) == (a.max_replicas, a.min_replicas):
        return
    run.add(
        SetScaleEnvelope(
            id=f"scale-envelope:{a.key}",
            target=a.key,
            pool=it.pool,
            reason=f"{a.ref} min/max {a.min_replicas}..{a.max_replicas} -> {to_min}..{want} "
            f"for {svc.kind} {svc.key} ({svc.replicas} replicas now): {why}",
            autoscaler_kind=a.kind,
            workload_kind=svc.kind,
            workload=svc.name,
            from_min=a.min_replicas,
            to_min=to_min,
            from_max=a.max_replicas,
            to_max=want,
            policy=it.policy,
            signals=run.scale_signals.get(svc.key, ()),
        )
    )


def _target_signals(run: _Run, pol: ScalingPolicy, svc: InferenceService) -> sig.TargetSignals:
    """Where the target's queue length and wait come from (`plan/signals.py`): annotations, or
    Prometheus readings. Each reading that fails is a finding; the readings used are kept for
    the Scale action (`Scale.signals`)."""
    name = pol.metadata.name
    target = next(
        t
        for t in pol.spec.targets
        if (t.kind, t.namespace, t.name) == (svc.kind, svc.namespace, svc.name)
    )
    read = sig.target_signals(run.observed, name, pol, target, svc)
    for signal, query, why in read.problems:
        run.find(
            "warning",
            "signal-unavailable",
            svc.key,
            f"ScalingPolicy/{name} cannot read {signal} ({query}): {why}; "
            "no scale-down while a signal is unread (scale-up may still come from the other)",
        )
    if read.evidence:
        run.scale_signals[svc.key] = read.evidence
    else:
        run.scale_signals.pop(svc.key, None)
    return read


# --------------------------------------------------------------------------- 2. caps, 3. idle


def _team_caps(run: _Run) -> None:
    """A team over its maxGPUs gives back its cheapest preemptible work, but only work its
    namespace's ResourceQuota keeps out once stopped: the pod's owner creates it again at
    once, and the API server's quota admission is the only thing that refuses it (nothing in
    gpupool holds a pod back yet). Work the quota would admit again (MIG and shared slices,
    which `maxGPUs` does not cap in a ResourceQuota; a team spread over namespaces) is left
    running: stopping it would only restart it. New demand of the team is held meanwhile."""
    quotas = _resource_quotas(run)
    gated = set(run.observed.gated_namespaces or ())
    use: dict[str, Counter] = {}
    for w in run.cluster.workloads.values():
        use.setdefault(w.namespace, Counter()).update(quota_use(w.request))
    stopped: list[Workload] = []

    def stays_out(w: Workload) -> bool:
        gang = run.gang(w)
        after = {ns: Counter(c) for ns, c in use.items()}
        for m in gang:
            after[m.namespace].subtract(quota_use(m.request))
        for m in stopped + gang:
            if not m.owner_kind or m.namespace in gated or suspended_job(m):
                # not created again: no owner, or a Job suspended; or created gated and
                # held by admission until the team is under its cap
                continue
            q = run.desired.quota_for_namespace(m.namespace)
            hard = quotas.get((m.namespace, QUOTA_PREFIX + q.team), {}) if q else {}
            if not any(
                res in hard and after[m.namespace][res] + n > int(hard[res])
                for res, n in quota_use(m.request).items()
            ):
                return False
        return True

    for q in sorted(run.desired.quotas.values(), key=lambda q: q.team):
        cap = q.spec.max_gpus
        if cap is None or run.team_usage.get(q.team, 0) <= cap:
            continue
        mine = [
            w
            for w in run.cluster.workloads.values()
            if w.phase == "Running" and w.namespace in q.spec.namespaces
        ]
        refused = ""
        while run.team_usage[q.team] > cap:
            excess = float(run.team_usage[q.team] - cap)
            ok = [w for w in mine if not run.gate(w, budget=False) and stays_out(w)]
            order = order_victims(
                [run.candidate(w, run.cluster.pool_of(w)) for w in ok], math.ceil(excess)
            )
            if not order:
                break
            w = run.cluster.workloads[order[0].key]
            refused = run.gate(w)
            if refused:
                break
            used = run.team_usage[q.team]
            gang = run.gang(w)
            run.evict(
                w,
                "preempt",
                f"team {q.team} uses {float(used):g} GPUs, over its cap of {cap}; "
                f"{w.key} is the cheapest of its preemptible work its ResourceQuota keeps "
                "from coming back",
                run.cluster.pool_of(w),
            )
            for m in gang:
                use[m.namespace].subtract(quota_use(m.request))
            stopped.extend(gang)
        if BUDGET in refused:
            run.find("warning", "budget-spent", q.team, f"over its cap but the {refused}")
        if run.team_usage[q.team] > cap:
            run.find(
                "warning",
                "over-cap",
                q.team,
                f"still uses {float(run.team_usage[q.team]):g} GPUs, over its cap of {cap}: "
                + (
                    refused
                    or "the rest is not preemptible yet, or its ResourceQuota would admit it "
                    "again (the pod's owner recreates it); new demand of the team is held"
                ),
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
            shown = ""
            if rule.utilization.source == "prometheus":
                got = _prometheus_idle(run, m, w, slots)
                if got is None:
                    continue
                idle, shown = got
                if any(i < limit for i in idle):
                    continue
            else:
                # A card's idleness is its time under the policy's threshold (processes or not,
                # from the levels the agent publishes), counted from when this workload started
                # at the earliest: the card may have been idle before the job came.
                since = [s.idle_since_below(rule.utilization_below) for s in slots]
                idle = [
                    run.seconds_since(max(t, w.started_at) if w.started_at else None)
                    if t is not None
                    else None
                    for t in since
                ]
                if any(s.utilization >= rule.utilization_below for s in slots) or any(
                    i is None or i < limit for i in idle
                ):
                    continue
            cls = w.priority_class or run._default_class()
            if cls in rule.exclude_classes:
                continue
            why = (
                f"{w.key} has used < {rule.utilization_below:g}% of its {len(slots)} GPU(s) "
                f"for {format_duration(min(idle))} (limit {format_duration(limit)}){shown}"
            )
            if rule.action == "report":
                run.find("info", "idle-report", w.key, why)
                break
            refused = run.gate(w)
            if refused:
                run.find("info", "idle-protected", w.key, f"{why}; not reclaimed: {refused}")
            else:
                run.evict(w, "reclaim", why + ": reclaim the cards", pool)
            break


def _prometheus_idle(
    run: _Run, m: MaintenancePolicy, w: Workload, slots: list
) -> tuple[list[float], str] | None:
    """Idle reclaim from the DCGM exporter's utilization in Prometheus: every card of `w` has a
    sample in the policy's reading, each below utilizationBelow over the window (idleFor); the
    idle time is idleFor, or the time since `w` started when that is shorter (unknown start:
    not idle). A failed reading, or a card without a sample, is a finding and nothing is
    reclaimed on it. Returns the idle seconds per card and the evidence for the reason."""
    rule = m.spec.idle_reclaim
    assert rule is not None
    q = sig.utilization_query(m.metadata.name, m)
    assert q is not None
    why = sig.unavailable(run.observed, q)
    if why:
        if q.id not in run.signals_reported:
            run.signals_reported.add(q.id)
            run.find(
                "warning",
                "signal-unavailable",
                f"MaintenancePolicy/{m.metadata.name}",
                f"cannot read GPU utilization ({q.query}): {why}; nothing is reclaimed as idle",
            )
        return None
    r = sig.reading(run.observed, q)
    assert r is not None
    cards = {(n.name, g.index): g for n in run.observed.nodes for g in n.gpus}
    values = []
    for s in slots:
        gpu = cards.get((s.node, s.index))
        u = sig.card_utilization(r, s.node, gpu) if gpu is not None else None
        if u is None:
            run.find(
                "warning",
                "signal-unavailable",
                w.key,
                f"MaintenancePolicy/{m.metadata.name}: no utilization sample for {s.node} "
                f"GPU {s.index} in ({q.query}); not reclaimed as idle",
            )
            return None
        values.append(u)
    if max(values) >= rule.utilization_below or w.started_at is None:
        return None
    span = min(rule.idle_for.total_seconds(), run.seconds_since(w.started_at) or 0.0)
    return [span] * len(slots), f" [utilization: {q.query} = {max(values):g}]"


# --------------------------------------------------------------------------- admission


def _admit(run: _Run, pending: list[Pending]) -> list[Pending]:
    """Demand that may be worked for: reachable in its pool, within the team's cap,
    borrowing limit, the other teams' unlent guarantees, the pool's training maximum and,
    for replicas not created yet, the namespace's ResourceQuota. Highest priority first."""
    out = []
    pending = sorted(
        pending,
        key=lambda p: (
            -run.demand_priority(p),
            p.created or run.now,
            p.key.split("#")[0],
            p.order,
            p.key,
        ),
    )
    quotas = _resource_quotas(run)
    ns_use: dict[str, Counter] = {}
    for w in run.cluster.workloads.values():
        pv = run.pool_view(run.cluster.pool_of(w))
        ns_use.setdefault(w.namespace, Counter()).update(quota_use(w.request))
    training_whole: Counter = Counter()
    for (_, pool), n in run.running_whole.items():
        training_whole[pool] += n
    for p in pending:
        pool = _pending_pool(run, p)
        if pool is None:
            _wait(
                run,
                p,
                "no-pool",
                f"no pool can run it ({_describe(p)}); it stays pending",
                "warning",
            )
            continue
        p.pool = pool
        pv = run.cluster.pools[pool]
        why = _unreachable(run, pv, p)
        if why:
            _wait(run, p, "unreachable", f"{p.origin} {why}: it can never run as asked", "warning")
            continue
        _memory_beyond_share(run, pv, p)
        pods = len(p.members)
        held = _held(run, p, pv, pods, training_whole, quotas, ns_use)
        if held:
            _wait(run, p, held[0], held[1])
            continue
        team = run.team(p.namespace)
        if team is not None:
            need = pods * card_equivalents(
                Workload(namespace=p.namespace, name="x", request=p.request), pv
            )
            run.team_usage[team] = run.team_usage.get(team, Fraction(0)) + need
            if p.request.gpus:
                run.pool_whole_usage[(team, pool)] = (
                    run.pool_whole_usage.get((team, pool), 0) + pods * p.request.gpus
                )
        if p.request.gpus:
            training_whole[pool] += pods * p.request.gpus
        if p.origin != "pending pod":
            ns_use.setdefault(p.namespace, Counter()).update(quota_use(p.request))
        out.append(p)
    return out


def _held(
    run: _Run,
    p: Pending,
    pv: PoolView,
    pods: int,
    training_whole: Counter,
    quotas: dict[tuple[str, str], dict[str, str]],
    ns_use: dict[str, Counter],
) -> tuple[str, str] | None:
    """(code, why) when admission holds `p`; None when it may go ahead."""
    r, pool = p.request, pv.name
    tmax = pv.pool.spec.training.max_gpus
    if r.gpus and tmax is not None and training_whole[pool] + pods * r.gpus > tmax:
        return "held-training-max", (
            f"held: training in {pool} would hold {training_whole[pool] + pods * r.gpus} "
            f"whole GPUs, over training.maxGPUs {tmax}"
        )
    q = run.desired.quota_for_namespace(p.namespace)
    if q is None:
        return None
    if kueue_mode(run) and r.kind == "whole":
        return None  # Kueue admitted it within its ClusterQueue: the Quota is Kueue's to keep
    team = q.team
    if p.origin != "pending pod":  # a replica not created yet: the API server would refuse it
        hard = quotas.get((p.namespace, QUOTA_PREFIX + team), {})
        for res, n in sorted(quota_use(r).items()):
            if res in hard and ns_use.get(p.namespace, Counter())[res] + n > int(hard[res]):
                return "held-quota", (
                    f"held: {p.namespace}'s ResourceQuota allows {hard[res]} {res}, "
                    f"{ns_use.get(p.namespace, Counter())[res]} in use"
                )
    need = pods * card_equivalents(Workload(namespace=p.namespace, name="x", request=r), pv)
    used = run.team_usage.get(team, Fraction(0))
    if q.spec.max_gpus is not None and used + need > q.spec.max_gpus:
        return "held-cap", (
            f"held: team {team} would use {float(used + need):g} GPUs, "
            f"over its cap of {q.spec.max_gpus}"
        )
    if not r.gpus:
        return None
    pq = next((x for x in q.spec.pools if x.pool == pool), None)
    whole = run.pool_whole_usage.get((team, pool), 0) + pods * r.gpus
    guaranteed = pq.whole.guaranteed if pq else 0
    if pq is not None and pq.whole.borrowing_limit is not None:
        limit = guaranteed + pq.whole.borrowing_limit
        if whole > limit:
            return "held-borrowing", (
                f"held: team {team} would hold {whole} whole GPUs in {pool}, "
                f"over guarantee + borrowing ({limit})"
            )
    if whole > guaranteed:
        locked = _unlent(run, pool, team)
        cards = pv.count("whole")
        total = sum(n for (_, pl), n in run.pool_whole_usage.items() if pl == pool)
        if locked and total + pods * r.gpus + locked > cards:
            return "held-lending", (
                f"held: team {team} would borrow beyond its guarantee in {pool}, and the "
                f"free cards are other teams' guarantees they do not lend ({locked})"
            )
    return None


def _unlent(run: _Run, pool: str, team: str) -> int:
    """Cards of other teams' unused guarantees in `pool` that their lendingLimit keeps
    from borrowers (None lends all of it)."""
    locked = 0
    for q in run.desired.quotas.values():
        if q.team == team:
            continue
        for pq in q.spec.pools:
            if pq.pool != pool or pq.whole.lending_limit is None:
                continue
            unused = max(0, pq.whole.guaranteed - run.pool_whole_usage.get((q.team, pool), 0))
            locked += max(0, unused - pq.whole.lending_limit)
    return locked


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
    if r.shared_slices and pv.pool.spec.inference.shared is not None:
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
            if g.free_slices >= k and g.node not in ranked:
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
                [min(g.free_slices, slices) * 1000 // slices for g in slots],
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
    run: _Run,
    g: GpuSlot,
    pv: PoolView,
    mode: str,
    layout: tuple[str, ...] = (),
    *,
    why: str,
    slices: int = 0,
) -> None:
    """One card's new target, as given: callers go through `_reshape`, which keeps a node's
    sharing whole (`_set_node_sharing`)."""
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
        pv.repartition(
            g, mode, slices=slices or pv.pool.spec.inference.shared.slices_per_gpu, why=why
        )
    else:
        pv.repartition(g, mode, why=why)


# The device plugin shares per node: the config a node's label selects applies to every card of
# the node not in MIG mode ("plain" cards here), and it ignores a `devices` list
# (NVIDIA/k8s-device-plugin api/config/v1/replicas.go; ../shared/notes/nvidia-stack.md). So the
# plain cards of a node are all whole or all shared with one slice count, in the observed state
# and in every plan; MIG cards are separate resources and change one by one.


def _node_slices(pv: PoolView, node: str) -> int:
    """The slice count the node's plain cards have in the plan (0: not shared)."""
    return max(
        (g.target_slices for g in pv.by_node()[node] if g.target_mode == "shared"), default=0
    )


def _plain_cards(pv: PoolView, node: str) -> list[GpuSlot]:
    return [g for g in pv.by_node()[node] if g.target_mode != "mig"]


def _set_node_sharing(run: _Run, pv: PoolView, node: str, slices: int, why: str) -> bool:
    """Every plain card of `node` becomes shared x`slices` (0: whole), or nothing changes
    when a card that would change holds work, is reserved or fenced, or (MPS) when the node
    has MIG cards: the plugin refuses MPS beside MIG (NVIDIA/k8s-device-plugin
    internal/plugin/mps.go)."""
    mig_beside = any(g.target_mode == "mig" for g in pv.by_node()[node])
    if slices and _policy_strategy(pv) == "mps" and mig_beside:
        return False
    want = ("shared", slices) if slices else ("whole", 0)
    cards = [g for g in _plain_cards(pv, node) if (g.target_mode, g.target_slices) != want]
    if any(g.holders or g.reserved_by is not None or g.fenced for g in cards):
        return False
    for g in cards:
        _convert(run, g, pv, want[0], why=why, slices=slices)
    return True


def _resets_node(pv: PoolView) -> bool:
    """A MIG mode change on one card resets every GPU of the node (Ampere: the catalog's
    `mig_mode_change: node`, reconciler/policy/catalog.py)."""
    return pv.model is not None and pv.model.mig_mode_change == "node"


def _reset_blocked(pv: PoolView, g: GpuSlot, mode: str) -> bool:
    """Turning MIG on or off on `g` would reset a card that holds work or is kept for some:
    on Ampere every card of the node; mig-parted's reset fails under running work."""
    if not _resets_node(pv) or (g.target_mode == "mig") == (mode == "mig"):
        return False
    return any(c.holders or c.reserved_by is not None for c in pv.by_node()[g.node] if c is not g)


def _policy_strategy(pv: PoolView) -> str:
    sh = pv.pool.spec.inference.shared
    return sh.strategy if sh is not None else "time-slicing"


def _policy_slices(pv: PoolView) -> int:
    sh = pv.pool.spec.inference.shared
    return sh.slices_per_gpu if sh is not None else 0


def _reshape(
    run: _Run, g: GpuSlot, pv: PoolView, mode: str, layout: tuple[str, ...] = (), *, why: str
) -> list[GpuSlot]:
    """Give `g` partition `mode` (`layout` for MIG) the way the hardware and the device plugin
    allow; returns the cards that change (more than `g` when its node's sharing changes, none
    when it cannot be done now: a card that would change with it holds work).

    - MIG: the card alone (a MIG card is its own resource, whatever the node's sharing).
    - shared: on a shared node a plain or MIG card joins the node's slice count; otherwise
      every plain card of the node becomes shared with the policy's count.
    - whole: on a shared node every shared card becomes whole with it."""
    node = g.node
    if _reset_blocked(pv, g, mode):
        return []
    if mode == "mig" and _node_slices(pv, node) and _policy_strategy(pv) == "mps":
        return []  # MIG beside MPS: the plugin refuses the node
    before = [c for c in pv.by_node()[node] if c.converted]
    if mode == "mig":
        _convert(run, g, pv, "mig", layout, why=why)
    elif mode == "shared":
        have = _node_slices(pv, node)
        if g.target_mode == "mig" and have:
            _convert(run, g, pv, "shared", why=why, slices=have)
        else:
            target = _policy_slices(pv)
            if not _set_node_sharing(run, pv, node, target, why):
                return []
            if g.target_mode == "mig":
                _convert(run, g, pv, "shared", why=why, slices=target)
    else:
        if _node_slices(pv, node) and not _set_node_sharing(run, pv, node, 0, why):
            return []
        if g.target_mode != "whole":
            _convert(run, g, pv, "whole", why=why)
    return [c for c in pv.by_node()[node] if c.converted and c not in before] or (
        [g] if g.converted else []
    )


def _drained_first(pv: PoolView, cards: list[GpuSlot]) -> list[GpuSlot]:
    """Next to existing inference first, then from the most fragmented nodes, so that whole
    free nodes stay whole for multi-card training; a node gpupool already drained for a
    repartition before all: an interrupted change finishes where it began."""
    inf_nodes = Counter(g.node for g in pv.gpus if g.target_mode != "whole")
    free_on = Counter(g.node for g in cards)
    drained = {
        n
        for n, node in pv.nodes.items()
        if node.unschedulable and CORDONED_FOR_ANN in node.annotations
    }
    return sorted(
        cards,
        key=lambda g: (g.node not in drained, -inf_nodes[g.node], free_on[g.node], g.node, g.index),
    )


def _free_cards(
    run: _Run, pv: PoolView, n: int, preemptor: Pending | None, why: str
) -> list[GpuSlot]:
    """Up to n whole cards to repartition: empty ones first, then, for a preemptor, by
    stopping the cheapest victims the rules allow (within the budget)."""
    free = [g for g in pv.gpus if g.free_whole]
    if _resets_node(pv):
        # a card turned to MIG resets every GPU of its node (Ampere): only cards of nodes with
        # nothing running; for a preemptor, a node whose work may all be preempted is drained
        chosen = _drained_first(pv, [g for g in free if not _reset_blocked(pv, g, "mig")])[:n]
        while len(chosen) < n and preemptor is not None:
            busy = [
                node
                for node, slots in pv.by_node().items()
                if any(g.holders for g in slots)
                and any(g.target_mode == "whole" and not g.fenced for g in slots)
            ]
            node = _preempt_node(run, pv, busy, preemptor, why, every_card=True)
            if node is None:
                break
            chosen += [g for g in pv.by_node()[node] if g.free_whole][: n - len(chosen)]
        return chosen
    chosen = _drained_first(pv, free)[:n]
    if len(chosen) >= n or preemptor is None:
        return chosen
    classes = run.victim_classes(preemptor.priority_class, preemptor.borrow_from)
    holders = sorted(
        {
            h
            for g in pv.gpus
            if g.target_mode == "whole" and not g.fenced
            for h in g.holders
            if h in run.cluster.workloads
        }
    )
    workloads = [run.cluster.workloads[h] for h in holders]
    for c in run.victims(workloads, preemptor, pv.name, classes, n - len(chosen)):
        if len(chosen) >= n:
            break
        w = run.cluster.workloads[c.key]
        refused = run.gate(w)
        if refused:
            run.blocked[preemptor.key] = refused
            break
        slots = [
            run.cluster.slot[(m.node, a.gpu)]
            for m in run.gang(w)
            for a in m.allocations
            if (m.node, a.gpu) in run.cluster.slot
        ]
        run.evict(
            w,
            "preempt",
            f"{why}; {w.key} ({w.priority_class}) is the cheapest preemptible victim",
            pv.name,
            preemptor=preemptor.key,
        )
        chosen.extend(s for s in slots if s.free_whole and s not in chosen)
    return chosen[:n]


def _reshapable(pv: PoolView) -> list[GpuSlot]:
    """Empty, open inference cards this plan has not touched: the waiting inference demand
    could not use them as they are (placement tried them all), so they may be reshaped."""
    return [
        g
        for g in pv.inference_slots()
        if not g.holders and not g.converted and g.open and g.reserved_by is None
    ]


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
    shared_need = 0
    if shared_unmet and inf.shared is not None:
        bins: list[int] = []  # first-fit decreasing over new shared cards
        for k in sorted(shared_unmet, reverse=True):
            for i, free in enumerate(bins):
                if free >= k:
                    bins[i] -= k
                    break
            else:
                bins.append(inf.shared.slices_per_gpu - k)
        shared_need = len(bins)
    top = unplaced[0]  # highest priority first (admission sorted them)
    demand = ", ".join(_describe(p) for p in unplaced[:3]) + (" ..." if len(unplaced) > 3 else "")
    why = (
        f"{len(unplaced)} inference request(s) wait with no free MIG/shared capacity "
        f"in {pv.name} ({demand})"
    )
    # Empty inference cards of the wrong shape are reshaped first (another offered layout, a
    # shared card to MIG, a MIG card of a shared node to shared): the number of inference
    # cards stays, whole cards stay for training.
    for g in _drained_first(pv, _reshapable(pv)):
        if g.converted:
            continue
        if wants:
            mode, layout = wants[0]
            if _reshape(run, g, pv, mode, layout, why=f"pending inference ({demand})"):
                wants.pop(0)
        elif shared_need and g.target_mode == "mig" and _node_slices(pv, g.node):
            shared_need -= len(_reshape(run, g, pv, "shared", why=f"pending inference ({demand})"))
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
        cards = _free_cards(run, pv, len(wants), top, why)
        for g, (mode, layout) in zip(cards, wants, strict=False):
            _reshape(run, g, pv, mode, layout, why=f"pending inference ({demand})")
    if shared_need > 0:
        _share_nodes(run, pv, shared_need, top, why, f"pending inference ({demand})")
    for p in unplaced:
        if not _place_inference(run, pv, p):
            run.inference_waits.add(pv.name)
            blocked = run.blocked.get(p.key) or run.blocked.get(top.key)
            _wait(
                run,
                p,
                "waits",
                f"{p.origin} ({_describe(p)}) stays pending: no capacity in {pv.name} "
                + (f"this cycle: {blocked}" if blocked else "this cycle"),
                "warning",
            )


def _share_nodes(
    run: _Run, pv: PoolView, need: int, top: Pending | None, why: str, reason: str
) -> int:
    """Shared cards for `need` more by sharing whole nodes (the device plugin shares per node:
    every plain card of the node at once), within the pool's inference budget: a node whose
    plain cards are all free, the smallest that covers the need (else the largest); then,
    for `top`, a node whose plain cards' holders may all be preempted for it, cheapest first.
    Returns how many cards became shared; says why when it falls short."""
    made = 0
    while made < need:
        rest, budget = need - made, _inference_budget(pv)
        free, busy = [], []
        for node in pv.by_node():
            plain = _plain_cards(pv, node)
            if _node_slices(pv, node) or not plain or len(plain) > budget:
                continue
            if len(plain) < len(pv.by_node()[node]) and _policy_strategy(pv) == "mps":
                continue  # MPS beside MIG cards: the plugin refuses the node
            if any(g.fenced or g.reserved_by is not None for g in plain):
                continue
            if all(not g.holders for g in plain):
                free.append(
                    (len(plain) < rest, len(plain) if len(plain) >= rest else -len(plain), node)
                )
            elif top is not None:
                busy.append(node)
        if free:
            node = min(free)[2]
        else:
            node = _preempt_node(run, pv, busy, top, why) if top is not None else None
            if node is None:
                if top is not None and not busy:
                    run.blocked.setdefault(
                        top.key,
                        f"no node of {pv.name} can be shared whole within inference.maxGPUs "
                        "(the device plugin shares every plain card of a node)",
                    )
                break
        cards = len(_plain_cards(pv, node))
        if not _set_node_sharing(run, pv, node, _policy_slices(pv), reason):
            break  # pragma: no cover - the node was checked free
        made += cards
    return made


def _preempt_node(
    run: _Run, pv: PoolView, nodes: list[str], p: Pending, why: str, every_card: bool = False
) -> str | None:
    """The node among `nodes` whose plain cards' holders (every card's with `every_card`)
    the rules let `p` preempt, all of them, at the least cost (priority, evictions, GPU-time
    lost), within the budget; the holders are preempted. None when there is none."""
    classes = run.victim_classes(p.priority_class, p.borrow_from)
    options = []
    for node in nodes:
        slots = pv.by_node()[node] if every_card else _plain_cards(pv, node)
        holders = sorted({h for g in slots for h in g.holders})
        work = [run.cluster.workloads[h] for h in holders if h in run.cluster.workloads]
        if len(work) != len(holders):
            continue
        cands = run.victims(work, p, pv.name, classes, len(slots))
        keys = {m.key for c in cands for m in run.gang(run.cluster.workloads[c.key])}
        if not set(holders) <= keys:
            continue
        evictions = len(keys)
        options.append(
            (
                max(c.priority for c in cands),
                evictions,
                sum(c.lost for c in cands),
                node,
                cands,
            )
        )
    if not options:
        return None
    _, evictions, _, node, cands = min(options, key=lambda o: o[:4])
    if evictions > run.budget_left:
        run.blocked[p.key] = (
            f"sharing {node} needs {evictions} preemption(s) and the {BUDGET} has "
            f"{run.budget_left} left"
        )
        return None
    for c in cands:
        w = run.cluster.workloads[c.key]
        if w.key in run.evicted:
            continue
        run.evict(
            w,
            "preempt",
            f"{why}; "
            + (
                f"a MIG mode change resets every GPU of {node}"
                if every_card
                else f"the device plugin shares every plain card of {node}"
            )
            + f", and {w.key} ({w.priority_class}) runs there",
            pv.name,
            preemptor=p.key,
        )
    return node


def _warm_minimum(run: _Run, pv: PoolView) -> None:
    """Warm inference cards come from empty whole cards only: nothing is stopped for
    capacity no one asked for yet."""
    inf = pv.pool.spec.inference
    have = len(pv.inference_slots())
    short = inf.min_gpus - have
    if short <= 0 or pv.model is None:
        return
    mode, layout = _inference_shape(pv)
    if mode == "whole":
        return
    why = f"keep Pool/{pv.name} inference.minGPUs={inf.min_gpus} cards warm"
    if mode == "shared":
        made = _share_nodes(run, pv, short, None, "", why)
    else:
        cards = _free_cards(
            run,
            pv,
            min(short, _inference_budget(pv)),
            None,
            f"Pool/{pv.name} keeps inference.minGPUs={inf.min_gpus} cards for inference "
            f"and has {have}",
        )
        made = sum(len(_reshape(run, g, pv, mode, layout, why=why)) for g in cards)
    if made < short:
        run.find(
            "info",
            "warm-short",
            pv.name,
            f"keeps {have + made} warm inference cards, "
            f"{short - made} short of minGPUs {inf.min_gpus}: no empty whole "
            + ("node" if mode == "shared" else "card")
            + " to take",
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


def _fits_group(slots: list[GpuSlot], n: int, topology: str) -> bool:
    """`n` free cards of one NVLink island / NUMA node on this node."""
    groups: Counter = Counter(
        (g.island if topology == "nvlink" else g.numa) for g in slots if g.free_whole
    )
    return any(c >= n for c in groups.values())


def _place_one(run: _Run, pv: PoolView, n: int, holder: str) -> list[GpuSlot] | None:
    """The node comes from the shared placement policy (the simulator's code) over a shortlist
    of nodes that can take the pod, best-fit first; the cards within it from the pool's
    topology preference. With an NVLink/NUMA preference, nodes where one island/NUMA node
    holds the whole pod are shortlisted first, across the pool."""
    topology = pv.pool.spec.training.topology
    shortlist = pv.nodes_fitting(n, SHORTLIST)
    if not shortlist:
        return None
    if n > 1 and topology in ("nvlink", "numa"):
        grouped = [
            node
            for node in pv.nodes_fitting(n, len(pv.nodes))
            if _fits_group(pv.by_node()[node], n, topology)
        ][:SHORTLIST]
        shortlist = grouped or shortlist
    states = [_whole_state(pv, node) for node in shortlist]
    chosen = placement.choose(
        PLACEMENT_POLICY,
        states,
        placement.PodDemand(num_gpu=n, gpu_milli=1000),
        run.placement_ctx(pv),
    )
    if chosen is None:  # pragma: no cover - every shortlisted node fits
        return None
    got = _gang_on(pv.by_node()[chosen.node], n, topology)
    pv.reserve(got, holder)
    return got


def _place_gang(run: _Run, pv: PoolView, p: Pending) -> bool:
    """Every pod of the gang gets its cards, or none does."""
    placed: list[list[GpuSlot]] = []
    for key in p.members:
        got = _place_one(run, pv, p.request.gpus, key)
        if got is None:
            for cards in placed:
                pv.unreserve(cards)
            return False
        placed.append(got)
    return True


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


def _whole_kind(run: _Run, p: Pending) -> str:
    """What whole-card demand is, for the words of a finding: replicas a ScalingPolicy adds,
    and pods of a class for inference, are inference; the rest is training."""
    c = run.pclass(p.priority_class)
    if p.origin.startswith("scale-up") or (c is not None and c.workload == "inference"):
        return "inference"
    return "training"


def _training(run: _Run, pv: PoolView, pending: list[Pending]) -> None:
    """Whole-card demand: training, and inference whose replicas ask whole cards."""
    for p in pending:
        if p.placed or _place_gang(run, pv, p):
            continue
        n = p.request.gpus
        # The same shape of demand failed and nothing was freed since: it fails again.
        shape = (pv.name, n, len(p.members), p.priority_class, p.borrow_from, p.namespace)
        if run.failed.get(shape) != run.generation and (
            any(step(run, pv, p) for step in _gang_steps(run, p))
        ):
            continue
        run.failed[shape] = run.generation
        blocked = run.blocked.get(p.key) or run.blocked.get(shape) or ""
        run.blocked[shape] = blocked
        _wait(
            run,
            p,
            "waits",
            f"pending {_whole_kind(run, p)} ({_describe(p)}) waits: "
            + (blocked or f"nothing in {pv.name} can be freed for it this cycle"),
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
    """Empty inference cards beyond the warm minimum return to training when training waits,
    unless inference demand of this pool waits too (it would take them back next cycle)."""
    if len(p.members) != 1 or pv.name in run.inference_waits:
        return False
    inf = pv.pool.spec.inference
    spare = len(pv.inference_slots()) - inf.min_gpus
    if spare <= 0:
        if pv.empty_inference_nodes():
            run.blocked.setdefault(
                p.key,
                f"the empty inference cards are Pool/{pv.name}'s warm minimum "
                f"(inference.minGPUs={inf.min_gpus})",
            )
        return False
    n = p.request.gpus
    options = []
    empty = pv.empty_inference_by_node()
    for node in pv.empty_inference_nodes():
        free = pv.free_whole_on(node)
        if n - free <= 0:
            continue
        if _node_slices(pv, node):
            # a shared node comes back whole or not at all (the plugin shares per node), and
            # its MIG cards would come back shared
            back = [g for g in _plain_cards(pv, node) if g.target_mode == "shared"]
            if any(g.holders or g.converted or g.fenced for g in back) or len(back) > spare:
                continue
            if free + len(back) >= n:
                options.append((len(back), node, back))
            continue
        back = [
            g
            for g in empty[node]
            if not g.holders
            and not g.converted
            and g.target_mode == "mig"
            and not g.fenced
            and not _reset_blocked(pv, g, "whole")
        ]
        if free + min(len(back), spare) >= n:
            options.append((n - free, node, back[: n - free]))
    if not options:
        return False
    _, node, back = min(options, key=lambda o: (o[0], o[1]))
    for g in back:
        if g.target_mode == "whole":
            continue  # came back with its node
        _reshape(
            run,
            g,
            pv,
            "whole",
            why=(
                f"pending {_whole_kind(run, p)} {p.key} needs {n} whole cards on one node "
                "and these inference cards are empty"
            ),
        )
    placed = _place_gang(run, pv, p)
    assert placed
    return True


def _preempt_for_gang(run: _Run, pv: PoolView, p: Pending) -> bool:
    """Free one node's worth of cards per pod of the gang, choosing nodes by what their
    victims cost; all of it within the budget, or nothing at all."""
    classes = run.victim_classes(p.priority_class)
    reclaim = run.reclaims(p, pv.name)
    if not classes and reclaim is None:
        return False
    n = p.request.gpus
    options: list[tuple[tuple, str, list[Candidate]]] = []
    reserved_nodes = {node for node, _ in p.reserved.values()}
    nodes = sorted(pv.by_node()) if reclaim is not None else run.nodes_hosting(pv, classes)
    for node in nodes:
        slots = pv.by_node()[node]
        if any(g.fenced for g in slots):
            continue
        free = pv.free_whole_on(node)
        if free >= n:
            continue  # it already fits there (another pod of the gang took it, or none)
        ws = sorted(
            {
                h
                for g in slots
                if g.target_mode == "whole"
                for h in g.holders
                if h in run.cluster.workloads
            }
        )
        victims = run.victims([run.cluster.workloads[h] for h in ws], p, pv.name, classes, n - free)
        take, freed, evictions = [], free, 0
        for c in victims:
            if freed >= n:
                break
            members = run.gang(run.cluster.workloads[c.key])
            if any(m.node != node for m in members):
                continue  # a job spread over nodes frees cards elsewhere too: not here
            take.append(c)
            evictions += len(members)
            freed += sum(
                1
                for m in members
                for a in m.allocations
                if run.cluster.slot.get((node, a.gpu)) is not None
            )
        if freed < n:
            continue
        cost = (
            node not in reserved_nodes,  # the node already being freed for it comes first
            max(c.priority for c in take),
            sum(max(0.0, c.gpus) for c in take) - (n - free),
            evictions,
            sum(c.lost for c in take),
            node,
        )
        options.append((cost, node, take))
    options.sort(key=lambda o: o[0])
    pods = len(p.members)
    ready = sum(pv.free_whole_on(node) // n for node in pv.by_node())
    chosen = options[: max(0, pods - ready)]
    if len(chosen) < pods - ready:
        return False
    evictions = sum(len(run.gang(run.cluster.workloads[c.key])) for _, _, t in chosen for c in t)
    if evictions > run.budget_left:
        run.blocked[p.key] = (
            f"it needs {evictions} preemption(s) and the {BUDGET} has {run.budget_left} left"
        )
        return False
    for _, _, take in chosen:
        for c in take:
            w = run.cluster.workloads[c.key]
            run.evict(
                w,
                "preempt",
                f"pending {p.key} ({p.priority_class}, {_describe(p)}) "
                + (
                    f"reclaims team {reclaim}'s guarantee from {w.key}, which borrows"
                    if reclaim is not None
                    and (w.priority_class or run._default_class()) not in classes
                    else f"outranks {w.key} ({w.priority_class})"
                )
                + f" and no node has {n} free whole cards for it",
                pv.name,
                preemptor=p.key,
            )
    return _place_gang(run, pv, p)


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
    if len(p.members) != 1 or pv.total_free_whole() < n:
        return False
    prio = run.demand_priority(p)
    by_node = pv.by_node()
    moves = min(rule.max_migrations_per_cycle, n, max(run.budget_left, 0))
    if moves == 0:
        run.blocked.setdefault(p.key, f"the {BUDGET} is spent")
        return False
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
            if len(w.allocations) != 1 or w.key in run.evicted or len(run.gang(w)) != 1:
                continue
            at = next(i for i, g in enumerate(slots) if g.index == w.allocations[0].gpu)
            residents.setdefault(node, []).append(
                placement.Resident(
                    key,
                    one_card,
                    placement.Placement(node, (at,)),
                    # a move is an eviction: it passes the same gate as a preemption, but a
                    # job of the same priority may be moved (it restarts at once elsewhere)
                    movable=(w.migratable or not rule.only_migratable)
                    and not run.gate(w, prio + 1, budget=False),
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
            to_gpus=(dest.index,),
        )
    return _place_gang(run, pv, p) is not None


def _in_window(now: datetime, start: str, end: str) -> bool:
    """Maintenance windows are written in UTC (the reference says so), whatever offset
    `now` carries."""
    now = now.astimezone(UTC)
    t = now.hour * 60 + now.minute
    s = int(start[:2]) * 60 + int(start[3:])
    e = int(end[:2]) * 60 + int(end[3:])
    return s <= t < e if s <= e else (t >= s or t < e)


# --------------------------------------------------------------------------- 7. objects


def _foreign(run: _Run, kind: str, name: str, manager: str, what: str) -> None:
    """A policy object whose name is taken by an object gpupool does not manage (no
    managed-by label, or another manager's): gpupool never changes or deletes it."""
    by = f"is managed by {manager}" if manager else f"has no {MANAGED_BY_LABEL} label"
    run.find(
        "warning",
        "foreign-object",
        f"{kind} {name}",
        f"{kind} {name} exists and {by}, so gpupool leaves it as it is instead of making it "
        f"{what}. Rename it in the policy, or label the object "
        f"{MANAGED_BY_LABEL}={MANAGED_BY} to hand it to gpupool",
    )


def _objects(run: _Run) -> None:
    have = {(q.namespace, q.name): q for q in run.observed.quotas}
    for (ns, name), hard in _resource_quotas(run).items():
        cur = have.get((ns, name))
        if cur is None and not hard:
            continue
        if cur is not None and cur.hard == hard:
            continue
        if cur is not None and cur.managed_by != MANAGED_BY:
            _foreign(
                run, "ResourceQuota", f"{ns}/{name}", cur.managed_by, f"team {run.team(ns)}'s quota"
            )
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
                + ", ".join(f"{k}={hard.get(k, '(removed)')}" for k in changed)
                + (
                    f" ({ns} is gated: gpupool's admission enforces the team's limits and "
                    "queues what a quota would refuse)"
                    if ns in (run.observed.gated_namespaces or ())
                    else ""
                ),
                verb=verb,
                hard=hard,
                previous=cur.hard if cur else None,
            )
        )
    classes = {c.name: c for c in run.observed.priority_classes}
    wanted = desired_priority_classes(run.desired)
    # The API server admits one globalDefault class (plugin/pkg/admission/priority): another
    # one, not the policy's, keeps that role and the policy's default is published without it.
    other = sorted(c.name for c in classes.values() if c.global_default and c.name not in wanted)
    for name, want in wanted.items():
        if want.global_default and other:
            want = want.model_copy(update={"global_default": False})
            run.find(
                "warning",
                "default-class-taken",
                name,
                f"PriorityClass {other[0]} is the cluster's globalDefault: pods created without "
                f"a class get its priority, not defaultClass {name}'s",
            )
        cur = classes.get(name)
        if cur is not None and cur.model_dump(exclude={"name", "managed_by"}) == want.model_dump(
            exclude={"name", "managed_by"}
        ):
            continue
        if cur is not None and cur.managed_by != MANAGED_BY:
            _foreign(
                run,
                "PriorityClass",
                name,
                cur.managed_by,
                f"the policy's class (value {want.value}, preemptionPolicy "
                f"{want.preemption_policy}); pods naming it get value {cur.value}",
            )
            continue
        default = ", the default for pods that name none" if want.global_default else ""
        run.add(
            ApplyPriorityClass(
                id=f"priority-class:{name}",
                target=name,
                reason=(
                    f"{'create' if cur is None else 'update'} PriorityClass {name} "
                    f"(value {want.value}, preemptionPolicy {want.preemption_policy}{default})"
                ),
                value=want.value,
                preemption_policy=want.preemption_policy,
                global_default=want.global_default,
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
    _prune_pool_labels(run)


def _prune_pool_labels(run: _Run) -> None:
    """A node that carries gpupool's pool label but is in no desired pool (its Pool was deleted
    from git, or its selector no longer matches the node) loses the label: the key is
    gpupool's, and a stale label would keep steering the old pool's pods and Kueue's
    ResourceFlavor there. With no Pool desired at all nothing is removed (a policy that lost
    every Pool is more likely a mistake than a decommissioning): a finding says so."""
    pooled = {n for pv in run.cluster.pools.values() for n in pv.nodes}
    stale = sorted(
        (n.name, n.labels[POOL_LABEL])
        for n in run.observed.nodes
        if POOL_LABEL in n.labels and n.name not in pooled
    )
    if not stale:
        return
    if not run.desired.pools:
        run.find(
            "warning",
            "prune-everything-refused",
            "Node",
            f"no Pool is desired, so the {POOL_LABEL} label stays on {len(stale)} node(s) "
            f"({', '.join(n for n, _ in stale[:5])}{', ...' if len(stale) > 5 else ''}); "
            "remove it by hand if the pools are really gone",
        )
        return
    for node, old in stale:
        run.add(
            LabelNode(
                id=f"label-node:{node}",
                target=node,
                pool=old,
                reason=(
                    f"{node} is labelled {POOL_LABEL}={old} but is in no desired pool "
                    f"(Pool/{old} is gone or its selector no longer matches): remove the label"
                ),
                labels={POOL_LABEL: None},
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
            cordon = run.add(
                Cordon(
                    id=f"cordon:{node}",
                    target=node,
                    pool=pv.name,
                    reason=f"stop new pods on {node} while {len(changed)} GPU(s) are repartitioned",
                )
            )
            shared = tuple(
                CardSlices(gpu=g.index, slices=g.target_slices)
                for g in slots
                if g.target_mode == "shared"
            )
            why = (
                "; ".join(dict.fromkeys(g.why for g in changed if g.why)) or "desired partitioning"
            )
            mig_cards = [g for g in changed if "mig" in (g.mode, g.target_mode)]
            share_cards = [g for g in changed if g not in mig_cards]
            done: list[str] = []
            deps = (cordon, *evictions)
            if mig_cards:
                layout = tuple(
                    CardLayout(
                        gpu=g.index,
                        profiles=tuple(g.target_layout) if g.target_mode == "mig" else None,
                    )
                    for g in slots
                )
                done.append(
                    run.add(
                        MigReconfigure(
                            id=f"mig-reconfigure:{node}",
                            layout=layout,
                            **_repartition_fields(pv, node, mig_cards, shared, why, deps),
                        )
                    )
                )
            before = max((g.slices for g in slots if g.mode == "shared"), default=0)
            after = _node_slices(pv, node)
            if share_cards or before != after:
                done.append(
                    run.add(
                        SetSharing(
                            id=f"set-sharing:{node}",
                            slices=after or None,
                            strategy=_policy_strategy(pv),
                            plain_cards=len(_plain_cards(pv, node)),
                            **_repartition_fields(
                                pv, node, share_cards, shared, why, (*deps, *done)
                            ),
                        )
                    )
                )
            rc = done[-1]
            run.add(
                Uncordon(
                    id=f"uncordon:{node}",
                    target=node,
                    pool=pv.name,
                    reason=f"{node} is repartitioned; schedule on it again",
                    depends_on=(rc,),
                )
            )


def _repartition_fields(
    pv: PoolView,
    node: str,
    changed: list[GpuSlot],
    shared: tuple[CardSlices, ...],
    why: str,
    deps: tuple[str, ...],
) -> dict:
    cards = tuple(
        CardChange(gpu=g.index, before=g.describe(), after=g.describe(target=True)) for g in changed
    )
    summary = "; ".join(f"gpu{c.gpu}: {c.before} -> {c.after}" for c in cards)
    return {
        "target": node,
        "pool": pv.name,
        "reason": f"{summary} ({why})",
        "depends_on": deps,
        "cards": cards,
        "shared_slices": shared,
    }


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


# --------------------------------------------------------------------------- 9. admissions


def _reservations(run: _Run, pending: list[Pending]) -> None:
    """Cards freed for a gated gang in earlier cycles stay its own: when every card its pods'
    reservations name is free now (their victims gone or terminating), the gang is placed
    there before any other demand is (highest priority first, as admission sorted them)."""
    for p in pending:
        if not p.gated or p.request.kind != "whole" or set(p.reserved) != set(p.members):
            continue
        pv = run.pool_view(p.pool)
        if pv is None:
            continue
        cards: list[list[GpuSlot]] = []
        for m in p.members:
            node, gpus = p.reserved[m]
            slots = [run.cluster.slot.get((node, i)) for i in gpus]
            if (
                node not in pv.nodes
                or len(gpus) != p.request.gpus
                or not all(g is not None and g.free_whole for g in slots)
                or any(g in c for c in cards for g in slots)
            ):
                break
            cards.append([g for g in slots if g is not None])
        else:
            for m, got in zip(p.members, cards, strict=True):
                pv.reserve(got, m)
            p.placed = True


def _suspended(run: _Run) -> list[Pending]:
    """Jobs gpupool suspended to stop their gang: demand for all their pods again (created
    when the Job is resumed, gated, then admitted)."""
    if kueue_mode(run):
        _kueue_suspended(run)
        return []
    out = []
    for j in sorted(run.observed.suspended_jobs, key=lambda j: j.key):
        p = Pending(
            j.key,
            j.namespace,
            j.request,
            j.priority_class,
            j.pool,
            j.suspended_at,
            origin="suspended job",
        )
        p.members = tuple(f"{j.key}#{i}" for i in range(j.parallelism))
        out.append(p)
    return out


def _admissions(run: _Run, pending: list[Pending]) -> None:
    """An Admit for every gated gang the plan placed: each pod's node and cards, after the
    repartitions and uncordons of those nodes, and once the pods stopped to free the cards
    are gone. Demand kube-scheduler places itself (no gate) is never admitted."""
    where: dict[str, list[GpuSlot]] = {}
    for g in run.cluster.slot.values():
        if g.reserved_by:
            where.setdefault(g.reserved_by, []).append(g)
        for h in g.holders:
            where.setdefault(h, []).append(g)
    node_steps: dict[str, list[str]] = {}
    for aid, a in run.actions.items():
        if isinstance(a, MigReconfigure | SetSharing | Uncordon):
            node_steps.setdefault(a.target, []).append(aid)
    for p in pending:
        if any(m not in where for m in p.members):
            continue
        if p.origin == "suspended job":
            nodes = sorted({where[m][0].node for m in p.members})
            run.add(
                Resume(
                    id=f"resume:{p.key}",
                    target=p.key,
                    pool=p.pool,
                    reason=(
                        f"resume Job {p.key}, suspended to stop its gang: its {_describe(p)} "
                        f"fit on {', '.join(nodes)} now (its pods are admitted once created)"
                    ),
                )
            )
            continue
        if not p.gated or p.origin != "pending pod":
            continue
        if kueue_mode(run) and p.request.kind == "whole":
            continue  # Kueue admits training (`_kueue_workloads` reports a gpupool gate)
        pods, after, deps = [], set(), set()
        for m in p.members:
            cards = sorted(where[m], key=lambda g: g.index)
            node = cards[0].node
            pods.append(
                PodAdmission(name=m.split("/", 1)[1], node=node, gpus=tuple(g.index for g in cards))
            )
            deps.update(node_steps.get(node, ()))
            for g in cards:
                after.update(
                    run.actions[e].target for e in run.evictions_on.get((node, g.index), ())
                )
                after.update(run.stopping.get((node, g.index), ()))
        nodes = sorted({a.node for a in pods})
        freed = f", once {len(after)} pod(s) stopped for it are gone" if after else ""
        run.add(
            Admit(
                id=f"admit:{p.key}",
                target=p.key,
                pool=p.pool,
                reason=(f"admit {p.origin} {p.key} ({_describe(p)}) to {', '.join(nodes)}{freed}"),
                depends_on=tuple(sorted(deps)),
                namespace=p.namespace,
                pods=tuple(pods),
                after=tuple(sorted(after)),
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


# --------------------------------------------------------------------------- Kueue mode (issue 14)


def kueue_mode(run: _Run) -> bool:
    """PriorityPolicy `admission.controller: kueue`, and Kueue's CRDs are served. Without them
    (`observed.kueue` None) gpupool keeps to gpupool mode, with a `kueue-not-installed`
    finding: pruning the ResourceQuotas before Kueue can enforce anything would leave the
    teams without limits, and nobody would admit what gpupool no longer admits."""
    return run.desired.admission_controller == "kueue" and run.observed.kueue is not None


def _kueue_workloads(run: _Run) -> None:
    """In kueue mode, training that Kueue will not see or that gpupool's gate keeps back."""
    if run.desired.admission_controller == "kueue" and run.observed.kueue is None:
        run.find(
            "warning",
            "kueue-not-installed",
            "Kueue",
            "the PriorityPolicy chooses admission.controller kueue, but Kueue's CRDs "
            "(kueue.x-k8s.io ResourceFlavor, ClusterQueue, LocalQueue) are not served: no Kueue "
            "object is applied, and gpupool keeps its ResourceQuotas and its own admission "
            "until they are",
        )
        return
    if not kueue_mode(run):
        return
    seen: set[object] = set()
    for w in sorted(run.observed.workloads, key=lambda w: w.key):
        if w.request.kind != "whole" or run.desired.quota_for_namespace(w.namespace) is None:
            continue
        key = gang_key(w) or w.key
        if key in seen:
            continue
        seen.add(key)
        who = f"{w.owner_kind} {w.namespace}/{w.owner_name}" if w.owner_name else f"Pod {w.key}"
        if not w.queue_name:
            run.find(
                "warning",
                "kueue-queue-name-missing",
                w.key,
                f"{who} trains in team namespace {w.namespace} without the label "
                f"{KUEUE_QUEUE_LABEL}: Kueue does not queue it, so it runs outside the team's "
                f"ClusterQueue. Label it {KUEUE_QUEUE_LABEL}={KUEUE_LOCAL_QUEUE}",
            )
        if w.phase == "Pending" and w.admission == "gpupool":
            run.find(
                "warning",
                "kueue-gated-training",
                w.key,
                f"carries gpupool's scheduling gate {ADMISSION_GATE} in kueue mode, where gpupool "
                "admits no training: it waits for good. Remove the namespace's "
                "gpupool.io/admission=gated label (or the gate)",
            )


def _kueue_suspended(run: _Run) -> None:
    for j in sorted(run.observed.suspended_jobs, key=lambda j: j.key):
        run.find(
            "warning",
            "kueue-suspended-job",
            j.key,
            f"Job {j.key} was suspended by gpupool before kueue mode; gpupool resumes nothing in "
            f"kueue mode. Kueue admits it if it carries {KUEUE_QUEUE_LABEL}; otherwise resume "
            "it by hand (spec.suspend: false)",
        )


def _kueue_ref(kind: str, ns: str, name: str) -> str:
    return f"{kind} {ns + '/' if ns else ''}{name}"


def _kueue(run: _Run) -> None:
    """Kueue's objects: in kueue mode every Quota as a ClusterQueue, every Pool as a
    ResourceFlavor, every team namespace's LocalQueue (reconciler/plan/kueue.py); in gpupool
    mode none, so the ones gpupool made are pruned. Only objects with gpupool's managed-by
    label are changed or pruned, and pruning all of them while no Quota is left needs the
    ChangePolicy's allowDeleteAllQuotas, as for ResourceQuotas."""
    if run.observed.kueue is None:
        return  # Kueue's CRDs are not served: nothing to apply or prune
    mode = kueue_mode(run)
    want = kueue_render.desired_kueue_objects(run.desired) if mode else {}
    if mode:
        for q in sorted(run.desired.quotas.values(), key=lambda q: q.metadata.name):
            for what in kueue_render.unmapped_fields(q):
                run.find(
                    "info",
                    "kueue-unmapped-field",
                    f"Quota {q.metadata.name}",
                    f"{what} has no Kueue equivalent and is not enforced in kueue mode",
                )
    have = {(o.kind, o.namespace, o.name): o for o in run.observed.kueue}
    applied: dict[tuple[str, str, str], str] = {}
    pruned: dict[tuple[str, str, str], str] = {}

    def prune(key: tuple[str, str, str], why: str) -> str:
        kind, ns, name = key
        ref = _kueue_ref(kind, ns, name)
        deps: list[str] = []
        if kind == "ClusterQueue":  # its local queues go first
            deps = [aid for (k, _, _), aid in pruned.items() if k == "LocalQueue"]
        elif kind == "ResourceFlavor":
            deps = [aid for (k, _, _), aid in pruned.items() if k == "ClusterQueue"]
        aid = run.add(
            PruneKueueObject(
                id=f"prune-kueue:{kind}:{f'{ns}/' if ns else ''}{name}",
                target=f"{ns}/{name}" if ns else name,
                reason=f"prune {ref}: {why} (gpupool made it: {MANAGED_BY_LABEL}={MANAGED_BY})",
                depends_on=tuple(sorted(deps)),
                object_kind=kind,
                namespace=ns,
                name=name,
            )
        )
        pruned[key] = aid
        return aid

    for key, spec in want.items():
        kind, ns, name = key
        cur = have.get(key)
        if cur is not None and cur.managed_by != MANAGED_BY:
            _foreign(run, kind, f"{ns}/{name}" if ns else name, cur.managed_by, "gpupool's")
            continue
        if cur is not None and kueue_render.spec_matches(spec, cur.spec):
            continue
        deps: list[str] = []
        if kind == "ClusterQueue":
            names = {f["name"] for g in spec["resourceGroups"] for f in g["flavors"]}
            deps = [
                aid for (k, _, n), aid in applied.items() if k == "ResourceFlavor" and n in names
            ]
        elif kind == "LocalQueue":
            deps = [
                aid
                for (k, _, n), aid in applied.items()
                if k == "ClusterQueue" and n == spec["clusterQueue"]
            ]
        verb = "create" if cur is None else "update"
        if (
            kind == "LocalQueue"
            and cur is not None
            and cur.spec.get("clusterQueue")
            not in (
                None,
                spec["clusterQueue"],
            )
        ):
            # spec.clusterQueue is immutable (LocalQueue CRD rule "field is immutable"):
            # the queue is deleted and made again pointing at the namespace's new quota
            deps.append(
                prune(
                    key,
                    f"{ns} now belongs to ClusterQueue {spec['clusterQueue']}, and a "
                    "LocalQueue's clusterQueue cannot change: it is made again",
                )
            )
            verb = "create"
        what = {
            "ResourceFlavor": f"for Pool {spec.get('nodeLabels', {}).get(POOL_LABEL, name)}",
            "ClusterQueue": f"for the Quota of namespaces {', '.join(_cq_namespaces(spec))}",
            "LocalQueue": f"of namespace {ns}, queueing into ClusterQueue "
            f"{spec.get('clusterQueue')}",
        }[kind]
        applied[key] = run.add(
            ApplyKueueObject(
                id=f"kueue:{kind}:{f'{ns}/' if ns else ''}{name}",
                target=f"{ns}/{name}" if ns else name,
                reason=f"{verb} {_kueue_ref(kind, ns, name)} {what} (kueue mode)",
                depends_on=tuple(sorted(deps)),
                object_kind=kind,
                namespace=ns,
                name=name,
                verb=verb,
                spec=kueue_render.body(spec),
            )
        )
    stale = sorted(
        (
            key
            for key, o in have.items()
            if o.managed_by == MANAGED_BY and key not in want and not o.terminating
        ),
        key=lambda k: (-kueue_render.KINDS.index(k[0]), k[1], k[2]),
    )
    change = run.desired.change.spec if run.desired.change else None
    if stale and not run.desired.quotas and not (change and change.allow_delete_all_quotas):
        _refuse_prune_all(
            run, "Kueue object", [_kueue_ref(*k) for k in stale], "allowDeleteAllQuotas"
        )
        return
    why = (
        "no Quota, Pool or team namespace of the desired state renders it any more"
        if mode
        else "the PriorityPolicy's admission.controller is gpupool, which renders no Kueue object"
    )
    for key in stale:
        prune(key, why)


def _cq_namespaces(spec: dict) -> list[str]:
    exprs = (spec.get("namespaceSelector") or {}).get("matchExpressions") or [{}]
    return list(exprs[0].get("values") or [])
