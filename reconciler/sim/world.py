"""The effect model's working copy of a snapshot, and the API server's admission of new pods.

`World` is a mutable copy of one `ObservedState` that the effects of a plan's actions
(`reconciler.sim.actions`) and `reconciler.sim.effects.finish` change in place; `state()`
freezes it again. Pods an owner creates go through `World.create_pod`: Priority admission
(`with_default_class`) and ResourceQuota admission (`admitted`), as the API server applies
them. See `reconciler.sim.effects` for the model as a whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from reconciler.observe.model import (
    InferenceService,
    KueueObject,
    Node,
    ObservedState,
    PriorityClassObject,
    QuotaObject,
    SuspendedJob,
    Workload,
)
from reconciler.observe.model_dra import DraState
from reconciler.plan.quotas import quota_use
from reconciler.policy.state import DesiredState


@dataclass
class World:
    """A mutable working copy of one snapshot; `state()` freezes it again."""

    desired: DesiredState
    observed: ObservedState
    nodes: dict[str, Node] = field(default_factory=dict)
    workloads: list[Workload] = field(default_factory=list)
    services: list[InferenceService] = field(default_factory=list)
    quotas: list[QuotaObject] = field(default_factory=list)
    priority_classes: list[PriorityClassObject] = field(default_factory=list)
    recent: list[datetime] = field(default_factory=list)
    suspended: list[SuspendedJob] = field(default_factory=list)
    kueue: list[KueueObject] | None = None
    dra: DraState | None = None

    @classmethod
    def of(cls, desired: DesiredState, observed: ObservedState) -> World:
        return cls(
            desired,
            observed,
            nodes={n.name: n for n in observed.nodes},
            workloads=list(observed.workloads),
            services=list(observed.services),
            quotas=list(observed.quotas),
            priority_classes=list(observed.priority_classes),
            recent=list(observed.recent_preemptions),
            suspended=list(observed.suspended_jobs),
            kueue=None if observed.kueue is None else list(observed.kueue),
            dra=observed.dra,
        )

    def state(self) -> ObservedState:
        return self.observed.model_copy(
            update={
                "nodes": list(self.nodes.values()),
                "workloads": list(self.workloads),
                "services": list(self.services),
                "quotas": list(self.quotas),
                "priority_classes": list(self.priority_classes),
                "recent_preemptions": list(self.recent),
                "suspended_jobs": list(self.suspended),
                "kueue": None if self.kueue is None else list(self.kueue),
                "dra": self.dra,
            }
        )

    # -- lookups and replacements ------------------------------------------------------
    def workload_at(self, key: str) -> int | None:
        return next((i for i, w in enumerate(self.workloads) if w.key == key), None)

    def service_at(self, key: str) -> int | None:
        return next((i for i, s in enumerate(self.services) if s.key == key), None)

    def update_gpu(self, node: str, index: int, **update: object) -> None:
        n = self.nodes[node]
        gpus = [g.model_copy(update=update) if g.index == index else g for g in n.gpus]
        self.nodes[node] = n.model_copy(update={"gpus": gpus})

    def create_pod(self, pod: Workload) -> None:
        """A pod an owner creates, as the API server admits it: the globalDefault class if it
        names none (`with_default_class`), then refused if a ResourceQuota of its namespace
        has no room (`admitted`: the owner's retries are not modelled)."""
        pod = with_default_class(self.priority_classes, pod)
        if admitted(self.quotas, self.workloads, pod):
            self.workloads.append(pod)

    def running_on(self, node: str) -> list[Workload]:
        return [w for w in self.workloads if w.phase == "Running" and w.node == node]

    def leave_cards(self, w: Workload, now: datetime) -> None:
        """Whole cards `w` held are idle from now on (unless they were idle already)."""
        if w.node not in self.nodes:
            return
        gpus = {g.index: g for g in self.nodes[w.node].gpus}
        for a in w.allocations:
            g = gpus.get(a.gpu)
            if g is None or a.mig_start is not None or a.slices or g.mode != "whole":
                continue
            idle = g.with_sample(0.0, now)
            self.update_gpu(
                w.node,
                a.gpu,
                utilization=0.0,
                idle_since=idle.idle_since,
                below_since=idle.below_since,
            )


def with_default_class(classes: Iterable[PriorityClassObject], w: Workload) -> Workload:
    """A pod as the API server creates it: without a priorityClassName it gets the
    globalDefault class, if one exists (Priority admission, on create only: kubernetes
    plugin/pkg/admission/priority/admission.go); otherwise it keeps none (priority 0)."""
    if w.priority_class:
        return w
    default = next((c.name for c in classes if c.global_default), None)
    return w.model_copy(update={"priority_class": default}) if default else w


def admitted(quotas: Iterable[QuotaObject], workloads: Iterable[Workload], w: Workload) -> bool:
    """ResourceQuota admission of a new pod `w`: every quota of its namespace has room for it
    beside the namespace's other pods (Pending and Running both count)."""
    mine = [q for q in quotas if q.namespace == w.namespace]
    if not mine:
        return True
    used: dict[str, int] = {}
    for other in workloads:
        if other.namespace == w.namespace and other.key != w.key:
            for k, v in quota_use(other.request).items():
                used[k] = used.get(k, 0) + v
    for q in mine:
        for k, v in quota_use(w.request).items():
            hard = q.hard.get(k)
            if hard is not None and hard.isdigit() and used.get(k, 0) + v > int(hard):
                return False
    return True
