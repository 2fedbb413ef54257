"""A plan is data: an ordered list of explained actions, JSON-able and deterministic."""

from __future__ import annotations

from collections import Counter
from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from reconciler.plan.actions import Action, Scale

FORMAT_VERSION = 2
"""2: actions are typed per kind (no `details`; see reconciler/plan/actions.py); `summary`,
`counts` and each action's `disruptive` are computed fields, so plan.json round-trips."""

SUMMARY_KINDS = (
    "mig-reconfigure",
    "set-sharing",
    "partition-change",
    "preempt",
    "reclaim",
    "move",
    "scale-up",
    "scale-down",
    "scale-envelope",
    "quota",
    "priority-class",
    "prune-quota",
    "prune-priority-class",
    "kueue-object",
    "prune-kueue-object",
    "label-node",
)
SUMMARY_WORDS = {
    "mig-reconfigure": ("MIG reconfiguration", "MIG reconfigurations"),
    "set-sharing": ("sharing change", "sharing changes"),
    "partition-change": ("partition change", "partition changes"),
    "preempt": ("preemption", "preemptions"),
    "reclaim": ("idle reclaim", "idle reclaims"),
    "move": ("move", "moves"),
    "scale-up": ("scale-up", "scale-ups"),
    "scale-down": ("scale-down", "scale-downs"),
    "scale-envelope": ("autoscaler envelope change", "autoscaler envelope changes"),
    "quota": ("quota change", "quota changes"),
    "priority-class": ("priority-class change", "priority-class changes"),
    "prune-quota": ("quota pruned", "quotas pruned"),
    "prune-priority-class": ("priority class pruned", "priority classes pruned"),
    "label-node": ("node label change", "node label changes"),
    "kueue-object": ("Kueue object change", "Kueue object changes"),
    "prune-kueue-object": ("Kueue object pruned", "Kueue objects pruned"),
}
COMPUTED = ("summary", "counts")
WAITING_CODES = frozenset(
    {
        "waits",
        "budget-spent",
        "held-cap",
        "held-quota",
        "held-borrowing",
        "held-lending",
        "held-training-max",
        "unreachable",
        "no-pool",
        "scale-held",
    }
)
"""Finding codes that mean demand waits or is held: a plan with them is never 'no changes'."""
UNSETTLED_CODES = frozenset(
    {
        "over-cap",
        "warm-short",
        "partition-drift",
        "inference-limit",
        "at-max-replicas",
        "prune-class-in-use",
        "prune-everything-refused",
    }
)
"""Finding codes that mean the cluster does not match the desired state yet."""


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

    @model_validator(mode="before")
    @classmethod
    def _drop_computed(cls, data: object) -> object:
        # written into plan.json for readers; derived from the actions, never read back
        if isinstance(data, dict):
            data = {k: v for k, v in data.items() if k not in COMPUTED}
        return data

    @property
    def empty(self) -> bool:
        return not self.actions

    @computed_field  # type: ignore[prop-decorator]
    @property
    def counts(self) -> dict[str, int]:
        c: Counter = Counter()
        for a in self.actions:
            if isinstance(a, Scale):
                c["scale-up" if a.up else "scale-down"] += 1
            else:
                c[a.kind] += 1
        return dict(sorted(c.items()))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary(self) -> str:
        waiting = len({f.subject for f in self.findings if f.code in WAITING_CODES})
        unsettled = len({f.subject for f in self.findings if f.code in UNSETTLED_CODES})
        if not self.actions:
            if not waiting and not unsettled:
                return "No changes. The cluster matches the desired state."
            parts = []
            if waiting:
                parts.append(f"{waiting} workload(s) wait or are held")
            if unsettled:
                parts.append(f"{unsettled} other thing(s) are not as desired")
            return (
                "No actions this cycle, but the cluster does not match the desired state: "
                + ", ".join(parts)
                + " (see findings)."
            )
        counts = self.counts
        parts = []
        for kind in SUMMARY_KINDS:
            n = counts.get(kind, 0)
            if n:
                one, many = SUMMARY_WORDS[kind]
                parts.append(f"{n} {one if n == 1 else many}")
        head = "Plan: " + ", ".join(parts) if parts else f"Plan: {len(self.actions)} actions"
        return head + (f"; {waiting} workload(s) still wait or are held" if waiting else "")
