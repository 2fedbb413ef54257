"""What every handler shares: the settings (`ApplyConfig`), the result of one step
(`Outcome`), what a step may use (`Context`), the registry the executor dispatches by
(`HANDLERS`, filled by `handles(...)`), and small helpers of more than one handler module."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from reconciler.apply.configs import DEFAULT_SHARING
from reconciler.apply.port import ApiError, ClusterOps, NodeInfo, PodInfo
from reconciler.conventions import MAX_TIME_YEAR, MIN_TIME_YEAR
from reconciler.plan.actions import Action


@dataclass(frozen=True)
class ApplyConfig:
    mig_config_namespace: str = "gpu-operator"
    mig_config_map: str = "gpupool-mig-parted-config"
    sharing_config_map: str = "gpupool-device-plugin-config"
    sharing_default_config: str = DEFAULT_SHARING
    """The device plugin's config that shares nothing, the label value of an unshared node: the
    GPU operator's `devicePlugin.config.default` (deploy/gpu-operator/values.yaml), created by the
    install."""
    sharing_timeout_seconds: float = 600.0
    """How long after `nvidia.com/device-plugin.config` was set the node's allocatable may take to
    show the config's resources (the plugin restarts and re-registers with the kubelet) before
    the step fails and the controller reports Stalled."""
    mig_timeout_seconds: float = 900.0
    """How long mig-manager may leave a reconfiguration `pending` (or unanswered) before it
    counts as failed, and how long the node agent may take to publish the new layout."""
    config_propagation_seconds: float = 150.0
    """How long a ConfigMap change takes to reach a pod that mounts it: the kubelet's sync
    period plus its ConfigMap cache TTL, one minute each by default (kubernetes.io, "Mounted
    ConfigMaps are updated automatically"), the sync period jittered by up to half of it
    (kubelet pod_workers.go, `workerResyncIntervalJitterFactor = 0.5`): 90s + 60s. mig-manager
    validates the label's config against its mounted copy and fails a config it cannot see, so
    the label waits this long after the config was written. Raise it with a kubelet whose
    `--sync-frequency` or ConfigMap cache TTL is longer."""
    mig_retries: int = 2
    """How often a reconfiguration mig-manager failed (`failed`, or `pending` past
    `mig_timeout_seconds`) is tried again, each time under a new label value naming an
    identical config; then the step fails and the controller reports Stalled."""
    emit_events: bool = True
    parallel_steps: int = 8
    """How many admissions and holds (one gang's or one pod's step each, independent of one
    another) run at once: each is a few requests, and a busy cycle has dozens (1: one by one)."""
    gone_wait_seconds: float = 0.1
    """How long an Admit step may wait, reading them again every `GONE_POLL_SECONDS`, for the
    pods it frees cards from (`Admit.after`) to be gone, when each of them is terminating and
    its deletion was asked for less than `GONE_WAIT_RECENT_SECONDS` ago: a pod whose containers
    stop at once is gone within tens of milliseconds, and its cards go to the admitted pod then
    instead of a cycle later. A pod that takes longer costs each cycle at most this, for that
    second only. The same budget bounds the wait for the DRA claims of a pod created a moment
    ago to be named in its status (`CLAIMS_WAIT_RECENT_SECONDS`). 0: never waits (the step
    reports `waiting` at once)."""


@dataclass
class Outcome:
    action: str
    status: str  # done | waiting | blocked | failed | skipped
    message: str = ""
    changed: bool = False
    """This step wrote to the cluster (Events are emitted for disruptive steps that did)."""
    stopped: bool = False
    """A preemption, reclaim or move that stopped its running pod: evicted it, or its Job is
    suspended by gpupool (now, or by an earlier action of the gang). Exactly the outcomes whose
    write-ahead `before_preempt` record should stay in the hourly budget; a blocked or failed
    eviction, a pod found gone, or a Job someone else suspended is not one."""


GONE_POLL_SECONDS = 0.01
"""How often an Admit step waiting for `after` pods to be gone reads them again."""
CLAIM_POLL_SECONDS = 0.003
"""How often, once those pods are gone, it reads their DRA claims again (`Admit.after_claims`):
Kubernetes' resourceclaim controller deallocates a claim a few ms after its pod went (0.00 s
p50, 0.01 s p95 in bench/admission_openb.py's DRA runs), so a coarser poll would be most of
the wait."""
CACHE_POLL_SECONDS = 0.002
"""How often a wait within an Admit step looks again at the watch cache's copies, when it has
them (`ClusterOps.peek_pod`, `peek_dra_object`: no request): a DRA pod's claim named in its
status, a departing pod's claim deallocated. The watch delivers a change milliseconds after the
API server made it; a read every `GONE_POLL_SECONDS` (or `CLAIM_POLL_SECONDS`) costs a round
trip to the API server on top of its pause."""
GONE_WAIT_RECENT_SECONDS = 1.0
"""Only pods whose deletion was asked for this recently are waited for within a step (either
way of the API server's clock, which stamps the deletion, and the controller's)."""
CLAIMS_WAIT_RECENT_SECONDS = 2.0
"""Only pods created this recently are waited for within a step until their DRA claims are
made (either way of the clocks, as above; `creationTimestamp` has whole seconds)."""


@dataclass
class Context:
    """What every handler may use: the port, the settings, the clock, and the plan's facts
    that span actions (checkpoint grace periods by checkpoint id)."""

    ops: ClusterOps
    cfg: ApplyConfig
    clock: Callable[[], datetime]
    grace: dict[str, float] = field(default_factory=dict)
    before_preempt: Callable[[Action, PodInfo], None] | None = None
    sleep: Callable[[float], None] = time.sleep
    """How a step waits (tests pass one that moves their fake cluster on)."""
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    """The wall clock, for times the API server stamped (a pod's deletion): `clock` is the
    plan's, which a simulation runs faster (bench/admission_openb.py); in a cluster both read
    the same time."""


A = TypeVar("A")
Handler = Callable[[Any, Context], Outcome]
HANDLERS: dict[type, Handler] = {}


def handles(
    *types: type,
) -> Callable[[Callable[[A, Context], Outcome]], Callable[[A, Context], Outcome]]:
    def register(fn: Callable[[A, Context], Outcome]) -> Callable[[A, Context], Outcome]:
        for t in types:
            HANDLERS[t] = fn
        return fn

    return register


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if not MIN_TIME_YEAR <= t.year <= MAX_TIME_YEAR:
        return None  # a year-1 or year-9999 annotation reads as absent: no sum with it overflows
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _ns_name(target: str) -> tuple[str, str]:
    ns, _, name = target.partition("/")
    return ns, name


def _node(ctx: Context, name: str) -> NodeInfo:
    node = ctx.ops.read_node(name)
    if node is None:
        raise ApiError(404, "NotFound", f'nodes "{name}" not found')
    return node
