"""Step 1 (and the fences of step 0): cards whose partition is not one the pool's policy
offers are repartitioned when empty (closed to nothing while busy: the scheduler still binds
to them), inference cards over `inference.maxGPUs` go back to whole; unavailable nodes are
reported and their cards are not capacity."""

from __future__ import annotations

from reconciler.plan.partition import partition_for
from reconciler.plan.partition.policy import inference_shape, policy_shape
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


def repartition_drift(run: Run) -> None:
    """A card whose partition is not the policy's is repartitioned like any other change:
    at once when empty. While work runs on it, it stays what it is, to the planner as to
    kube-scheduler: the device plugin keeps advertising its instances or slices and nothing
    can close one card to the scheduler (the plugin advertises per node, a cordon stops the
    whole node), so its free capacity is counted where pods will really land."""
    for pv in run.cluster.pools.values():
        inf = pv.pool.spec.inference
        for g in pv.gpus:
            why = policy_shape(pv, g) if not g.fenced else ""
            if not why:
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
