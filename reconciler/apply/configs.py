"""The configs NVIDIA's node components read, rendered from repartition actions (pure)."""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Iterable, Mapping

from ruamel.yaml import YAML

from reconciler import conventions as C
from reconciler.plan.actions import MigReconfigure, SetSharing

MIG_CONFIG_KEY = "config.yaml"
"""mig-manager reads one file; the node label names an entry of its `mig-configs`."""
ALL_DISABLED = "all-disabled"
"""The entry the GPU operator labels MIG-capable nodes with when they have no
`nvidia.com/mig.config` label (NVIDIA/gpu-operator controllers/nodelabeling_controller.go, with
ClusterPolicy `migManager.config.default: all-disabled`, the chart's default): it must be in
mig-manager's ConfigMap from install on (deploy/gpu-operator/)."""
DEFAULT_SHARING = "default"
"""The device plugin's fallback config (`devicePlugin.config.default`), created by the install
with no sharing (deploy/gpu-operator/device-plugin-config.yaml)."""

_ATTEMPT = re.compile(r"(?P<base>gpupool-[0-9a-f]{12})(?:-r(?P<n>[1-9][0-9]*))?")


def config_name(spec: dict) -> str:
    """The name of a rendered config (label value and config key): `gpupool-` + a digest.
    A label value holds at most 63 characters, so configs are named by content only (nodes
    that get the same layout share one entry)."""
    return "gpupool-" + hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def attempt_name(name: str, attempt: int) -> str:
    """The label value of attempt `attempt` (0: the first) at config `name`: `name-r<n>` names
    an identical entry. mig-manager runs again only when the label's VALUE changes (a `failed`
    state stays until then), so a retry needs a new value naming the same config."""
    return name if attempt == 0 else f"{name}-r{attempt}"


def split_attempt(label: str | None) -> tuple[str, int] | None:
    """(config name, attempt) of a label value gpupool wrote, None for any other value."""
    m = _ATTEMPT.fullmatch(label or "")
    return None if m is None else (m["base"], int(m["n"] or 0))


def yaml_load(text: str):
    return YAML(typ="safe", pure=True).load(text) if text.strip() else None


def yaml_text(data: dict) -> str:
    buf = io.StringIO()
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.dump(data, buf)
    return buf.getvalue()


def render_mig_parted(a: MigReconfigure, gpus: Iterable[int] | None = None) -> dict:
    """The mig-parted config (version v1) for a node: one entry per GPU, MIG on/off; only the
    cards in `gpus` when given (mig-parted leaves the cards a config does not list alone)."""
    entries = []
    only = None if gpus is None else set(gpus)
    for card in sorted(a.layout, key=lambda c: c.gpu):
        if only is not None and card.gpu not in only:
            continue
        if card.profiles:
            counts: dict[str, int] = {}
            for p in card.profiles:
                counts[p] = counts.get(p, 0) + 1
            entries.append({"devices": [card.gpu], "mig-enabled": True, "mig-devices": counts})
        else:
            entries.append({"devices": [card.gpu], "mig-enabled": False})
    return {"version": "v1", "mig-configs": {"gpupool": entries}}


def mode_changes(a: MigReconfigure, mig_now: Mapping[int, bool]) -> frozenset[int]:
    """The changed cards whose MIG mode flips. `mig_now`: MIG mode per card as the node agent
    publishes it; a card it does not list is judged by the plan's own description of it."""
    after = {c.gpu: bool(c.profiles) for c in a.layout}
    return frozenset(
        c.gpu
        for c in a.cards
        if mig_now.get(c.gpu, c.before.startswith("MIG")) != after.get(c.gpu, False)
    )


def mig_stages(a: MigReconfigure, *, cost: str, mig_now: Mapping[int, bool]) -> list[dict]:
    """The configs mig-manager applies for `a`, in order; the last one lists every card, so the
    node's label always ends on a config that describes the whole node (mig-manager applies the
    label's config again whenever it starts, e.g. after a reboot, and a card left out would come
    back without its instances).

    A MIG mode change makes mig-parted walk every card the config lists: it clears every listed
    card in MIG mode, changed or not (NVIDIA/mig-parted cmd/nvidia-mig-parted/apply/mode.go,
    `ApplyMigMode`: `ClearMigConfig` on each listed card whose current mode is not disabled),
    which fails on a card with work on its instances. So on a model whose mode change costs only
    the card (`cost == "card"`, Hopper), with other cards of the node in MIG mode, the change is
    first applied with a config that lists only the changed cards; the whole-node config then
    finds everything applied and changes nothing (pkg/mig/reconfigure/reconfigure.go: "Selected
    MIG config is already applied" -> success). Whole cards a config lists only get their mode
    set to the one they have (`SetMigMode`, no change). Where a mode change costs the node
    (Ampere) every GPU is reset anyway, so one whole-node config does it."""
    full = render_mig_parted(a)
    others_in_mig = any(c.profiles for c in a.layout if c.gpu not in a.changed_gpus)
    if cost == "card" and others_in_mig and mode_changes(a, mig_now):
        return [render_mig_parted(a, a.changed_gpus), full]
    return [full]


SHARING_FLAGS = {"time-slicing": {"migStrategy": "mixed"}, "mps": {"migStrategy": "none"}}
"""The `flags` of the device-plugin configs gpupool renders, by sharing strategy.

Time-slicing keeps the install's `default` flags (deploy/gpu-operator/device-plugin-config.yaml):
`mixed`, so the node keeps its `nvidia.com/mig-<profile>` resources whichever config its label
selects. MPS cannot: the plugin refuses to start with MPS and the mixed strategy ("using
--mig-strategy=mixed is not supported with MPS", NVIDIA/k8s-device-plugin v0.19.3
cmd/nvidia-device-plugin/main.go `validateFlags`). An MPS config says `none`, under which the
plugin builds only whole-GPU resources (internal/rm/device_map.go
`buildDeviceMapFromConfigResources`): a card in MIG mode would be offered whole, so an MPS node
has no MIG card (the planner's `shares_beside_mig`; MPS on a MIG device is refused too,
internal/plugin/mps.go). The file's value holds only where the GPU operator leaves its
`mig.strategy` unset (deploy/gpu-operator/values.yaml): otherwise its MIG_STRATEGY environment
variable overrides every node's file (api/config/v1/config.go `NewConfig`: command line, then
environment, then file; gpu-operator controllers/object_controls.go `applyMIGConfiguration`),
and a Pool says so with `spec.devicePlugin.migStrategy: mixed`, which refuses MPS at
validation. `mpsRoot` is not written: the operator's DaemonSet sets MPS_ROOT."""
SHARING_KEYS = {"time-slicing": "timeSlicing", "mps": "mps"}
"""`SetSharing.strategy` -> the section of `sharing` (NVIDIA/k8s-device-plugin
api/config/v1/sharing.go: `timeSlicing`, `mps`; the two are mutually exclusive)."""
MPS_MAX_REPLICAS = 48
"""MPS serves at most 48 clients per card from Volta on (16 before): the MPS control daemon
refuses more replicas ("maximum allowed replicas exceeded", NVIDIA/k8s-device-plugin
cmd/mps-control-daemon/mps/device.go `assertReplicas`)."""


def render_sharing(a: SetSharing) -> dict | None:
    """The device-plugin config (`version: v1`) that shares every card of the node not in MIG
    mode `a.slices` ways; None for no sharing (the node's label then selects the install's
    `default`, which has no `sharing` section).

    As NVIDIA/k8s-device-plugin reads it (commit 1b826acc6): sharing applies per node to every
    device of the resource (api/config/v1/replicas.go: a resource without `devices` means
    "all", a list is ignored with "Customizing the 'devices' field ... is not yet supported"),
    so none is written; `replicas` must be at least 2 (replicas.go, "number of replicas must be
    >= 2"), which `SetSharing.slices` guarantees, so `replicas: 1` is never rendered;
    `renameByDefault: true` advertises the replicas as `nvidia.com/gpu.shared` and
    `nvidia.com/gpu` disappears from the node (replicas.go `DefaultSharedRename`). MPS takes the
    same shape under `sharing.mps` (sharing.go; README "With CUDA MPS"); GPU feature discovery,
    reading the same config, labels the node `nvidia.com/mps.capable=true`
    (internal/lm/nvml.go `newSharingLabeler`), which starts the MPS control daemon there; gpupool
    writes nothing else for it."""
    if a.slices is None:
        return None
    return {
        "version": "v1",
        "flags": dict(SHARING_FLAGS[a.strategy]),
        "sharing": {
            SHARING_KEYS[a.strategy]: {
                "renameByDefault": True,
                "resources": [{"name": C.GPU_RESOURCE, "replicas": a.slices}],
            }
        },
    }


def sharing_resources(a: SetSharing) -> dict[str, int]:
    """What the node's allocatable shows once the device plugin applied `a`'s config: every card
    not in MIG mode as one `nvidia.com/gpu`, or as `slices` `nvidia.com/gpu.shared` (with
    `renameByDefault` the other name is not advertised: 0)."""
    if a.slices is None:
        return {C.GPU_RESOURCE: a.plain_cards, C.SHARED_RESOURCE: 0}
    return {C.GPU_RESOURCE: 0, C.SHARED_RESOURCE: a.slices * a.plain_cards}


def merged_mig_config(current_text: str | None, entries: Mapping[str, list]) -> str | None:
    """mig-parted's `config.yaml` with `entries` (name -> entry) added next to those already
    there (the operator's defaults, other nodes' layouts); None when all are there already."""
    if current_text is None:
        body = {
            "version": "v1",
            "mig-configs": {
                ALL_DISABLED: [{"devices": "all", "mig-enabled": False}],
                **dict(entries),
            },
        }
        return yaml_text(body)
    current = yaml_load(current_text) or {}
    configs = dict(current.get("mig-configs") or {})
    if current.get("version") == "v1" and all(configs.get(n) == e for n, e in entries.items()):
        return None
    configs.update(entries)
    return yaml_text({**current, "version": "v1", "mig-configs": configs})
