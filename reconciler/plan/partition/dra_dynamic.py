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

A card's partition as the planner reads it (`read_observed`, step 0, before the snapshot is
checked): the MIG partitions allocated on it (held by pods, read from their claims; the node
agent shows an instance only from the claim's prepare to its unprepare), completed to the
first layout the pool offers that contains them (the rest of that layout is free: what the
counters leave); a card with nothing or the whole card allocated is whole (the driver offers
it whole and as any partition). A card whose partitions fit no offered layout stays as the
agent reports it (the consistency check and drift say what is wrong).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from reconciler.observe.model import Gpu, MigInstance, ObservedState
from reconciler.plan.cluster import GpuSlot, PoolView, node_pool_name
from reconciler.plan.partition.dra import DraBackend
from reconciler.plan.run import Run
from reconciler.policy.catalog import GpuModel
from reconciler.policy.models import Pool
from reconciler.policy.state import DesiredState


class DynamicMigBackend(DraBackend):
    """MIG partitions the DRA driver makes at claim time; no mig-manager, no node action."""

    name = "dra-dynamic-mig"

    def serves(self, pv: PoolView) -> bool:
        return pv.pool.spec.dynamic_mig

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

    def read_observed(self, desired: DesiredState, observed: ObservedState) -> ObservedState:
        """Each card of a dynamic pool's nodes as the driver offers it (the module's
        docstring): the node agent shows an instance only once the kubelet prepared its claim
        and until it unprepared it, while the allocation is what the counters hold."""
        if not any(p.spec.dynamic_mig for p in desired.pools.values()):
            return observed  # no dynamic pool: nothing to read (one pass saved per plan)
        dynamic: dict[str, Pool] = {}
        for n in observed.nodes:
            pool = desired.pools.get(node_pool_name(desired, n) or "")
            if pool is not None and pool.spec.dynamic_mig:
                dynamic[n.name] = pool
        held = _held(observed, dynamic.keys())
        nodes = []
        for n in observed.nodes:
            pool = dynamic.get(n.name)
            if pool is None:
                nodes.append(n)
                continue
            model = desired.catalog.model(pool.spec.gpu_model)
            gpus = [
                _as_allocated(desired, pool, model, g, held.get((n.name, g.index))) for g in n.gpus
            ]
            nodes.append(n if gpus == n.gpus else n.model_copy(update={"gpus": gpus}))
        if all(a is b for a, b in zip(nodes, observed.nodes, strict=True)):
            return observed
        return observed.model_copy(update={"nodes": nodes})


def _held(
    observed: ObservedState, nodes: Collection[str]
) -> dict[tuple[str, int], list[tuple[str, int] | None]]:
    """(node, card) -> what running (or bound) workloads hold there, on `nodes`: (profile,
    start) for a MIG partition, None for the whole card."""
    out: dict[tuple[str, int], list[tuple[str, int] | None]] = {}
    for w in observed.workloads:
        if w.node not in nodes:
            continue
        for a in w.allocations:
            part = (a.mig_profile or "", a.mig_start) if a.mig_start is not None else None
            out.setdefault((w.node or "", a.gpu), []).append(part)
    return out


def _as_allocated(
    desired: DesiredState,
    pool: Pool,
    model: GpuModel | None,
    g: Gpu,
    held: list[tuple[str, int] | None] | None,
) -> Gpu:
    """`g` as its allocations make it: whole when nothing or the whole card is held; MIG
    with the held partitions completed to an offered layout; as reported when the held
    partitions fit no offered layout (drift and the consistency check say so)."""
    parts = sorted({p for p in held or () if p is not None})
    if not parts:  # nothing held, or the whole card
        if not g.mig_enabled and not g.mig_instances:
            return g
        return g.model_copy(update={"mig_enabled": False, "mig_instances": []})
    placed = _completed(desired, pool, model, parts)
    if placed is None:
        return g
    uuids = {(i.profile, i.start): i.uuid for i in g.mig_instances}
    instances = [MigInstance(profile=p, start=s, uuid=uuids.get((p, s), "")) for p, s in placed]
    return g.model_copy(update={"mig_enabled": True, "mig_instances": instances})


def _completed(
    desired: DesiredState, pool: Pool, model: GpuModel | None, occupied: list[tuple[str, int]]
) -> list[tuple[str, int]] | None:
    """The instances of the first offered layout that contains `occupied`, placed beside them
    (the catalog's first free start, largest first); None when no offered layout does."""
    mig = pool.spec.inference.mig
    if mig is None or model is None or any(not p for p, _ in occupied):
        return None
    have = Counter(p for p, _ in occupied)
    for lay in mig.layouts:
        if have - Counter(lay.profiles):
            continue  # an occupied profile this layout does not have
        placed = list(occupied)
        rest = Counter(lay.profiles) - have
        for prof in sorted(rest.elements(), key=lambda p: -_slices(model, p)):
            start = desired.catalog.fits_after(model, placed, prof)
            if start is None:
                break
            placed.append((prof, start))
        else:
            return sorted(placed, key=lambda i: i[1])
    return None


def _slices(model: GpuModel, profile: str) -> int:
    p = model.profiles.get(profile)
    return p.memory_slices if p is not None else 0
