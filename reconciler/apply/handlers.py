"""One handler per action type: look at the cluster, do nothing if the effect is there, else
take one idempotent step. Each returns an `Outcome`; they talk to the cluster only through
the `ClusterOps` port, so they are table-tested against an in-memory cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from reconciler import conventions as C
from reconciler.apply.configs import (
    MIG_CONFIG_KEY,
    config_name,
    merged_mig_config,
    render_mig_parted,
    render_sharing,
    yaml_text,
)
from reconciler.apply.port import ApiError, ClusterOps, NodeInfo
from reconciler.observe.model import parse_allocation
from reconciler.plan.actions import (
    Action,
    ApplyPriorityClass,
    ApplyQuota,
    Checkpoint,
    Cordon,
    Eviction,
    LabelNode,
    MigReconfigure,
    Move,
    Preempt,
    Reclaim,
    Repartition,
    Scale,
    SetSharing,
    Uncordon,
)

STALE_CHECKPOINT_SECONDS = 3600.0  # a checkpoint request older than grace + this is asked again


@dataclass(frozen=True)
class ApplyConfig:
    mig_config_namespace: str = "gpu-operator"
    mig_config_map: str = "gpupool-mig-parted-config"
    sharing_config_map: str = "gpupool-device-plugin-config"
    mig_timeout_seconds: float = 900.0
    config_propagation_seconds: float = 120.0
    """How long a ConfigMap change takes to reach a pod that mounts it: the kubelet's sync
    period plus its ConfigMap cache TTL, one minute each by default (kubernetes.io, "Mounted
    ConfigMaps are updated automatically"). mig-manager validates the label's config against
    its mounted copy and fails a config it cannot see, so the label waits this long."""
    emit_events: bool = True


@dataclass
class Outcome:
    action: str
    status: str  # done | waiting | blocked | failed | skipped
    message: str = ""
    changed: bool = False
    """This step wrote to the cluster (Events are emitted for disruptive steps that did)."""


@dataclass
class Context:
    """What every handler may use: the port, the settings, the clock, and the plan's facts
    that span actions (checkpoint grace periods by checkpoint id)."""

    ops: ClusterOps
    cfg: ApplyConfig
    clock: Callable[[], datetime]
    grace: dict[str, float] = field(default_factory=dict)
    before_preempt: Callable[[Action], None] | None = None


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
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _ns_name(target: str) -> tuple[str, str]:
    ns, _, name = target.partition("/")
    return ns, name


def _node(ctx: Context, name: str) -> NodeInfo:
    node = ctx.ops.read_node(name)
    if node is None:
        raise ApiError(404, "NotFound", f'nodes "{name}" not found')
    return node


# ----------------------------------------------------------------------------- nodes
@handles(Cordon)
def cordon(a: Cordon, ctx: Context) -> Outcome:
    node = _node(ctx, a.target)
    if node.unschedulable:
        return Outcome(a.id, "done", "already cordoned")
    ctx.ops.patch_node(
        a.target, unschedulable=True, annotations={C.CORDONED_FOR_ANN: "repartition"}
    )
    return Outcome(a.id, "done", "cordoned", changed=True)


@handles(Uncordon)
def uncordon(a: Uncordon, ctx: Context) -> Outcome:
    node = _node(ctx, a.target)
    if not node.unschedulable:
        return Outcome(a.id, "done", "already schedulable")
    if C.CORDONED_FOR_ANN not in node.annotations:
        return Outcome(a.id, "done", "cordoned by someone else: left alone")
    mig = node.labels.get(C.MIG_CONFIG_LABEL, "")
    if mig.startswith("gpupool-") and node.labels.get(C.MIG_STATE_LABEL) == "pending":
        return Outcome(a.id, "waiting", f"mig-manager is still applying {mig}")
    ctx.ops.patch_node(a.target, unschedulable=None, annotations={C.CORDONED_FOR_ANN: None})
    return Outcome(a.id, "done", "uncordoned", changed=True)


@handles(LabelNode)
def label_node(a: LabelNode, ctx: Context) -> Outcome:
    node = _node(ctx, a.target)
    if all(node.labels.get(k) == v for k, v in a.labels.items()):
        return Outcome(a.id, "done", "labels present")
    ctx.ops.patch_node(a.target, labels=dict(a.labels))
    return Outcome(a.id, "done", "labelled", changed=True)


def _gpus_busy(ctx: Context, node: str, gpus: frozenset[int]) -> list[str]:
    """GPU pods on the node that hold one of those cards. Which card a pod holds comes from the
    node agent's `GpuNodeState` `status.pods` (the kubelet's PodResources, as the agent read it);
    a GPU pod it does not list (started since, or an agent that publishes no pods) falls back to
    the `gpupool.io/gpus` annotation, and without that counts as holding every card."""
    state = ctx.ops.read_node_state(node) or {}
    published = (state.get("status") or {}).get("pods")
    held_by: dict[str, set[int]] = {}
    for entry in published or []:
        key = f"{entry.get('namespace')}/{entry.get('name')}"
        held_by[key] = {int(a.get("gpu", -1)) for a in entry.get("allocations") or []}
    busy = []
    for p in ctx.ops.pods_on_node(node):
        if p.phase in ("Succeeded", "Failed") or not p.gpu_resources:
            continue
        held = held_by.get(p.key)
        if held is None:
            ann = p.annotations.get(C.GPUS_ANN)
            held = {x.gpu for x in parse_allocation(ann)} if ann else None
        if held is None or held & gpus:
            busy.append(p.key)
    return sorted(busy)


def _agent_shows(ctx: Context, a: MigReconfigure) -> bool:
    """The node agent's GpuNodeState shows the target MIG layout on every changed GPU (so the
    next plan sees it and does not repartition again). No object: nothing to wait for."""
    obj = ctx.ops.read_node_state(a.target)
    if obj is None:
        return True
    gpus = {g.get("index"): g for g in ((obj.get("status") or {}).get("gpus") or [])}
    if not gpus:
        return True
    for card in a.layout:
        if card.gpu not in a.changed_gpus:
            continue
        g = gpus.get(card.gpu) or {}
        have = (
            sorted(i.get("profile") for i in g.get("migInstances") or [])
            if g.get("migEnabled")
            else None
        )
        want = sorted(card.profiles) if card.profiles else None
        if have != want and not (want is None and not have):
            return False
    return True


def _put_named_config(ctx: Context, config_map: str, key: str, spec: dict) -> None:
    """Device-plugin config: one key per named config (the node label selects the key)."""
    ns = ctx.cfg.mig_config_namespace
    text = yaml_text(spec)
    cm = ctx.ops.read_config_map(ns, config_map)
    if cm is None:
        ctx.ops.write_config_map(ns, config_map, {key: text}, resource_version=None)
    elif cm.data.get(key) != text:
        ctx.ops.write_config_map(ns, config_map, {key: text}, resource_version=cm.resource_version)


def _put_mig_config(ctx: Context, name: str, spec: dict) -> bool:
    """mig-parted config (`version: v1`, `mig-configs:`) in the ConfigMap's `config.yaml`,
    written with the resourceVersion read, so two writers never lose one. True: it wrote."""
    ns = ctx.cfg.mig_config_namespace
    cm = ctx.ops.read_config_map(ns, ctx.cfg.mig_config_map)
    text = merged_mig_config(
        None if cm is None else cm.data.get(MIG_CONFIG_KEY, ""),
        name,
        spec["mig-configs"]["gpupool"],
    )
    if text is not None:
        ctx.ops.write_config_map(
            ns,
            ctx.cfg.mig_config_map,
            {MIG_CONFIG_KEY: text},
            resource_version=None if cm is None else cm.resource_version,
        )
        return True
    return False


def _propagation_left(
    ctx: Context, node: NodeInfo, name: str, *, rewritten: bool
) -> tuple[float, bool]:
    """Seconds until the mounted copy of mig-manager's ConfigMap surely holds config `name`,
    counted from the first time this node's step saw it written (recorded on the node, so a
    restart of the controller does not shorten the wait) or from now when it was just
    (re)written; and whether the node's mark was written now."""
    mark = node.annotations.get(C.MIG_CONFIG_WRITTEN_ANN, "")
    seen, _, at = mark.partition("@")
    since = parse_time(at) if seen == name and not rewritten else None
    if since is None:
        ctx.ops.patch_node(
            node.name, annotations={C.MIG_CONFIG_WRITTEN_ANN: f"{name}@{ctx.clock().isoformat()}"}
        )
        return ctx.cfg.config_propagation_seconds, True
    return ctx.cfg.config_propagation_seconds - (ctx.clock() - since).total_seconds(), False


def _repartition(
    a: Repartition, ctx: Context, *, label: str, spec: dict, state_label: str | None
) -> Outcome:
    node = _node(ctx, a.target)
    if not node.unschedulable:
        return Outcome(a.id, "blocked", "node is not cordoned")
    name = config_name(spec)
    if node.labels.get(label) == name:
        if state_label is None:
            return Outcome(a.id, "done", f"{label}={name}")
        st = node.labels.get(state_label, "")
        if st == "failed":
            return Outcome(a.id, "failed", f"mig-manager reports failed for {name}")
        since = parse_time(node.annotations.get(C.RECONFIGURE_SINCE_ANN))
        if st == "success":
            if isinstance(a, MigReconfigure) and _agent_shows(ctx, a):
                return Outcome(a.id, "done", f"mig-manager applied {name}")
            msg = (
                f"mig-manager applied {name}; waiting for the node agent to publish the new layout"
            )
        else:
            msg = f"{state_label}={st or 'unset'}"
        if since and (ctx.clock() - since).total_seconds() > ctx.cfg.mig_timeout_seconds:
            return Outcome(
                a.id, "failed", f"{msg}: stuck for over {int(ctx.cfg.mig_timeout_seconds)}s"
            )
        return Outcome(a.id, "waiting", msg)
    busy = _gpus_busy(ctx, a.target, a.changed_gpus)
    if busy:
        return Outcome(a.id, "waiting", f"GPUs still in use by {', '.join(busy)}")
    if state_label:
        wrote = _put_mig_config(ctx, name, spec)
        left, marked = _propagation_left(ctx, node, name, rewritten=wrote)
        if left > 0:
            return Outcome(
                a.id,
                "waiting",
                f"config {name} written; mig-manager reads a mounted copy: "
                f"{int(left)}s before {label} may name it",
                changed=wrote or marked,
            )
    else:
        _put_named_config(ctx, ctx.cfg.sharing_config_map, name, spec)
    partition = {str(c.gpu): {"from": c.before, "to": c.after} for c in a.cards}
    labels: dict[str, str | None] = {label: name}
    annotations: dict[str, str | None] = {
        C.RECONFIGURE_SINCE_ANN: ctx.clock().isoformat(),
        C.PARTITION_ANN: json.dumps(partition, sort_keys=True),
    }
    if state_label:
        labels[state_label] = None  # mig-manager writes it afresh
    else:  # the device plugin applies its config on the label change: record the slices
        slices = {str(c.gpu): c.slices for c in a.shared_slices}
        annotations[C.SHARED_SLICES_ANN] = json.dumps(slices, sort_keys=True)
    ctx.ops.patch_node(a.target, labels=labels, annotations=annotations)
    return Outcome(a.id, "waiting" if state_label else "done", f"{label}={name}", changed=True)


@handles(MigReconfigure)
def mig_reconfigure(a: MigReconfigure, ctx: Context) -> Outcome:
    return _repartition(
        a, ctx, label=C.MIG_CONFIG_LABEL, spec=render_mig_parted(a), state_label=C.MIG_STATE_LABEL
    )


@handles(SetSharing)
def set_sharing(a: SetSharing, ctx: Context) -> Outcome:
    return _repartition(
        a, ctx, label=C.DEVICE_PLUGIN_CONFIG_LABEL, spec=render_sharing(a), state_label=None
    )


# ----------------------------------------------------------------------------- workloads
@handles(Checkpoint)
def checkpoint(a: Checkpoint, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    pod = ctx.ops.read_pod(ns, name)
    if pod is None:
        return Outcome(a.id, "done", "pod is gone")
    asked = parse_time(pod.annotations.get(C.CHECKPOINT_REQUESTED_ANN))
    if asked is not None:
        age = (ctx.clock() - asked).total_seconds()
        if age <= a.grace_period_seconds + STALE_CHECKPOINT_SECONDS:
            return Outcome(
                a.id, "done", f"requested at {pod.annotations[C.CHECKPOINT_REQUESTED_ANN]}"
            )
        # left over from an earlier, abandoned plan: ask again, and wait the grace again
    # a done mark left from an earlier request must not cut this one's grace period short
    ctx.ops.annotate_pod(
        ns, name, {C.CHECKPOINT_REQUESTED_ANN: ctx.clock().isoformat(), C.CHECKPOINT_DONE_ANN: None}
    )
    return Outcome(a.id, "done", "checkpoint requested", changed=True)


def _grace_left(a: Eviction, ctx: Context, annotations: dict[str, str]) -> float:
    ck = next((d for d in a.depends_on if d.startswith("checkpoint:")), None)
    if ck is None:
        return 0.0
    grace = ctx.grace.get(ck, 0.0)
    asked = parse_time(annotations.get(C.CHECKPOINT_REQUESTED_ANN))
    if asked is None:
        return grace
    if annotations.get(C.CHECKPOINT_DONE_ANN):
        return 0.0
    return grace - (ctx.clock() - asked).total_seconds()


@handles(Preempt, Reclaim, Move)
def evict(a: Eviction, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    pod = ctx.ops.read_pod(ns, name)
    if pod is None:
        return Outcome(a.id, "done", "pod is gone")
    if pod.deleting:
        return Outcome(a.id, "done", "pod is terminating")
    left = _grace_left(a, ctx, pod.annotations)
    if left > 0:
        return Outcome(a.id, "waiting", f"checkpoint grace period: {int(left)}s left")
    if isinstance(a, Move) and a.to_node and pod.annotations.get(C.MOVE_TO_ANN) != a.to_node:
        ctx.ops.annotate_pod(ns, name, {C.MOVE_TO_ANN: a.to_node})
    if ctx.before_preempt is not None:  # every eviction kind spends the hourly budget
        ctx.before_preempt(a)
    try:
        ctx.ops.evict_pod(ns, name)
    except ApiError as exc:
        if exc.status == 429:
            return Outcome(
                a.id,
                "blocked",
                f"a PodDisruptionBudget does not allow it now; retried next cycle ({exc.message})",
            )
        if exc.status == 404:
            return Outcome(a.id, "done", "pod is gone")
        raise
    return Outcome(a.id, "done", "evicted", changed=True)


@handles(Scale)
def scale(a: Scale, ctx: Context) -> Outcome:
    """One patch sets replicas and the last-scale annotation together (a crash cannot leave one
    without the other), guarded by the resourceVersion read (no lost update)."""
    ns, name = _ns_name(a.target)
    cur = ctx.ops.read_workload(a.workload_kind, ns, name)
    if cur.replicas == a.to_replicas:
        return Outcome(a.id, "done", f"already {a.to_replicas} replicas")
    if cur.replicas != a.from_replicas:
        return Outcome(
            a.id,
            "skipped",
            f"replicas changed to {cur.replicas} since the plan; replanned next cycle",
        )
    ctx.ops.scale_workload(
        a.workload_kind,
        ns,
        name,
        replicas=a.to_replicas,
        resource_version=cur.resource_version,
        annotations={C.LAST_SCALE_ANN: ctx.clock().isoformat()},
    )
    return Outcome(a.id, "done", f"{cur.replicas} -> {a.to_replicas} replicas", changed=True)


# ----------------------------------------------------------------------------- objects
@handles(ApplyQuota)
def quota(a: ApplyQuota, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    if not ctx.ops.namespace_exists(ns):
        return Outcome(a.id, "blocked", f"namespace {ns} does not exist")
    ctx.ops.server_side_apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY},
            },
            "spec": {"hard": dict(a.hard)},
        }
    )
    return Outcome(a.id, "done", "applied", changed=True)


@handles(ApplyPriorityClass)
def priority_class(a: ApplyPriorityClass, ctx: Context) -> Outcome:
    cur = ctx.ops.read_priority_class(a.target)
    # value and preemptionPolicy are immutable in Kubernetes: replace the object
    if cur is not None and (cur.value != a.value or cur.preemption_policy != a.preemption_policy):
        ctx.ops.delete_priority_class(a.target)
    ctx.ops.server_side_apply(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": a.target, "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY}},
            "value": a.value,
            "preemptionPolicy": a.preemption_policy,
            "description": "managed by gpupool",
        }
    )
    return Outcome(a.id, "done", "applied", changed=True)
