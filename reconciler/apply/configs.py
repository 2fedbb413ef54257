"""The configs NVIDIA's node components read, rendered from repartition actions (pure)."""

from __future__ import annotations

import hashlib
import io
import json

from ruamel.yaml import YAML

from reconciler import conventions as C
from reconciler.plan.actions import MigReconfigure, Repartition

MIG_CONFIG_KEY = "config.yaml"
"""mig-manager reads one file; the node label names an entry of its `mig-configs`."""
ALL_DISABLED = "all-disabled"


def config_name(spec: dict) -> str:
    """The name of a rendered config (label value and config key): `gpupool-` + a digest.
    A label value holds at most 63 characters, so configs are named by content only (nodes
    that get the same layout share one entry)."""
    return "gpupool-" + hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def yaml_load(text: str):
    return YAML(typ="safe", pure=True).load(text) if text.strip() else None


def yaml_text(data: dict) -> str:
    buf = io.StringIO()
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.dump(data, buf)
    return buf.getvalue()


def render_mig_parted(a: MigReconfigure) -> dict:
    """The mig-parted config (version v1) for a node: one entry per GPU, MIG on/off."""
    entries = []
    for card in sorted(a.layout, key=lambda c: c.gpu):
        if card.profiles:
            counts: dict[str, int] = {}
            for p in card.profiles:
                counts[p] = counts.get(p, 0) + 1
            entries.append({"devices": [card.gpu], "mig-enabled": True, "mig-devices": counts})
        else:
            entries.append({"devices": [card.gpu], "mig-enabled": False})
    return {"version": "v1", "mig-configs": {"gpupool": entries}}


def render_sharing(a: Repartition) -> dict:
    """A device-plugin sharing config: time-slicing replicas for the shared cards."""
    slices = {c.gpu: c.slices for c in a.shared_slices}
    replicas = max(slices.values()) if slices else 1
    return {
        "version": "v1",
        "sharing": {
            "timeSlicing": {
                "renameByDefault": True,
                "resources": [
                    {"name": C.GPU_RESOURCE, "replicas": replicas, "devices": sorted(slices)}
                ],
            }
        },
    }


def merged_mig_config(current_text: str | None, name: str, entry: list) -> str | None:
    """mig-parted's `config.yaml` with entry `name` added next to those already there (the
    operator's defaults, other nodes' layouts); None when it is there already."""
    if current_text is None:
        body = {
            "version": "v1",
            "mig-configs": {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}], name: entry},
        }
        return yaml_text(body)
    current = yaml_load(current_text) or {}
    configs = dict(current.get("mig-configs") or {})
    if configs.get(name) == entry and current.get("version") == "v1":
        return None
    configs[name] = entry
    return yaml_text({**current, "version": "v1", "mig-configs": configs})
