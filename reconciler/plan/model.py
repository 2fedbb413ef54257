"""A plan is data: an ordered list of explained actions, JSON-able and deterministic.

A saved plan (`gpupool plan --out`, read back by `gpupool apply`) is checked as it is read:
its `format_version` is exactly this gpupool's (an int, not "2", not a bool); when it carries a
fingerprint, its `revision` is the one the fingerprint was made at and its `observed_at` a time
with a timezone in the years `TIME_MIN`..`TIME_MAX`, the time `apply` plans at again.
`Plan.model_validate` and `Plan.model_validate_json` report the first problem as one line that
names the field (`SavedPlanError`)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    computed_field,
    field_validator,
    model_validator,
)

from reconciler.conventions import MAX_TIME_YEAR, MIN_TIME_YEAR
from reconciler.plan.actions import Action, Scale
from reconciler.plan.fingerprint import revision_fingerprint

FORMAT_VERSION = 2
"""2: actions are typed per kind (no `details`; see reconciler/plan/actions.py); `summary`,
`counts` and each action's `disruptive` are computed fields, so plan.json round-trips."""

TIME_MIN, TIME_MAX = MIN_TIME_YEAR, MAX_TIME_YEAR
"""The years a saved plan's `observed_at` may have, as written (in its own offset, so no
conversion can overflow): the years the snapshot's times are held to
(reconciler/conventions.py `MIN_TIME_YEAR`, `MAX_TIME_YEAR`, which reconciler/observe/model.py
checks).
`apply` plans again at that time, and the planner's arithmetic with its durations (an hour's
budget window before it, a year at most after) leaves Python's years 1-9999 near either end:
year 1 was an OverflowError, year 9999 a plan that could never match."""

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
    "dra-object",
    "prune-dra-object",
    "taint-device",
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
    "dra-object": ("DRA object change", "DRA object changes"),
    "prune-dra-object": ("DRA object pruned", "DRA objects pruned"),
    "taint-device": ("device taint rule", "device taint rules"),
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
        "idle-replicas-over-target",
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


class SavedPlanError(ValueError):
    """A saved plan that cannot be read: one line, the field first (`format_version: ...`)."""


def _one_line(exc: ValidationError) -> str:
    """The first of pydantic's errors as `field: why`, and how many more there are."""
    errors = exc.errors(include_url=False)
    if not errors:  # pragma: no cover - pydantic reports at least one
        return str(exc).splitlines()[0]
    e = errors[0]
    where = ".".join(str(p) for p in e["loc"])
    why = str(e["msg"]).removeprefix("Value error, ")
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return (f"{where}: {why}" if where else why) + more


def time_problem(text: str) -> str:
    """Why `text` is no time a saved plan can be planned at again ('' when it is one): not ISO
    8601, no timezone, or a year outside `TIME_MIN`..`TIME_MAX`."""
    shown = _shown(text)
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return f"{shown} is not an ISO 8601 time"
    if at.tzinfo is None:
        return f"{shown} has no timezone"
    if not TIME_MIN <= at.year <= TIME_MAX:
        return f"{shown} is outside the years {TIME_MIN}-{TIME_MAX} (TIME_MIN, TIME_MAX)"
    return ""


def _shown(v: object) -> str:
    """`v` as a message quotes it: its repr, cut at 40 characters."""
    r = repr(v)
    return r if len(r) <= 40 else r[:40] + "..."


class Plan(BaseModel):
    """A plan. Read back from a file, through `model_validate` or `model_validate_json`, a
    problem is a `SavedPlanError` (a ValueError) of one line that names the field."""

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

    @field_validator("format_version", mode="before")
    @classmethod
    def _this_format(cls, v: object) -> object:
        # exactly the int: pydantic would take "2", 2.0 and True (as 1) for an int
        if type(v) is not int or v != FORMAT_VERSION:
            raise ValueError(
                f"{_shown(v)} ({type(v).__name__}) is not this gpupool's plan format, the int "
                f"{FORMAT_VERSION}: make the plan again with `gpupool plan --out`"
            )
        return v

    @model_validator(mode="after")
    def _saved(self) -> Plan:
        """A saved plan (one with a fingerprint): the revision it was made at, and a time
        `apply` can plan at again."""
        if not self.fingerprint:
            return self
        why = time_problem(self.observed_at)
        if why:
            raise ValueError(f"observed_at: {why}")
        bound = self.fingerprint.get("revision")
        if bound is None:
            raise ValueError(
                "fingerprint: no revision (saved by an older gpupool?): make the plan again "
                "with `gpupool plan --out`"
            )
        if bound != revision_fingerprint(self.revision):
            raise ValueError(
                f"revision: {self.revision!r} is not the revision the plan was made at (its "
                "fingerprint says otherwise): make the plan again with `gpupool plan --out`"
            )
        return self

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Plan:  # type: ignore[override]
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            raise SavedPlanError(_one_line(exc)) from exc

    @classmethod
    def model_validate_json(cls, json_data: Any, **kwargs: Any) -> Plan:  # type: ignore[override]
        try:
            return super().model_validate_json(json_data, **kwargs)
        except ValidationError as exc:
            raise SavedPlanError(_one_line(exc)) from exc

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
