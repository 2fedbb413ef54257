"""The pod part of an observation made from what changed since the last one (issue 28 item 2).

`read_pods` is what `_observe` does with the pods: which hold or want cards (`pod_holdings`),
each as a `Workload` (`pod_workloads`), and the gangs' failed members (`failed_members`).
Made afresh that is a pass over every pod each cycle, even where the `WorkloadMemo` hands back
each unchanged pod's values. With a memo, `PodDelta` (kept in it) remembers the last
observation's pods and every result per pod, and redoes only what changed:

- which pods changed: the cache hands over the same object for a pod it has no new event for
  (the informer replaces an object on each event), so the pods are told apart by identity, a
  set difference over the objects' ids (the kept pods are held, so no id is reused);
- a changed, new or gone pod is read again (what it holds and wants, `_holding`; gpupool's
  state on it as believed, `_prepared`), and so is every pod of a node whose agent's
  publication (`published`) is another object than last time;
- the cards each pod holds depend on the other pods of one node only: those bound there
  (what they are known to hold; guesses in creation order) and those admitted to it. So pods
  are grouped by that node ("" for a pod neither bound nor admitted), and only the groups of
  changed pods, and of nodes whose `Node` is another object, are allocated again (`_allocated`
  in the order `pod_workloads` takes: bound first, then by creation);
- a pod's part of the owners (`owner_facts`) is read again where an owner's entry it reads
  changed (`_changed_refs`: the keys of `Owners` that differ from last time);
- the `Workload` list keeps `pod_workloads`' order (bound first, then by creation, namespace,
  name): changed pods are spliced in by that key (`bisect`), as the planner splices its
  canonical lists (reconciler/plan/consistency.py `_respliced`);
- what reading a pod reported unreadable is kept per pod and step and reported again.

- a node that came or went: its group, and the pods whose `admitted` annotation names it
  (whether that node exists decides what `believed` keeps);
- a pod handed over as another object of the same version (uid and resourceVersion, as the
  memo keys a pod: a relist) is taken for the kept one.

- DRA read (a `ClaimReader`: a pod asks for and holds cards through its ResourceClaims): a pod
  whose claims are other objects than last time (changed, came or went: the watch cache's
  `DraMemo` hands over the same model for an object without an event) is read again, and so
  are the pods bound to a node that changed and those not bound (their claims' node may be
  that one).

Any doubt makes the whole pass (a fresh `PodDelta`, as the first cycle): more than
`SPLICE_MAX` pods changed, DRA's device classes, claim templates or slices changed (what every
pod's request and cards are read with), DRA read now and not last time or the reverse, a pod
object or a (namespace, name) twice (then the plain functions, no `PodDelta`). The snapshot
equals the one made without any memo (tests/observe/test_pod_delta.py checks it over random
event sequences, with and without DRA)."""

from __future__ import annotations

from bisect import bisect_left
from typing import Any

from reconciler import conventions as C
from reconciler.observe.dra_holdings import ClaimReader
from reconciler.observe.kube_common import _UNREADABLE, _each, _identified, reported_again
from reconciler.observe.kube_owners import Owners
from reconciler.observe.kube_pods import (
    Holding,
    Prepared,
    _allocated,
    _holding,
    _made,
    _prepared,
    failed_members,
    is_failed,
    pod_holdings,
    pod_version,
    pod_workloads,
)
from reconciler.observe.model import Node, UnreadableObject, Workload

SPLICE_MAX = 512
"""Pods changed since the last observation (new, changed, gone) beyond which the whole pass is
made afresh: a relist, or a burst, where splicing would cost more."""

_ALL = object()
"""Every owner entry counts as changed (`_changed_refs`)."""
_BAD = ("*",)
"""The owner ref of a pod whose owner references do not read: its facts are read every cycle."""


class _Doubt(Exception):
    """The kept state cannot be followed: make the whole pass."""


def read_pods(
    raw_pods: Any,
    held: dict[str, dict | None],
    by_name: dict[str, Node],
    owners: Owners,
    claimed: Any = None,
    memo: Any = None,
) -> tuple[list[Workload], list[Workload]]:
    """(the GPU pods as `Workload`s, `pod_workloads`' order; the gangs' failed members,
    `failed_members`) of `raw_pods`, given what the agents publish the pods on their nodes hold
    (`held`), the nodes, the owners and (DRA) `claimed`. With a `WorkloadMemo`, through its
    `PodDelta`: only what changed since the memo's last observation is read again."""
    raw = list(raw_pods)
    if memo is None or (claimed is not None and not isinstance(claimed, ClaimReader)):
        if memo is not None:
            memo.delta = None
        gpu_pods, taken = pod_holdings(raw, held, claimed, memo)
        made = pod_workloads(gpu_pods, by_name, taken, owners, memo)
        return made, failed_members(raw, owners)
    kept, memo.delta = memo.delta, None  # a cycle that raises leaves none half made
    for delta in ([kept] if kept is not None else []) + [PodDelta()]:
        try:
            plan = delta.changes(raw, by_name, claimed)
        except _Doubt:
            continue
        out = delta.apply(plan, raw, held, by_name, owners, memo, claimed)
        memo.delta = delta
        return out
    gpu_pods, taken = pod_holdings(raw, held, claimed, memo)  # a pod twice: the plain pass
    return pod_workloads(gpu_pods, by_name, taken, owners, memo), failed_members(raw, owners)


def identified_pods(raw_pods: Any, memo: Any = None) -> list:
    """The pods of `raw_pods` that have a namespace and a name (`_identified`, which reports
    each other one), checking only those the memo's `PodDelta` does not hold already: a pod
    object it holds passed last cycle."""
    delta = getattr(memo, "delta", None)
    raw = list(raw_pods)
    if delta is None:
        return _identified("Pod", raw, namespaced=True)
    known = delta.ids
    unknown = [p for p in raw if id(p) not in known]
    if not unknown:
        return raw
    ok = {id(p) for p in _identified("Pod", unknown, namespaced=True)}
    if len(ok) == len(unknown):
        return raw
    left_out = {id(p) for p in unknown} - ok
    return [p for p in raw if id(p) not in left_out]


def _key(p: Any) -> tuple[str, str]:
    return p.metadata.namespace, p.metadata.name


def _node_of(p: Any) -> str | None:
    """The node the pod is bound to ("" none); None where its spec does not read."""
    try:
        return p.spec.node_name or ""
    except AttributeError:
        return None


def _admitted(p: Any) -> Any:
    """The node the pod's `admitted` annotation names, as `_prepared` reads it (whether it
    exists decides what `believed` keeps); None where none does, or it does not read."""
    try:
        admitted = (p.metadata.annotations or {}).get(C.ADMITTED_ANN)
    except (AttributeError, TypeError):
        return None
    return admitted if isinstance(admitted, str) else None


def _refs(prep: Prepared) -> tuple:
    """The entries of `Owners` that `owner_facts` reads for the pod (`_changed_refs`' keys)."""
    p = prep[1]
    try:
        ns = p.metadata.namespace
        owner = (p.metadata.owner_references or [None])[0]
        refs: list[tuple] = []
        if owner is not None:
            refs += [("j", ns, owner.name), ("s", ns, owner.kind, owner.name)]
        group = (p.metadata.labels or {}).get(C.POD_GROUP_LABEL)
        if group:
            refs.append(("s", ns, "PodGroup", group))
        sg = getattr(p.spec, "scheduling_group", None)
        name = getattr(sg, "pod_group_name", None) if sg is not None else None
        if isinstance(name, str):
            refs.append(("g", ns, name))
        hash(tuple(refs))
        return tuple(refs)
    except (AttributeError, TypeError, IndexError):
        return (_BAD,)


def _differ(a: dict, b: dict) -> set:
    """The keys whose values differ between `a` and `b` (present in one only included)."""
    if a == b:
        return set()
    return {k for k in a.keys() | b.keys() if k not in a or k not in b or a[k] != b[k]}


def _changed_refs(before: Owners | None, now: Owners) -> Any:
    """The owner entries (`_refs`' keys) that differ between two observations' owners; `_ALL`
    where everything counts as changed."""
    if before is None:
        return _ALL
    if before is now:
        return set()
    if (before.pod_groups is None) != (now.pod_groups is None):
        return _ALL
    refs: set[tuple] = {("s", *k) for k in _differ(before.sizes, now.sizes)}
    jobs = _differ(before.next_pod, now.next_pod) | _differ(before.queues, now.queues)
    jobs |= set(before.foreign_jobs) ^ set(now.foreign_jobs)
    refs |= {("j", *k) for k in jobs}
    if before.pod_groups is not None and now.pod_groups is not None:
        refs |= {("g", *k) for k in _differ(before.pod_groups.groups, now.pod_groups.groups)}
    return refs


def _reporting(stage: str, reports: dict[str, list], make: Any) -> Any:
    """`make()`, keeping what it reported unreadable under `stage` (not reported now: every
    kept report is reported once at the end of the cycle)."""
    found: list[UnreadableObject] = []
    token = _UNREADABLE.set(found)
    try:
        return make()
    finally:
        _UNREADABLE.reset(token)
        if found:
            reports[stage] = found
        else:
            reports.pop(stage, None)


class PodDelta:
    """The last observation's pods and what each read as (`read_pods`); kept in the
    `WorkloadMemo` (`WorkloadMemo.delta`)."""

    def __init__(self) -> None:
        self.live: dict[tuple, Any] = {}  # key -> the pod object
        self.ids: dict[int, tuple] = {}  # id(pod) -> key
        self.node_of: dict[tuple, str | None] = {}
        self.by_node: dict[str | None, set] = {}  # node -> keys of pods bound there
        self.admitted: dict[tuple, Any] = {}  # key -> the node its `admitted` names
        self.by_admitted: dict[Any, set] = {}
        self.failed: set[tuple] = set()
        self.held: dict[str, Any] = {}  # node -> the publication last read
        self.by_name: dict[str, Node] | None = None
        self.owners: Owners | None = None
        self.hold: dict[tuple, Holding] = {}  # GPU pods
        self.holders: dict[str, set] = {}  # node -> GPU pods bound there (what is taken)
        self.prep: dict[tuple, Prepared] = {}
        self.group: dict[tuple, str] = {}  # key -> the node its cards come from
        self.groups: dict[str, set] = {}
        self.sort: dict[tuple, tuple] = {}  # key -> its place in `pod_workloads`' order
        self.allocs: dict[tuple, list] = {}
        self.made: dict[tuple, Workload] = {}
        self.refs: dict[tuple, tuple] = {}
        self.by_ref: dict[Any, set] = {}
        self.reports: dict[tuple, dict[str, list]] = {}
        self.order: list[tuple] = []  # sort keys of `out`, ascending
        self.out: list[Workload] = []
        self.placed: dict[tuple, tuple] = {}  # key -> its sort key in `order`
        self.dra: tuple | None = None
        """DRA read: (device classes, claim templates, slices) as last read (the objects: the
        watch cache's `DraMemo` hands over the same one while unchanged); None: no DRA."""
        self.claims: dict[str, Any] = {}  # claim key -> the claim last read (DRA)

    def changes(
        self, raw: list, by_name: dict[str, Node], claimed: ClaimReader | None = None
    ) -> tuple[set, dict, dict, set]:
        """(keys of the pods gone, key -> pod new or changed, key -> pod handed over as
        another object of the same version: uid and resourceVersion, as `WorkloadMemo` keys
        a pod, keys of the pods whose DRA claims changed: `_claims_changed`); raises `_Doubt`
        (nothing changed then) where the kept state cannot be followed."""
        claims_changed = self._claims_changed(claimed)
        cur = {id(p): p for p in raw}
        if len(cur) != len(raw):
            raise _Doubt("a pod object twice")
        new_ids = cur.keys() - self.ids.keys()
        gone = {self.ids[i] for i in self.ids.keys() - cur.keys()}
        added: dict[tuple, Any] = {}
        same: dict[tuple, Any] = {}
        for i in new_ids:
            p = cur[i]
            k = _key(p)
            if k in added or k in same or (k in self.live and k not in gone):
                raise _Doubt("a pod twice")
            version = pod_version(p)
            if version is not None and k in gone and pod_version(self.live[k]) == version:
                same[k] = p  # another object, the same state (a relist): the memo's rule
            else:
                added[k] = p
        gone -= same.keys()
        if self.by_name is not None and len(added) + len(gone) > SPLICE_MAX:
            raise _Doubt("too many changed")
        return gone, added, same, claims_changed

    def _claims_changed(self, claimed: ClaimReader | None) -> set:
        """The pods whose claims are not the objects last read (a claim changed, came or went:
        the pods that name it); `_Doubt` where DRA's device classes, claim templates or slices
        are not (what every pod's request and cards are read with), or DRA was read last time
        and not now, or the reverse."""
        if self.by_name is None:
            return set()  # the first pass reads every pod
        if (claimed is None) != (self.dra is None):
            raise _Doubt("DRA read now and not before, or the reverse")
        if claimed is None:
            return set()
        assert self.dra is not None
        for before, now in zip(self.dra, _dra_shared(claimed), strict=True):
            if len(before) != len(now) or any(a is not b for a, b in zip(before, now, strict=True)):
                raise _Doubt("DRA's classes, templates or slices changed")
        cur = claimed.index.claims
        changed = {
            k for k in cur.keys() | self.claims.keys() if cur.get(k) is not self.claims.get(k)
        }
        return claimed.users(changed) if changed else set()

    def apply(
        self,
        plan: tuple[set, dict, dict, set],
        raw: list,
        held: dict,
        by_name: dict[str, Node],
        owners: Owners,
        memo: Any,
        claimed: ClaimReader | None = None,
    ) -> tuple[list[Workload], list[Workload]]:
        gone, added, same, claims_changed = plan
        fresh = self.by_name is None
        for k, p in same.items():
            del self.ids[id(self.live[k])]
            self.live[k] = p
            self.ids[id(p)] = k
        dirty = set(gone) | set(added) | (claims_changed & self.live.keys())
        for k in gone:
            p = self.live.pop(k)
            del self.ids[id(p)]
            self.by_node[self.node_of.pop(k)].discard(k)
            self.by_admitted[self.admitted.pop(k)].discard(k)
            self.failed.discard(k)
        for k, p in added.items():
            self.live[k] = p
            self.ids[id(p)] = k
            node = self.node_of[k] = _node_of(p)
            self.by_node.setdefault(node, set()).add(k)
            if k in self.admitted:
                self.by_admitted[self.admitted[k]].discard(k)
            admitted = self.admitted[k] = _admitted(p)
            self.by_admitted.setdefault(admitted, set()).add(k)
            if is_failed(p):
                self.failed.add(k)
        for node in held.keys() | self.held.keys():
            if held.get(node) is not self.held.get(node):
                dirty |= self.by_node.get(node, set())
        self.held = dict(held)
        groups: set[str] = set()
        if not fresh:
            assert self.by_name is not None
            changed = {n for n, node in by_name.items() if self.by_name.get(n) is not node}
            groups |= changed
            for n in by_name.keys() ^ self.by_name.keys():  # a node came or went
                groups.add(n)
                changed.add(n)
                dirty |= self.by_admitted.get(n, set())  # what `believed` reads
            if claimed is not None and changed:
                # the cards a pod's claims hold are read on its node (`ClaimReader`): the pods
                # bound there, and those not bound (their claims' node may be this one)
                for n in changed:
                    dirty |= self.by_node.get(n, set())
                dirty |= self.by_node.get("", set())
        self.by_name = dict(by_name)
        self.dra = _dra_shared(claimed) if claimed is not None else None
        self.claims = dict(claimed.index.claims) if claimed is not None else {}
        refs = _changed_refs(self.owners, owners)
        self.owners = owners
        for k in dirty:
            groups |= self._forget(k)
        for k in dirty:
            if k in self.live:
                groups |= self._read(k, held, by_name, memo, claimed)
        facts = set(self.allocs) if refs is _ALL else set(self.by_ref.get(_BAD, ()))
        for ref in refs if refs is not _ALL else ():
            facts |= self.by_ref.get(ref, set())
        placed = set(dirty)
        for x in groups:
            placed |= self._allocate(x, by_name, owners, memo)
        for k in facts - placed:
            if k in self.allocs:
                placed.add(k)
                self._make(k, owners, memo)
        for k in placed:  # only pods that reported anything are kept here
            if not self.reports.get(k, True):
                del self.reports[k]
        self._place(placed, fresh)
        for kept in self.reports.values():
            for found in kept.values():
                reported_again(found)
        if memo is not None and not fresh:
            memo.keep_unasked({k for k in gone if k not in self.live})
        failed = []
        if self.failed:
            ids = {id(self.live[k]) for k in self.failed}
            failed = failed_members([p for p in raw if id(p) in ids], owners)
        return list(self.out), failed

    def _forget(self, k: tuple) -> set[str]:
        """Drop what pod `k` read as; the groups whose cards it took part in."""
        touched: set[str] = set()
        x = self.hold.pop(k, None)
        self.reports.pop(k, None)
        if x is not None:
            node = x[0].spec.node_name or ""
            self.holders[node].discard(k)
            touched.add(node)
        if self.prep.pop(k, None) is not None:
            group = self.group.pop(k)
            self.groups[group].discard(k)
            touched.add(group)
            del self.sort[k]
            for ref in self.refs.pop(k):
                self.by_ref[ref].discard(k)
        self.allocs.pop(k, None)
        self.made.pop(k, None)
        return touched

    def _read(
        self,
        k: tuple,
        held: dict,
        by_name: dict[str, Node],
        memo: Any,
        claimed: ClaimReader | None = None,
    ) -> set[str]:
        """Read pod `k` as far as it does not depend on the other pods; the groups it joins."""
        p = self.live[k]
        reports = self.reports.setdefault(k, {})
        found = _reporting("hold", reports, lambda: _each("Pod", [p], _hold(held, memo, claimed)))
        touched: set[str] = set()
        if not found or found[0] is None:
            return touched
        x = self.hold[k] = found[0]
        node = x[0].spec.node_name or ""
        self.holders.setdefault(node, set()).add(k)
        touched.add(node)
        found = _reporting(
            "prepare",
            reports,
            lambda: _each("Pod", [x], lambda x: _prepared(x, by_name, memo), named=_pod),
        )
        if not found:
            return touched
        prep = self.prep[k] = found[0]
        group = self.group[k] = prep[5] or node
        self.groups.setdefault(group, set()).add(k)
        touched.add(group)
        raw = prep[0]
        self.sort[k] = (not raw.spec.node_name, str(raw.metadata.creation_timestamp), *k)
        refs = self.refs[k] = _refs(prep)
        for ref in refs:
            self.by_ref.setdefault(ref, set()).add(k)
        return touched

    def _allocate(self, group: str, by_name: dict[str, Node], owners: Owners, memo: Any) -> set:
        """Hand out the cards of one node's group again, in `pod_workloads`' order; its pods."""
        taken: set[int] = set()
        for h in self.holders.get(group, ()):
            known = self.hold[h][2]
            if known is not None:
                taken.update(a.gpu for a in known)
        shared = {group: taken}
        members = sorted(self.groups.get(group, ()), key=self.sort.__getitem__)
        for k in members:
            prep = self.prep[k]
            reports = self.reports.setdefault(k, {})
            found = _reporting(
                "allocate",
                reports,
                lambda prep=prep: _each(
                    "Pod", [prep], lambda x: _allocated(x, by_name, shared), named=_pod
                ),
            )
            if not found:
                self.allocs.pop(k, None)
                self.made.pop(k, None)
                reports.pop("make", None)
                continue
            self.allocs[k] = found[0]
            self._make(k, owners, memo)
        return set(members)

    def _make(self, k: tuple, owners: Owners, memo: Any) -> None:
        prep, allocs = self.prep[k], self.allocs[k]
        found = _reporting(
            "make",
            self.reports.setdefault(k, {}),
            lambda: _each("Pod", [prep], lambda x: _made(x, allocs, owners, memo), named=_pod),
        )
        if found:
            self.made[k] = found[0]
        else:
            self.made.pop(k, None)

    def _place(self, keys: set, whole: bool) -> None:
        """Bring `order`/`out` up to date for `keys` (all of them afresh where `whole`)."""
        if whole or len(keys) > SPLICE_MAX:
            items = sorted((self.sort[k], k) for k in self.made)
            self.order = [s for s, _ in items]
            self.out = [self.made[k] for _, k in items]
            self.placed = {k: s for s, k in items}
            return
        for k in keys:
            before = self.placed.pop(k, None)
            if before is not None:
                i = bisect_left(self.order, before)
                del self.order[i]
                del self.out[i]
            if k in self.made:
                s = self.placed[k] = self.sort[k]
                i = bisect_left(self.order, s)
                self.order.insert(i, s)
                self.out.insert(i, self.made[k])


def _pod(x: tuple) -> Any:
    return x[0]


def _hold(held: dict, memo: Any, claimed: ClaimReader | None = None) -> Any:
    return lambda p: _holding(p, held, claimed, memo)


def _dra_shared(claimed: ClaimReader) -> tuple:
    """What every pod's DRA reading depends on besides its claims and its node."""
    dra = claimed.dra
    return (list(dra.device_classes), list(dra.claim_templates), list(dra.slices))
