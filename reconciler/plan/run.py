"""One plan's run: the frozen inputs (desired, observed, now), the working view of the cluster,
the emitter of actions and findings, and the usage ledger (the hourly budget, team usage,
borrowed whole cards) that evictions.py alone releases; plus `Demand`, the unit of demand."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from reconciler.observe.model import (
    ObservedState,
    Request,
    Workload,
)
from reconciler.plan import placement
from reconciler.plan.actions import (
    Action,
)
from reconciler.plan.cluster import (
    ClusterView,
    PoolView,
    card_equivalents,
)
from reconciler.plan.kept import Keeper, fresh
from reconciler.plan.model import Finding
from reconciler.plan.quotas import quota_use
from reconciler.policy.models import PreemptionRule, PriorityClassSpec
from reconciler.policy.state import DesiredState

INF_PRIORITY = 2**31


PLACEMENT_POLICY = "ours"  # the simulator's best policy (docs/simulator.md); FGD plus look-ahead


SHORTLIST = 16  # nodes scored per placement, tightest fits first (like percentageOfNodesToScore)


UNMETERED = 10**9  # the planner does not meter CPU/memory; the scheduler checks those


BUDGET = "preemption budget for this hour"


SERVICE_OWNERS = frozenset({"", "ReplicaSet", "Deployment", "StatefulSet", "DaemonSet"})


DemandShape = tuple[str, int, int, str | None, tuple[str, ...], str]
"""(pool, GPUs per pod, pods, class, borrowFrom, namespace): demand that fails alike."""


@dataclass(frozen=True)
class PreemptionTerms:
    """The PriorityPolicy's preemption terms, or what holds without one: no rules, no default
    class, nothing old enough to stop (min runtime infinite), no grace, no budget."""

    default_class: str | None = None
    rules: tuple[PreemptionRule, ...] = ()
    min_runtime: float = math.inf
    """Seconds a non-spot workload runs before it may be stopped."""
    grace: timedelta = timedelta(0)
    budget_per_hour: int | None = None
    """None without a PriorityPolicy: the budget stays 0."""

    @classmethod
    def of(cls, desired: DesiredState) -> PreemptionTerms:
        if desired.priority is None:
            return cls()
        spec = desired.priority.spec
        return cls(
            default_class=spec.default_class,
            rules=tuple(spec.preemption.rules),
            min_runtime=spec.preemption.min_runtime.total_seconds(),
            grace=spec.preemption.checkpoint_grace_period,
            budget_per_hour=spec.preemption.budget_per_hour,
        )


@dataclass
class Demand:
    """A unit of demand the plan tries to place: the pending pods of one gang (or one pod), a
    Job gpupool suspended, or a replica it scales up. ("Pending" is only ever a pod phase.)"""

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
    on_reservation: bool = False  # placed on its reservation before any other placement
    reserved: dict[str, tuple[str, tuple[int, ...]]] = field(default_factory=dict)
    """member -> (node, cards) the pod's `gpupool.io/reserved` names: freed for it earlier."""

    def __post_init__(self) -> None:
        self.members = self.members or (self.key,)


@dataclass
class Run:
    """One plan's run (see the module docstring). `terms` are the PriorityPolicy's preemption
    terms, read once."""

    desired: DesiredState
    observed: ObservedState
    now: datetime
    cluster: ClusterView
    terms: PreemptionTerms = field(init=False)
    backends: tuple[Any, ...] = ()
    """The partition backends (`reconciler.plan.partition.PartitionBackend`), the first that
    serves a pool partitions it (`partition_for`)."""
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
    blocked: dict[str, str] = field(default_factory=dict)
    """Demand key -> what stopped a step that would have made room for it (for its wait)."""
    shape_blocked: dict[DemandShape, str] = field(default_factory=dict)
    """Demand shape -> what stopped it last (`failed`): the same shape waits for the same."""
    inference_waits: set[str] = field(default_factory=set)  # pools whose inference demand waits
    generation: int = 0  # bumped whenever capacity is freed or repartitioned
    failed: dict[DemandShape, int] = field(default_factory=dict)
    """Demand shape -> the generation it failed at: it fails again until capacity is freed."""
    stopping: dict[tuple[str, int], set[str]] = field(default_factory=dict)
    """(node, gpu) -> pods terminating there: left out of the view (their cards are as good as
    free to the plan), but an admission onto those cards waits until they are gone."""
    _hosts: dict[str, dict[str, set[str]]] = field(default_factory=dict)
    _gang_index: dict[tuple[str, str, str], list[Workload]] | None = None
    memo: dict[tuple, tuple] = field(default_factory=dict)
    """Answers that hold for the whole run, by (what, id(workload), ...) -> (workload, ...):
    the workload is kept beside its answer so an id is never taken for another's."""
    _gang_of: dict[int, tuple[Workload, tuple[Workload, ...]]] = field(default_factory=dict)
    """id(w) -> (w, its gang): `gang` answers each workload once per run (the index is fixed)."""
    _placement: dict[str, placement.PlacementContext] = field(default_factory=dict)
    _typical: dict[str, dict[placement.TaskType, int]] | None = None
    keep: Keeper = field(default_factory=fresh)
    """The per-object answers kept from the last plan (`reconciler.plan.kept`), for a stage's
    answer about one node's objects that are the same objects as then (none: every answer
    computed)."""

    def placement_ctx(self, pv: PoolView) -> placement.PlacementContext:
        """FGD's target workload for a pool: the GPU requests observed there (whole cards as
        1000 milli, shared slices as their share of a card); a fixed seed for ties."""
        if pv.name not in self._placement:
            if self._typical is None:
                self._typical = _typical_workloads(self.cluster)
            self._placement[pv.name] = placement.PlacementContext(
                target=placement.typical_of(self._typical.get(pv.name, {})), rng=random.Random(0)
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

    def demand_priority(self, p: Demand) -> int:
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

    def unsaved_seconds(self, w: Workload) -> float | None:
        """Seconds of work `w` loses if stopped now: since its last checkpoint, else its start
        (None when neither is known)."""
        return self.seconds_since(w.last_checkpoint_at or w.started_at)

    # -- victims -----------------------------------------------------------------------
    def gang(self, w: Workload) -> list[Workload]:
        """The running pods that live and die together with `w` (pods of one job: stopping
        one stops the job), `w` first; a pod of a service stands alone."""
        known = self._gang_of.get(id(w))
        if known is not None and known[0] is w:
            return list(known[1])
        key = gang_key(w)
        if key is None:
            gang = [w]
        else:
            wk = w.key
            gang = [w] + [m for m in self._gangs().get(key, ()) if m is not w and m.key != wk]
        self._gang_of[id(w)] = (w, tuple(gang))
        return gang

    def _gangs(self) -> dict[tuple[str, str, str], list[Workload]]:
        if self._gang_index is None:
            out: dict[tuple[str, str, str], list[Workload]] = {}
            for w in self.cluster.workloads.values():
                k = gang_key(w)
                if k is not None and w.phase == "Running":
                    out.setdefault(k, []).append(w)
            self._gang_index = out
        return self._gang_index

    def __post_init__(self) -> None:
        self.terms = PreemptionTerms.of(self.desired)

    def freed(self) -> None:
        """Capacity came free: demand that failed before may fit now."""
        self.generation += 1


def _typical_workloads(cluster: ClusterView) -> dict[str, dict[placement.TaskType, int]]:
    """Pool -> the GPU requests of its workloads counted per FGD task type (whole cards as
    1000 milli of each card, shared slices as their share of one card), from the view's
    census."""
    slices = {
        name: pv.pool.spec.inference.shared.slices_per_gpu if pv.pool.spec.inference.shared else 1
        for name, pv in cluster.pools.items()
    }
    asks: dict[tuple[str, int, int], int] = {}  # (pool, GPUs, slices) -> pods
    for (_, pool, _, gpus, _, shared), n in cluster.census.items():
        if (gpus or shared) and pool in slices:
            k = (pool, gpus, shared)
            asks[k] = asks.get(k, 0) + n
    out: dict[str, dict[placement.TaskType, int]] = {}
    for (pool, gpus, shared), n in asks.items():
        if gpus:
            d = placement.PodDemand(num_gpu=gpus, gpu_milli=1000)
        else:
            d = placement.PodDemand(num_gpu=1, gpu_milli=-(-shared * 1000 // slices[pool]))
        counts = out.setdefault(pool, {})
        t = placement.task_type(d)
        counts[t] = counts.get(t, 0) + n
    return out


def init_usage(run: Run) -> None:
    if run.terms.budget_per_hour is not None:
        hour_ago = run.now - timedelta(hours=1)
        recent = sum(1 for t in run.observed.recent_preemptions if hour_ago < t <= run.now)
        run.budget_left = max(0, run.terms.budget_per_hour - recent)
    # each team's placed pods counted by (pool, request shape) from the view's census, each
    # shape priced once (Fractions are exact: the sum is the one a running total gives)
    price: dict[tuple, Fraction] = {}
    teams: dict[str, str | None] = {}
    for (ns, pool, placed, gpus, mig, shared), n in run.cluster.census.items():
        if not placed:
            continue
        if ns not in teams:
            teams[ns] = run.team(ns)
        team = teams[ns]
        if team is None:
            continue
        shape = (pool, gpus, mig, shared)
        if shape not in price:
            r = Request(gpus=gpus, mig=dict(mig), shared_slices=shared)
            price[shape] = card_equivalents(r, run.pool_view(pool))
        run.team_usage[team] = run.team_usage.get(team, Fraction(0)) + price[shape] * n
        if gpus and pool:
            for usage in (run.pool_whole_usage, run.running_whole):
                usage[(team, pool)] = usage.get((team, pool), 0) + gpus * n


def quota_use_of(run: Run) -> dict[str, Counter]:
    """Namespace -> what its pods count against its ResourceQuota (`quotas.quota_use` summed;
    every namespace with a pod, with nothing counted too), from the view's census: what
    `quotas.quota_use_by_namespace` of the view's workloads says. A new value per call."""
    out: dict[str, Counter] = {}
    for (ns, _, _, gpus, mig, shared), n in run.cluster.census.items():
        use = out.setdefault(ns, Counter())
        r = Request(gpus=gpus, mig=dict(mig), shared_slices=shared)
        use.update({res: k * n for res, k in quota_use(r).items()})
    return out


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


def kueue_mode(run: Run) -> bool:
    """PriorityPolicy `admission.controller: kueue`, and Kueue's CRDs are served. Without them
    (`observed.kueue` None) gpupool keeps to gpupool mode, with a `kueue-not-installed`
    finding: pruning the ResourceQuotas before Kueue can enforce anything would leave the
    teams without limits, and nobody would admit what gpupool no longer admits."""
    return run.desired.admission_controller == "kueue" and run.observed.kueue is not None
