"""Every metric gpupool exports, declared in one place (its own registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

RECONCILE_DURATION = Histogram(
    "gpupool_reconcile_duration_seconds",
    "Time of one reconcile cycle (read, observe, plan, apply).",
    registry=REGISTRY,
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
RECONCILES = Counter(
    "gpupool_reconciles_total", "Reconcile cycles by result.", ["result"], registry=REGISTRY
)
ACTIONS = Counter(
    "gpupool_actions_total",
    "Plan actions carried out, by kind and outcome.",
    ["kind", "result"],
    registry=REGISTRY,
)
DRIFT = Gauge(
    "gpupool_drift_actions",
    "Actions in the latest plan (0 = the cluster matches git).",
    registry=REGISTRY,
)
GPUS = Gauge(
    "gpupool_gpus",
    "GPUs by pool and partition, as observed.",
    ["pool", "partition"],
    registry=REGISTRY,
)
TEAM_USAGE = Gauge(
    "gpupool_team_gpus_used",
    "GPUs a team's running workloads hold, in card equivalents.",
    ["team"],
    registry=REGISTRY,
)
TEAM_QUOTA = Gauge(
    "gpupool_team_gpus_cap",
    "A team's hard cap in card equivalents (absent: no cap).",
    ["team"],
    registry=REGISTRY,
)
LEADER = Gauge("gpupool_leader", "1 while this replica holds the lease.", registry=REGISTRY)
SUSPENDED = Gauge("gpupool_suspended", "1 while reconciliation is suspended.", registry=REGISTRY)
LAST_SUCCESS = Gauge(
    "gpupool_last_success_timestamp_seconds",
    "When a cycle last completed without error.",
    registry=REGISTRY,
)
CACHE_BEHIND = Counter(
    "gpupool_cache_behind_total",
    "Cycles that listed afresh because the watch cache had not seen gpupool's own last writes.",
    registry=REGISTRY,
)
UNREADABLE = Gauge(
    "gpupool_unreadable_objects",
    "Objects the last cycle's snapshot left out or read in part because they do not parse "
    "(each has a finding and an Event).",
    registry=REGISTRY,
)
PLANS = Counter(
    "gpupool_plans_total",
    "Plans by how they were made: full (planned afresh) or reused (nothing the last plan was "
    "made from changed).",
    ["mode"],
    registry=REGISTRY,
)
