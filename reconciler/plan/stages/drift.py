"""Step 1 (and the fences of step 0): cards whose partition is not one the pool's policy
offers are repartitioned when empty (while busy, a shared card is closed only to shared work
whose memory does not fit its slices: `slice_memory_fits`), inference cards over
`inference.maxGPUs` go back to whole; unavailable nodes are reported and their cards are not
capacity."""

from __future__ import annotations

from reconciler.observe.model import Request
from reconciler.plan.cluster import GpuSlot, PoolView
from reconciler.plan.demand import card_slice_mib, gib, slice_memory_fits
from reconciler.plan.partition import partition_for
from reconciler.plan.partition.policy import inference_shape, policy_shape, policy_strategy
from reconciler.plan.run import Run


def report_fences(run: Run) -> None:
    for name, why in sorted(run.cluster.fenced_nodes.items()):
        pool = run.cluster.node_pool.get(name)
        run.find(
            "info",
            "node-unavailable",
            name,
            f"{why}: its GPUs are not counted as capacity of {pool}; gpupool places, "
            "repartitions and uncordons nothing there until it is available again",
        )


def _closed(pv: PoolView, g: GpuSlot, busy: bool) -> str:
    """For a card still shared with a count whose slices have less memory than the policy's
    memoryPerSlice: what it is closed to, when it changes, and what may still land there
    ('' for any other card)."""
    sh = pv.pool.spec.inference.shared
    if g.mode != "shared" or sh is None or pv.model is None:
        return ""
    if slice_memory_fits(pv, Request(shared_slices=1), g.slices):
        return ""
    per = gib(card_slice_mib(pv, g.slices))
    first = "once its workloads finish and the other" if busy else "once the other"
    when = f"{first} plain cards of {g.node} are empty too (the device plugin shares per node)"
    cost = (
        f"MPS caps each at {per}, so such a pod fails to allocate"
        if policy_strategy(pv) == "mps"
        else "time-slicing does not isolate memory, so that may over-commit the card"
    )
    return (
        f"closed to new shared work that does not fit its x{g.slices} slices; re-shared as "
        f"x{sh.slices_per_gpu} once empty: {when}. A slice has {per} there, less than the "
        f"policy's {sh.memory_per_slice}: gpupool admits no gated pod to it whose GPU memory "
        "per slice (declared, else the policy's) is more; kube-scheduler may still bind pods "
        f"without gpupool's gate (namespaces not gated for gpupool) to its free slices, and {cost}"
    )


def repartition_drift(run: Run) -> None:
    """A card whose partition is not the policy's is repartitioned like any other change:
    at once when empty. While work runs on it, it stays what it is, to the planner as to
    kube-scheduler: the device plugin keeps advertising its instances or slices and nothing
    can close one card to the scheduler (the plugin advertises per node, a cordon stops the
    whole node), so its free capacity is counted where pods will really land. A shared card
    whose slices have less memory than the policy's slice is closed to the shared work
    gpupool admits that does not fit them (`stages/inference.py`), and re-shared with its
    node once the node's plain cards are all empty."""
    for pv in run.cluster.pools.values():
        inf = pv.pool.spec.inference
        for g in pv.gpus:
            why = policy_shape(pv, g) if not g.fenced else ""
            if not why:
                continue
            closed = _closed(pv, g, busy=bool(g.holders))
            if g.holders and closed:
                run.find("info", "partition-drift", g.key, f"{g.key} {why}: {closed}")
                continue
            if g.holders:
                run.find(
                    "info",
                    "partition-drift",
                    g.key,
                    f"{g.key} {why}: it is repartitioned once its workloads finish; until "
                    "then kube-scheduler still binds pods to its free "
                    + (
                        "slices (time-slicing does not isolate memory)"
                        if g.mode == "shared"
                        else "capacity"
                    ),
                )
                continue
            if g.converted:
                continue  # reshaped with its node already
            mode, layout = inference_shape(pv, prefer=g.mode)
            if not partition_for(run, pv).reshape(run, g, pv, mode, layout, why=f"{g.key} {why}"):
                if closed:
                    run.find("info", "partition-drift", g.key, f"{g.key} {why}: {closed}")
                    continue
                run.find(
                    "info",
                    "partition-drift",
                    g.key,
                    f"{g.key} {why}: it is repartitioned once the other shared cards of "
                    f"{g.node} are empty (the device plugin shares per node)",
                )
        cap = inf.max_gpus
        surplus = len(pv.inference_slots()) - cap if cap is not None else 0
        for g in list(pv.inference_slots()):
            if surplus <= 0:
                break
            if g.holders or g.fenced or g.target_mode == "whole":
                continue
            if g.target_mode == "shared":
                unit = [
                    c
                    for c in partition_for(run, pv).sharing_unit(pv, g.node)
                    if c.target_mode == "shared"
                ]
                if len(pv.inference_slots()) - len(unit) < inf.min_gpus:
                    continue  # unsharing the whole node would go below the warm minimum
            surplus -= len(
                partition_for(run, pv).reshape(
                    run,
                    g,
                    pv,
                    "whole",
                    why=f"Pool/{pv.name} allows at most inference.maxGPUs={cap} inference cards",
                )
            )
