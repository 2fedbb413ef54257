"""The partition seam: how a card or node is partitioned, and what changing it costs.

Every stage that reshapes capacity (drift, inference, training's give-back, the warm minimum)
asks the pool's backend (`partition_for`) and nothing else; every repartition action a plan
carries is rendered by the backend (`PartitionBackend.change_actions`) and carried out by the
backend's handler family in `reconciler.apply.handlers`. The first backend is NVIDIA's device
plugin plus mig-manager (`device_plugin.py`); a second one (Kubernetes DRA, say) implements
this protocol, is given to `plan_with_facts(..., backends=...)`, and registers its apply
handlers: no stage changes (docs/architecture.md, "A new partition backend").

What the pool's *policy* offers (which layouts, slice counts, the preferred kind) is not a
backend's business: `policy.py` reads it for every backend.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from reconciler.observe.model import ObservedState
from reconciler.plan.actions import PodAdmission
from reconciler.plan.cluster import GpuSlot, PoolView
from reconciler.plan.run import Run
from reconciler.policy.state import DesiredState


@dataclass(frozen=True)
class NotYet:
    """A pod's place cannot be named in an admission yet (`PartitionBackend.pod_admission`):
    the gang waits, whole, with this wait's code and why."""

    code: str
    why: str


class PartitionBackend(Protocol):
    """How one pool's cards are partitioned, how a change reaches the node, and how an
    admission names a pod's place on them."""

    name: str

    def serves(self, pv: PoolView) -> bool:
        """This backend partitions `pv`'s cards (the first backend that serves a pool wins)."""
        ...

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
        """Give `g` partition `mode` ("whole", "mig" with `layout`, "shared") in the working
        view; return every card that changes with it (none when it cannot be done now)."""
        ...

    def resets_node(self, pv: PoolView) -> bool:
        """A MIG mode change on one card resets every card of its node (the cost of a change)."""
        ...

    def reset_blocked(self, pv: PoolView, g: GpuSlot, mode: str) -> bool:
        """Changing `g` to `mode` would reset a card that holds work or is kept for some."""
        ...

    def node_slices(self, pv: PoolView, node: str) -> int:
        """The slice count `node`'s shareable cards have in the plan (0: not shared)."""
        ...

    def sharing_unit(self, pv: PoolView, node: str) -> list[GpuSlot]:
        """The cards of `node` whose sharing changes together (all of them, or one card)."""
        ...

    def shares_beside_mig(self, pv: PoolView) -> bool:
        """Shared cards may sit on a node beside MIG cards."""
        ...

    def share(self, run: Run, pv: PoolView, node: str, slices: int, why: str) -> bool:
        """`node`'s sharing unit becomes shared x`slices` (0: whole), or nothing changes."""
        ...

    def changes_on_node(self, pv: PoolView) -> bool:
        """A new partition reaches a card through a node action (cordon -> `change_actions` ->
        uncordon); False: it is made when claims on it are allocated (DRA's DynamicMIG), and
        step 10 emits nothing for the pool."""
        ...

    def read_observed(self, desired: DesiredState, observed: ObservedState) -> ObservedState:
        """Step 0, before the snapshot is checked: the cards of the pools this backend serves
        as its driver means them where the node agent's report differs (DynamicMIG: a card's
        layout is what is allocated on it); the snapshot itself when nothing differs."""
        ...

    def change_actions(
        self,
        run: Run,
        pv: PoolView,
        node: str,
        changed: list[GpuSlot],
        deps: tuple[str, ...],
        why: str,
    ) -> list[str]:
        """Add the actions that carry out `node`'s changed cards, after `deps` (the cordon and
        the evictions that empty them); return their ids, the last one the node's change."""
        ...

    def pod_admission(
        self, run: Run, pv: PoolView, member: str, cards: list[GpuSlot]
    ) -> PodAdmission | NotYet:
        """How step 11's Admit names the place of one pod (`member`, namespace/name) on
        `cards` (all of one node, with what the plan placed on them), or why it cannot yet."""
        ...

    def held_beyond(self, run: Run, pv: PoolView, pods: Collection[str]) -> tuple[str, ...]:
        """What still holds the cards of `pods` (namespace/name: the pods an admission waits
        to be gone) after they are gone, until it is released (`Admit.after_claims`); ()
        where their going frees the cards."""
        ...


def partition_for(run: Run, pv: PoolView) -> PartitionBackend:
    """The backend that partitions `pv`: the first of the plan's backends that serves it."""
    for backend in run.backends:
        if backend.serves(pv):
            return backend
    raise LookupError(f"no partition backend serves Pool/{pv.name}")  # pragma: no cover


def convert(
    run: Run,
    g: GpuSlot,
    pv: PoolView,
    mode: str,
    layout: tuple[str, ...] = (),
    *,
    why: str,
    slices: int = 0,
) -> None:
    """One card's new target in the working view, as given (a backend's `reshape` decides
    which cards change together); the capacity it frees may let failed demand fit."""
    run.freed()
    if mode == "mig":
        pv.repartition(
            g,
            mode,
            layout=layout,
            instances=run.desired.catalog.place(pv.model, list(layout)) or [],
            why=why,
        )
    elif mode == "shared":
        pv.repartition(
            g, mode, slices=slices or pv.pool.spec.inference.shared.slices_per_gpu, why=why
        )
    else:
        pv.repartition(g, mode, why=why)
