"""Step 4: teams that run over their hard cap (say, after a PR lowered it) give back their
cheapest preemptible work, as far as their ResourceQuota keeps it from coming back."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from reconciler.observe.model import (
    Workload,
)
from reconciler.plan.evictions import as_candidate, evict, stop_refusal
from reconciler.plan.objects.wanted import resource_quotas
from reconciler.plan.quotas import (
    QUOTA_PREFIX,
    quota_use,
)
from reconciler.plan.run import BUDGET, Run, quota_use_of, suspended_job
from reconciler.plan.victims import order_victims
from reconciler.policy.models import Quota


def enforce_team_caps(run: Run) -> None:
    """A team over its maxGPUs gives back its cheapest preemptible work, but only work its
    namespace's ResourceQuota keeps out once stopped: the pod's owner creates it again at
    once, and the API server's quota admission is the only thing that refuses it (nothing in
    gpupool holds a pod back yet). Work the quota would admit again (MIG and shared slices,
    which `maxGPUs` does not cap in a ResourceQuota; a team spread over namespaces) is left
    running: stopping it would only restart it. New demand of the team is held meanwhile."""
    over = [
        q
        for q in sorted(run.desired.quotas.values(), key=lambda q: q.team)
        if q.spec.max_gpus is not None and run.team_usage.get(q.team, 0) > q.spec.max_gpus
    ]
    if not over:
        return  # what the ResourceQuotas count is read only for a team over its cap
    comeback = _Comeback(resource_quotas(run), set(run.observed.gated_namespaces or ()))
    comeback.use.update(quota_use_of(run))
    for q in over:
        cap = q.spec.max_gpus
        assert cap is not None
        if run.team_usage.get(q.team, 0) <= cap:
            continue
        refused = _stop_down_to_cap(run, q, cap, comeback)
        if BUDGET in refused:
            run.find("warning", "budget-spent", q.team, f"over its cap but {refused}")
        if run.team_usage[q.team] > cap:
            run.find(
                "warning",
                "over-cap",
                q.team,
                f"still uses {float(run.team_usage[q.team]):g} GPUs, over its cap of {cap}: "
                + (
                    refused
                    or "the rest is not preemptible yet, or its ResourceQuota would admit it "
                    "again (the pod's owner recreates it); new demand of the team is held"
                ),
            )


@dataclass
class _Comeback:
    """Whether a stopped pod would be created again and admitted by its ResourceQuota."""

    quotas: dict[tuple[str, str], dict[str, str]]
    gated: set[str]
    use: dict[str, Counter] = field(default_factory=dict)
    """Namespace -> what its pods count against its ResourceQuota (less what was stopped)."""
    stopped: list[Workload] = field(default_factory=list)

    def stays_out(self, run: Run, w: Workload) -> bool:
        gang = run.gang(w)
        after = {ns: Counter(c) for ns, c in self.use.items()}
        for m in gang:
            after[m.namespace].subtract(quota_use(m.request))
        for m in self.stopped + gang:
            if not m.owner_kind or m.namespace in self.gated or suspended_job(m):
                # not created again: no owner, or a Job suspended; or created gated and
                # held by admission until the team is under its cap
                continue
            q = run.desired.quota_for_namespace(m.namespace)
            hard = self.quotas.get((m.namespace, QUOTA_PREFIX + q.team), {}) if q else {}
            if not any(
                res in hard and after[m.namespace][res] + n > int(hard[res])
                for res, n in quota_use(m.request).items()
            ):
                return False
        return True

    def stop(self, gang: list[Workload]) -> None:
        for m in gang:
            self.use[m.namespace].subtract(quota_use(m.request))
        self.stopped.extend(gang)


def _stop_down_to_cap(run: Run, q: Quota, cap: int, comeback: _Comeback) -> str:
    """Preempt team `q`'s cheapest work that stays out until it is within `cap`; why it
    stopped short ('' when nothing refused)."""
    mine = [
        w
        for w in run.cluster.workloads.values()
        if w.phase == "Running" and w.namespace in q.spec.namespaces
    ]
    refused = ""
    while run.team_usage[q.team] > cap:
        excess = float(run.team_usage[q.team] - cap)
        ok = [
            w for w in mine if not stop_refusal(run, w, budget=False) and comeback.stays_out(run, w)
        ]
        order = order_victims(
            [as_candidate(run, w, run.cluster.pool_of(w)) for w in ok], math.ceil(excess)
        )
        if not order:
            break
        w = run.cluster.workloads[order[0].key]
        refused = stop_refusal(run, w)
        if refused:
            break
        used = run.team_usage[q.team]
        gang = run.gang(w)
        evict(
            run,
            w,
            "preempt",
            f"team {q.team} uses {float(used):g} GPUs, over its cap of {cap}; "
            f"{w.key} is the cheapest of its preemptible work its ResourceQuota keeps "
            "from coming back",
            run.cluster.pool_of(w),
        )
        comeback.stop(gang)
    return refused
