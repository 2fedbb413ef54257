"""plan(desired, observed, now) -> Plan: the pure heart of gpupool, as a pipeline.

No I/O, no clock (time is an input), no globals: the same inputs give a byte-identical plan,
whatever order the snapshot lists things in (`consistency.canonical`). The rules an SRE can
hold it to are in docs/planner.md; the map of the modules is docs/architecture.md.

`plan_with_facts` runs the steps below in order. Each is a function of a module of its own
(`stages/`, `objects/`, `demand.py`) that takes the run and what earlier steps returned, and
returns what later steps take; the actions and findings they emit explain themselves. The
working view, the emitter and the usage ledger travel in one `Run` (run.py); every eviction
passes one check (`stop_refusal`, evictions.py), every repartition one seam (partition/).

 0. open the run: check the snapshot (cards the cluster over-committed and the cards of
    unavailable nodes are fenced), the usage ledger and the hourly budget;
 0b. recovery: a gang that lost a member (its node failed, it was evicted) is stopped whole
    and comes back whole; replicas on failed nodes are replaced; returning nodes settle;
 1. drift: cards whose partition is not the policy's are repartitioned when empty;
 2. scaling: inference services whose queue/wait signals cross their thresholds;
 3. demand: pending pods (a gang as one unit), new replicas, Jobs gpupool suspended;
 4. team caps: teams over their hard cap lose their cheapest preemptible work;
 5. idle reclaim: cards idle longer than the MaintenancePolicy allows;
 6. admission: reachable, within caps, borrowing/lending limits and quotas, else held;
 7. reservations: cards freed for a gated gang in earlier cycles stay its own;
 8. placement per pool and priority level, highest first: training on whole cards (give back
    inference, preempt, defragment), inference on MIG / shared slices (reshape, preempt),
    then the pool's warm inference minimum;
 9. desired objects (quotas, priority classes, pool labels, Kueue's objects) and pruning;
10. repartitions per node: cordon -> (checkpoint -> evict) -> the backend's change -> uncordon;
11. admissions: an Admit (or Resume) for every gated gang the plan placed;
12. the planner's own guard against over-commitment, and the ordered plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction

from reconciler.observe.model import (
    ObservedState,
)
from reconciler.plan import consistency
from reconciler.plan.cluster import (
    ClusterView,
    PoolView,
    build_cluster,
    unknown_holdings,
)
from reconciler.plan.demand import kueue_findings, pending_demand, suspended_demand
from reconciler.plan.kept import Keeper, ViewMemo, fresh
from reconciler.plan.model import Plan
from reconciler.plan.objects.dra_objects import dra_objects, slices_agree
from reconciler.plan.objects.kueue_objects import kueue_objects
from reconciler.plan.objects.prune import prune_objects, prune_pool_labels
from reconciler.plan.objects.wanted import desired_objects
from reconciler.plan.ordering import ordered
from reconciler.plan.partition import DEFAULT_BACKENDS, PartitionBackend
from reconciler.plan.run import Demand, Run, init_usage
from reconciler.plan.stages.admission import admit_demand, emit_admissions, honour_reservations
from reconciler.plan.stages.caps import enforce_team_caps
from reconciler.plan.stages.drain_taints import drain_taints
from reconciler.plan.stages.drift import repartition_drift, report_fences
from reconciler.plan.stages.idle import reclaim_idle
from reconciler.plan.stages.inference import keep_warm_minimum, serve_inference
from reconciler.plan.stages.recovery import recover
from reconciler.plan.stages.repartitions import finish_drains, repartition_actions
from reconciler.plan.stages.scaling import emit_scales, plan_scaling
from reconciler.plan.stages.training import place_training
from reconciler.policy.state import DesiredState


@dataclass(frozen=True)
class PlanFacts:
    """What a plan leaves besides its actions, as data (the working view stays inside)."""

    targets: dict[tuple[str, str, int], str]
    """(pool, node, index) -> the card's partitioning after the plan."""
    team_usage: dict[str, Fraction]
    """Team -> card equivalents its running workloads hold, as observed."""


def plan(desired: DesiredState, observed: ObservedState, now: datetime | None = None) -> Plan:
    """The ordered, explained actions that move `observed` towards `desired`."""
    return plan_with_facts(desired, observed, now)[0]


def plan_with_facts(
    desired: DesiredState,
    observed: ObservedState,
    now: datetime | None = None,
    backends: tuple[PartitionBackend, ...] = DEFAULT_BACKENDS,
) -> tuple[Plan, PlanFacts]:
    """The plan, and the facts the controller's gauges and the change report read.
    `backends`: the partition backends, the first that serves a pool partitions it."""
    return _plan(desired, observed, now, backends, fresh())


def plan_with_view(
    desired: DesiredState,
    observed: ObservedState,
    now: datetime | None,
    view: ViewMemo | None,
    backends: tuple[PartitionBackend, ...] = DEFAULT_BACKENDS,
) -> tuple[Plan, PlanFacts, ViewMemo]:
    """`plan_with_facts`, its working view built with the per-object answers `view` kept
    from a plan of this desired state (`reconciler.plan.kept`; None: none), and the view
    memo for the next plan. The plan is byte-identical to `plan_with_facts`'s."""
    keeper = Keeper(view)
    p, facts = _plan(desired, observed, now, backends, keeper)
    return p, facts, keeper.memo()


def _plan(
    desired: DesiredState,
    observed: ObservedState,
    now: datetime | None,
    backends: tuple[PartitionBackend, ...],
    keep: Keeper,
) -> tuple[Plan, PlanFacts]:
    run = open_run(desired, observed, now, backends, keep)  # 0
    observed_usage = dict(run.team_usage)
    held_back = recover(run, observed.workloads)  # 0b
    repartition_drift(run)  # 1
    scaling, replicas, scaled_away = plan_scaling(run)  # 2
    demand = (  # 3
        [p for p in pending_demand(run) if not set(p.members) <= scaled_away | held_back]
        + replicas
        + suspended_demand(run)
    )
    enforce_team_caps(run)  # 4
    reclaim_idle(run)  # 5
    demand = admit_demand(run, demand)  # 6
    emit_scales(run, scaling, demand)
    honour_reservations(run, demand)  # 7
    for pv in run.cluster.pools.values():  # 8
        place_pool(run, pv, [p for p in demand if p.pool == pv.name])
    desired_objects(run)  # 9
    prune_pool_labels(run)
    prune_objects(run)
    kueue_objects(run)
    dra_objects(run)
    slices_agree(run)
    repartition_actions(run)  # 10
    finish_drains(run)
    emit_admissions(run, demand)  # 11
    drain_taints(run)  # DRA cards repartitioned or freed for a gang: tainted (first in order)
    check_no_overcommit(run.cluster)  # 12
    report_unmatched(run)
    return finished_plan(run), PlanFacts(targets=run.cluster.targets(), team_usage=observed_usage)


def open_run(
    desired: DesiredState,
    observed: ObservedState,
    now: datetime | None,
    backends: tuple[PartitionBackend, ...],
    keep: Keeper | None = None,
) -> Run:
    """Step 0: the canonical snapshot, checked; pods terminating are left out of the view
    (their cards are as good as free) but remembered; the usage ledger and the budget.
    `keep`: the per-object steps, perhaps answered from a kept view (`reconciler.plan.kept`)."""
    if now is not None and now.tzinfo is None:
        raise ValueError(f"plan time {now.isoformat()} has no timezone; give it in UTC")
    stopping = [w for w in observed.workloads if w.terminating]
    if stopping:
        observed = observed.model_copy(
            update={"workloads": [w for w in observed.workloads if not w.terminating]}
        )
    keep = keep or fresh()
    observed = consistency.canonical(observed, keep)
    for backend in backends:  # the cards as each backend's driver means them
        observed = backend.read_observed(desired, observed)
    unknown = unknown_holdings(observed, keep)
    rest: list = []  # the workloads that hold nothing
    groups = consistency.holding_groups(observed, rest, keep)  # None: a node or workload twice
    checked = consistency.check(
        desired, observed, keep, unknown, groups, stopping=[w.key for w in stopping]
    )
    observed = consistency.first_listings(observed)  # a service or quota listed twice: once
    cluster = build_cluster(desired, observed, checked.suspect_cards, keep, unknown, groups, rest)
    run = Run(desired, observed, now or observed.observed_at, cluster, backends=backends, keep=keep)
    run.findings.extend(checked.findings)
    for u in observed.unreadable:  # left out of the snapshot (or read in part) by the adapter
        run.find("warning", "unreadable-object", u.ref, u.message)
    for w in stopping:
        for a in w.allocations if w.node else ():
            run.stopping.setdefault((w.node or "", a.gpu), set()).add(w.key)
    init_usage(run)
    kueue_findings(run)
    report_fences(run)
    return run


def place_pool(run: Run, pv: PoolView, demand: list[Demand]) -> None:
    """Step 8 for one pool. Higher priority first, whatever the kind: a high-priority training
    run is not squeezed out by lower-priority inference taking the last free cards, nor vice
    versa."""
    for level in sorted({run.demand_priority(p) for p in demand}, reverse=True):
        batch = [p for p in demand if run.demand_priority(p) == level]
        place_training(run, pv, [p for p in batch if p.request.kind == "whole"])
        serve_inference(run, pv, [p for p in batch if p.request.kind in ("mig", "shared")])
    keep_warm_minimum(run, pv)


def report_unmatched(run: Run) -> None:
    for node in run.cluster.unmatched_nodes:
        run.find(
            "info",
            "unmatched-node",
            node,
            "GPU node matches no pool's selector; gpupool leaves it alone "
            "(but for removing a stale pool label)",
        )


def finished_plan(run: Run) -> Plan:
    """The actions in a stable order (dependencies first), the findings sorted, capacity."""
    return Plan(
        revision=run.desired.revision,
        observed_at=run.now.isoformat(),
        actions=tuple(ordered(run.actions)),
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


def check_no_overcommit(cluster: ClusterView) -> None:
    """The planner's own guard: a bug here must fail loudly, never reach a cluster. Cards
    the cluster itself over-committed (consistency findings) are fenced and not judged."""
    for g in cluster.slot.values():
        if g.fenced:
            continue
        if g.target_mode == "whole" and len(g.holders) > 1:
            raise AssertionError(f"{g.key}: whole card held by {sorted(g.holders)}")
        if g.converted and g.target_mode == "shared" and g.used_slices > g.target_slices:
            raise AssertionError(f"{g.key}: {g.used_slices} slices used of {g.target_slices}")
        if g.target_mode == "mig" and not g.used_instances <= set(g.target_instances):
            raise AssertionError(
                f"{g.key}: instances {sorted(g.used_instances)} not in layout {g.target_instances}"
            )
        if not g.changes or not g.holders:
            continue
        running = sorted(
            h for h in g.holders if h in cluster.workloads and cluster.workloads[h].placed
        )
        if running:
            raise AssertionError(f"{g.key}: repartitioned while {running} still run on it")
