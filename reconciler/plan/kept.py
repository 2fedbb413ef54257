"""The working view's per-object steps, kept from one plan to the next (issue 28, item 2).

Building the working view from a snapshot does the same work for every node, workload and
service each plan: its canonical form (`consistency.canonical`), what can be judged from one
node alone (`consistency.check`), the node's pool, fence and card slots (`build_cluster`). An
object the adapter hands back unchanged is the same Python object, and every snapshot object is
frozen, so the answer for it is the answer of last plan.

`ViewMemo` is that: per step, the input object's id -> (the object, its answer). The object is
kept beside its answer, so while the memo lives no other object can take its id, and a hit is
checked by identity (`is`), never by id alone. It is a value: a plan reads the previous memo
and makes a new one (`Keeper.memo`) holding the objects of this snapshot only, so what left the
cluster leaves the memo. Nothing time-dependent is kept (`now` is not an input of any kept
step), and every answer is for one desired state: the memo of another is not read.

An answer kept must never be changed by the plan that reads it: the steps keep frozen objects,
tuples, or templates the plan copies before it changes them (`cluster.clone_slot`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

X = TypeVar("X")
R = TypeVar("R")

Kept = Mapping[str, Mapping[int, tuple[Any, Any]]]
"""Step -> id(input) -> ((input, the objects asked with it), answer)."""


@dataclass(frozen=True)
class ViewMemo:
    """What one plan's working view leaves for the next: the answers of its per-object steps,
    for the plan's desired state (a plan of another reads none of it: `plan_incremental`
    compares the desired states its `PlanMemo` keeps)."""

    steps: Kept = field(default_factory=dict)
    hits: int = 0
    """Answers the plan that made it read from the memo before it (for tests, benchmarks)."""
    misses: int = 0
    """Answers it computed."""
    read_kept: bool = False
    """The plan that made it was given a memo to read (hits 0 then: none of its objects
    was in the snapshot again)."""

    def size(self) -> int:
        """How many answers it keeps (for tests and the benchmark)."""
        return sum(len(v) for v in self.steps.values())


class Keeper:
    """One plan's reader of the previous `ViewMemo` and writer of the next one. `once(step, fn,
    x)` is `fn(x)`, answered from the previous memo when `x` is the object it was asked of
    (`group` with no other objects).
    Local to one plan (the planner keeps nothing between plans: the memo is returned)."""

    def __init__(self, previous: ViewMemo | None, record: bool = True) -> None:
        """`previous`: the memo of a plan of this desired state (or one equal to it: the
        caller decides), None for none. `record` False: keep nothing (every answer computed,
        as a plan without a memo does)."""
        self.record = record
        self._old: Kept = previous.steps if previous is not None else {}
        self.read_kept = previous is not None
        self._new: dict[str, dict[int, tuple[Any, Any]]] = {}
        self.hits = 0
        self.misses = 0

    def once(self, step: str, fn: Callable[[X], R], x: X) -> R:
        return self.group(step, lambda: fn(x), x, ())

    def each(self, step: str, fn: Callable[[X], R]) -> Callable[[X], R]:
        """`lambda x: self.once(step, fn, x)`, with the step's tables looked up once (what
        a step asked of every object of a snapshot costs is this per object)."""
        if not self.record:
            return fn
        new = self._new.setdefault(step, {})
        old = self._old.get(step) or {}

        def one(x: X) -> R:
            k = id(x)
            e = new.get(k)
            if e is not None and e[0][0] is x and not e[0][1]:  # asked twice in this plan
                return e[1]
            e = old.get(k)
            if e is not None and e[0][0] is x and not e[0][1]:
                self.hits += 1
                new[k] = e
                return e[1]
            self.misses += 1
            answer = fn(x)
            new[k] = ((x, ()), answer)
            return answer

        return one

    def group(self, step: str, fn: Callable[[], R], head: Any, members: tuple) -> R:
        """`fn()`, an answer about `head` and `members` (a node and the workloads on it; none
        for `once`), answered from the previous memo, or from this plan when it asked the same
        already, when it was asked of `head` and of `members`, each the very object it was
        (in order)."""
        if not self.record:
            return fn()
        new = self._new.get(step)
        if new is None:
            new = self._new[step] = {}
        k = id(head)
        if _asked_of(new.get(k), head, members):  # asked twice in this plan
            return new[k][1]
        old = self._old.get(step)
        hit = old.get(k) if old else None
        if _asked_of(hit, head, members):
            self.hits += 1
            new[k] = hit
            return hit[1]
        self.misses += 1
        answer = fn()
        new[k] = ((head, members), answer)
        return answer

    def last(self, step: str) -> tuple[list, Any] | None:
        """What a step over a whole list (`keep_last`) answered in the previous plan: (the
        list it was asked of, its answer); None when it was not asked, or nothing is kept.
        A list step's name is its own (not a per-object step's: `keep_last` replaces the
        step's whole table)."""
        entry = (self._old.get(step) or {}).get(0) if self.record else None
        return None if entry is None else (entry[0][0], entry[1])

    def keep_last(self, step: str, items: list, answer: Any, shared: int | None = None) -> None:
        """Keep `answer`, of a step over the whole list `items`, for the next plan (`last`).
        `shared`: how many of `items` the answer took from the previous plan's (hits; the
        rest were computed: misses), when the step worked from it."""
        if not self.record:
            return
        self._new[step] = {0: ((items, ()), answer)}
        if shared is not None:
            self.hits += shared
            self.misses += len(items) - shared

    def memo(self) -> ViewMemo:
        return ViewMemo(self._new, self.hits, self.misses, self.read_kept)


def fresh() -> Keeper:
    """A keeper that keeps nothing: every answer computed (a plan without a view memo)."""
    return Keeper(None, record=False)


def _asked_of(entry: tuple | None, head: Any, members: tuple) -> bool:
    """`entry` ((head, members), answer) was asked of these very objects."""
    if entry is None:
        return False
    (h, ms), _ = entry
    if h is not head or len(ms) != len(members):
        return False
    return all(a is b for a, b in zip(ms, members, strict=True))


def shared_ends(before: list, after: list) -> tuple[int, int]:
    """How many items `before` and `after` hold, the very objects (`is`), at the same place
    from their start (i), and then from their end (j, not overlapping i): what lies between
    (`before[i:len(before) - j]`, `after[i:len(after) - j]`) is what changed."""
    n = min(len(before), len(after))
    i = 0
    while i < n and before[i] is after[i]:
        i += 1
    j = 0
    while j < n - i and before[-1 - j] is after[-1 - j]:
        j += 1
    return i, j
