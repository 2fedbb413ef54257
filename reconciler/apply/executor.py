"""Carry out a Plan, one action at a time, idempotently.

Level-triggered: every handler first looks at the cluster and does nothing if its effect is
already there, so a crash between any two steps is healed by the next cycle with nothing done
twice. Steps that must wait (a checkpoint grace period, mig-manager's state label, a PDB that
blocks an eviction) report `waiting`/`blocked` and hold back only what depends on them; the next
cycle plans again from what it then observes.

The executor dispatches each action to its handler (reconciler/apply/handlers/) by type and
talks to the cluster only through the `ClusterOps` port (reconciler/apply/port.py).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from reconciler import conventions as C
from reconciler.apply.handlers import HANDLERS, ApplyConfig, Context, Outcome
from reconciler.apply.port import ApiError, ClusterOps, PodInfo
from reconciler.plan.actions import (
    Action,
    Admit,
    Checkpoint,
    Eviction,
    Hold,
)
from reconciler.plan.model import Plan

TRANSIENT = frozenset({0, 409, 429, 500, 503, 504})  # 0: no answer; every step re-checks first
CONCURRENT = (Admit, Hold)
"""Steps that touch only their own pods and write-ahead nothing: a run of them in the plan's
order, none depending on another of the run, goes out at once (`ApplyConfig.parallel_steps`)."""
NODE_EVENTS_NAMESPACE = "default"

__all__ = ["ApplyConfig", "ApplyResult", "Executor", "Outcome"]


@dataclass
class ApplyResult:
    outcomes: list[Outcome] = field(default_factory=list)

    def by_status(self, status: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def converged(self) -> bool:
        return all(o.status == "done" for o in self.outcomes)

    @property
    def failed(self) -> bool:
        return any(o.status == "failed" for o in self.outcomes)


def _now() -> datetime:
    return datetime.now(UTC)


class Executor:
    """Applies plans through a `ClusterOps` (in a cluster: `reconciler.apply.kube.KubeOps`)."""

    def __init__(
        self,
        ops: ClusterOps,
        config: ApplyConfig | None = None,
        clock: Callable[[], datetime] = _now,
    ):
        self.ops = ops
        self.cfg = config or ApplyConfig()
        self.clock = clock
        self._pool = ThreadPoolExecutor(
            max(1, self.cfg.parallel_steps), thread_name_prefix="gpupool-apply"
        )
        """Where a run of concurrent steps goes out, kept for the executor's life: a thread
        started per run of steps cost a cycle more than its requests did (measured with py-spy
        in bench/admission_openb.py's controller: thread start and join were 12 % of apply)."""

    def apply(
        self,
        plan: Plan,
        *,
        on_outcome: Callable[[Action, Outcome], None] | None = None,
        before_preempt: Callable[[Action, PodInfo], None] | None = None,
        may_continue: Callable[[], bool] | None = None,
    ) -> ApplyResult:
        """`before_preempt` runs just before the Eviction request of a preemption, reclaim or
        move (the planner's one eviction budget counts all three): the controller
        records it there first (write-ahead), so a crash right after cannot lose it from the
        hourly budget. `may_continue` is asked before every step (the controller: "do I still
        hold the lease?"); once it says no, nothing more is applied."""
        ctx = Context(
            self.ops,
            self.cfg,
            self.clock,
            before_preempt=before_preempt,
            grace={
                a.id: float(a.grace_period_seconds)
                for a in plan.actions
                if isinstance(a, Checkpoint)
            },
        )
        result = ApplyResult()
        state: dict[str, str] = {}
        stopped = False
        for batch in _batches(plan.actions, self.cfg.parallel_steps):
            outs: dict[str, Outcome] = {}
            runnable = []
            for action in batch:
                pending = [d for d in action.depends_on if state.get(d, "done") != "done"]
                stopped = stopped or (may_continue is not None and not may_continue())
                if stopped:
                    outs[action.id] = Outcome(
                        action.id,
                        "skipped",
                        "stopped: no longer allowed to apply (leadership lost)",
                    )
                elif pending:
                    outs[action.id] = Outcome(
                        action.id, "skipped", f"waits for {', '.join(pending)}"
                    )
                else:
                    runnable.append(action)
            if len(runnable) > 1:
                done = list(self._pool.map(lambda a: self.step(a, ctx), runnable))
            else:
                done = [self.step(a, ctx) for a in runnable]
            outs.update((a.id, out) for a, out in zip(runnable, done, strict=True))
            for action in batch:
                out = outs[action.id]
                state[action.id] = out.status
                result.outcomes.append(out)
                if out.changed and action.disruptive and self.cfg.emit_events:
                    self._event(action, out)
                if on_outcome:
                    on_outcome(action, out)
        return result

    def step(self, action: Action, ctx: Context) -> Outcome:
        try:
            return HANDLERS[type(action)](action, ctx)
        except ApiError as exc:
            if (
                exc.status in TRANSIENT
            ):  # a conflict or an overloaded server: the next cycle retries
                return Outcome(
                    action.id, "waiting", f"API {exc.status} {exc.reason}: retried next cycle"
                )
            return Outcome(action.id, "failed", f"API {exc.status}: {exc.reason}")

    def _event(self, action: Action, out: Outcome) -> None:
        """A Kubernetes Event on the pod or node a disruptive step changed (a courtesy: never
        fails the step). An Event about a cluster-scoped object (a Node) lives in `default`,
        where the kubelet writes node events and `kubectl describe node` looks: the API server
        refuses one whose namespace differs from its involved object's unless it is `default`."""
        if isinstance(action, Checkpoint | Eviction):
            kind = "Pod"
            ns, _, name = action.target.partition("/")
        else:
            kind, ns, name = "Node", "", action.target
        self.emit_event(
            kind,
            ns,
            name,
            reason="GpuPool" + "".join(p.title() for p in action.kind.split("-")),
            message=action.reason + (f" ({out.message})" if out.message else ""),
            key=action.id,
        )

    def emit_event(
        self,
        kind: str,
        namespace: str,
        name: str,
        *,
        reason: str,
        message: str,
        key: str,
        api_version: str | None = None,
    ) -> None:
        """One Warning Event on an object (a courtesy: never raises). `namespace` "" is a
        cluster-scoped object: its Event lives in `default`."""
        now = self.clock()
        ns = namespace or NODE_EVENTS_NAMESPACE
        digest = hashlib.sha1(f"{key}/{now.isoformat()}".encode()).hexdigest()[:10]
        involved = {"kind": kind, "name": name, "namespace": namespace or None}
        if api_version:
            involved["apiVersion"] = api_version
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"gpupool.{digest}",
                "namespace": ns,
                "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY},
            },
            "involvedObject": involved,
            "reason": reason,
            "message": message[:1000],
            "type": "Warning",
            "source": {"component": "gpupool"},
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        with contextlib.suppress(ApiError):
            self.ops.create_event(ns, body)


def _batches(actions: Sequence[Action], width: int) -> Iterator[Sequence[Action]]:
    """The plan in order, cut into runs of at most `width` `CONCURRENT` steps none of which
    depends on another of its run; every other step alone."""
    i = 0
    while i < len(actions):
        j = i + 1
        if isinstance(actions[i], CONCURRENT):
            ids = {actions[i].id}
            while (
                j < len(actions)
                and j - i < width
                and isinstance(actions[j], CONCURRENT)
                and not ids.intersection(actions[j].depends_on)
            ):
                ids.add(actions[j].id)
                j += 1
        yield actions[i:j]
        i = j
