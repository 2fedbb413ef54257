"""The second partition backend: Kubernetes DRA with NVIDIA's DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1), for pools with `spec.backend: dra`.

What the driver offers without its alpha `DynamicMIG` gate, and so what this backend plans:

- whole cards (`gpu-<minor>` devices) and static MIG devices: the driver publishes the MIG
  instances that exist on a card in MIG mode and nothing else of it
  (cmd/gpu-kubelet-plugin/nvlib.go: a card with MIG enabled announces its MIG devices, one
  without announces itself). Creating and removing instances stays mig-manager's, so a
  repartition is the device plugin backend's `MigReconfigure` (reused: `change_actions`), and
  the driver republishes the node's slices once the layout changed (its pool's generation
  rises; observe/model_dra.py `DraState.devices` reads the newest).
- no shared slices: the driver shares a card only by several pods referencing one
  ResourceClaim, with no per-slice capacity (refused at validation: policy/validate_dra.py), so
  `share` never makes a card shared and nothing shared sits beside MIG.
- dynamic MIG is not this backend's: with `DynamicMIG` the driver creates instances itself
  and must not run beside mig-parted; pools with `spec.dra.mig: dynamic` are served by
  `DynamicMigBackend` (dra_dynamic.py, ahead of this one), which never drives mig-manager.
  One node is never driven both ways: a pool is one or the other, and a dynamic pool's node
  carrying mig-manager's label is a finding (`dra-dynamic-mig-manager`).

No stage changed for this backend: the stages ask `partition_for(run, pv)` only.
"""

from __future__ import annotations

from collections.abc import Collection

from reconciler.plan.actions import PodAdmission
from reconciler.plan.cluster import GpuSlot, PoolView
from reconciler.plan.dra_admit import claims_held_for, guard_in_place, planned_devices
from reconciler.plan.partition.base import NotYet
from reconciler.plan.partition.device_plugin import DevicePluginBackend
from reconciler.plan.run import Run


class DraBackend(DevicePluginBackend):
    """Whole cards and static MIG through DRA; MIG layouts through mig-manager."""

    name = "dra"

    def serves(self, pv: PoolView) -> bool:
        return pv.pool.spec.backend == "dra"  # dynamic MIG pools are served before

    def shares_beside_mig(self, pv: PoolView) -> bool:
        return False  # nothing is shared on a DRA pool

    def pod_admission(
        self, run: Run, pv: PoolView, member: str, cards: list[GpuSlot]
    ) -> PodAdmission | NotYet:
        """The node, the cards and the devices the pod's claims are pinned to (exact
        admission, plan/dra_admit.py), and with `dra.admission: allocate` on a node whose guard
        is in place the same devices as the allocation's refs; not yet while one is not
        published."""
        hint = super().pod_admission(run, pv, member, cards)
        assert isinstance(hint, PodAdmission)
        dra = run.observed.dra
        observed = next((n for n in run.observed.nodes if n.name == hint.node), None)
        devices = planned_devices(dra, observed, cards, member)
        refs = (
            planned_devices(dra, observed, cards, member, refs=True)
            if pv.pool.spec.dra.admission == "allocate" and guard_in_place(dra, hint.node)
            else None
        )
        if refs:
            hint = hint.model_copy(update={"refs": refs})
        if devices is None:
            return NotYet(
                "dra-devices-unpublished",
                f"the devices planned for it on {hint.node} are not published by NVIDIA's DRA "
                f"driver yet (it republishes a node's slices after a repartition); admitted "
                f"once they are, on exactly those devices",
            )
        return hint.model_copy(update={"devices": devices})

    def held_beyond(self, run: Run, pv: PoolView, pods: Collection[str]) -> tuple[str, ...]:
        """Their allocated claims: the allocator counts a device taken while an allocation
        names it, and Kubernetes deallocates a claim a moment after its pod went."""
        return claims_held_for(run.observed.dra, pods)

    def share(self, run: Run, pv: PoolView, node: str, slices: int, why: str) -> bool:
        """Cards become whole (slices 0) as the device plugin backend makes them; never shared:
        the driver has no per-slice capacity to give a pod one slice of a card."""
        if slices:
            return False
        return super().share(run, pv, node, 0, why)

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
        """MIG (static, through mig-manager) and whole as the device plugin backend; shared is
        not a partition a DRA card can have."""
        if mode == "shared":
            return []
        return super().reshape(run, g, pv, mode, layout, why=why)
