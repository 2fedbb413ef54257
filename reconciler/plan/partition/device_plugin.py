"""The first partition backend: NVIDIA's device plugin (shared slices, per node) and
mig-manager (MIG layouts, per card; a mode change resets the node on Ampere).

The device plugin shares per node: the config a node's label selects applies to every card of
the node not in MIG mode ("plain" cards here), and it ignores a `devices` list
(NVIDIA/k8s-device-plugin api/config/v1/replicas.go; ../shared/notes/nvidia-stack.md). So the
plain cards of a node are all whole or all shared with one slice count, in the observed state
and in every plan; MIG cards are separate resources and change one by one. Its changes are
`MigReconfigure` and `SetSharing` actions, carried out by
`reconciler/apply/handlers/partition.py`.
"""

from __future__ import annotations

from collections.abc import Collection

from reconciler.observe.model import ObservedState
from reconciler.plan.actions import (
    CardChange,
    CardLayout,
    CardSlices,
    MigReconfigure,
    PodAdmission,
    SetSharing,
)
from reconciler.plan.cluster import GpuSlot, PoolView
from reconciler.plan.partition.base import NotYet, convert
from reconciler.plan.partition.policy import policy_slices, policy_strategy
from reconciler.plan.run import Run
from reconciler.policy.state import DesiredState


class DevicePluginBackend:
    """Partitions through the device plugin's node config and mig-manager's node label."""

    name = "device-plugin"

    def serves(self, pv: PoolView) -> bool:
        return True  # the default: every pool no other backend claims

    def pod_admission(
        self, run: Run, pv: PoolView, member: str, cards: list[GpuSlot]
    ) -> PodAdmission | NotYet:
        """The node and the cards: a hint (the device plugin picks the devices; the node agent
        reports what it picked)."""
        name = member.split("/", 1)[1]
        return PodAdmission(name=name, node=cards[0].node, gpus=tuple(g.index for g in cards))

    def held_beyond(self, run: Run, pv: PoolView, pods: Collection[str]) -> tuple[str, ...]:
        return ()  # kube-scheduler counts a pod's cards free at its delete event

    def node_slices(self, pv: PoolView, node: str) -> int:
        """The slice count the node's plain cards have in the plan (0: not shared)."""
        return max(
            (g.target_slices for g in pv.by_node()[node] if g.target_mode == "shared"), default=0
        )

    def sharing_unit(self, pv: PoolView, node: str) -> list[GpuSlot]:
        """The node's plain cards: the plugin shares them all or none."""
        return [g for g in pv.by_node()[node] if g.target_mode != "mig"]

    def shares_beside_mig(self, pv: PoolView) -> bool:
        """Time-slicing may share the plain cards of a node with MIG cards; MPS may not: the
        plugin refuses MPS with the mixed MIG strategy (k8s-device-plugin v0.19.3
        cmd/nvidia-device-plugin/main.go `validateFlags`), so an MPS config says `none`, which
        advertises no MIG resource and offers a card in MIG mode whole (internal/rm/device_map.go;
        reconciler/apply/configs.py `SHARING_FLAGS`), and MPS on a MIG device is refused too
        (internal/plugin/mps.go)."""
        return policy_strategy(pv) != "mps"

    def share(self, run: Run, pv: PoolView, node: str, slices: int, why: str) -> bool:
        """Every plain card of `node` becomes shared x`slices` (0: whole), or nothing changes
        when a card that would change holds work, is reserved or fenced, or (MPS) when the node
        has MIG cards."""
        mig_beside = any(g.target_mode == "mig" for g in pv.by_node()[node])
        if slices and not self.shares_beside_mig(pv) and mig_beside:
            return False
        want = ("shared", slices) if slices else ("whole", 0)
        cards = [g for g in self.sharing_unit(pv, node) if (g.target_mode, g.target_slices) != want]
        if any(g.holders or g.reserved_by is not None or g.fenced for g in cards):
            return False
        for g in cards:
            convert(run, g, pv, want[0], why=why, slices=slices)
        return True

    def resets_node(self, pv: PoolView) -> bool:
        """A MIG mode change on one card resets every GPU of the node (Ampere: the catalog's
        `mig_mode_change: node`, reconciler/policy/catalog.py)."""
        return pv.model is not None and pv.model.mig_mode_change == "node"

    def reset_blocked(self, pv: PoolView, g: GpuSlot, mode: str) -> bool:
        """Turning MIG on or off on `g` would reset a card that holds work or is kept for some:
        on Ampere every card of the node; mig-parted's reset fails under running work."""
        if not self.resets_node(pv) or (g.target_mode == "mig") == (mode == "mig"):
            return False
        return any(
            c.holders or c.reserved_by is not None for c in pv.by_node()[g.node] if c is not g
        )

    def reshape(
        self,
        run: Run,
        g: GpuSlot,
        pv: PoolView,
        mode: str,
        layout: tuple[str, ...] = (),
        *,
        why: str,
    ) -> list[GpuSlot]:
        """Give `g` partition `mode` (`layout` for MIG) the way the hardware and the device
        plugin allow; returns the cards that change (more than `g` when its node's sharing
        changes, none when it cannot be done now: a card that would change with it holds work).

        - MIG: the card alone (a MIG card is its own resource, whatever the node's sharing).
        - shared: on a shared node a plain or MIG card joins the node's slice count; otherwise
          every plain card of the node becomes shared with the policy's count.
        - whole: on a shared node every shared card becomes whole with it."""
        node = g.node
        if self.reset_blocked(pv, g, mode):
            return []
        if mode == "mig" and self.node_slices(pv, node) and not self.shares_beside_mig(pv):
            return []  # MIG beside MPS: the plugin refuses the node
        before = [c for c in pv.by_node()[node] if c.converted]
        if mode == "mig":
            convert(run, g, pv, "mig", layout, why=why)
        elif mode == "shared":
            have = self.node_slices(pv, node)
            if g.target_mode == "mig" and have:
                convert(run, g, pv, "shared", why=why, slices=have)
            else:
                target = policy_slices(pv)
                if not self.share(run, pv, node, target, why):
                    return []
                if g.target_mode == "mig":
                    convert(run, g, pv, "shared", why=why, slices=target)
        else:
            if self.node_slices(pv, node) and not self.share(run, pv, node, 0, why):
                return []
            if g.target_mode != "whole":
                convert(run, g, pv, "whole", why=why)
        return [c for c in pv.by_node()[node] if c.converted and c not in before] or (
            [g] if g.converted else []
        )

    def changes_on_node(self, pv: PoolView) -> bool:
        return True  # mig-manager's label and the plugin's config, on a cordoned node

    def read_observed(self, desired: DesiredState, observed: ObservedState) -> ObservedState:
        return observed  # a card is what the node agent reports

    def change_actions(
        self,
        run: Run,
        pv: PoolView,
        node: str,
        changed: list[GpuSlot],
        deps: tuple[str, ...],
        why: str,
    ) -> list[str]:
        """mig-manager's new layout for the node's MIG cards, then the device plugin's sharing
        config when the node's plain cards change (or their slice count does)."""
        slots = pv.by_node()[node]
        shared = tuple(
            CardSlices(gpu=g.index, slices=g.target_slices)
            for g in slots
            if g.target_mode == "shared"
        )
        mig_cards = [g for g in changed if "mig" in (g.mode, g.target_mode)]
        share_cards = [g for g in changed if g not in mig_cards]
        done: list[str] = []
        if mig_cards:
            layout = tuple(
                CardLayout(
                    gpu=g.index,
                    profiles=tuple(g.target_layout) if g.target_mode == "mig" else None,
                )
                for g in slots
            )
            done.append(
                run.add(
                    MigReconfigure(
                        id=f"mig-reconfigure:{node}",
                        layout=layout,
                        target=node,
                        pool=pv.name,
                        reason=_reason(mig_cards, why),
                        depends_on=deps,
                        cards=_card_changes(mig_cards),
                        shared_slices=shared,
                    )
                )
            )
        before = max((g.slices for g in slots if g.mode == "shared"), default=0)
        after = self.node_slices(pv, node)
        if share_cards or before != after:
            done.append(
                run.add(
                    SetSharing(
                        id=f"set-sharing:{node}",
                        slices=after or None,
                        strategy=policy_strategy(pv),
                        plain_cards=len(self.sharing_unit(pv, node)),
                        target=node,
                        pool=pv.name,
                        reason=_reason(share_cards, why),
                        depends_on=(*deps, *done),
                        cards=_card_changes(share_cards),
                        shared_slices=shared,
                    )
                )
            )
        return done


def _card_changes(changed: list[GpuSlot]) -> tuple[CardChange, ...]:
    return tuple(
        CardChange(gpu=g.index, before=g.describe(), after=g.describe(target=True)) for g in changed
    )


def _reason(changed: list[GpuSlot], why: str) -> str:
    summary = "; ".join(f"gpu{c.gpu}: {c.before} -> {c.after}" for c in _card_changes(changed))
    return f"{summary} ({why})"
