"""The third partition backend: NVIDIA's DRA driver with its alpha `DynamicMIG` gate
(kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1), for pools with `spec.backend: dra` and
`spec.dra.mig: dynamic`.

What the driver does there (read, not copied):

- it publishes, per card, the whole card `gpu-<minor>` and every possible MIG partition
  `gpu-<minor>-mig-<profile>-<profile id>-<placement start>` (cmd/gpu-kubelet-plugin/nvlib.go:
  Hopper and later offer both whole and partitions whatever the card's MIG mode,
  `supportsMIGModeToggle`), and one shared counter set per card, `gpu-<minor>-counter-set`,
  with one counter per capacity (`multiprocessors`, `copy-engines`, ..., `memory`) and one
  `memory-slice-<i>` per memory slice; the whole card consumes all of them, a partition its
  own capacities and memory slices (partitions.go `PartSharedCounterSets`,
  `PartConsumesCounters`). So kube-scheduler's allocator never gives out a whole card and a
  partition of it, nor two overlapping partitions: the counters keep a card consistent.
- it creates the MIG instance when a claim on a partition is prepared, and destroys it at
  unprepare (device_state.go `Prepare`/`Unprepare`, nvlib.go `createMigDevice`,
  `deleteMigDevice`). Its docs warn not to run mig-parted beside it.

So a repartition here is no node action: gpupool never writes mig-manager's label on such a
node (`change_actions` adds nothing, `changes_on_node` is False: no cordon either), and the
new layout exists once the pods admitted to it are allocated (exact admission names the card
and profile: plan/dra_admit.py). The planner still reshapes only empty cards (a card with work
is drained first, the evictions ordered before the admission as for any backend).

A card's partition as the planner reads it (`read_cards`, step 0): the MIG devices allocated
on it (held by pods; the node agent shows them once the driver made them), completed to the
first layout the pool offers that contains them (the rest of that layout is free: what the
counters leave); a card with nothing on it is whole (the driver offers it whole and as any
partition). A card whose instances fit no offered layout stays what it is (drift reports it).
"""

from __future__ import annotations

from collections import Counter

from reconciler.plan.cluster import GpuSlot, PoolView
from reconciler.plan.partition.dra import DraBackend
from reconciler.plan.run import Run


class DynamicMigBackend(DraBackend):
    """MIG partitions the DRA driver makes at claim time; no mig-manager, no node action."""

    name = "dra-dynamic-mig"

    def serves(self, pv: PoolView) -> bool:
        spec = pv.pool.spec
        return spec.backend == "dra" and spec.dra.mig == "dynamic"

    def resets_node(self, pv: PoolView) -> bool:
        return False  # Hopper and later: MIG mode changes per card, without a reset

    def reset_blocked(self, pv: PoolView, g: GpuSlot, mode: str) -> bool:
        return False

    def changes_on_node(self, pv: PoolView) -> bool:
        return False

    def change_actions(
        self,
        run: Run,
        pv: PoolView,
        node: str,
        changed: list[GpuSlot],
        deps: tuple[str, ...],
        why: str,
    ) -> list[str]:
        return []  # the driver makes the partition when a claim on it is prepared

    def read_cards(self, run: Run, pv: PoolView) -> None:
        """Each open card of the pool as the driver offers it (see the module's docstring)."""
        for g in pv.gpus:
            if g.fenced:
                continue
            held = sorted(g.used_instances)  # the partitions allocated to pods on it
            if not held:
                if not g.holders:
                    _set(pv, g, "whole", [])  # nothing allocated: the driver offers it whole
                continue  # the whole card is allocated
            placed = _completed(run, pv, held)
            if placed is not None:
                _set(pv, g, "mig", placed)


def _set(pv: PoolView, g: GpuSlot, mode: str, instances: list[tuple[str, int]]) -> None:
    """`g` is `mode` now (and in the plan until a stage changes it)."""
    if (g.mode, g.instances) == (mode, instances):
        return
    g.mode = g.target_mode = mode
    g.instances, g.target_instances = list(instances), list(instances)
    g.layout = g.target_layout = tuple(sorted(p for p, _ in instances))
    pv.touch(g.node, repartitioned=True)


def _completed(
    run: Run, pv: PoolView, occupied: list[tuple[str, int]]
) -> list[tuple[str, int]] | None:
    """The instances of the first offered layout that contains `occupied`, placed beside them
    (the catalog's first free start, largest first); None when no offered layout does."""
    mig = pv.pool.spec.inference.mig
    if mig is None or pv.model is None:
        return None
    have = Counter(p for p, _ in occupied)
    catalog = run.desired.catalog
    for lay in mig.layouts:
        rest = Counter(lay.profiles) - have
        if have - Counter(lay.profiles):
            continue  # an occupied profile this layout does not have
        placed = list(occupied)
        for prof in sorted(rest.elements(), key=lambda p: -_slices(pv, p)):
            start = catalog.fits_after(pv.model, placed, prof)
            if start is None:
                break
            placed.append((prof, start))
        else:
            return sorted(placed)
    return None


def _slices(pv: PoolView, profile: str) -> int:
    p = pv.model.profiles.get(profile) if pv.model is not None else None
    return p.memory_slices if p is not None else 0
