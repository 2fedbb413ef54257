"""Step 8, training: a pending gang goes whole on whole cards (each pod on one node); when it
does not fit, empty inference cards beyond the warm minimum come back, then victims the rules
allow are preempted, then single-card work is moved (defragment.py)."""

from __future__ import annotations

import math
from collections.abc import Callable

from reconciler.plan.cluster import (
    PoolView,
)
from reconciler.plan.demand import describe, record_wait
from reconciler.plan.evictions import (
    default_class,
    evict,
    nodes_hosting,
    ordered_victims,
    overdrawn,
    reclaim_within_cohort,
    reclaims,
    victim_candidates,
    victim_classes,
)
from reconciler.plan.partition import partition_for
from reconciler.plan.run import BUDGET, Demand, DemandShape, Run
from reconciler.plan.stages.defragment import defragment
from reconciler.plan.stages.whole_cards import by_domain, is_inference, place_gang
from reconciler.plan.victims import Candidate


def _whole_kind(run: Run, p: Demand) -> str:
    """What whole-card demand is, for the words of a finding (`is_inference`)."""
    return "inference" if is_inference(run, p) else "training"


def place_training(run: Run, pv: PoolView, pending: list[Demand]) -> None:
    """Whole-card demand: training, and inference whose replicas ask whole cards."""
    for p in pending:
        if p.on_reservation or place_gang(run, pv, p):
            continue
        n = p.request.gpus
        # The same shape of demand failed and nothing was freed since: it fails again.
        shape: DemandShape = (
            pv.name,
            n,
            len(p.members),
            p.priority_class,
            p.borrow_from,
            p.namespace,
        )
        if run.failed.get(shape) != run.generation and (
            any(step(run, pv, p) for step in _gang_steps(run, p))
        ):
            continue
        run.failed[shape] = run.generation
        blocked = run.blocked.get(p.key) or run.shape_blocked.get(shape) or ""
        run.shape_blocked[shape] = blocked
        record_wait(
            run,
            p,
            "waits",
            f"pending {_whole_kind(run, p)} ({describe(p)}) waits: "
            + (blocked or f"nothing in {pv.name} can be freed for it this cycle"),
        )


GangStep = Callable[[Run, PoolView, Demand], bool]
"""One way to make room for a gang that fits nowhere; True when it is placed."""


def _gang_steps(run: Run, p: Demand) -> tuple[GangStep, ...]:
    """How a gang that fits nowhere gets room, in order. A preemption rule with `when: always`
    for its class displaces victims before warm inference cards are given back."""
    cls = p.priority_class or default_class(run)
    if any(r.preemptor == cls and r.when == "always" for r in run.terms.rules):
        return (_preempt_for_gang, _give_back_inference, defragment)
    return (_give_back_inference, _preempt_for_gang, defragment)


def _give_back_inference(run: Run, pv: PoolView, p: Demand) -> bool:
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
        if partition_for(run, pv).node_slices(pv, node):
            # a shared node comes back whole or not at all (the plugin shares per node), and
            # its MIG cards would come back shared
            back = [
                g
                for g in partition_for(run, pv).sharing_unit(pv, node)
                if g.target_mode == "shared"
            ]
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
            and not partition_for(run, pv).reset_blocked(pv, g, "whole")
        ]
        if free + min(len(back), spare) >= n:
            options.append((n - free, node, back[: n - free]))
    if not options:
        return False
    _, node, back = min(options, key=lambda o: (o[0], o[1]))
    for g in back:
        if g.target_mode == "whole":
            continue  # came back with its node
        partition_for(run, pv).reshape(
            run,
            g,
            pv,
            "whole",
            why=(
                f"pending {_whole_kind(run, p)} {p.key} needs {n} whole cards on one node "
                "and these inference cards are empty"
            ),
        )
    placed = place_gang(run, pv, p)
    assert placed
    return True


Option = tuple[tuple, str, list[Candidate]]
"""What freeing one pod's cards on a node costs, the node, and the victims there."""


def _preempt_for_gang(run: Run, pv: PoolView, p: Demand) -> bool:
    """Free one node's worth of cards per pod of the gang, choosing nodes by what their
    victims cost; all of it within the budget, or nothing at all. A gang of several pods in
    a pool with NVLink domains frees them within one domain (`_choices`)."""
    classes = victim_classes(run, p.priority_class)
    reclaim = reclaims(run, p, pv.name)
    if not classes and reclaim is None:
        return False
    if run.budget_left <= 0:
        # every way of freeing a node stops at least one pod: none is priced while the
        # budget is spent (at 10,000 nodes that pricing was a fifth of a cycle's time)
        run.blocked[p.key] = f"it needs a preemption and the {BUDGET} has 0 left"
        return False
    options = _options(run, pv, p, classes, reclaim)
    refusal = ""
    for chosen in _choices(pv, p, options):
        why = _refusal(run, p, pv, chosen)
        if not why:
            _preempt(run, pv, p, chosen, classes, reclaim)
            return place_gang(run, pv, p)
        refusal = refusal or why
    if refusal:
        run.blocked[p.key] = refusal
    return False


def _options(
    run: Run, pv: PoolView, p: Demand, classes: set[str], reclaim: str | None
) -> list[Option]:
    """The nodes that can be freed for one pod of `p`, cheapest first (`_node_option`)."""
    reserved = {node for node, _ in p.reserved.values()}
    nodes = sorted(pv.by_node()) if reclaim is not None else nodes_hosting(run, pv, classes)
    who = _victims_key(run, p, classes, reclaim)
    options: list[Option] = []
    for node in nodes:
        option = _node_option(run, pv, p, node, classes, node in reserved, who)
        if option is not None:
            options.append(option)
    options.sort(key=lambda o: o[0])
    return options


def _choices(pv: PoolView, p: Demand, options: list[Option]) -> list[list[Option]]:
    """The sets of nodes to free for `p`, the one to try first first. A gang of several pods,
    in a pool whose nodes carry NVLink domains (`by_domain`): per domain
    that can hold it, its cheapest nodes that with the domain's free room fit every pod,
    the domain whose victims cost least first (`_total`; then the fewest free cards, then
    the name); only when no domain can, the cheapest nodes of the pool (and `place_gang`
    says the gang spans domains)."""
    n, pods = p.request.gpus, len(p.members)
    if by_domain(pv, n, pods):
        ranked = []
        for name, members in sorted(pv.cliques().items()):
            ready = sum(pv.free_whole_on(x) // n for x in members)
            mine = [o for o in options if o[1] in members]
            take = mine[: max(0, pods - ready)]
            if len(take) >= pods - ready:
                free = sum(pv.free_whole_on(x) for x in members)
                ranked.append((_total(take), free, name, take))
        if ranked:
            return [take for *_, take in sorted(ranked, key=lambda r: r[:3])]
    ready = sum(pv.free_whole_on(node) // n for node in pv.by_node())
    chosen = options[: max(0, pods - ready)]
    return [chosen] if len(chosen) >= pods - ready else []


def _total(take: list[Option]) -> tuple:
    """What freeing all of `take`'s nodes costs, summed from each node's cost
    (`_node_option`): nodes not already being freed for the gang, the highest victim
    priority, cards freed beyond the need, evictions, work lost."""
    costs = [o[0] for o in take]
    return (
        sum(c[0] for c in costs),
        max((c[1] for c in costs), default=-math.inf),
        sum(c[2] for c in costs),
        sum(c[3] for c in costs),
        sum(c[4] for c in costs),
    )


def _refusal(run: Run, p: Demand, pv: PoolView, chosen: list[Option]) -> str:
    """Why stopping the victims of `chosen` for `p` is not allowed now ('' when it is): a
    team would go below its guarantee, or the hourly budget has too little left."""
    overdraw = overdrawn(run, p, pv.name, [c for _, _, t in chosen for c in t])
    if overdraw:
        return overdraw
    evictions = sum(len(run.gang(run.cluster.workloads[c.key])) for _, _, t in chosen for c in t)
    if evictions > run.budget_left:
        return f"it needs {evictions} preemption(s) and the {BUDGET} has {run.budget_left} left"
    return ""


def _preempt(
    run: Run,
    pv: PoolView,
    p: Demand,
    chosen: list[Option],
    classes: set[str],
    reclaim: str | None,
) -> None:
    n = p.request.gpus
    for _, _, take in chosen:
        for c in take:
            w = run.cluster.workloads[c.key]
            evict(
                run,
                w,
                "preempt",
                f"pending {p.key} ({p.priority_class}, {describe(p)}) "
                + (
                    f"reclaims team {reclaim}'s guarantee from {w.key}, which borrows"
                    + (
                        " (reclaimWithinCohort Any: its stopped pods wait for gpupool's plan)"
                        if run.priority(w.priority_class) >= run.demand_priority(p)
                        else ""
                    )
                    if reclaim is not None
                    and (w.priority_class or default_class(run)) not in classes
                    else f"outranks {w.key} ({w.priority_class})"
                )
                + f" and no node has {n} free whole cards for it",
                pv.name,
                preemptor=p.key,
            )


def _victims_key(run: Run, p: Demand, classes: set[str], reclaim: str | None) -> tuple:
    """What of `p` decides which running work may be stopped for it (`victim_candidates`):
    the classes the rules let it displace, its priority, and, when it takes its team's
    guarantee back, the team, its Quota's `reclaimWithinCohort` and `p`'s class."""
    return (
        frozenset(classes),
        run.demand_priority(p),
        reclaim,
        reclaim_within_cohort(run, p.namespace) if reclaim is not None else None,
        (p.priority_class or default_class(run)) if reclaim is not None else None,
    )


def _candidates(
    run: Run, pv: PoolView, p: Demand, node: str, ws: tuple[str, ...], classes: set[str], who: tuple
) -> list[Candidate]:
    """`victim_candidates` among the work `ws` on `node` for `p`, computed once per node,
    `who` (`_victims_key`) and generation of the run: what decides it changes only when
    work is stopped, which starts a new generation (`Run.freed`), or when other work runs
    on the node (`ws`). Waiting gangs of several shapes ask it of the same nodes."""
    key = ("gang-victims", pv.name, node, who)
    known = run.memo.get(key)
    if known is not None and known[0] == run.generation and known[1] == ws:
        return known[2]
    work = [run.cluster.workloads[h] for h in ws]
    found = victim_candidates(run, work, p, pv.name, classes, who[2])
    run.memo[key] = (run.generation, ws, found)
    return found


def _held(run: Run, pv: PoolView, node: str, n: int) -> tuple[str, ...] | None:
    """The running workloads on `node`'s whole cards, by key; None when freeing `n` cards
    there is no option: the node is fenced or not the pool's, or it fits already (another
    pod of the gang took it, or none), or nothing runs there."""
    slots = pv.by_node().get(node)
    if not slots or node in _fenced(run, pv):
        return None  # no card of the pool there (its victims run on cards the agent lost)
    if pv.free_whole_on(node) >= n:
        return None
    return _whole_holders(run, pv, node, slots) or None


def _whole_holders(run: Run, pv: PoolView, node: str, slots: list) -> tuple[str, ...]:
    """The workloads holding `node`'s whole cards, by key, kept while the run's generation
    and releases stay as they were (`_epoch`): step 8 adds holders only to MIG and shared
    cards (whole cards are reserved, not held), a card's target changes only with a new
    generation (`convert`), and a holder goes only with a release."""
    key = ("whole-holders", pv.name, node)
    epoch = _epoch(run)
    known = run.memo.get(key)
    if known is not None and known[0] == epoch:
        return known[1]
    ws = tuple(
        sorted(
            {
                h
                for g in slots
                if g.target_mode == "whole"
                for h in g.holders
                if h in run.cluster.workloads
            }
        )
    )
    run.memo[key] = (epoch, ws)
    return ws


def _epoch(run: Run) -> tuple[int, int]:
    """What changes whenever work is stopped or a card repartitioned: the run's generation
    (`Run.freed`) and the releases of its view (`ClusterView.release`, also recovery's
    stops, which start no generation of their own)."""
    return (run.generation, run.cluster.releases)


def _fenced(run: Run, pv: PoolView) -> frozenset[str]:
    """The pool's nodes with a fenced card: fences are set before step 8 (the view is built,
    recovery fences nodes it no longer trusts) and never during it."""
    key = ("fenced-nodes", pv.name)
    known = run.memo.get(key)
    if known is None:
        known = run.memo[key] = frozenset(g.node for g in pv.gpus if g.fenced)
    return known


def _node_option(
    run: Run,
    pv: PoolView,
    p: Demand,
    node: str,
    classes: set[str],
    reserved: bool,
    who: tuple,
) -> Option | None:
    """What freeing `n` whole cards on `node` for one pod of `p` costs, and its victims; None
    when the node is fenced, fits already, or cannot be freed (a victim's job spans nodes).
    Kept per node, `n`, `who` and `reserved` while the run's epoch (`_epoch`) and the node's
    free whole cards stay as they were: nothing else it reads changes during step 8 (which
    work may be stopped, the teams' borrowing and what is already stopped change only with
    an eviction, which starts a new generation)."""
    n = p.request.gpus
    free = pv.free_whole_on(node)
    key = ("gang-option", pv.name, node, n, who, reserved)
    state = (_epoch(run), free)
    known = run.memo.get(key)
    if known is not None and known[0] == state:
        return known[1]
    option = _price_node(run, pv, p, node, classes, reserved, who)
    run.memo[key] = (state, option)
    return option


def _price_node(
    run: Run,
    pv: PoolView,
    p: Demand,
    node: str,
    classes: set[str],
    reserved: bool,
    who: tuple,
) -> Option | None:
    """`_node_option`, computed."""
    ws = _held(run, pv, node, p.request.gpus)
    if ws is None:
        return None
    n = p.request.gpus
    free = pv.free_whole_on(node)
    victims = ordered_victims(
        run, _candidates(run, pv, p, node, ws, classes, who), p, pv.name, n - free, who[2]
    )
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
        return None
    cost = (
        not reserved,  # the node already being freed for it comes first
        max(c.priority for c in take),
        sum(max(0.0, c.gpus) for c in take) - (n - free),
        evictions,
        sum(c.lost for c in take),
        node,
    )
    return cost, node, take
