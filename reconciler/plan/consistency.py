"""What the cluster says that cannot all be true, and one order for everything it says.

A live cluster drifts and races: a pod's record names a MIG instance the card no longer has
(the card was repartitioned under it), two pods hold one whole card, a shared card holds more
slices than it now offers (its slice count was lowered), a pod runs on a node or card the
snapshot does not have. That is not bad input (nothing refuses it at load time, see
`reconciler/observe/model.py`): the planner must plan safely around it, never crash on it.

`check` finds it. Each problem is a warning `Finding` with a stable code that says what
gpupool does about it:

- the allocation is ignored (`ignored_allocations`): the workload still counts as running,
  so its team's usage holds, but no card is thought to be held by that allocation;
- a card whose holders disagree with it is suspect (`suspect_cards`, card -> why): the planner
  places nothing on it, never repartitions it and never counts it as free, until the cluster
  agrees with itself again;
- a running workload whose cards are not (all) known (`allocation-unknown`: its node's agent
  publishes no allocation for it, or fewer than it asks for) may hold any card of its node
  with room for what is missing: every such card is suspect, and the working view counts the
  workload as holding them (`reconciler.plan.cluster.unknown_holdings`);
- a card a DRA ResourceClaim is still allocated on after its pods are gone
  (`dra-claim-unreleased`: the pod ended or was deleted, and Kubernetes has not deallocated
  the claim yet) is suspect: Kubernetes' allocator counts the device as taken until then.

A service or ResourceQuota listed twice (`duplicate-object`: the API server has one object per
name, so a snapshot with two is a broken file or a forged one) is reported too, and
`first_listings` keeps its first listing only, so every step of the planner sees the same one.

`canonical` sorts every list of a snapshot by a total key, so no result of the planner can
depend on the order in which an adapter or a file listed things.

Pure: no I/O, no clock; it never raises on any `ObservedState`, validated or not.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from pydantic import BaseModel

from reconciler.conventions import PRODUCT_LABEL
from reconciler.observe.dra_holdings import unreleased_claims
from reconciler.observe.model import (
    Allocation,
    Gpu,
    InferenceService,
    Node,
    ObservedState,
    QuotaObject,
    Request,
    Workload,
    card_model,
    card_problems,
)
from reconciler.plan.cluster import UNKNOWN_HOLDER, UnknownHolding, unknown_holdings
from reconciler.plan.kept import Keeper, fresh, shared_ends
from reconciler.plan.model import Finding
from reconciler.policy.catalog import GpuModel
from reconciler.policy.state import DesiredState

Card = tuple[str, int]
"""(node name, GPU index)."""

CODES = (
    "duplicate-node",
    "duplicate-gpu",
    "duplicate-workload",
    "mig-overlap",
    "unknown-node",
    "unknown-gpu",
    "unknown-mig-instance",
    "mig-instance-shared",
    "whole-card-shared",
    "shared-overfull",
    "wrong-card-mode",
    "allocation-unknown",
    "dra-claim-unreleased",
    "duplicate-object",
)
"""Every finding code `check` can emit."""


@dataclass(frozen=True)
class Consistency:
    findings: tuple[Finding, ...] = ()
    """One warning per problem, sorted (subject, code, message)."""
    suspect_cards: Mapping[Card, str] = field(default_factory=dict)
    """Cards whose holders disagree with the card -> why, in a few words. Nothing is placed
    on them, they are never repartitioned and never counted as free."""
    ignored_allocations: frozenset[tuple[str, int]] = frozenset()
    """(workload key, position in its `allocations`) the planner must not count: on an
    unknown node or card, or on a suspect card. Positions refer to the `ObservedState` given
    to `check` (plan with `canonical(observed)` and check that same object)."""

    def usable(self, w: Workload) -> list[Allocation]:
        """`w`'s allocations that the planner may count as holding a card."""
        return [
            a for i, a in enumerate(w.allocations) if (w.key, i) not in self.ignored_allocations
        ]


FENCED = (
    "gpupool fences the card: places nothing there, never repartitions it and does not count "
    "it as free until the cluster agrees with itself"
)


def card_key(card: Card) -> str:
    """How findings name a card (the planner's `GpuSlot.key`)."""
    return f"{card[0]}/gpu{card[1]}"


# --------------------------------------------------------------------------- check


@dataclass
class _Checker:
    desired: DesiredState
    findings: list[Finding] = field(default_factory=list)
    suspect: dict[Card, str] = field(default_factory=dict)
    ignored: set[tuple[str, int]] = field(default_factory=set)

    def warn(self, code: str, subject: str, message: str) -> None:
        self.findings.append(
            Finding(severity="warning", code=code, subject=subject, message=message)
        )

    def fence(self, card: Card, why: str) -> None:
        self.suspect.setdefault(card, why)


def check(
    desired: DesiredState,
    observed: ObservedState,
    keep: Keeper | None = None,
    unknown: list[UnknownHolding] | None = None,
    groups: Mapping[str, tuple[Workload, ...]] | None = None,
    stopping: Collection[str] = (),
) -> Consistency:
    """Every contradiction between the snapshot's cards and what its workloads hold.

    What one node's cards and the workloads that hold them say (`_judge_node`) is asked of
    `keep` per node, which may answer from a kept view (`reconciler.plan.kept`); `groups` is
    `holding_groups(observed)`, `unknown` is `unknown_holdings(observed)` (given when the
    caller has them). A snapshot that lists a node or a workload twice (no validated one
    does) is judged as a whole, without `keep`. `stopping`: the keys of the pods terminating,
    left out of `observed` (`planner.open_run`): a DRA claim still reserved for one of them is
    that pod's, not unreleased (the plan may give its cards to the next holder, whose Admit
    waits for the claim: `Admit.after_claims`)."""
    keep = keep or fresh()
    c = _Checker(desired)
    if groups is None:
        groups = holding_groups(observed)
    if groups is None:  # a node or workload listed twice
        cards, nodes = _cards(c, observed.nodes)
        running = _workloads(c, observed.workloads)
        holders = _holdings(c, running, cards, nodes)
        _judge_cards(c, cards, holders)
        held_on = {card: tuple((w.key, i) for w, i, _ in held) for card, held in holders.items()}
    else:
        cards, held_on = _judge_nodes(c, observed, keep, groups)
    _judge_unknown(c, unknown_holdings(observed) if unknown is None else unknown)
    _judge_unreleased(c, observed, cards, stopping)
    _judge_duplicates(c, observed)
    # an allocation on a card found suspect is not counted either
    for card in c.suspect:
        c.ignored.update(held_on.get(card, ()))
    return Consistency(
        findings=tuple(sorted(c.findings, key=lambda f: (f.subject, f.code, f.message))),
        suspect_cards=dict(sorted(c.suspect.items())),
        ignored_allocations=frozenset(c.ignored),
    )


def holding_groups(
    observed: ObservedState, rest: list[Workload] | None = None, keep: Keeper | None = None
) -> dict[str, tuple[Workload, ...]] | None:
    """Node name -> the workloads that hold something on it (running, or admitted and not
    bound yet, with allocations), in the snapshot's order; '' for those with no node. None
    when a node or a workload is listed twice: what is judged then is not one node's alone.
    `rest`, when given, gets the other workloads (those that hold nothing), in order.
    `keep` (with `rest`): made from the previous plan's when only workloads that hold nothing
    came or went (`_groups_spliced`), and kept for the next."""
    if keep is not None and rest is not None:
        spliced = _groups_spliced(observed, keep)
        if spliced is not None:
            rest.extend(spliced[1])
            return spliced[0]
    names: set[str] = set()
    for n in observed.nodes:
        if n.name in names:
            return None
        names.add(n.name)
    keys: set[str] = set()
    out: dict[str, list[Workload]] = {}
    mine: list[Workload] = []
    for w in observed.workloads:
        k = w.key
        if k in keys:
            return None
        keys.add(k)
        if _holds(w):
            out.setdefault(w.node or "", []).append(w)
        else:
            mine.append(w)
    groups = {n: tuple(ws) for n, ws in out.items()}
    if rest is not None:
        rest.extend(mine)
        if keep is not None:
            _keep_groups(keep, observed, names, keys, groups, tuple(mine))
    return groups


GROUPS = "holding-groups"


def _keep_groups(
    keep: Keeper,
    observed: ObservedState,
    names: set[str],
    keys: set[str],
    groups: dict[str, tuple[Workload, ...]],
    rest: tuple[Workload, ...],
) -> None:
    at = {id(w): i for i, w in enumerate(rest)}
    keep.keep_last(GROUPS, observed.workloads, (observed.nodes, names, keys, groups, rest, at))


def _renamed(have: set[str], gone: list[str], came: list[str]) -> set[str] | None:
    """`have` less `gone`, with `came` added: a new set; None when one of `came` is in it
    already (listed twice)."""
    out = have - set(gone)
    for x in came:
        if x in out:
            return None
        out.add(x)
    return out


def _groups_spliced(
    observed: ObservedState, keep: Keeper
) -> tuple[dict[str, tuple[Workload, ...]], tuple[Workload, ...]] | None:
    """`holding_groups` and its `rest` from the previous plan's, when the workloads that
    changed (the previous list's and this one's between their shared ends: `shared_ends`)
    hold nothing, before and after, and no name or key comes twice: the groups are the same,
    and `rest` is the previous one with those workloads (one run in it) replaced. None when
    that cannot be told so (the whole pass says)."""
    last = keep.last(GROUPS)
    if last is None:
        return None
    old_ws, (old_nodes, names, keys, groups, old_rest, at) = last
    ws = observed.workloads
    i, j = shared_ends(old_ws, ws)
    gone, came = old_ws[i : len(old_ws) - j], ws[i : len(ws) - j]
    nodes = observed.nodes
    ni, nj = shared_ends(old_nodes, nodes)
    ngone, ncame = old_nodes[ni : len(old_nodes) - nj], nodes[ni : len(nodes) - nj]
    if len(gone) + len(came) + len(ngone) + len(ncame) > SPLICE_MAX:
        return None
    if any(_holds(w) for w in gone) or any(_holds(w) for w in came):
        return None
    if ngone or ncame:
        names = _renamed(names, [n.name for n in ngone], [n.name for n in ncame])
    if gone or came:
        keys = _renamed(keys, [w.key for w in gone], [w.key for w in came])
    if names is None or keys is None:
        return None  # a name or key listed twice
    if gone:
        start = at[id(gone[0])]  # the previous list (kept) holds it: its id is its own
    else:  # after the last workload before them that holds nothing
        k = i - 1
        while k >= 0 and _holds(ws[k]):
            k -= 1
        start = at[id(ws[k])] + 1 if k >= 0 else 0
    rest = old_rest[:start] + tuple(came) + old_rest[start + len(gone) :]
    _keep_groups(keep, observed, names, keys, groups, rest)
    return groups, rest


def _judge_nodes(
    c: _Checker, observed: ObservedState, keep: Keeper, groups: Mapping[str, tuple[Workload, ...]]
) -> tuple[dict[Card, Gpu], dict[Card, tuple[tuple[str, int], ...]]]:
    """`_judge_node` per node (each node once: `holding_groups` said so), then the workloads
    on no node of the snapshot; the cards, and what holds each card (key, position)."""
    cards: dict[Card, Gpu] = {}
    held_on: dict[Card, tuple[tuple[str, int], ...]] = {}
    names: set[str] = set()
    for n in observed.nodes:
        names.add(n.name)
        ws = groups.get(n.name, ())
        part = keep.group("check-node", lambda n=n, ws=ws: _judge_node(c.desired, n, ws), n, ws)
        cards.update(part.cards)
        held_on.update(part.held_on)
        c.findings.extend(part.findings)
        c.ignored.update(part.ignored)
        for card, why in part.fences:
            c.fence(card, why)
    strays = [w for node, ws in groups.items() if node not in names for w in ws]
    _holdings(c, strays, {}, names)
    return cards, held_on


@dataclass(frozen=True)
class _NodeJudged:
    """What one node's cards and the workloads holding them say: its cards, findings,
    fences (in the order found: a card keeps the first reason it was fenced for), the
    allocations not counted, and what holds each card (workload key, position)."""

    cards: tuple[tuple[Card, Gpu], ...]
    findings: tuple[Finding, ...]
    fences: tuple[tuple[Card, str], ...]
    ignored: tuple[tuple[str, int], ...]
    held_on: tuple[tuple[Card, tuple[tuple[str, int], ...]], ...]


def _judge_node(desired: DesiredState, n: Node, ws: tuple[Workload, ...]) -> _NodeJudged:
    """`n` judged with the workloads on it, as `check` judges a snapshot of that node alone."""
    c = _Checker(desired)
    cards, names = _cards(c, (n,))
    holders = _holdings(c, list(ws), cards, names)
    _judge_cards(c, cards, holders)
    return _NodeJudged(
        tuple(cards.items()),
        tuple(c.findings),
        tuple(c.suspect.items()),
        tuple(sorted(c.ignored)),
        tuple((card, tuple((w.key, i) for w, i, _ in held)) for card, held in holders.items()),
    )


def _cards(c: _Checker, nodes: Iterable[Node]) -> tuple[dict[Card, Gpu], set[str]]:
    """(node, index) -> its card, and the names of the nodes; a node or card listed twice is
    fenced (a validated snapshot has none: this guards states built without validation)."""
    out: dict[Card, Gpu] = {}
    names: set[str] = set()
    models: dict[tuple[str, str], GpuModel | None] = {}
    for n in nodes:
        if n.name in names:
            c.warn(
                "duplicate-node",
                n.name,
                "the node is listed twice; gpupool fences every card of it "
                "(places nothing there, repartitions nothing)",
            )
            for g in n.gpus:
                c.fence((n.name, g.index), "its node is listed twice")
            continue
        names.add(n.name)
        _judge_sharing(c, n)
        for g in n.gpus:
            card = (n.name, g.index)
            if card in out:
                c.warn(
                    "duplicate-gpu",
                    card_key(card),
                    f"GPU index {g.index} is listed twice on {n.name}; gpupool fences it",
                )
                c.fence(card, "its index is listed twice")
                continue
            out[card] = g
            if not g.mig_instances:
                continue
            which = (g.model, n.labels.get(PRODUCT_LABEL, ""))
            if which not in models:
                models[which] = card_model(g, n, c.desired.catalog)
            problems = card_problems(g, models[which])
            if problems:
                c.warn(
                    "mig-overlap",
                    card_key(card),
                    "its MIG instances cannot all exist ("
                    + "; ".join(m for _, m in problems)
                    + "); gpupool fences the card: places nothing there and never "
                    "repartitions it until its agent reports a possible layout",
                )
                c.fence(card, "its MIG instances collide")
    return out, names


def _judge_sharing(c: _Checker, n: Node) -> None:
    """The device plugin shares per node: every card of a node not in MIG mode is whole, or
    all are shared with one slice count (NVIDIA/k8s-device-plugin ignores a `devices` list,
    api/config/v1/replicas.go). A node reported otherwise is not what the plugin advertises:
    its plain cards are fenced until its state reads right."""
    plain = {g.shared_slices or 0 for g in n.gpus if not g.mig_enabled}
    if len(plain) <= 1:
        return
    counts = ", ".join("whole" if k == 0 else f"shared x{k}" for k in sorted(plain))
    c.warn(
        "partial-sharing",
        n.name,
        f"its cards not in MIG mode are reported {counts}; the device plugin shares all of a "
        "node's cards or none, with one count. gpupool fences them (places nothing there, "
        "repartitions nothing) until the node reports one sharing",
    )
    for g in n.gpus:
        if not g.mig_enabled:
            c.fence((n.name, g.index), "its node's sharing is reported per card")


def _workloads(c: _Checker, workloads: Iterable[Workload]) -> list[Workload]:
    """Workloads that hold something (running, or admitted and not bound yet: the cards meant
    for them are theirs), each key once: the last listing, as the planner's working view keeps
    it (a validated snapshot lists each key once)."""
    last: dict[str, Workload] = {}
    for w in workloads:
        if w.key in last:
            c.warn(
                "duplicate-workload",
                w.key,
                "the workload is listed twice; gpupool counts one listing only",
            )
        last[w.key] = w
    return [w for w in last.values() if _holds(w)]


def _holds(w: Workload) -> bool:
    """`w` holds something: running, or admitted and not bound yet, with allocations."""
    return (w.phase == "Running" or w.admission == "admitted") and bool(w.allocations)


def _holdings(
    c: _Checker, running: list[Workload], cards: dict[Card, Gpu], nodes: set[str]
) -> dict[Card, list[tuple[Workload, int, Allocation]]]:
    """Card -> (workload, position, allocation) of what claims it; allocations on nodes or
    cards the snapshot lacks are ignored, with one finding per workload and cause."""
    held: dict[Card, list[tuple[Workload, int, Allocation]]] = {}
    for w in running:
        if not w.node or w.node not in nodes:
            c.ignored.update((w.key, i) for i in range(len(w.allocations)))
            where = f"node {w.node}, which is not in the snapshot" if w.node else "no node"
            c.warn(
                "unknown-node",
                w.key,
                f"runs on {where}; gpupool ignores its {len(w.allocations)} allocation(s) "
                "and still counts it as running (its team's usage holds)",
            )
            continue
        missing = []
        for i, a in enumerate(w.allocations):
            card = (w.node, a.gpu)
            if card not in cards:
                if card not in c.suspect:
                    missing.append(a.gpu)
                c.ignored.add((w.key, i))
                continue
            held.setdefault(card, []).append((w, i, a))
        if missing:
            have = sorted(idx for node, idx in cards if node == w.node)
            listing = ", ".join(map(str, have)) if have else "none"
            c.warn(
                "unknown-gpu",
                w.key,
                f"holds GPU {', '.join(map(str, sorted(set(missing))))} on {w.node}, which has "
                f"no such GPU (its GPUs: {listing}); gpupool ignores that allocation and still "
                "counts the workload as running",
            )
    return held


def _judge_unknown(c: _Checker, unknown: list[UnknownHolding]) -> None:
    """Running workloads whose cards are not all known: every card they may hold is fenced."""
    for u in unknown:
        listing = ", ".join(card_key(card) for card in u.cards)
        where = (
            f"fences the cards of {u.node} it may hold ({listing}): places nothing there and "
            "repartitions none of them"
            if u.cards
            else f"finds no card of {u.node} with room for it, so the node's cards disagree "
            "with its pods"
        )
        c.warn(
            "allocation-unknown",
            u.workload,
            f"runs on {u.node}, but which cards it holds is unknown: its node's agent publishes "
            f"no allocation for {' and '.join(u.missing)} it asks for. gpupool counts it as "
            f"holding them and {where}, until the agent publishes what it holds",
        )
        for card in u.cards:
            c.fence(card, UNKNOWN_HOLDER)


CLAIM_HOLDER = "a DRA claim no running pod uses still holds a device of it"


def _judge_unreleased(
    c: _Checker, observed: ObservedState, cards: dict[Card, Gpu], stopping: Collection[str]
) -> None:
    """Allocated ResourceClaims whose pods are gone (ended, deleted, or none reserved) or
    still behind gpupool's gate (an allocation `spec.dra.admission: allocate` wrote with its
    reservation, and the gate stayed: the claim is taken back when the pod is admitted): the
    allocator counts their devices as taken until Kubernetes deallocates the claim, so the
    cards they are on are fenced (not free, not drift to repartition) until then. A claim
    reserved for a pod of `stopping` (terminating) is not one of them: its cards are the
    stopping pod's (`Run.stopping`)."""
    if observed.dra is None or not observed.dra.claims:
        return  # no claim (no DRA pool): no pass over the workloads
    keys = [*(w.key for w in observed.workloads), *stopping]
    placed = [w.key for w in observed.workloads if w.node]
    gated = [w.key for w in observed.workloads if w.admission == "gpupool" and not w.node]
    for u in unreleased_claims(observed.dra, observed.nodes, keys, placed, gated):
        held = sorted({(u.node, a.gpu) for a in u.cards} & cards.keys())
        if not held:
            continue
        pods = (
            f"reserved for {', '.join(u.reserved_for)}, none of them a pod gpupool counts as "
            "running (ended, deleted, terminating, still behind gpupool's gate, or asking "
            "through another DeviceClass)"
            if u.reserved_for
            else "reserved for no pod"
        )
        c.warn(
            "dra-claim-unreleased",
            f"ResourceClaim {u.claim}",
            f"is still allocated devices on {', '.join(card_key(k) for k in held)} but is "
            f"{pods}: Kubernetes has not deallocated it yet, and its allocator counts them as "
            "taken until it does. gpupool counts the cards as held: places nothing there and "
            "repartitions none of them until the claim is released",
        )
        for card in held:
            c.fence(card, CLAIM_HOLDER)


def _service_id(s: InferenceService) -> tuple[str, str]:
    return (s.kind, s.key)


def _quota_id(q: QuotaObject) -> tuple[str, str]:
    return ("ResourceQuota", f"{q.namespace}/{q.name}")


def _judge_duplicates(c: _Checker, observed: ObservedState) -> None:
    """A service or quota listed twice: one finding each, whatever the listings say."""
    for items, ident, what in (
        (observed.services, _service_id, "the inference service"),
        (observed.quotas, _quota_id, "the ResourceQuota"),
    ):
        seen: dict[tuple[str, str], int] = {}
        for x in items:
            k = ident(x)
            seen[k] = seen.get(k, 0) + 1
        for (kind, key), n in seen.items():
            if n > 1:
                c.warn(
                    "duplicate-object",
                    f"{kind} {key}",
                    f"{what} is listed {n} times; the API server has one object per name, so "
                    "the snapshot is broken or forged. gpupool plans with its first listing "
                    "(in the snapshot's canonical order) and ignores the others",
                )


def first_listings(observed: ObservedState) -> ObservedState:
    """`observed` with the first listing only of each service (kind, namespace, name) and
    ResourceQuota (namespace, name), the others dropped (`duplicate-object`); `observed` itself
    when nothing is listed twice. After `canonical`, the first is the same whatever the order
    the snapshot listed them in."""
    fields: dict[str, list] = {}
    for name, items, ident in (
        ("services", observed.services, _service_id),
        ("quotas", observed.quotas, _quota_id),
    ):
        seen: set[tuple[str, str]] = set()
        kept = []
        for x in items:
            if ident(x) not in seen:
                seen.add(ident(x))
                kept.append(x)
        if len(kept) != len(items):
            fields[name] = kept
    return observed.model_copy(update=fields) if fields else observed


def _kind(a: Allocation) -> str:
    if a.mig_start is not None:
        return "mig"
    if a.slices:
        return "shared"
    return "whole"


def _judge_cards(
    c: _Checker,
    cards: dict[Card, Gpu],
    holders: dict[Card, list[tuple[Workload, int, Allocation]]],
) -> None:
    for card, held in holders.items():  # findings are sorted at the end
        if card in c.suspect:
            continue
        gpu = cards[card]
        mode = gpu.mode
        if mode == "whole" and len(held) == 1 and _kind(held[0][2]) == "whole":
            continue  # the common case: one job on its card
        subject = card_key(card)
        if mode != "mig" and any(_kind(a) == "mig" for _, _, a in held):
            keys = sorted({w.key for w, _, a in held if _kind(a) == "mig"})
            c.warn(
                "unknown-mig-instance",
                subject,
                f"{', '.join(keys)} hold(s) a MIG instance on it, but the card is {mode} "
                "(MIG is off): it was repartitioned under them, or their record is stale; "
                + FENCED,
            )
            c.fence(card, f"pods hold MIG instances on a {mode} card")
            continue
        wrong = sorted({w.key for w, _, a in held if _kind(a) not in (mode, "mig")})
        if wrong:
            kinds = sorted({_kind(a) for w, _, a in held if w.key in wrong})
            c.warn(
                "wrong-card-mode",
                subject,
                f"the card is {mode}, but {', '.join(wrong)} hold(s) it as "
                f"{' and '.join(kinds)}; {FENCED}",
            )
            c.fence(card, f"held as a {'/'.join(kinds)} card, but it is {mode}")
            continue
        if mode == "whole":
            keys = sorted({w.key for w, _, _ in held})
            if len(keys) > 1:
                waiting = sorted({w.key for w, _, _ in held if w.phase != "Running"})
                why = (
                    f" ({', '.join(waiting)} admitted here but not bound: the node has too few "
                    "free cards for it, so kube-scheduler binds it only once some free up)"
                    if waiting
                    else ""
                )
                c.warn(
                    "whole-card-shared",
                    subject,
                    f"{len(keys)} workloads hold this whole card ({', '.join(keys)}){why}; "
                    f"{FENCED}",
                )
                c.fence(card, f"a whole card held by {len(keys)} workloads")
        elif mode == "shared":
            used = sum(a.slices for _, _, a in held)
            offered = gpu.shared_slices or 0
            if used > offered:
                keys = sorted({w.key for w, _, _ in held})
                c.warn(
                    "shared-overfull",
                    subject,
                    f"{used} shared slices are held ({', '.join(keys)}) but the card offers "
                    f"{offered}; {FENCED}",
                )
                c.fence(card, f"{used} of {offered} shared slices held")
        else:
            _judge_mig(c, card, gpu, held)


def _judge_mig(
    c: _Checker, card: Card, gpu: Gpu, held: list[tuple[Workload, int, Allocation]]
) -> None:
    subject = card_key(card)
    instances = {i.start: i.profile for i in gpu.mig_instances} if gpu.mig_enabled else {}
    by_start: dict[int, set[str]] = {}
    unknown: list[str] = []
    for w, _, a in held:
        start = a.mig_start
        if start is None:  # pragma: no cover - `wrong-card-mode` judged those
            continue
        profile = instances.get(start)
        if profile is None or (a.mig_profile and a.mig_profile != profile):
            there = f"a {profile} instance" if profile else "no instance"
            what = f"{a.mig_profile} " if a.mig_profile else ""
            unknown.append(f"{w.key} holds the {what}instance at slice {start} ({there} there)")
            continue
        by_start.setdefault(start, set()).add(w.key)
    if unknown:
        c.warn(
            "unknown-mig-instance",
            subject,
            f"{'; '.join(unknown)}: the card was repartitioned under its pods, or their "
            f"record is stale; {FENCED}",
        )
        c.fence(card, "a pod holds a MIG instance the card does not have")
        return
    shared = {s: keys for s, keys in by_start.items() if len(keys) > 1}
    if shared:
        parts = [
            f"{instances[s]} at slice {s} by {', '.join(sorted(keys))}"
            for s, keys in sorted(shared.items())
        ]
        c.warn(
            "mig-instance-shared",
            subject,
            f"one MIG instance is held by several workloads ({'; '.join(parts)}); {FENCED}",
        )
        c.fence(card, "a MIG instance held by several workloads")


# --------------------------------------------------------------------------- canonical

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")
K = TypeVar("K", str, int)


def _total(items: list[M], key: Callable[[M], tuple]) -> list[M]:
    """`items` sorted by `key`; items with equal keys (which a validated snapshot does not
    have) by their whole content, so that any input order gives the same list. The list
    itself when it is in that order already (copies are what canonical costs)."""
    return _total_unique(items, key)[0]


def _total_unique(items: list[M], key: Callable[[M], tuple]) -> tuple[list[M], bool]:
    """`_total`, and whether no two items have the same key."""
    if len(items) < 2:
        return items, True
    keys = [key(x) for x in items]
    if all(a < b for a, b in zip(keys, keys[1:], strict=False)):
        return items, True
    order = sorted(range(len(items)), key=keys.__getitem__)
    out = [items[i] for i in order]
    ks = [keys[i] for i in order]
    unique = True
    i = 0
    while i < len(out):
        j = i + 1
        while j < len(out) and ks[j] == ks[i]:
            j += 1
        if j - i > 1:
            unique = False
            out[i:j] = sorted(out[i:j], key=lambda m: m.model_dump_json())
        i = j
    return out, unique


def _each(items: list[M], fn: Callable[[M], M], key: Callable[[M], tuple]) -> list[M]:
    """`fn` on every item, then `_total`; the list itself when nothing changed."""
    return _each_unique(items, fn, key)[0]


def _each_unique(
    items: list[M], fn: Callable[[M], M], key: Callable[[M], tuple]
) -> tuple[list[M], bool]:
    mapped = [fn(x) for x in items]
    if all(a is b for a, b in zip(mapped, items, strict=True)):
        mapped = items
    return _total_unique(mapped, key)


SPLICE_MAX = 256
"""At most this many items changed (gone plus come) between two plans' lists: the canonical
list is the previous one with those taken out and put in (`_respliced`); more: made afresh."""


def _each_kept(
    keep: Keeper, step: str, items: list[M], fn: Callable[[M], M], key: Callable[[M], tuple]
) -> list[M]:
    """`_each(items, fn, key)`, from the previous plan's canonical list when `keep` has it
    and only a few items differ (a cycle woken by one event): the same list, at the cost of
    the items that changed instead of a pass over all (`_respliced`)."""
    whole = f"{step}-list"
    last = keep.last(whole)
    if last is not None and last[1][1]:
        old_in, (old_out, _) = last
        i, j = shared_ends(old_in, items)
        out = _respliced(old_in, old_out, items, i, j, fn, key)
        if out is not None:
            keep.keep_last(whole, items, (out, True), shared=i + j)
            return out
    out, unique = _each_unique(items, keep.each(step, fn), key)
    keep.keep_last(whole, items, (out, unique))
    return out


def _respliced(
    old_in: list[M],
    old_out: list[M],
    items: list[M],
    i: int,
    j: int,
    fn: Callable[[M], M],
    key: Callable[[M], tuple],
) -> list[M] | None:
    """The canonical list of `items` made from `old_out`, the canonical list (keys unique) of
    `old_in`, which shares its first `i` and last `j` items with `items`: the canonical forms
    of those are in `old_out` already (`fn` is a function of the object alone), so only the
    items between are taken out (found by key) and put in (canonical, by key). `items`
    itself when it is canonical (`old_in` was, and what came in is, in key order); None when
    more changed than `SPLICE_MAX`, or a key would be there twice (the whole path says how)."""
    gone = old_in[i : len(old_in) - j]
    came = items[i : len(items) - j]
    if len(gone) + len(came) > SPLICE_MAX:
        return None
    mapped = [fn(x) for x in came]
    if old_out is old_in and all(y is x for x, y in zip(came, mapped, strict=True)):
        ends = items[max(i - 1, 0) : len(items) - j + 1]
        ks = [key(x) for x in ends]
        if all(a < b for a, b in zip(ks, ks[1:], strict=False)):
            return items
    out = list(old_out)
    for x in gone:
        k = key(x)
        at = bisect_left(out, k, key=key)
        if at == len(out) or key(out[at]) != k:
            return None  # pragma: no cover - old_out holds every item of old_in, by key
        del out[at]
    for y in mapped:
        k = key(y)
        at = bisect_left(out, k, key=key)
        if at < len(out) and key(out[at]) == k:
            return None
        out.insert(at, y)
    return out


def _with(m: M, **fields: object) -> M:
    """`m` with `fields`; `m` itself when every value is the one it has."""
    changed = {k: v for k, v in fields.items() if v is not getattr(m, k)}
    return m.model_copy(update=changed) if changed else m


def _dict(d: dict[K, T]) -> dict[K, T]:
    if len(d) < 2:
        return d
    keys = list(d)
    return d if keys == sorted(keys) else {k: d[k] for k in sorted(keys)}


def _utc(t: datetime) -> tuple[datetime, str]:
    return (t if t.tzinfo else t.replace(tzinfo=UTC), t.isoformat())


def _request(r: Request) -> Request:
    return _with(r, mig=_dict(r.mig))


def _gpu(g: Gpu) -> Gpu:
    return _with(
        g,
        mig_instances=_total(g.mig_instances, lambda i: (i.start, i.profile, i.uuid)),
        processes=_total(g.processes, lambda p: (p.pid, p.used_memory_mib, p.name)),
        below_since=_dict(g.below_since),
    )


def _node(n: Node) -> Node:
    return _with(
        n,
        labels=_dict(n.labels),
        annotations=_dict(n.annotations),
        allocatable=_dict(n.allocatable),
        taints=_total(n.taints, lambda t: (t.key, t.effect, t.value)),
        gpus=_each(n.gpus, _gpu, lambda g: (g.index,)),
    )


def _allocation_key(a: Allocation) -> tuple:
    return (a.gpu, a.mig_start is not None, a.mig_start or 0, a.mig_profile or "", a.slices)


def _workload(w: Workload) -> Workload:
    return _with(w, request=_request(w.request), allocations=_total(w.allocations, _allocation_key))


def _service(s: InferenceService) -> InferenceService:
    return _with(
        s,
        replica_request=_request(s.replica_request),
        autoscalers=sorted(s.autoscalers, key=lambda a: (a.kind, a.name)),
    )


def _quota(q: QuotaObject) -> QuotaObject:
    return _with(q, hard=_dict(q.hard))


def _same(x: M) -> M:
    return x


def canonical(observed: ObservedState, keep: Keeper | None = None) -> ObservedState:
    """The same snapshot with every list sorted by a total key (nodes by name, cards by index,
    MIG instances by start, taints, workloads by key, allocations by (gpu, MIG start, slices),
    services, quotas, priority classes, preemption times, processes) and every mapping by
    key, so that a plan cannot depend on the order the cluster or a file listed things in.
    What is in that order already is shared with `observed`, not copied. `keep`: each node's,
    workload's and service's canonical form, answered from a kept view (`reconciler.plan.kept`)."""
    keep = keep or fresh()
    times = observed.recent_preemptions
    ordered_times = sorted(times, key=_utc)
    return _with(
        observed,
        nodes=_each_kept(keep, "canonical-node", observed.nodes, _node, _node_order),
        workloads=_each_kept(
            keep, "canonical-workload", observed.workloads, _workload, _workload_order
        ),
        services=_each_kept(keep, "canonical-service", observed.services, _service, _service_order),
        quotas=_each(observed.quotas, _quota, lambda q: (q.namespace, q.name)),
        priority_classes=_each(
            observed.priority_classes, _same, lambda p: (p.name, p.value, p.preemption_policy)
        ),
        recent_preemptions=times if ordered_times == times else ordered_times,
    )


def _node_order(n: Node) -> tuple:
    return (n.name,)


def _workload_order(w: Workload) -> tuple:
    return (w.key,)


def _service_order(s: InferenceService) -> tuple:
    return (s.key, s.kind)
