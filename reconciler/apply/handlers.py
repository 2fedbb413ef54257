"""One handler per action type: look at the cluster, do nothing if the effect is there, else
take one idempotent step. Each returns an `Outcome`; they talk to the cluster only through
the `ClusterOps` port, so they are table-tested against an in-memory cluster."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from reconciler import conventions as C
from reconciler.apply.configs import (
    DEFAULT_SHARING,
    MIG_CONFIG_KEY,
    MPS_MAX_REPLICAS,
    attempt_name,
    config_name,
    merged_mig_config,
    mig_stages,
    mode_changes,
    render_sharing,
    sharing_resources,
    split_attempt,
    yaml_text,
)
from reconciler.apply.port import ApiError, ClusterOps, NodeInfo, PodInfo
from reconciler.observe.model import parse_allocation
from reconciler.plan.actions import (
    Action,
    Admit,
    ApplyKueueObject,
    ApplyPriorityClass,
    ApplyQuota,
    Checkpoint,
    Cordon,
    Eviction,
    Hold,
    LabelNode,
    MigReconfigure,
    Move,
    Preempt,
    PruneKueueObject,
    PrunePriorityClass,
    PruneQuota,
    Reclaim,
    Repartition,
    Resume,
    Scale,
    SetScaleEnvelope,
    SetSharing,
    Uncordon,
)
from reconciler.policy.catalog import MigModeChange, default_catalog

STALE_CHECKPOINT_SECONDS = 3600.0  # a checkpoint request older than grace + this is asked again


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


@dataclass
class Context:
    """What every handler may use: the port, the settings, the clock, and the plan's facts
    that span actions (checkpoint grace periods by checkpoint id)."""

    ops: ClusterOps
    cfg: ApplyConfig
    clock: Callable[[], datetime]
    grace: dict[str, float] = field(default_factory=dict)
    before_preempt: Callable[[Action, PodInfo], None] | None = None


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
            try:
                held = {x.gpu for x in parse_allocation(ann)} if ann else None
            except ValueError:  # unreadable (a tenant's "all"): it may hold any card
                held = None
        if held is None or held & gpus:
            busy.append(p.key)
    return sorted(busy)


def _put_named_config(ctx: Context, config_map: str, key: str, spec: dict) -> bool:
    """Device-plugin config: one key per named config (the node label selects the key), merged
    into the ConfigMap with the resourceVersion read. True: it wrote."""
    ns = ctx.cfg.mig_config_namespace
    text = yaml_text(spec)
    cm = ctx.ops.read_config_map(ns, config_map)
    if cm is None:
        ctx.ops.write_config_map(ns, config_map, {key: text}, resource_version=None)
    elif cm.data.get(key) != text:
        ctx.ops.write_config_map(ns, config_map, {key: text}, resource_version=cm.resource_version)
    else:
        return False
    return True


# The device plugin's protocol, as NVIDIA/k8s-device-plugin implements it (commit 1b826acc6):
# * cmd/config-manager/main.go: the config-manager sidecar watches the node's
#   `nvidia.com/device-plugin.config` (on add and whenever it changes) and selects that key of its
#   MOUNTED copy of the ConfigMap, or the default config when the label is empty; a key its copy
#   does not have ends the sidecar ("specified config ... does not exist"), and the kubelet
#   restarts it until the copy has it. So a named config is written, and the label waits
#   `config_propagation_seconds` after the write (the time is kept on the node in
#   `gpupool.io/sharing-config-written`), as for mig-manager. The install's `default` is in every
#   copy from the start: no wait.
# * api/config/v1/replicas.go: `replicas` >= 2, `devices` ignored: the config applies to every
#   card of the node not in MIG mode (configs.render_sharing).
# * The new resources are real only when the kubelet shows them in the node's
#   `status.allocatable` (the plugin restarts with the new config and re-registers; with MPS it
#   also waits for the MPS control daemon, internal/plugin/mps.go `waitForDaemon`). The step is
#   done only then; past `sharing_timeout_seconds` after the label it fails (Stalled).
# * internal/plugin/mps.go `getMPSOptions`: an MPS config on a node with a MIG device fails the
#   plugin ("sharing using MPS is not supported for MIG devices"), and with FAIL_ON_INIT_ERROR
#   the node then advertises no GPU at all: refused here before anything is written.


def _quantity(value: str | None) -> int:
    """An extended resource's count in allocatable ("8"); anything unreadable counts as 0."""
    try:
        return int(str(value or "0"))
    except ValueError:
        return 0


def _advertised(node: NodeInfo, want: dict[str, int]) -> bool:
    return all(_quantity(node.allocatable.get(k)) == n for k, n in want.items())


def _shown(node: NodeInfo, want: dict[str, int]) -> str:
    return ", ".join(f"{k}={_quantity(node.allocatable.get(k))}" for k in want)


def _mig_cards(state: dict | None) -> list[int]:
    return sorted(int(g.get("index", -1)) for g in _node_gpus(state) if g.get("migEnabled"))


@handles(SetSharing)
def set_sharing(a: SetSharing, ctx: Context) -> Outcome:
    """Level-triggered over the node's label and allocatable: the label names the config (the
    install's `default` for no sharing) and allocatable shows what it advertises -> done, without
    writes; the label names it but allocatable does not show it yet -> waiting, failed past
    `sharing_timeout_seconds`; else, once cordoned and the changed cards idle, write the config,
    wait for the mounted copies, then set the label."""
    label = C.DEVICE_PLUGIN_CONFIG_LABEL
    node = _node(ctx, a.target)
    spec = render_sharing(a)
    default = ctx.cfg.sharing_default_config
    name = default if spec is None else config_name(spec)
    want = sharing_resources(a)
    current = node.labels.get(label) or ""
    selected = current == name or (spec is None and not current)
    if selected and _advertised(node, want):
        return Outcome(a.id, "done", f"{label}={name}; allocatable shows {_shown(node, want)}")
    if not node.unschedulable:
        return Outcome(a.id, "blocked", "node is not cordoned")
    if selected:
        return _sharing_progress(a, ctx, node, name, want)
    if a.strategy == "mps" and a.slices is not None:
        refused = _mps_refused(a, ctx)
        if refused:
            return Outcome(a.id, "failed", refused)
    busy = _gpus_busy(ctx, a.target, a.changed_gpus)
    if busy:
        return Outcome(a.id, "waiting", f"GPUs still in use by {', '.join(busy)}")
    if spec is not None:  # `default` is in every mounted copy from the install on: no wait
        wrote = _put_named_config(ctx, ctx.cfg.sharing_config_map, name, spec)
        left, marked = _propagation_left(
            ctx, node, name, rewritten=wrote, mark=C.SHARING_CONFIG_WRITTEN_ANN
        )
        if left > 0:
            return Outcome(
                a.id,
                "waiting",
                f"config {name} written; the device plugin's config-manager reads a mounted "
                f"copy: {int(left)}s before {label} may name it",
                changed=wrote or marked,
            )
    ctx.ops.patch_node(
        a.target,
        labels={label: name},
        annotations={
            C.RECONFIGURE_SINCE_ANN: ctx.clock().isoformat(),
            C.PARTITION_ANN: json.dumps(_partition(a), sort_keys=True),
        },
    )
    return Outcome(
        a.id,
        "waiting",
        f"{label}={name}; waiting for allocatable to show {_shown_want(want)}",
        changed=True,
    )


def _shown_want(want: dict[str, int]) -> str:
    return ", ".join(f"{k}={n}" for k, n in want.items())


def _mps_refused(a: SetSharing, ctx: Context) -> str:
    """Why the device plugin would refuse this MPS config on the node ("" when it would not)."""
    if (a.slices or 0) > MPS_MAX_REPLICAS:
        return (
            f"MPS serves at most {MPS_MAX_REPLICAS} clients per card; {a.slices} slices would "
            f"stop the device plugin on {a.target}"
        )
    mig = _mig_cards(ctx.ops.read_node_state(a.target))
    if mig:
        return (
            f"the device plugin refuses MPS on a node with MIG devices (GPU "
            f"{', '.join(map(str, mig))} in MIG mode) and would stop on {a.target}"
        )
    return ""


def _sharing_progress(
    a: SetSharing, ctx: Context, node: NodeInfo, name: str, want: dict[str, int]
) -> Outcome:
    """The label names the config; allocatable does not show its resources yet."""
    label = C.DEVICE_PLUGIN_CONFIG_LABEL
    msg = (
        f"{label}={name}; waiting for allocatable to show {_shown_want(want)} "
        f"(now {_shown(node, want)})"
    )
    since = parse_time(node.annotations.get(C.RECONFIGURE_SINCE_ANN))
    if since is None:  # lost (or never written: a label someone else set): count from now
        ctx.ops.patch_node(a.target, annotations={C.RECONFIGURE_SINCE_ANN: ctx.clock().isoformat()})
        return Outcome(a.id, "waiting", msg, changed=True)
    age = (ctx.clock() - since).total_seconds()
    timeout = ctx.cfg.sharing_timeout_seconds
    if age > timeout:
        return Outcome(
            a.id,
            "failed",
            f"{msg}: stuck for over {int(timeout)}s; {a.target} stays cordoned: see the "
            f"nvidia-device-plugin pod on it (config-manager and plugin logs)",
        )
    return Outcome(a.id, "waiting", msg)


def _partition(a: Repartition) -> dict:
    return {str(c.gpu): {"from": c.before, "to": c.after} for c in a.cards}


# ----------------------------------------------------------------------------- MIG
# mig-manager's protocol, as NVIDIA/mig-parted implements it (commit bd7160f4):
# * cmd/nvidia-mig-manager/main.go: an informer hands the node's `nvidia.com/mig.config` over
#   when it is added and whenever its VALUE changes (`UpdateFunc`: oldLabel != newLabel); the
#   main loop runs one reconfiguration per value handed over and, on an error, logs it and waits
#   for the next change. A `failed` state therefore stays until the label's value changes.
# * pkg/mig/reconfigure/reconfigure.go `Run`: `nvidia-mig-parted assert --valid-config` of the
#   label's config against the config FILE (the operator's ConfigMap mounted as a volume,
#   NVIDIA/gpu-operator controllers/object_controls.go `TransformMIGManager`, CONFIG_FILE=
#   /mig-parted-config/config.yaml) -> `failed` when it is not there; already applied ->
#   `success`; else `pending`, stop the GPU clients, apply, restart them, `success`; an error on
#   the way -> `failed`, except that a GPU client that does not stop in time
#   (`waitForPodsToBeDeleted`) returns with the state left `pending`.
#
# Why the executor waits for the mounted copy instead of declaring every config ahead: the
# configs are layouts the planner picks from demand and policy per node and per plan (any mix
# of profiles over 8 cards), so they cannot be enumerated at install; and nothing in the cluster
# tells when a pod's mounted copy holds a given key (the kubelet writes the files, mig-manager
# reports no inventory). So a config is written, the time of that write is kept on the node
# (`gpupool.io/mig-config-written`, surviving controller restarts), and the label waits the
# kubelet's worst-case refresh (`config_propagation_seconds`), restarting whenever gpupool
# (re)writes the entry. The retry names are declared ahead, with their config: they are the
# only configs known in advance.


def _node_gpus(state: dict | None) -> list[dict]:
    return list(((state or {}).get("status") or {}).get("gpus") or [])


def _mode_change_cost(node: NodeInfo, state: dict | None) -> tuple[MigModeChange, str]:
    """What a MIG mode change costs on this node's model (catalog `mig_mode_change`), and the
    model's name. Unknown model: "node", the safe assumption."""
    cat = default_catalog()
    product = node.labels.get(C.PRODUCT_LABEL)
    model = cat.model_for_product(product) if product else None
    for g in _node_gpus(state):
        if model is not None:
            break
        name = g.get("model") or ""
        model = cat.model(name) or cat.model_for_product(name)
    if model is None:
        return "node", product or "an unknown GPU model"
    return model.mig_mode_change, model.name


def _agent_shows(state: dict | None, a: MigReconfigure) -> bool:
    """The node agent's GpuNodeState shows the target MIG layout on every changed GPU (so the
    next plan sees it and does not repartition again). No object: nothing to wait for."""
    if state is None:
        return True
    gpus = {g.get("index"): g for g in _node_gpus(state)}
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


def _put_mig_config(ctx: Context, entries: dict[str, list]) -> bool:
    """mig-parted config (`version: v1`, `mig-configs:`) in the ConfigMap's `config.yaml`, with
    `entries` added, written with the resourceVersion read, so two writers never lose one.
    True: it wrote."""
    ns = ctx.cfg.mig_config_namespace
    cm = ctx.ops.read_config_map(ns, ctx.cfg.mig_config_map)
    text = merged_mig_config(None if cm is None else cm.data.get(MIG_CONFIG_KEY, ""), entries)
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
    ctx: Context,
    node: NodeInfo,
    name: str,
    *,
    rewritten: bool,
    mark: str = C.MIG_CONFIG_WRITTEN_ANN,
) -> tuple[float, bool]:
    """Seconds until the mounted copy of a ConfigMap (mig-manager's, or the device plugin's with
    `mark` its annotation) surely holds config `name` (and the entries written with it), counted
    from the first time this node's step saw it written (recorded on the node in the annotation
    `mark`, so a restart of the controller does not shorten the wait) or from now when it was
    just (re)written; and whether the node's mark was written now."""
    seen, _, at = node.annotations.get(mark, "").partition("@")
    since = parse_time(at) if seen == name and not rewritten else None
    if since is None:
        ctx.ops.patch_node(node.name, annotations={mark: f"{name}@{ctx.clock().isoformat()}"})
        return ctx.cfg.config_propagation_seconds, True
    return ctx.cfg.config_propagation_seconds - (ctx.clock() - since).total_seconds(), False


@dataclass(frozen=True)
class _MigPlan:
    """What one MigReconfigure asks of mig-manager on its node."""

    stages: list[tuple[str, list]]
    """(config name, entry) in the order they are applied; the last lists every card."""
    whole_node: bool
    """A MIG mode change on a model whose mode change resets every GPU of the node."""
    model: str


def _mig_plan(a: MigReconfigure, node: NodeInfo, state: dict | None) -> _MigPlan:
    cost, model = _mode_change_cost(node, state)
    mig_now = {int(g["index"]): bool(g.get("migEnabled")) for g in _node_gpus(state)}
    stages = [
        (config_name(spec), spec["mig-configs"]["gpupool"])
        for spec in mig_stages(a, cost=cost, mig_now=mig_now)
    ]
    return _MigPlan(stages, cost == "node" and bool(mode_changes(a, mig_now)), model)


def _mig_label(
    a: MigReconfigure,
    ctx: Context,
    node: NodeInfo,
    plan: _MigPlan,
    stage: int,
    attempt: int,
    note: str = "",
) -> Outcome:
    """Point mig-manager at attempt `attempt` of stage `stage`: once the cards are idle, the
    config (with every stage and retry name of this reconfiguration) is in the ConfigMap, and
    the mounted copies have had the time to show it. Never labels before."""
    label = C.MIG_CONFIG_LABEL
    if plan.whole_node:  # mig-parted resets every GPU of the node for the mode change
        cards = frozenset(c.gpu for c in a.layout) | a.changed_gpus
        why = f" (a MIG mode change on {plan.model} resets every GPU of the node)"
    else:
        cards, why = a.changed_gpus, ""
    busy = _gpus_busy(ctx, a.target, cards)
    if busy:
        return Outcome(a.id, "waiting", f"{note}GPUs still in use by {', '.join(busy)}{why}")
    family = {
        attempt_name(name, k): entry
        for name, entry in plan.stages
        for k in range(ctx.cfg.mig_retries + 1)
    }
    wrote = _put_mig_config(ctx, family)
    left, marked = _propagation_left(ctx, node, plan.stages[0][0], rewritten=wrote)
    value = attempt_name(plan.stages[stage][0], attempt)
    if left > 0:
        return Outcome(
            a.id,
            "waiting",
            f"{note}config {value} written; mig-manager reads a mounted copy: "
            f"{int(left)}s before {label} may name it",
            changed=wrote or marked,
        )
    ctx.ops.patch_node(
        a.target,
        labels={label: value, C.MIG_STATE_LABEL: None},  # mig-manager writes the state afresh
        annotations={
            C.RECONFIGURE_SINCE_ANN: ctx.clock().isoformat(),
            C.PARTITION_ANN: json.dumps(_partition(a), sort_keys=True),
        },
    )
    return Outcome(a.id, "waiting", f"{note}{label}={value}", changed=True)


@handles(MigReconfigure)
def mig_reconfigure(a: MigReconfigure, ctx: Context) -> Outcome:
    """Level-triggered over the node's labels: which of this reconfiguration's configs the label
    names (stage and attempt, `split_attempt`) and what mig-manager says of it decide the next
    step. `failed` (or `pending` past the timeout: mig-manager gave up without saying so) is
    retried by a new label value naming an identical config, at most `mig_retries` times and no
    sooner than a propagation period after the previous label; then the step fails with the
    reason, and the node stays cordoned under a Stalled condition that says why."""
    node = _node(ctx, a.target)
    if not node.unschedulable:
        return Outcome(a.id, "blocked", "node is not cordoned")
    state = ctx.ops.read_node_state(a.target)
    plan = _mig_plan(a, node, state)
    names = [n for n, _ in plan.stages]
    value = node.labels.get(C.MIG_CONFIG_LABEL, "")
    ours = split_attempt(value)
    if ours is None or ours[0] not in names:
        return _mig_label(a, ctx, node, plan, 0, 0)
    since = parse_time(node.annotations.get(C.RECONFIGURE_SINCE_ANN))
    if since is None:  # lost (edited away): the timeout and the retry backoff count from now
        since = ctx.clock()
        ctx.ops.patch_node(a.target, annotations={C.RECONFIGURE_SINCE_ANN: since.isoformat()})
        out = _mig_progress(a, ctx, node, plan, state, ours, 0.0)
        return dataclasses.replace(out, changed=True)
    return _mig_progress(a, ctx, node, plan, state, ours, (ctx.clock() - since).total_seconds())


def _mig_progress(
    a: MigReconfigure,
    ctx: Context,
    node: NodeInfo,
    plan: _MigPlan,
    state: dict | None,
    ours: tuple[str, int],
    age: float,
) -> Outcome:
    """The label names attempt `ours[1]` of one of `plan`'s configs, set `age` seconds ago:
    what mig-manager says of it decides the next step."""
    value = node.labels.get(C.MIG_CONFIG_LABEL, "")
    stage, attempt = [n for n, _ in plan.stages].index(ours[0]), ours[1]
    st = node.labels.get(C.MIG_STATE_LABEL, "")
    timeout = ctx.cfg.mig_timeout_seconds
    if st == "success":
        if stage + 1 < len(plan.stages):
            note = f"mig-manager applied {value} to the changed cards; next the whole node: "
            return _mig_label(a, ctx, node, plan, stage + 1, 0, note)
        if _agent_shows(state, a):
            return Outcome(a.id, "done", f"mig-manager applied {value}")
        msg = f"mig-manager applied {value}; waiting for the node agent to publish the new layout"
        if age > timeout:
            return Outcome(a.id, "failed", f"{msg}: stuck for over {int(timeout)}s")
        return Outcome(a.id, "waiting", msg)
    if st == "failed" or (st == "pending" and age > timeout):
        what = (
            f"reports failed for {value}"
            if st == "failed"
            else f"left {value} pending for over {int(timeout)}s"
        )
        tried = [attempt_name(ours[0], k) for k in range(attempt + 1)]
        if attempt >= ctx.cfg.mig_retries:
            return Outcome(
                a.id,
                "failed",
                f"mig-manager {what}, attempt {attempt + 1} of "
                f"{ctx.cfg.mig_retries + 1} ({', '.join(tried)}); {a.target} stays cordoned: "
                f"see the nvidia-mig-manager log on it; to have gpupool try again, set "
                f"{C.MIG_CONFIG_LABEL} to any value that is no gpupool config (do not remove "
                f"it: the GPU operator would label the node all-disabled)",
            )
        nxt = attempt_name(ours[0], attempt + 1)
        note = f"mig-manager {what}; retry {attempt + 1} of {ctx.cfg.mig_retries}: "
        wait = ctx.cfg.config_propagation_seconds - age
        if wait > 0:
            return Outcome(a.id, "waiting", f"{note}{nxt} in {int(wait)}s")
        return _mig_label(a, ctx, node, plan, stage, attempt + 1, note)
    msg = f"{C.MIG_STATE_LABEL}={st or 'unset'}"
    if age > timeout:  # unset: mig-manager never took the label up; a new value would not help
        return Outcome(
            a.id,
            "failed",
            f"{msg}: stuck for over {int(timeout)}s; is nvidia-mig-manager running on {a.target}?",
        )
    return Outcome(a.id, "waiting", msg)


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


def _reserve_next_pod(a: Move, ctx: Context, pod: PodInfo) -> str:
    """A move lands where the plan meant only if the pod that replaces the evicted one is
    admitted to `to_node`: for a Job's pod, the Job gets `gpupool.io/next-pod-reserved:
    <node>:<cards>@<now>` before the eviction, and the pod it creates next (gated) is reserved
    on those cards. Left alone when the Job already says so for the same cards (a retry after a
    PodDisruptionBudget refused the eviction), unless that was more than half of
    NEXT_POD_RESERVATION_TTL_SECONDS ago: the reservation is honoured only for pods created
    within the TTL of its time, so the pod this eviction makes room for gets at least half of
    it. Returns a note for the Outcome's message."""
    if pod.owner_kind != "Job" or not pod.owner_name:
        # a ReplicaSet's or StatefulSet's replacement is not reserved (it is admitted like any
        # new pod, wherever the plan then finds room); a bare pod is not recreated at all
        return ""
    ns, job = pod.namespace, pod.owner_name
    where = f"{a.to_node}:{','.join(map(str, a.to_gpus))}"
    gone = f" (its Job {job} is gone: no pod replaces it)"
    info = ctx.ops.read_job(ns, job)
    if info is None:
        return gone
    held, _, since = info.annotations.get(C.NEXT_POD_RESERVED_ANN, "").partition("@")
    at = parse_time(since)
    fresh = at is not None and (
        (ctx.clock() - at).total_seconds() <= C.NEXT_POD_RESERVATION_TTL_SECONDS / 2
    )
    if held != where or not fresh:
        try:
            ctx.ops.annotate_job(
                ns, job, {C.NEXT_POD_RESERVED_ANN: f"{where}@{ctx.clock().isoformat()}"}
            )
        except ApiError as exc:
            if exc.status == 404:  # deleted since: nothing will recreate the pod
                return gone
            raise
    return f"; the next pod of Job {job} is reserved on {a.to_node}"


# Suspending a Job, as the Job controller carries it out (k8s.io/kubernetes v1.37.2
# pkg/controller/job/job_controller.go):
# * `manageJob`: while `jobSuspended(job)` (spec.suspend true) it deletes every active pod
#   ("Deleting all active pods in suspended job": `deleteJobPods` on all of `activePods`) and
#   returns before the code that creates pods, so it creates none while suspended; once
#   spec.suspend is false again the same function creates pods up to `parallelism` (the
#   `wantActive` branch). `syncJob` sets the JobSuspended condition (reason JobSuspended, then
#   JobResumed) and, on resume, restarts `status.startTime`, so activeDeadlineSeconds counts
#   only time not suspended.
# * `deleteJobPods` -> `RealPodControl.DeletePod` (pkg/controller/controller_utils.go) is a plain
#   DELETE with empty DeleteOptions: graceful (the kubelet sends SIGTERM, then SIGKILL after the
#   pod's terminationGracePeriodSeconds), and NOT through the Eviction API, so no
#   PodDisruptionBudget is consulted.
# * Not counted as failures: `deleteJobPods` first removes the pod's `batch.kubernetes.io/
#   job-tracking` finalizer (`removeTrackingFinalizerPatch`), then deletes it. The failure
#   count that `exceedsBackoffLimit := jobCtx.failed > *job.Spec.BackoffLimit` compares comes
#   from `getNewFinishedPods` -> `getValidPodsWithFilter` and from
#   `trackJobStatusAndRemoveFinalizers`, and both skip pods without that finalizer. So pods
#   deleted because of the suspension never reach status.failed or backoffLimit. (A pod evicted
#   or deleted by anyone else keeps the finalizer and `isPodFailed` counts it: phase Failed, or
#   deleted before it succeeded; only a podFailurePolicy rule can ignore it. Evicting a Job's
#   pods spends its backoffLimit, suspending the Job does not.)
# * `managedByExternalController`: a Job whose spec.managedBy names another controller is not
#   synced at all, so none of the above happens to it (its manager decides).


def _suspend_job(a: Eviction, ctx: Context, ns: str, job: str) -> Outcome | None:
    """Stop the pod's gang by suspending its Job: one merge patch of `spec.suspend: true` and
    `gpupool.io/suspended-at: <now>` (the mark gpupool resumes by). None: the Job is gone, the
    caller evicts the pod instead."""
    info = ctx.ops.read_job(ns, job)
    if info is None:
        return None
    if info.suspended:
        if C.SUSPENDED_BY_ANN not in info.annotations:
            return Outcome(
                a.id,
                "done",
                f"Job {job} is already suspended by someone else (no {C.SUSPENDED_BY_ANN}): "
                "the Job controller stops its pods; gpupool will not resume it",
            )
        return Outcome(
            a.id,
            "done",
            f"Job {job} already suspended by gpupool at {info.annotations[C.SUSPENDED_BY_ANN]}: "
            "the Job controller stops its pods",
            stopped=True,
        )
    try:
        ctx.ops.set_job_suspend(
            ns, job, suspend=True, annotations={C.SUSPENDED_BY_ANN: ctx.clock().isoformat()}
        )
    except ApiError as exc:
        if exc.status == 404:  # deleted since it was read
            return None
        raise
    return Outcome(
        a.id,
        "done",
        f"suspended Job {job}: the Job controller stops its pods",
        changed=True,
        stopped=True,
    )


@handles(Preempt, Reclaim, Move)
def evict(a: Eviction, ctx: Context) -> Outcome:
    """Stop a running pod: wait out its checkpoint's grace period, record the stop in the
    hourly budget (`before_preempt`, write-ahead, once per run that gets this far), then, for a
    Job's gang (`suspend_job`, never a move), suspend the Job; else (or when that Job is gone)
    evict the pod through the Eviction API. A pod already gone or terminating: done, nothing
    recorded or written."""
    ns, name = _ns_name(a.target)
    pod = ctx.ops.read_pod(ns, name)
    if pod is None:
        return Outcome(a.id, "done", "pod is gone")
    if pod.deleting:
        return Outcome(a.id, "done", "pod is terminating")
    left = _grace_left(a, ctx, pod.annotations)
    if left > 0:
        return Outcome(a.id, "waiting", f"checkpoint grace period: {int(left)}s left")
    note = ""
    if a.suspend_job and not isinstance(a, Move):
        if ctx.before_preempt is not None:  # before the write that stops it: write-ahead
            ctx.before_preempt(a, pod)
        out = _suspend_job(a, ctx, ns, a.suspend_job)
        if out is not None:
            return out
        note = f" (its Job {a.suspend_job} is gone: the pod is evicted instead)"
    else:
        if isinstance(a, Move) and a.to_node:
            if pod.annotations.get(C.MOVE_TO_ANN) != a.to_node:
                ctx.ops.annotate_pod(ns, name, {C.MOVE_TO_ANN: a.to_node})
            note = _reserve_next_pod(a, ctx, pod)
        if ctx.before_preempt is not None:  # every eviction kind spends the hourly budget
            ctx.before_preempt(a, pod)
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
    return Outcome(a.id, "done", f"evicted{note}", changed=True, stopped=True)


@handles(Resume)
def resume(a: Resume, ctx: Context) -> Outcome:
    """Let a Job gpupool suspended run again: one merge patch of `spec.suspend: false` that
    also removes `gpupool.io/suspended-at`; the Job controller then creates its pods (gated by
    the admission policy, admitted like any gated gang). Only a Job that carries that mark: one
    suspended by someone else (its owner, Kueue) is theirs to resume."""
    ns, name = _ns_name(a.target)
    job = ctx.ops.read_job(ns, name)
    if job is None:
        return Outcome(a.id, "done", "Job is gone")
    if not job.suspended:
        return Outcome(a.id, "done", "Job is not suspended: nothing to resume")
    if C.SUSPENDED_BY_ANN not in job.annotations:
        return Outcome(
            a.id,
            "skipped",
            f"Job {name} was suspended by someone else (no {C.SUSPENDED_BY_ANN}, e.g. by Kueue "
            "or its owner): gpupool leaves it suspended",
        )
    try:
        ctx.ops.set_job_suspend(ns, name, suspend=False, annotations={C.SUSPENDED_BY_ANN: None})
    except ApiError as exc:
        if exc.status == 404:  # deleted since it was read
            return Outcome(a.id, "done", "Job is gone")
        raise
    return Outcome(
        a.id,
        "done",
        f"resumed Job {name} (suspended at {job.annotations[C.SUSPENDED_BY_ANN]}): the Job "
        "controller creates its pods",
        changed=True,
    )


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


@handles(SetScaleEnvelope)
def scale_envelope(a: SetScaleEnvelope, ctx: Context) -> Outcome:
    """The autoscaler's min/max and the last-scale annotation in one merge patch, guarded by
    the resourceVersion read (no lost update); the workload itself is never written (its
    autoscaler scales it). Skipped when the autoscaler is gone, scales another workload, is
    the HPA KEDA made for a ScaledObject (KEDA would revert it) or changed since the plan."""
    ns, name = _ns_name(a.target)
    cur = ctx.ops.read_autoscaler(a.autoscaler_kind, ns, name)
    what = f"{a.autoscaler_kind} {name}"
    if cur is None:
        return Outcome(a.id, "skipped", f"{what} is gone; replanned next cycle")
    if cur.owner:
        return Outcome(
            a.id, "skipped", f"{what} is managed by {cur.owner} (KEDA); gpupool leaves it alone"
        )
    if (cur.target_kind, cur.target_name) != (a.workload_kind, a.workload):
        return Outcome(
            a.id,
            "skipped",
            f"{what} now scales {cur.target_kind} {cur.target_name}, not {a.workload_kind} "
            f"{a.workload}; replanned next cycle",
        )
    if (cur.min_replicas, cur.max_replicas) == (a.to_min, a.to_max):
        return Outcome(a.id, "done", f"already min {a.to_min}, max {a.to_max}")
    if (cur.min_replicas, cur.max_replicas) != (a.from_min, a.from_max):
        return Outcome(
            a.id,
            "skipped",
            f"min/max changed to {cur.min_replicas}/{cur.max_replicas} since the plan; "
            "replanned next cycle",
        )
    ctx.ops.set_autoscaler_bounds(
        a.autoscaler_kind,
        ns,
        name,
        min_replicas=a.to_min,
        max_replicas=a.to_max,
        resource_version=cur.resource_version,
        annotations={C.LAST_SCALE_ANN: ctx.clock().isoformat()},
    )
    return Outcome(
        a.id,
        "done",
        f"min/max {cur.min_replicas}/{cur.max_replicas} -> {a.to_min}/{a.to_max}",
        changed=True,
    )


# ----------------------------------------------------------------------------- admission
# A gated pod (`gpupool.io/admission` scheduling gate, deploy/admission-gate.yaml) is left alone
# by kube-scheduler until gpupool admits it: the Admit step pins it to the node the plan chose
# (required node affinity on metadata.name) and removes the gate in one patch
# (`ClusterOps.admit_pod`); Hold tells the owner of a pod that stays gated why.


def _gone(a: Admit, key: str, what: str = "gone") -> Outcome:
    return Outcome(a.id, "skipped", f"pod {key} is {what}; the gang is planned again next cycle")


def _still_there(ctx: Context, after: tuple[str, ...]) -> list[str]:
    """The pods of `after` that kube-scheduler still counts on their node: not finished (its
    pod informer lists only pods not Succeeded or Failed: k8s.io/kubernetes v1.37.2
    pkg/scheduler/scheduler.go, newPodInformer), and terminating or bound. A pod of that name
    that exists unbound and not terminating is a new pod (a StatefulSet recreates its evicted
    pod under the same name): it holds no card."""
    out = []
    for key in after:
        ns, name = _ns_name(key)
        p = ctx.ops.read_pod(ns, name)
        if p is None or p.phase in ("Succeeded", "Failed"):
            continue
        if not p.deleting and p.node is None:
            continue
        out.append(f"{key} (terminating)" if p.deleting else f"{key} (not evicted yet)")
    return out


@handles(Admit)
def admit(a: Admit, ctx: Context) -> Outcome:
    """Level-triggered over the gang's pods: reservation annotations, then (once every pod
    evicted for the cards is gone) one admission patch per pod still gated. A gang is admitted
    whole: a pod gone, terminating, held by another admission system's gate or ungated by
    someone else skips the step (nothing admitted), and the next cycle plans again."""
    ns = a.namespace
    pods: dict[str, PodInfo] = {}
    for want in a.pods:
        pod = ctx.ops.read_pod(ns, want.name)
        if pod is None or pod.deleting:
            return _gone(a, f"{ns}/{want.name}", "gone" if pod is None else "terminating")
        pods[want.name] = pod
    wrote, current = False, ""
    try:
        # 1. the pods evicted for these cards must be GONE, not just terminating: kube-scheduler
        # keeps a bound pod in its cache, counting its requests on the node, until the pod's
        # delete event (k8s.io/kubernetes v1.37.2 pkg/scheduler/eventhandlers.go,
        # deleteAssignedPodFromCache), so an admitted pod would find the node full. Worse, its
        # DefaultPreemption may then preempt OTHER pods on the node: it holds a preemptor back
        # only while a pod on its nominated node is terminating *by scheduler preemption*
        # (pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go,
        # PodEligibleToPreemptOthers -> preemption.PodTerminatingByPreemption, which looks for
        # a DisruptionTarget condition with reason PreemptionByScheduler); a pod evicted through
        # the Eviction API carries reason EvictionByEvictionAPI instead
        # (pkg/registry/core/pod/storage/eviction.go), so it does not hold anything back.
        waiting = _still_there(ctx, a.after)
        # 2. the reservation, before this step waits or admits a gang pod by pod: the next
        # cycles plan from scratch and read it back, so they keep freeing these cards for this
        # gang instead of giving them to someone else (one pod admitted at once needs none)
        if waiting or len(a.pods) > 1:
            for want in a.pods:
                pod = pods[want.name]
                reserved = f"{want.node}:{','.join(map(str, want.gpus))}"
                if (
                    C.ADMISSION_GATE in pod.gates
                    and pod.annotations.get(C.RESERVED_ANN) != reserved
                ):
                    current = want.name
                    ctx.ops.annotate_pod(ns, want.name, {C.RESERVED_ANN: reserved})
                    wrote = True
        if waiting:
            return Outcome(
                a.id,
                "waiting",
                f"waits for {', '.join(waiting)} to be gone: kube-scheduler still counts its cards",
                changed=wrote,
            )
        # 3. who holds each pod now
        todo, left = [], []
        for want in a.pods:
            pod = pods[want.name]
            if C.ADMISSION_GATE not in pod.gates:
                admitted = pod.annotations.get(C.ADMITTED_ANN)
                if admitted == want.node:
                    continue  # admitted by an earlier run of this step
                left.append(
                    f"{want.name} was admitted to {admitted} before"
                    if admitted
                    else f"{want.name} was ungated by someone else"
                )
            elif len(pod.gates) > 1:
                others = ", ".join(g for g in pod.gates if g != C.ADMISSION_GATE)
                left.append(f"{want.name} is held by another admission system ({others})")
            else:
                todo.append(want)
        if left:
            return Outcome(
                a.id,
                "skipped",
                f"{'; '.join(left)}: left alone, nothing admitted; the gang is planned again "
                f"next cycle",
                changed=wrote,
            )
        # 4. admit: affinity, the gate's removal and the annotations in one patch per pod
        for want in todo:
            annotations = {C.ADMITTED_ANN: want.node}
            if want.gpus:
                annotations[C.INTENDED_GPUS_ANN] = ",".join(map(str, want.gpus))
            current = want.name
            ctx.ops.admit_pod(ns, want.name, node=want.node, annotations=annotations)
            wrote = True
            held = pods[want.name].condition(C.HELD_CONDITION)
            if held is not None and held.status == "False":
                # the wait a Hold reported is over: say so, not a stale reason
                ctx.ops.set_pod_condition(
                    ns,
                    want.name,
                    type=C.HELD_CONDITION,
                    status="True",
                    reason="Admitted",
                    message=f"admitted to {want.node}",
                    last_transition_time=_rfc3339(ctx.clock()),
                )
    except ApiError as exc:
        if exc.status == 404 and current:  # deleted since it was read
            return dataclasses.replace(_gone(a, f"{ns}/{current}"), changed=wrote)
        if exc.status == 422:  # e.g. the gate went between our read and the patch
            return Outcome(
                a.id,
                "failed",
                f"pod {ns}/{current}: the API server refused the admission: {exc.message}",
                wrote,
            )
        raise
    placed = ", ".join(f"{w.name} -> {w.node}" for w in a.pods)
    if not todo:
        return Outcome(a.id, "done", f"already admitted {len(a.pods)} pod(s): {placed}", wrote)
    return Outcome(a.id, "done", f"admitted {len(a.pods)} pod(s): {placed}", changed=True)


def condition_reason(code: str) -> str:
    """A condition reason (CamelCase) from a finding code: `held-cap` -> `HeldCap`."""
    return "".join(p[:1].upper() + p[1:] for p in code.replace("_", "-").split("-") if p)


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@handles(Hold)
def hold(a: Hold, ctx: Context) -> Outcome:
    """The condition `gpupool.io/Admitted` False, with the reason, on a pod that stays gated
    (`kubectl describe pod` shows it). Written only when it says something else."""
    ns, name = _ns_name(a.target)
    pod = ctx.ops.read_pod(ns, name)
    if pod is None:
        return Outcome(a.id, "done", "pod is gone")
    if C.ADMISSION_GATE not in pod.gates:
        return Outcome(a.id, "done", "admitted meanwhile (no longer gated)")
    reason = condition_reason(a.code)
    cur = pod.condition(C.HELD_CONDITION)
    if cur is not None and (cur.status, cur.reason, cur.message) == ("False", reason, a.message):
        return Outcome(a.id, "done", f"already held: {a.message}")
    since = (  # the time the status last changed: kept while it stays False
        cur.last_transition_time
        if cur is not None and cur.status == "False" and cur.last_transition_time
        else _rfc3339(ctx.clock())
    )
    try:
        ctx.ops.set_pod_condition(
            ns,
            name,
            type=C.HELD_CONDITION,
            status="False",
            reason=reason,
            message=a.message,
            last_transition_time=since,
        )
    except ApiError as exc:
        if exc.status == 404:
            return Outcome(a.id, "done", "pod is gone")
        raise
    return Outcome(a.id, "done", f"held: {a.message}", changed=True)


# ----------------------------------------------------------------------------- objects
# gpupool changes or deletes only objects that carry its managed-by label: a PriorityClass or
# ResourceQuota of the same name that someone else made is theirs (the planner reports the
# collision; this is the last check, for one created between plan and apply).


def _not_ours(kind: str, a: Action, manager: str) -> Outcome:
    by = f"managed by {manager}" if manager else f"no {C.MANAGED_BY_LABEL} label"
    return Outcome(
        a.id,
        "skipped",
        f"{kind} {a.target} exists and is not gpupool's ({by}): left as it is",
    )


@handles(ApplyQuota)
def quota(a: ApplyQuota, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    if not ctx.ops.namespace_exists(ns):
        return Outcome(a.id, "blocked", f"namespace {ns} does not exist")
    manager = ctx.ops.quota_manager(ns, name)
    if manager is not None and manager != C.MANAGED_BY:
        return _not_ours("ResourceQuota", a, manager)
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
    if cur is not None and cur.managed_by != C.MANAGED_BY:
        return _not_ours("PriorityClass", a, cur.managed_by)
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
            "globalDefault": a.global_default,
            "description": "managed by gpupool",
        }
    )
    return Outcome(a.id, "done", "applied", changed=True)


def _prune(a: Action, kind: str, manager: str | None, delete: Callable[[], None]) -> Outcome:
    """Delete an object gpupool made (`manager`: its managed-by label, None when it is gone)."""
    if manager is None:
        return Outcome(a.id, "done", "already gone")
    if manager != C.MANAGED_BY:
        return _not_ours(kind, a, manager)
    try:
        delete()
    except ApiError as e:
        if e.status != 404:
            raise
        return Outcome(a.id, "done", "already gone")
    return Outcome(a.id, "done", "deleted", changed=True)


@handles(PruneQuota)
def prune_quota(a: PruneQuota, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    return _prune(
        a,
        "ResourceQuota",
        ctx.ops.quota_manager(ns, name),
        lambda: ctx.ops.delete_resource_quota(ns, name),
    )


@handles(PrunePriorityClass)
def prune_priority_class(a: PrunePriorityClass, ctx: Context) -> Outcome:
    cur = ctx.ops.read_priority_class(a.target)
    return _prune(
        a,
        "PriorityClass",
        None if cur is None else cur.managed_by,
        lambda: ctx.ops.delete_priority_class(a.target),
    )


# ----------------------------------------------------------------------------- Kueue (issue 14)


@handles(ApplyKueueObject)
def kueue_object(a: ApplyKueueObject, ctx: Context) -> Outcome:
    """Create the object, or merge-patch its labels and `spec` (a JSON merge patch replaces
    the lists in it whole, so what the policy dropped goes); only while it is gpupool's."""
    kind, ns, name = a.object_kind, a.namespace, a.name
    if ns and not ctx.ops.namespace_exists(ns):
        return Outcome(a.id, "blocked", f"namespace {ns} does not exist")
    labels = {C.MANAGED_BY_LABEL: C.MANAGED_BY}
    manager = ctx.ops.kueue_manager(kind, ns, name)
    if manager is not None and manager != C.MANAGED_BY:
        return _not_ours(kind, a, manager)
    if manager is None:
        meta: dict[str, Any] = {"name": name, "labels": labels}
        if ns:
            meta["namespace"] = ns
        try:
            ctx.ops.create_kueue_object(
                {"apiVersion": C.KUEUE_API_VERSION, "kind": kind, "metadata": meta, "spec": a.spec}
            )
        except ApiError as e:
            if e.status != 409:
                raise
            # made meanwhile, or still being deleted (Kueue's resource-in-use finalizer
            # keeps a queue in use): the next cycle sees which
            return Outcome(a.id, "blocked", f"{kind} {a.target} exists already: {e.message}")
        return Outcome(a.id, "done", "created", changed=True)
    ctx.ops.patch_kueue_object(kind, ns, name, {"metadata": {"labels": labels}, "spec": a.spec})
    return Outcome(a.id, "done", "updated", changed=True)


@handles(PruneKueueObject)
def prune_kueue_object(a: PruneKueueObject, ctx: Context) -> Outcome:
    kind, ns, name = a.object_kind, a.namespace, a.name
    return _prune(
        a,
        kind,
        ctx.ops.kueue_manager(kind, ns, name),
        lambda: ctx.ops.delete_kueue_object(kind, ns, name),
    )
