"""What a change of the desired state does to the cluster: base vs head, against one snapshot.

Pure. Both revisions are planned against the same observed state; the report is the
difference: capacity moved between training and inference, quota changes per team, cards
that would be repartitioned, workloads that would be disrupted, and the safety gates.

Gates come from the **base** revision's ChangePolicy, so a pull request cannot loosen the gates
that judge it (a change to the ChangePolicy itself is reported). Confirmations for deliberate
destructive changes (`allowEmptyPool`, `allowDeleteAllQuotas`) come from the head revision or
from `--confirm`, the way Argo CD wants `allowEmpty` / `Prune=confirm` said explicitly.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from reconciler.conventions import GPU_RESOURCE, SHARED_RESOURCE, mig_resource
from reconciler.observe.model import ObservedState
from reconciler.plan.actions import EVICTION_KINDS, Preempt
from reconciler.plan.dra import quota_key
from reconciler.plan.model import Action, Plan
from reconciler.plan.objects.wanted import resource_quotas
from reconciler.plan.partition import DEFAULT_BACKENDS
from reconciler.plan.planner import PlanFacts, open_run, plan_with_facts
from reconciler.plan.quotas import QUOTA_PREFIX, desired_resource_quotas
from reconciler.policy.models import Quota
from reconciler.policy.quantity import quantity_bytes
from reconciler.policy.state import DesiredState

Key = tuple[str, str]
"""A ResourceQuota: (namespace, name)."""


class RepartitionedCard(BaseModel):
    model_config = ConfigDict(frozen=True)
    pool: str
    node: str
    gpu: int
    base: str  # the card's partitioning after the base plan
    head: str  # ... and after the head plan


class Disruption(BaseModel):
    model_config = ConfigDict(frozen=True)
    workload: str
    kind: str
    reason: str
    """Why, true on its own whatever else is listed (`disruption_reasons`)."""


class ReplayMetrics(BaseModel):
    """One revision's numbers from the digital twin's replay (`reconciler.sim.twin`)."""

    model_config = ConfigDict(frozen=True)
    useful_utilisation: float
    """Share of the pool's GPU-time: inference cards needed + training work not later lost."""
    slo_attainment: float
    """Share of load bins whose ready inference capacity met demand."""
    preemptions_per_hour: float
    gpu_h_lost: float
    """Training work lost to preemption + restart time, GPU-hours."""


class Replay(BaseModel):
    """What the change would have done over a recorded load: the twin run on the base and on
    the head desired state with the same load, jobs and settings. Computed by the command (the
    shell) and handed in: this module never runs it."""

    model_config = ConfigDict(frozen=True)
    load: str
    """The load file replayed."""
    hours: float
    """The measured span (after the warm-up)."""
    base: ReplayMetrics | None = None
    head: ReplayMetrics | None = None
    problem: str | None = None
    """Why the replay could not compare (e.g. a revision without a ScalingPolicy)."""

    def line(self, arrow: str = "->", markdown: bool = False) -> str:
        where = f"over {self.hours:g} h of " + (f"`{self.load}`" if markdown else self.load)
        if self.problem or self.base is None or self.head is None:
            return f"Twin replay {where}: not compared: {self.problem or 'no result'}"
        b, h = self.base, self.head

        def pct(x: float, digits: int = 1) -> str:
            return f"{100 * x:.{digits}f}%"

        return (
            f"Twin replay {where}: useful utilisation {pct(b.useful_utilisation)} {arrow} "
            f"{pct(h.useful_utilisation)}, inference SLO {pct(b.slo_attainment, 2)} {arrow} "
            f"{pct(h.slo_attainment, 2)}, preemptions {b.preemptions_per_hour:.2f}/h {arrow} "
            f"{h.preemptions_per_hour:.2f}/h, GPU-hours lost {b.gpu_h_lost:.2f} {arrow} "
            f"{h.gpu_h_lost:.2f}"
        )


class ChangeReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    format_version: int = 1
    base_revision: str | None
    head_revision: str | None
    capacity: dict[str, dict[str, dict[str, int]]]
    """pool -> {base, head, delta} -> {whole, mig, shared} after each plan."""
    policy_changes: list[str]
    """Desired-state fields that differ, as YAML paths with YAML values (`policy_changes`),
    e.g. `Pool/a100 spec.inference.minGPUs: 4 -> 8`."""
    quota_changes: dict[str, dict[str, list[str | None]]]
    """"namespace/name" -> resource -> [base, head] (None: absent): the ResourceQuotas the
    plans keep (none in a gated namespace or in kueue mode: `objects.wanted.resource_quotas`)."""
    quota_reasons: dict[str, dict[str, str]] = {}
    """"namespace/name" -> resource -> where the head's value comes from (the Quota's fields
    it derives from), or why the head has none, for each row of `quota_changes`."""
    quota_notes: dict[str, str] = {}
    """"namespace/name" -> why the ResourceQuota of a changed Quota stays as it is: kept empty
    (a gated namespace, kueue mode), or its derived limits are the same."""
    repartitions: list[RepartitionedCard]
    disruptions: list[Disruption]
    """Evictions the head plan makes that the base plan does not."""
    drained_nodes: list[str]
    gates: list[str]
    """Tripped gates, each a reason; empty when the change may go ahead."""
    head_summary: str
    base_summary: str
    replay: Replay | None = None
    """The twin's replay of base and head over a load file (`plan --twin-load`), if asked."""

    @property
    def blocked(self) -> bool:
        return bool(self.gates)

    def summary(self) -> str:
        moved = []
        for pool, c in sorted(self.capacity.items()):
            d = c["delta"]
            inf = d["mig"] + d["shared"]
            if inf > 0:
                moved.append(f"{pool}: {inf} GPU{'s' if inf != 1 else ''} training -> inference")
            elif inf < 0:
                moved.append(f"{pool}: {-inf} GPU{'s' if inf != -1 else ''} inference -> training")
        parts = moved or ["no capacity moves"]
        parts.append(
            f"{len(self.repartitions)} repartition{'s' if len(self.repartitions) != 1 else ''}"
        )
        parts.append(
            f"{len(self.disruptions)} workload{'s' if len(self.disruptions) != 1 else ''} disrupted"
        )
        if self.quota_changes:
            parts.append(
                f"{len(self.quota_changes)} quota "
                f"object{'s' if len(self.quota_changes) != 1 else ''} changed"
            )
        head = "BLOCKED" if self.gates else "Change"
        return f"{head}: " + "; ".join(parts)


ABSENT = object()
"""A list item or document field one side does not have."""

LIST_KEYS = ("name", "pool", "preemptor", "key")
"""Fields that name a list's items (`spec.classes[name=serving]`), tried in this order; a
list whose items none of them names uniquely is addressed by index (`[0]`)."""

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
_PLAIN_SCALAR = re.compile(r"^[A-Za-z0-9_./$()+-][^,\[\]{}#&*!|>'\"%@`]*$")
_YAML_SPECIAL = re.compile(
    r"^(?:~|null|true|false|yes|no|on|off|y|n|[-+]?(?:\d[\d_]*)?(?:\.\d*)?(?:e[-+]?\d+)?"
    r"|[-+]?\.inf|\.nan|0x[0-9a-f]+|0o[0-7]+|\d+:\d+(?::\d+)*)$",
    re.IGNORECASE,
)


def yaml_value(value: Any) -> str:
    """`value` as YAML writes it in flow style: `8`, `20Gi`, `null`, `[a, b]`, `{a: 1}`;
    a string that would read as something else (a number, a boolean, null) or holds YAML's
    indicators is single-quoted. `(absent)` where one side has nothing."""
    if value is ABSENT:
        return "(absent)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(yaml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)}: {yaml_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if (
        _PLAIN_SCALAR.match(text)
        and not _YAML_SPECIAL.match(text)
        and ": " not in text
        and " #" not in text
        and text == text.strip()
    ):
        return text
    return "'" + text.replace("'", "''") + "'"


def _key(k: Any) -> str:
    k = str(k)
    return k if _PLAIN_KEY.match(k) else yaml_value(k) if k else "''"


def _segment(k: Any) -> str:
    """A mapping key in a path: `.maxGPUs`, or `["gpupool.io/pool"]` for one that is not a
    plain word (dots, slashes)."""
    k = str(k)
    return f".{k}" if _PLAIN_KEY.match(k) else '["' + k.replace('"', '\\"') + '"]'


def _list_key(*sides: list) -> str | None:
    items = [x for side in sides for x in side]
    if not items or not all(isinstance(x, dict) for x in items):
        return None
    for k in LIST_KEYS:
        if all(k in x and isinstance(x[k], str) for x in items) and all(
            len({x[k] for x in side}) == len(side) for side in sides
        ):
            return k
    return None


def _diff(path: str, old: Any, new: Any, out: list[str]) -> None:
    """`path: old -> new` for every leaf that differs; mappings by key, lists of mappings by
    the field that names their items (else by index), other lists as one value."""
    if old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in sorted(set(old) | set(new), key=str):
            _diff(path + _segment(k), old.get(k, ABSENT), new.get(k, ABSENT), out)
        return
    if isinstance(old, list) and isinstance(new, list):
        k = _list_key(old, new)
        if k is not None:
            b, h = {x[k]: x for x in old}, {x[k]: x for x in new}
            for name in [*b, *(n for n in h if n not in b)]:
                _diff(f"{path}[{k}={name}]", b.get(name, ABSENT), h.get(name, ABSENT), out)
            return
        if any(isinstance(x, dict | list) for x in [*old, *new]):
            for i in range(max(len(old), len(new))):
                _diff(
                    f"{path}[{i}]",
                    old[i] if i < len(old) else ABSENT,
                    new[i] if i < len(new) else ABSENT,
                    out,
                )
            return
    out.append(f"{path.lstrip('.')}: {yaml_value(old)} -> {yaml_value(new)}")


def _documents(state: DesiredState) -> dict[str, dict[str, Any]]:
    return {
        f"{d.model.kind}/{d.model.metadata.name}": d.model.model_dump(
            mode="json", by_alias=True, exclude={"api_version", "kind"}
        )
        for d in state.documents
    }


def policy_changes(base: DesiredState, head: DesiredState) -> list[str]:
    """Each changed field as its YAML path in the document (camelCase, as written) with the
    base and head values as YAML, e.g. `Quota/team-a spec.maxGPUs: 8 -> 12`,
    `PriorityPolicy/cluster spec.classes[name=serving].value: 30000 -> 40000`. A field the
    policy leaves out has its default (`null` for none)."""
    b, h = _documents(base), _documents(head)
    out = []
    for doc in sorted(set(b) | set(h)):
        if doc not in h:
            out.append(f"{doc}: deleted")
        elif doc not in b:
            out.append(f"{doc}: added")
        else:
            fields: list[str] = []
            _diff("", b[doc], h[doc], fields)
            out += [f"{doc} {f}" for f in fields]
    return out


def _kept_quotas(desired: DesiredState, observed: ObservedState) -> dict[Key, dict[str, str]]:
    """The ResourceQuotas a plan of `desired` keeps, by the planner's own rule (empty in a
    gated namespace, none in kueue mode); an empty one is left out, as gpupool does not
    create it."""
    kept = resource_quotas(open_run(desired, observed, None, DEFAULT_BACKENDS))
    return {k: h for k, h in kept.items() if h}


def _quota_changes(
    b: dict[Key, dict[str, str]], h: dict[Key, dict[str, str]]
) -> dict[str, dict[str, list[str | None]]]:
    out: dict[str, dict[str, list[str | None]]] = {}
    for key in sorted(set(b) | set(h)):
        bh, hh = b.get(key, {}), h.get(key, {})
        diff = {
            r: [bh.get(r), hh.get(r)] for r in sorted(set(bh) | set(hh)) if bh.get(r) != hh.get(r)
        }
        if diff or (key in b) != (key in h):
            out[f"{key[0]}/{key[1]}"] = diff
    return out


def _owners(desired: DesiredState) -> dict[Key, Quota]:
    """(namespace, ResourceQuota name) -> the Quota it comes from."""
    return {
        (ns, QUOTA_PREFIX + q.team): q for q in desired.quotas.values() for ns in q.spec.namespaces
    }


def _allotment(path: str, guaranteed: int, borrowing: int | None) -> tuple[int | None, str]:
    if borrowing is None:
        return None, f"{path} has no borrowingLimit: no limit"
    total = guaranteed + borrowing
    return total, f"{path}: guaranteed {guaranteed} + borrowingLimit {borrowing} = {total}"


def derivation(desired: DesiredState, q: Quota, resource: str) -> tuple[int | None, str]:
    """What `quotas.desired_resource_quotas` makes of `resource` for `q`, and from which of
    its fields: (the value, None for no limit; the words). The same sums, kept beside it so
    the report can name the fields; `compare` checks the value against the real one."""
    where = f"Quota/{q.metadata.name}"
    cap = q.spec.max_gpus
    terms: list[tuple[int | None, str]] = []
    within = False  # a whole-card limit maxGPUs did not cut
    for pq in q.spec.pools:
        at = f"spec.pools[pool={pq.pool}]"
        pool = desired.pools.get(pq.pool)
        dra = pool is not None and pool.spec.backend == "dra"  # counted in devices (plan/dra.py)
        if resource == (quota_key(pq.pool) if dra else "requests." + GPU_RESOURCE):
            term, capped_within = _whole_term(at, pq.whole, cap)
            if term is not None:
                terms.append(term)
                within = within or capped_within
        elif resource == "requests." + SHARED_RESOURCE and not dra:
            sh = pool.spec.inference.shared if pool else None
            m = pq.shared_memory
            if m is None or sh is None:
                continue
            per = quantity_bytes(sh.memory_per_slice)
            g = math.ceil(quantity_bytes(m.guaranteed) / per)
            slices = f"in slices of Pool/{pq.pool} memoryPerSlice {yaml_value(sh.memory_per_slice)}"
            if not m.borrowing_limit:
                terms.append((None, f"{at}.sharedMemory has no borrowingLimit: no limit"))
                continue
            b = math.ceil(quantity_bytes(m.borrowing_limit) / per)
            terms.append(
                (
                    g + b,
                    f"{at}.sharedMemory: guaranteed {yaml_value(m.guaranteed)} + borrowingLimit "
                    f"{yaml_value(m.borrowing_limit)}, {slices}: {g} + {b} = {g + b}",
                )
            )
        else:
            for prof, a in sorted(pq.mig.items()):
                key = quota_key(pq.pool, prof) if dra else "requests." + mig_resource(prof)
                if key == resource:
                    terms.append(
                        _allotment(f"{at}.mig{_segment(prof)}", a.guaranteed, a.borrowing_limit)
                    )
    if not terms:
        if resource == "requests." + GPU_RESOURCE and cap is not None:
            return cap, f"{where} spec.maxGPUs {cap} (no pool has a whole-card allotment)"
        return None, f"no pool of {where} allots it: no limit"
    unlimited = next((t for v, t in terms if v is None), None)
    if unlimited is not None:
        return None, f"{where} {unlimited}"
    total = sum(v for v, _ in terms if v is not None)
    note = ""
    if within:
        note = (
            f" (within maxGPUs {cap})"
            if total <= cap
            else f" (maxGPUs {cap} caps each pool's limit, not their sum)"
        )
    if len(terms) == 1:
        return total, f"{where} {terms[0][1]}{note}"
    return total, f"{where}: " + "; ".join(t for _, t in terms) + f"; {total} in all{note}"


def _whole_term(at: str, a: Any, cap: int | None) -> tuple[tuple[int | None, str] | None, bool]:
    """A pool's whole-card allotment `a` as `derivation`'s term (None: it allots none), and
    whether maxGPUs `cap` is above it (the limit stands within the cap)."""
    if not (a.guaranteed or a.borrowing_limit):
        return None, False
    if a.borrowing_limit is None:
        if cap is not None:
            return (cap, f"{at}.whole has no borrowingLimit: maxGPUs {cap}"), False
        return (None, f"{at}.whole has no borrowingLimit and there is no maxGPUs"), False
    total = a.guaranteed + a.borrowing_limit
    text = _allotment(f"{at}.whole", a.guaranteed, a.borrowing_limit)[1]
    if cap is not None and cap < total:
        return (cap, f"{text}, capped at maxGPUs {cap}"), False
    return (total, text), cap is not None


def _derived(desired: DesiredState, q: Quota, resource: str, actual: str | None) -> str:
    """`derivation`'s words for a value gpupool keeps (`actual`; None: no limit), or only the
    fields it comes from should the two ever disagree."""
    value, words = derivation(desired, q, resource)
    if (str(value) if value is not None else None) != actual:
        return f"derived from Quota/{q.metadata.name} spec.maxGPUs and spec.pools"
    return words


def _why_empty(desired: DesiredState, observed: ObservedState, q: Quota, ns: str, what="") -> str:
    """Why a plan keeps `q`'s ResourceQuota in `ns` empty; `what`: the limits it would hold."""
    enforced = f"Quota/{q.metadata.name}" + (f" ({what})" if what else "")
    if desired.admission_controller == "kueue" and observed.kueue is not None:
        return (
            f"kueue mode: Kueue's ClusterQueue enforces {enforced}, gpupool keeps no ResourceQuota"
        )
    if ns in (observed.gated_namespaces or ()):
        return (
            f"gated namespace: gpupool's admission enforces {enforced}, "
            "the ResourceQuota is kept empty"
        )
    return f"the plan keeps no ResourceQuota for {enforced}"


def _why_pruned(old: Quota | None, head: DesiredState, ns: str) -> str:
    """Why no Quota of the head keeps the ResourceQuota `old` kept in `ns`."""
    new = head.quotas.get(old.metadata.name) if old is not None else None
    if old is None:
        why = f"no Quota lists namespace {ns}"
    elif new is None:
        why = f"Quota/{old.metadata.name} is deleted"
    elif ns not in new.spec.namespaces:
        why = f"Quota/{old.metadata.name} no longer lists namespace {ns}"
    else:
        why = f"Quota/{old.metadata.name} now names team {new.team} ({QUOTA_PREFIX}{new.team})"
    return why + ": the ResourceQuota is pruned"


def _limits(b: dict[str, str], h: dict[str, str]) -> str:
    return ", ".join(
        f"{r} {b.get(r, '-')} -> {h.get(r, '-')}"
        for r in sorted(set(b) | set(h))
        if b.get(r) != h.get(r)
    )


def quota_explanations(
    base: DesiredState,
    head: DesiredState,
    observed: ObservedState,
    kept: tuple[dict[Key, dict[str, str]], dict[Key, dict[str, str]]],
    changes: dict[str, dict[str, list[str | None]]],
) -> tuple[dict[str, dict[str, str]], dict[str, str]]:
    """Why each changed ResourceQuota row has the head's value (`quota_reasons`); and, for the
    ResourceQuotas of changed Quotas, why what does not change stays as it is
    (`quota_notes`): kept empty, or the limits it derives (a cap raised past guarantee +
    borrowingLimit leaves `nvidia.com/gpu` where it was)."""
    bo, ho = _owners(base), _owners(head)
    bd, hd = desired_resource_quotas(base), desired_resource_quotas(head)
    kept_h = kept[1]
    reasons: dict[str, dict[str, str]] = {}
    for name, diff in changes.items():
        ns, rq = name.split("/", 1)
        key = (ns, rq)
        q = ho.get(key)
        for r in diff:
            if q is None:
                why = _why_pruned(bo.get(key), head, ns)
            elif key not in kept_h and hd.get(key):
                why = _why_empty(head, observed, q, ns)
            else:
                why = _derived(head, q, r, kept_h.get(key, {}).get(r))
            reasons.setdefault(name, {})[r] = why
    changed_docs = {
        n for n in set(base.quotas) & set(head.quotas) if base.quotas[n] != head.quotas[n]
    } | (set(head.quotas) - set(base.quotas))
    candidates = {k for k in set(bd) | set(hd) if bd.get(k) != hd.get(k)} | {
        k for k, q in ho.items() if q.metadata.name in changed_docs
    }
    notes: dict[str, str] = {}
    for key in sorted(candidates):
        name = f"{key[0]}/{key[1]}"
        q = ho.get(key)
        if q is None or name in reasons and key not in kept_h:
            continue
        if key not in kept_h:
            notes[name] = (
                _why_empty(head, observed, q, key[0], _limits(bd.get(key, {}), hd[key]))
                if hd.get(key)
                else f"Quota/{q.metadata.name} sets no limit a ResourceQuota holds"
            )
            continue
        same = [(r, v) for r, v in kept_h[key].items() if r not in changes.get(name, {})]
        if same:
            notes[name] = ("" if name in changes else "unchanged: ") + "; ".join(
                f"{r} stays {v}: {_derived(head, q, r, v)}" for r, v in same
            )
    return reasons, notes


def disruption_reasons(
    base: DesiredState, head: DesiredState, head_plan: Plan, head_facts: PlanFacts
) -> dict[str, str]:
    """Workload -> why the head plan stops it, where the plan's own reason would not be true
    on its own in a list sorted by name.

    That is a preemption that enforces a team's maxGPUs (`preemptor` None): the planner stops
    the team's cheapest work one gang at a time and words each reason with the team's use as
    it counts down (10 GPUs, then 9), so read by name the counts are out of order and each
    only true after the ones stopped before it. Here every such line quotes what holds for
    all of them: the team's use as observed, its cap (and the base's, when the change moved
    it) and how many of its workloads the plan stops. Other reasons name their own cause (the
    preemptor, the idle time, the move) and are kept."""
    by_team: dict[str, list[str]] = {}
    for a in head_plan.actions:
        if isinstance(a, Preempt) and a.preemptor is None:
            q = head.quota_for_namespace(a.target.split("/", 1)[0])
            if q is not None and q.spec.max_gpus is not None:
                by_team.setdefault(q.team, []).append(a.target)
    out: dict[str, str] = {}
    for team, stopped in by_team.items():
        q = next(q for q in head.quotas.values() if q.team == team)
        cap = q.spec.max_gpus
        b = next((b for b in base.quotas.values() if b.team == team), None)
        old = (
            "no Quota" if b is None else b.spec.max_gpus if b.spec.max_gpus is not None else "none"
        )
        was = f" ({old} at base)" if old != cap else ""
        used = float(head_facts.team_usage.get(team, 0))
        n = len(stopped)
        which = "the one workload" if n == 1 else f"one of the {n} workloads"
        for w in stopped:
            out[w] = (
                f"team {team} uses {used:g} GPUs, over its cap of {cap}{was}: {which} the "
                "plan stops to bring it within the cap, the cheapest of its preemptible work "
                "that its ResourceQuota keeps from coming back"
            )
    return out


def _evictions(plan: Plan) -> dict[str, Action]:
    return {a.target: a for a in plan.actions if a.kind in EVICTION_KINDS}


def _capacity(plan: Plan, pool: str) -> dict[str, int]:
    c = plan.capacity.get(pool)
    if c is None:
        return {"whole": 0, "mig": 0, "shared": 0}
    return {m: c[f"{m}After"] for m in ("whole", "mig", "shared")}


def compare(
    base: DesiredState,
    head: DesiredState,
    observed: ObservedState,
    *,
    confirm: tuple[str, ...] = (),
) -> tuple[ChangeReport, Plan, Plan]:
    """The change report, and both plans (base, head)."""
    base_plan, base_facts = plan_with_facts(base, observed)
    head_plan, head_facts = plan_with_facts(head, observed)
    pools = sorted(set(base_plan.capacity) | set(head_plan.capacity))
    capacity = {}
    for p in pools:
        b, h = _capacity(base_plan, p), _capacity(head_plan, p)
        capacity[p] = {"base": b, "head": h, "delta": {m: h[m] - b[m] for m in b}}
    bt, ht = base_facts.targets, head_facts.targets
    # cards in a pool on both sides whose partitioning differs (cards that leave or join a
    # pool are not repartitioned by gpupool; the empty-pool gate speaks for them)
    repartitions = [
        RepartitionedCard(pool=k[0], node=k[1], gpu=k[2], base=bt[k], head=ht[k])
        for k in sorted(set(bt) & set(ht))
        if bt[k] != ht[k]
    ]
    be, he = _evictions(base_plan), _evictions(head_plan)
    reasons = disruption_reasons(base, head, head_plan, head_facts)
    disruptions = [
        Disruption(workload=w, kind=a.kind, reason=reasons.get(w, a.reason))
        for w, a in sorted(he.items())
        if w not in be
    ]
    base_cordons = {a.target for a in base_plan.actions if a.kind == "cordon"}
    drained = sorted(
        a.target for a in head_plan.actions if a.kind == "cordon" and a.target not in base_cordons
    )
    kept = _kept_quotas(base, observed), _kept_quotas(head, observed)
    quota_changes = _quota_changes(*kept)
    quota_reasons, quota_notes = quota_explanations(base, head, observed, kept, quota_changes)
    gates = _gates(
        base, head, base_plan, head_plan, len(disruptions), len(repartitions), len(drained), confirm
    )
    report = ChangeReport(
        base_revision=base.revision,
        head_revision=head.revision,
        capacity=capacity,
        policy_changes=policy_changes(base, head),
        quota_changes=quota_changes,
        quota_reasons=quota_reasons,
        quota_notes=quota_notes,
        repartitions=repartitions,
        disruptions=disruptions,
        drained_nodes=drained,
        gates=gates,
        head_summary=head_plan.summary,
        base_summary=base_plan.summary,
    )
    return report, base_plan, head_plan


def _gates(
    base, head, base_plan, head_plan, evictions, repartitions, drained, confirm
) -> list[str]:
    out = []
    policy = base.change or head.change
    if policy is not None:
        g = policy.spec.gates
        where = f"ChangePolicy/{policy.metadata.name}"
        if g.max_preemptions is not None and evictions > g.max_preemptions:
            out.append(
                f"{evictions} workloads would be preempted/moved/reclaimed by this change; "
                f"{where} allows {g.max_preemptions}"
            )
        if g.max_repartitions is not None and repartitions > g.max_repartitions:
            out.append(
                f"{repartitions} GPUs would be repartitioned; {where} allows {g.max_repartitions}"
            )
        if g.max_drained_nodes is not None and drained > g.max_drained_nodes:
            out.append(f"{drained} nodes would be drained; {where} allows {g.max_drained_nodes}")
    allow_empty = "empty-pool" in confirm or bool(head.change and head.change.spec.allow_empty_pool)
    if not allow_empty:
        for p in sorted(base.pools):
            if p not in head.pools:
                out.append(
                    f"Pool/{p} is deleted; confirm with allowEmptyPool: true in the ChangePolicy "
                    "or --confirm empty-pool"
                )
            elif (
                sum(_capacity(base_plan, p).values()) > 0
                and sum(_capacity(head_plan, p).values()) == 0
            ):
                out.append(
                    f"Pool/{p} would select no nodes; "
                    "confirm with allowEmptyPool: true or --confirm empty-pool"
                )
    allow_delete = "delete-all-quotas" in confirm or bool(
        head.change and head.change.spec.allow_delete_all_quotas
    )
    if base.quotas and not head.quotas and not allow_delete:
        out.append(
            f"every Quota ({len(base.quotas)}) is deleted; "
            "confirm with allowDeleteAllQuotas: true or --confirm delete-all-quotas"
        )
    return out
