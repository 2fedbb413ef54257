"""The device-plugin + mig-manager partition backend's handler family: everything that carries
out a node repartition through NVIDIA's device plugin config (`set_sharing`, the node label
`nvidia.com/device-plugin.config` naming a config of the device plugin's ConfigMap) and
mig-manager (`mig_reconfigure`, the node label `nvidia.com/mig.config` naming a config of the
mig-parted ConfigMap), with their private helpers.

A new partition backend (e.g. Kubernetes DRA) adds its own handler family, registered for its
`PartitionChange` actions with `handles_partition(name)` (backends.py) or for typed actions of
its own with `handles(...)`; no other handler changes."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from reconciler import conventions as C
from reconciler.apply.configs import (
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
from reconciler.apply.handlers.base import Context, Outcome, _node, handles, parse_time
from reconciler.apply.port import NodeInfo, PodInfo
from reconciler.observe.model import parse_allocation
from reconciler.observe.trust import gpus_believed
from reconciler.plan.actions import MigReconfigure, Repartition, SetSharing
from reconciler.policy.catalog import MigModeChange, default_catalog


def _gpus_busy(ctx: Context, node: str, gpus: frozenset[int]) -> list[str]:
    """GPU pods on the node that hold one of those cards. Which card a pod holds comes from the
    node agent's `GpuNodeState` `status.pods` (the kubelet's PodResources, as the agent read it);
    a GPU pod it does not list (started since, or an agent that publishes no pods) falls back to
    the `gpupool.io/gpus` annotation where the node agent wrote it (`_annotated_cards`), and
    without that counts as holding every card."""
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
            held = _annotated_cards(p)
        if held is None or held & gpus:
            busy.append(p.key)
    return sorted(busy)


def _annotated_cards(p: PodInfo) -> set[int] | None:
    """The cards the pod's `gpupool.io/gpus` says it holds; None (it may hold any card) when it
    has none, when it is unreadable (a tenant's "all"), or when the node agent did not write it
    (`trust.gpus_believed`: anyone who may update the pod could otherwise free a card under
    it for a repartition)."""
    ann = p.annotations.get(C.GPUS_ANN)
    if not ann or not gpus_believed(p.annotation_writers.get(C.GPUS_ANN, ())):
        return None
    try:
        return {x.gpu for x in parse_allocation(ann)}
    except ValueError:
        return None


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
