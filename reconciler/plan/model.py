"""A plan is data: an ordered list of explained actions, JSON-able and deterministic."""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

FORMAT_VERSION = 1

ActionKind = Literal[
    "cordon",  # stop new pods landing on a node about to be repartitioned
    "checkpoint",  # ask a workload to checkpoint (annotation it watches), then wait the grace period
    "preempt",  # evict through the Eviction API (PDBs honoured)
    "reclaim",  # evict a workload whose GPUs have been idle too long
    "move",  # defragmentation: checkpoint, evict, let it restart on the named target
    "mig-reconfigure",  # new MIG layout on emptied GPUs (mig-parted config + node label)
    "set-sharing",  # whole card <-> shared slices (device-plugin sharing config)
    "uncordon",
    "scale",  # replicas of an inference Deployment/StatefulSet
    "quota",  # create/update a ResourceQuota
    "priority-class",  # create/update a PriorityClass
    "label-node",  # pool membership labels
]

# Order of kinds in the listing: disruptive first, in the order they would run.
KIND_ORDER: tuple[str, ...] = (
    "cordon", "checkpoint", "preempt", "reclaim", "move", "mig-reconfigure", "set-sharing",
    "uncordon", "scale", "quota", "priority-class", "label-node",
)
DISRUPTIVE = frozenset({"checkpoint", "preempt", "reclaim", "move", "mig-reconfigure", "set-sharing", "cordon"})

SUMMARY_WORDS = {
    "mig-reconfigure": ("MIG reconfiguration", "MIG reconfigurations"),
    "set-sharing": ("sharing change", "sharing changes"),
    "preempt": ("preemption", "preemptions"),
    "reclaim": ("idle reclaim", "idle reclaims"),
    "move": ("move", "moves"),
    "checkpoint": ("checkpoint", "checkpoints"),
    "cordon": ("cordon", "cordons"),
    "uncordon": ("uncordon", "uncordons"),
    "quota": ("quota change", "quota changes"),
    "priority-class": ("priority-class change", "priority-class changes"),
    "label-node": ("node label change", "node label changes"),
}


class Action(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    """Stable identity: the same change gets the same id in every plan."""
    kind: ActionKind
    target: str
    """What it acts on: node, namespace/name, or node/gpu."""
    reason: str
    """One line a human can check."""
    pool: str | None = None
    depends_on: tuple[str, ...] = ()
    details: dict[str, Any] = {}

    @property
    def disruptive(self) -> bool:
        return self.kind in DISRUPTIVE


class Finding(BaseModel):
    """Something the plan cannot fix and a person should know (held demand, stuck jobs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    severity: Literal["info", "warning"]
    code: str
    """Machine-readable kind, e.g. held-cap, held-borrowing, waits, budget-spent."""
    subject: str
    message: str


class Plan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    format_version: int = FORMAT_VERSION
    revision: str | None = None
    observed_at: str
    actions: tuple[Action, ...] = ()
    findings: tuple[Finding, ...] = ()
    capacity: dict[str, dict[str, int]] = {}
    """Per pool: GPUs by partition now and after the plan (whole/mig/shared)."""
    fingerprint: dict[str, str] = {}
    """Digests of the desired state and the observed snapshot the plan was made from."""

    @property
    def empty(self) -> bool:
        return not self.actions

    def counts(self) -> Counter:
        c: Counter = Counter()
        for a in self.actions:
            if a.kind == "scale":
                up = a.details.get("to", 0) > a.details.get("from", 0)
                c["scale-up" if up else "scale-down"] += 1
            else:
                c[a.kind] += 1
        return c

    def summary(self) -> str:
        if not self.actions:
            return "No changes. The cluster matches the desired state."
        parts = []
        counts = self.counts()
        for kind in ("mig-reconfigure", "set-sharing", "preempt", "reclaim", "move", "scale-up", "scale-down", "quota", "priority-class", "label-node"):
            n = counts.get(kind, 0)
            if not n:
                continue
            if kind in ("scale-up", "scale-down"):
                parts.append(f"{n} {kind}" + ("s" if n > 1 else ""))
            else:
                one, many = SUMMARY_WORDS[kind]
                parts.append(f"{n} {one if n == 1 else many}")
        return "Plan: " + ", ".join(parts) if parts else f"Plan: {len(self.actions)} actions"
