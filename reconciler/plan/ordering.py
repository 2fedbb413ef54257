"""The plan's total, stable order: dependencies first, then by kind (disruptive first, as they
would run) and id."""

from __future__ import annotations

import heapq

from reconciler.plan.actions import (
    KIND_ORDER,
    Action,
)


def ordered(actions: dict[str, Action]) -> list[Action]:
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
