"""The desired state: every validated document, indexed by kind and name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reconciler.policy.catalog import Catalog, GpuModel, default_catalog
from reconciler.policy.models import (
    ChangePolicy,
    MaintenancePolicy,
    Model,
    Pool,
    PriorityClassSpec,
    PriorityPolicy,
    Quota,
    ScalingPolicy,
)


@dataclass(frozen=True, slots=True)
class Located:
    """A validated document and where it was written."""

    model: Any  # one of the kinds in models.KINDS
    file: str
    line: int
    node: Any = field(default=None, compare=False, repr=False)  # ruamel node, for field positions

    @property
    def key(self) -> tuple[str, str]:
        return (self.model.kind, self.model.metadata.name)


@dataclass(frozen=True)
class DesiredState:
    documents: tuple[Located, ...]
    revision: str | None
    catalog: Catalog
    pools: dict[str, Pool]
    quotas: dict[str, Quota]
    priority: PriorityPolicy | None
    scaling: dict[str, ScalingPolicy]
    maintenance: dict[str, MaintenancePolicy]
    change: ChangePolicy | None

    @classmethod
    def from_documents(
        cls, docs: list[Located], *, revision: str | None = None, catalog: Catalog | None = None
    ) -> DesiredState:
        by_kind: dict[str, dict[str, Model]] = {}
        for d in docs:
            by_kind.setdefault(d.model.kind, {}).setdefault(d.model.metadata.name, d.model)
        first = lambda kind: next(iter(by_kind.get(kind, {}).values()), None)  # noqa: E731
        return cls(
            documents=tuple(docs),
            revision=revision,
            catalog=catalog or default_catalog(),
            pools=by_kind.get("Pool", {}),
            quotas=by_kind.get("Quota", {}),
            priority=first("PriorityPolicy"),
            scaling=by_kind.get("ScalingPolicy", {}),
            maintenance=by_kind.get("MaintenancePolicy", {}),
            change=first("ChangePolicy"),
        )

    @classmethod
    def empty(cls) -> DesiredState:
        return cls.from_documents([])

    # -- lookups the planner needs ---------------------------------------------------
    def gpu_model(self, pool: Pool) -> GpuModel | None:
        return self.catalog.model(pool.spec.gpu_model)

    def priority_class(self, name: str | None) -> PriorityClassSpec | None:
        if self.priority is None:
            return None
        name = name or self.priority.spec.default_class
        return next((c for c in self.priority.spec.classes if c.name == name), None)

    def quota_for_namespace(self, namespace: str) -> Quota | None:
        for q in self.quotas.values():
            if namespace in q.spec.namespaces:
                return q
        return None

    @property
    def admission_controller(self) -> str:
        """`gpupool` (the default) or `kueue`: PriorityPolicy `spec.admission.controller`."""
        return self.priority.spec.admission.controller if self.priority else "gpupool"

    @property
    def kueue_cohort(self) -> str:
        return self.priority.spec.admission.cohort if self.priority else "gpupool"

    def maintenance_for(self, pool: str) -> list[MaintenancePolicy]:
        return [m for m in self.maintenance.values() if not m.spec.pools or pool in m.spec.pools]

    def located(self, kind: str, name: str) -> Located | None:
        return next((d for d in self.documents if d.key == (kind, name)), None)
