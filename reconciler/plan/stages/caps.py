"""TODO docstring"""

from __future__ import annotations

import math
from collections import Counter

from reconciler.observe.model import (
    Workload,
)
from reconciler.plan.evictions import as_candidate, evict, stop_refusal
from reconciler.plan.objects.wanted import resource_quotas
from reconciler.plan.quotas import (
    QUOTA_PREFIX,
    quota_use,
)
from reconciler.plan.run import BUDGET, Run, suspended_job
from reconciler.plan.victims import order_victims


def enforce_team_caps(run: Run) -> None:
    """A team over its maxGPUs gives back its cheapest preemptible work, but only work its
    namespace's ResourceQuota keeps out once stopped: the pod's owner creates it again at
    once, and the API server's quota admission is the only thing that refuses it (nothing in
    gpupool holds a pod back yet). Work the quota would admit again (MIG and shared slices,
    which `maxGPUs` does not cap in a ResourceQuota; a team spread over namespaces) is left
    running: stopping it would only restart it. New demand of the team is held meanwhile."""
    quotas = resource_quotas(run)
    gated = set(run.observed.gated_namespaces or ())
    use: dict[str, Counter] = {}
    for w in run.cluster.workloads.values():
        use.setdefault(w.namespace, Counter()).update(quota_use(w.request))
    stopped: list[Workload] = []

    def stays_out(w: Workload) -> bool:
        gang = run.gang(w)
        after = {ns: Counter(c) for ns, c in use.items()}
        for m in gang:
            after[m.namespace].subtract(quota_use(m.request))
        for m in stopped + gang:
            if not m.owner_kind or m.namespace in gated or suspended_job(m):
                # not created again: no owner, or a Job suspended; or created gated and
                # held by admission until the team is under its cap
                continue
            q = run.desired.quota_for_namespace(m.namespace)
            hard = quotas.get((m.namespace, QUOTA_PREFIX + q.team), {}) if q else {}
            if not any(
                res in hard and after[m.namespace][res] + n > int(hard[res])
                for res, n in quota_use(m.request).items()
            ):
                return False
        return True

    for q in sorted(run.desired.quotas.values(), key=lambda q: q.team):
        cap = q.spec.max_gpus
        if cap is None or run.team_usage.get(q.team, 0) <= cap:
            continue
        mine = [
            w
            for w in run.cluster.workloads.values()
            if w.phase == "Running" and w.namespace in q.spec.namespaces
        ]
        refused = ""
        while run.team_usage[q.team] > cap:
            excess = float(run.team_usage[q.team] - cap)
            ok = [w for w in mine if not stop_refusal(run, w, budget=False) and stays_out(w)]
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
            for m in gang:
                use[m.namespace].subtract(quota_use(m.request))
            stopped.extend(gang)
        if BUDGET in refused:
            run.find("warning", "budget-spent", q.team, f"over its cap but the {refused}")
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
