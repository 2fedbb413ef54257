"""MigReconfigure and SetSharing as mig-manager and the device plugin carry them out.

The node's cards take the layout (instances where `catalog.place` puts them), the shared
slices, or whole (`_targets`: sharing is per node); only on a cordoned node, and only when no
card that changes has a running holder. Part of the effect model (`reconciler.sim.effects`);
`reconciler.sim.actions` dispatches the two kinds here.
"""

from __future__ import annotations

from datetime import datetime

from reconciler.conventions import DEVICE_PLUGIN_CONFIG_LABEL, PRODUCT_LABEL
from reconciler.observe.model import Gpu, MigInstance, Node
from reconciler.plan.actions import MigReconfigure, Repartition, SetSharing
from reconciler.sim.world import World

# A card's partitioning as the effect model compares it: ("whole",), ("shared", slices),
# ("mig", sorted profiles).
Partition = tuple


def _partition(g: Gpu) -> Partition:
    if g.mig_enabled:
        return ("mig", tuple(sorted(i.profile for i in g.mig_instances)))
    if g.shared_slices:
        return ("shared", g.shared_slices)
    return ("whole",)


def _targets(a: Repartition, node: Node) -> dict[int, Partition]:
    """Card index -> the partitioning the action gives it (cards it does not change: absent).

    As the hardware and the device plugin do it, whatever the plan believed: the plugin's
    config applies to every card of the node not in MIG mode (it ignores a `devices` list:
    NVIDIA/k8s-device-plugin api/config/v1/replicas.go), so SetSharing reshapes all of them,
    and a card MigReconfigure takes out of MIG comes back as the node's other plain cards are
    (shared with their count, or whole)."""
    out: dict[int, Partition] = {}
    if isinstance(a, MigReconfigure):
        plain = [g.shared_slices or 0 for g in node.gpus if not g.mig_enabled]
        node_slices = max(plain, default=0)
        for c in a.layout:
            if c.profiles:
                out[c.gpu] = ("mig", tuple(sorted(c.profiles)))
            elif node_slices:
                out[c.gpu] = ("shared", node_slices)
            else:
                out[c.gpu] = ("whole",)
    elif isinstance(a, SetSharing):
        for g in node.gpus:
            if not g.mig_enabled:
                out[g.index] = ("shared", a.slices) if a.slices else ("whole",)
    return out


def sharing_config(strategy: str, slices: int | None) -> str:
    """The device-plugin config name the effect model puts on a node's
    `nvidia.com/device-plugin.config` label (the executor names configs by content)."""
    return f"{strategy}-x{slices}" if slices else "default"


def is_mps(node: Node) -> bool:
    return node.labels.get(DEVICE_PLUGIN_CONFIG_LABEL, "").startswith("mps-")


def repartition(world: World, a: Repartition, now: datetime) -> None:
    node = world.nodes.get(a.target)
    if node is None or not node.unschedulable:
        return  # the handler: "node is not cordoned"
    targets = _targets(a, node)
    # MPS beside MIG: the device plugin refuses the node (NVIDIA/k8s-device-plugin
    # internal/plugin/mps.go); the handler refuses such a step before writing anything
    mps = a.strategy == "mps" and bool(a.slices) if isinstance(a, SetSharing) else is_mps(node)
    if mps and any(targets.get(g.index, _partition(g))[0] == "mig" for g in node.gpus):
        return
    gpus = {g.index: g for g in node.gpus}
    changing = {i for i, t in targets.items() if i in gpus and _partition(gpus[i]) != t}
    changing |= {i for i in a.changed_gpus if i in gpus}
    held = {al.gpu for w in world.running_on(node.name) for al in w.allocations}
    if changing & held:
        return  # a card that changes still runs a pod: refused, nothing recorded
    catalog = world.desired.catalog
    new: dict[int, Gpu] = {}
    for i in sorted(changing):
        g, t = gpus[i], targets.get(i, _partition(gpus[i]))
        if t[0] == "mig":
            model = catalog.model(g.model) or catalog.model_for_product(
                node.labels.get(PRODUCT_LABEL, "")
            )
            placed = catalog.place(model, list(t[1])) if model is not None else None
            if placed is None:
                return  # mig-manager fails an unplaceable config: nothing changes
            instances = [MigInstance(profile=p, start=s) for p, s in placed]
            new[i] = g.model_copy(
                update={"mig_enabled": True, "mig_instances": instances, "shared_slices": None}
            )
        elif t[0] == "shared":
            new[i] = g.model_copy(
                update={"mig_enabled": False, "mig_instances": [], "shared_slices": t[1]}
            )
        else:
            new[i] = g.model_copy(
                update={"mig_enabled": False, "mig_instances": [], "shared_slices": None}
            )
    labels = node.labels
    if isinstance(a, SetSharing):
        labels = {**labels, DEVICE_PLUGIN_CONFIG_LABEL: sharing_config(a.strategy, a.slices)}
    world.nodes[node.name] = node.model_copy(
        update={"gpus": [new.get(g.index, g) for g in node.gpus], "labels": labels}
    )
