"""Step 8, inference: place pending MIG and shared-slice demand, reshaping cards through the
pool's partition backend when none is free, and keep the pool's warm inference minimum."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from fractions import Fraction

from reconciler.conventions import (
    CORDONED_FOR_ANN,
)
from reconciler.plan import placement
from reconciler.plan.cluster import (
    GpuSlot,
    PoolView,
)
from reconciler.plan.demand import (
    card_slice_mib,
    describe,
    gib,
    record_wait,
    slice_memory_fits,
    slice_need_mib,
)
from reconciler.plan.evictions import evict, stop_refusal, victim_classes, victims_for
from reconciler.plan.partition import partition_for
from reconciler.plan.partition.policy import inference_shape, policy_slices, policy_strategy
from reconciler.plan.run import BUDGET, PLACEMENT_POLICY, SHORTLIST, UNMETERED, Demand, Run


def _place_inference(run: Run, pv: PoolView, p: Demand) -> bool:
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
        fits = _memory_rule(run, pv, p)
        g = _choose_shared(run, pv, r.shared_slices, lambda g: fits(g.target_slices))
        if g is None:
            return False
        pv.take_slices(g, r.shared_slices, p.key)
        return True
    return False


def _memory_rule(run: Run, pv: PoolView, p: Demand) -> Callable[[int], bool]:
    """Whether `p` may be placed on a card shared x`slices`: where gpupool decides where `p`
    runs, only if each slice of the card has the memory `p` needs per slice
    (`slice_memory_fits`: time-slicing isolates no memory, so more would over-commit the
    card; under MPS the pod would fail to allocate). A pending pod without gpupool's gate is
    placed by kube-scheduler on any free slices, so the plan counts it where it can land
    (not doing so made a new card it did not use, given back next cycle: a loop). Replicas a
    scale-up adds are gated unless their namespace is known not to be."""
    if p.origin == "pending pod":
        judged = p.gated
    else:
        gated = run.observed.gated_namespaces
        judged = gated is None or p.namespace in gated
    if not judged:
        return lambda slices: True
    return lambda slices: slice_memory_fits(pv, p.request, slices)


def _choose_shared(
    run: Run, pv: PoolView, k: int, fits: Callable[[GpuSlot], bool]
) -> GpuSlot | None:
    """A shared card with k free slices that `fits` the demand, chosen by the shared
    placement policy: each card's free slices are its free milli (slices x 1000 /
    slicesPerGPU), as the simulator models GPU sharing."""
    # shortlist: the tightest fits first, like kube-scheduler scoring a sample of nodes
    ranked: list[str] = []
    for bucket in pv.shared_buckets()[k:]:
        for g in bucket:
            if g.free_slices >= k and g.node not in ranked and fits(g):
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
                [min(g.free_slices, slices) * 1000 // slices if fits(g) else 0 for g in slots],
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
    """How many more cards inference may take in this pool. Cards of an unavailable node
    (failed: its replicas are replaced elsewhere at once) do not count against maxGPUs; once
    the node is back, drift returns what is over the cap to whole cards."""
    spec = pv.pool.spec
    now_inf = len(pv.inference_slots())
    whole = len(pv.gpus) - now_inf
    live_inf = sum(1 for g in pv.inference_slots() if not g.fenced)
    by_max = (
        (spec.inference.max_gpus - live_inf)
        if spec.inference.max_gpus is not None
        else len(pv.gpus)
    )
    return max(0, min(by_max, whole - spec.training.min_gpus))


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
    run: Run, pv: PoolView, n: int, preemptor: Demand | None, why: str
) -> list[GpuSlot]:
    """Up to n whole cards to repartition: empty ones first, then, for a preemptor, by
    stopping the cheapest victims the rules allow (within the budget)."""
    free = [g for g in pv.gpus if g.free_whole]
    if partition_for(run, pv).resets_node(pv):
        # a card turned to MIG resets every GPU of its node (Ampere): only cards of nodes with
        # nothing running; for a preemptor, a node whose work may all be preempted is drained
        chosen = _drained_first(
            pv, [g for g in free if not partition_for(run, pv).reset_blocked(pv, g, "mig")]
        )[:n]
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
    classes = victim_classes(run, preemptor.priority_class, preemptor.borrow_from)
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
    for c in victims_for(run, workloads, preemptor, pv.name, classes, n - len(chosen)):
        if len(chosen) >= n:
            break
        w = run.cluster.workloads[c.key]
        refused = stop_refusal(run, w)
        if refused:
            run.blocked[preemptor.key] = refused
            break
        slots = [
            run.cluster.slot[(m.node, a.gpu)]
            for m in run.gang(w)
            for a in m.allocations
            if (m.node, a.gpu) in run.cluster.slot
        ]
        evict(
            run,
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


def serve_inference(run: Run, pv: PoolView, pending: list[Demand]) -> None:
    """Pending inference onto free MIG instances / shared slices; for what is left, empty
    inference cards of the wrong shape are reshaped, then whole cards are taken (empty first,
    then freed by preemption) and whole nodes shared; what still does not fit waits."""
    if not pending:
        return
    unplaced = [p for p in pending if not _place_inference(run, pv, p)]
    if not unplaced:
        return
    wants, shared_need = _new_cards(pv, unplaced)
    top = unplaced[0]  # highest priority first (admission sorted them)
    demand = ", ".join(describe(p) for p in unplaced[:3]) + (" ..." if len(unplaced) > 3 else "")
    why = (
        f"{len(unplaced)} inference request(s) wait with no free MIG/shared capacity "
        f"in {pv.name} ({demand})"
    )
    reason = f"pending inference ({demand})"
    rules = [_memory_rule(run, pv, p) for p in unplaced if p.request.shared_slices]
    shared_need = _reshape_idle(
        run, pv, wants, shared_need, reason, lambda slices: all(f(slices) for f in rules)
    )
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
            partition_for(run, pv).reshape(run, g, pv, mode, layout, why=reason)
    if shared_need > 0:
        _share_nodes(run, pv, shared_need, top, why, reason)
    for p in unplaced:
        if not _place_inference(run, pv, p):
            run.inference_waits.add(pv.name)
            blocked = run.blocked.get(p.key) or run.blocked.get(top.key)
            blocked = "; ".join(x for x in (_closed_by_memory(run, pv, p), blocked) if x)
            record_wait(
                run,
                p,
                "waits",
                f"{p.origin} ({describe(p)}) stays pending: no capacity in {pv.name} "
                + (f"this cycle: {blocked}" if blocked else "this cycle"),
                "warning",
            )


def _closed_by_memory(run: Run, pv: PoolView, p: Demand) -> str:
    """Why free slices enough for `p` are not its: their slices have less memory than it
    needs a slice ('' when there are none)."""
    r = p.request
    if not r.shared_slices:
        return ""
    fits = _memory_rule(run, pv, p)
    # the cards with enough free slices are those `shared_buckets` files at that count or more
    # (the index `_choose_shared` places by); in card order, so a node's last card decides
    cards = sorted(
        (
            g
            for bucket in pv.shared_buckets()[r.shared_slices :]
            for g in bucket
            if g.free_slices >= r.shared_slices and not fits(g.target_slices)
        ),
        key=lambda g: (g.node, g.index),
    )
    closed = {g.node: g.target_slices for g in cards}
    if not closed:
        return ""
    where = ", ".join(
        f"{node} (x{n}: {gib(card_slice_mib(pv, n))} a slice)" for node, n in sorted(closed.items())
    )
    need = gib(Fraction(slice_need_mib(pv, r), r.shared_slices))
    cost = (
        "MPS would cap it at that"
        if policy_strategy(pv) == "mps"
        else "time-slicing does not isolate memory"
    )
    return (
        f"the free slices of {where} have less GPU memory than the {need} a slice it needs "
        f"({cost}): closed to it until re-shared"
    )


def _new_cards(
    pv: PoolView, unplaced: list[Demand]
) -> tuple[list[tuple[str, tuple[str, ...]]], int]:
    """The new MIG cards (mode, layout) the unplaced demand needs, and how many new shared
    cards (first-fit decreasing)."""
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
    return wants, shared_need


def _reshape_idle(
    run: Run,
    pv: PoolView,
    wants: list[tuple[str, tuple[str, ...]]],
    shared_need: int,
    reason: str,
    fits: Callable[[int], bool],
) -> int:
    """Empty inference cards of the wrong shape are reshaped first (another offered layout, a
    shared card to MIG, a MIG card of a shared node to shared): the number of inference
    cards stays, whole cards stay for training. A MIG card joins its node's slice count only
    where that count `fits` the waiting shared demand's memory (a node still shared with a
    count the policy dropped may not). Takes what it covers off `wants`; returns the shared
    cards still needed."""
    part = partition_for(run, pv)
    for g in _drained_first(pv, _reshapable(pv)):
        if g.converted:
            continue
        if wants:
            mode, layout = wants[0]
            if part.reshape(run, g, pv, mode, layout, why=reason):
                wants.pop(0)
        elif (
            shared_need
            and g.target_mode == "mig"
            and part.node_slices(pv, g.node)
            and fits(part.node_slices(pv, g.node))
        ):
            shared_need -= len(part.reshape(run, g, pv, "shared", why=reason))
    return shared_need


def _share_nodes(
    run: Run, pv: PoolView, need: int, top: Demand | None, why: str, reason: str
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
            plain = partition_for(run, pv).sharing_unit(pv, node)
            if partition_for(run, pv).node_slices(pv, node) or not plain or len(plain) > budget:
                continue
            if len(plain) < len(pv.by_node()[node]) and not partition_for(
                run, pv
            ).shares_beside_mig(pv):
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
        cards = len(partition_for(run, pv).sharing_unit(pv, node))
        if not partition_for(run, pv).share(run, pv, node, policy_slices(pv), reason):
            break  # pragma: no cover - the node was checked free
        made += cards
    return made


def _preempt_node(
    run: Run, pv: PoolView, nodes: list[str], p: Demand, why: str, every_card: bool = False
) -> str | None:
    """The node among `nodes` whose plain cards' holders (every card's with `every_card`)
    the rules let `p` preempt, all of them, at the least cost (priority, evictions, GPU-time
    lost), within the budget; the holders are preempted. None when there is none."""
    classes = victim_classes(run, p.priority_class, p.borrow_from)
    options = []
    for node in nodes:
        slots = pv.by_node()[node] if every_card else partition_for(run, pv).sharing_unit(pv, node)
        holders = sorted({h for g in slots for h in g.holders})
        work = [run.cluster.workloads[h] for h in holders if h in run.cluster.workloads]
        if len(work) != len(holders):
            continue
        cands = victims_for(run, work, p, pv.name, classes, len(slots))
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
        evict(
            run,
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


def keep_warm_minimum(run: Run, pv: PoolView) -> None:
    """Warm inference cards come from empty whole cards only: nothing is stopped for
    capacity no one asked for yet."""
    inf = pv.pool.spec.inference
    have = len(pv.inference_slots())
    short = inf.min_gpus - have
    if short <= 0 or pv.model is None:
        return
    mode, layout = inference_shape(pv)
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
        made = sum(
            len(partition_for(run, pv).reshape(run, g, pv, mode, layout, why=why)) for g in cards
        )
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
