"""Step 10: per node, the repartitions the working view planned, as actions: cordon ->
(checkpoint -> evict, already emitted) -> the backend's change -> uncordon; and nodes gpupool
cordoned for a repartition that is complete go back into service."""

from __future__ import annotations

from reconciler.conventions import (
    CONFIG_NAME_PREFIX,
    CORDONED_FOR_ANN,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
)
from reconciler.plan.actions import Cordon, Uncordon
from reconciler.plan.partition import partition_for
from reconciler.plan.run import Run


def repartition_actions(run: Run) -> None:
    for pv in run.cluster.pools.values():
        backend = partition_for(run, pv)
        if not backend.changes_on_node(pv):
            continue  # the driver makes the partitions when the claims are allocated
        for node, slots in pv.by_node().items():
            changed = [g for g in slots if g.changes]
            if not changed:
                continue
            evictions = sorted(
                set().union(*(run.evictions_on.get((node, g.index), set()) for g in changed))
            )
            cordon = run.add(
                Cordon(
                    id=f"cordon:{node}",
                    target=node,
                    pool=pv.name,
                    reason=f"stop new pods on {node} while {len(changed)} GPU(s) are repartitioned",
                )
            )
            why = (
                "; ".join(dict.fromkeys(g.why for g in changed if g.why)) or "desired partitioning"
            )
            done = backend.change_actions(run, pv, node, changed, (cordon, *evictions), why)
            run.add(
                Uncordon(
                    id=f"uncordon:{node}",
                    target=node,
                    pool=pv.name,
                    reason=f"{node} is repartitioned; schedule on it again",
                    depends_on=(done[-1],),
                )
            )


def finish_drains(run: Run) -> None:
    """Nodes gpupool cordoned for a repartition that is now complete go back into service. Not
    a node unavailable (failed, back and settling, or its agent silent since it came back):
    whether its repartition completed is known only once it reports again, and its cards are
    read afresh first; nor one where mig-manager still applies a config gpupool wrote
    (`unresolved`: the repartition was abandoned, say by a node failure, and is not over)."""
    for pv in run.cluster.pools.values():
        for name, node in pv.nodes.items():
            if not (node.unschedulable and CORDONED_FOR_ANN in node.annotations):
                continue
            if name in run.cluster.fenced_nodes or f"cordon:{name}" in run.actions:
                continue
            if unresolved(node.labels):
                run.find(
                    "info",
                    "repartition-unresolved",
                    name,
                    f"{name} stays cordoned: {unresolved(node.labels)}; it is uncordoned "
                    "once mig-manager has applied it and the node agent shows the result",
                )
                continue
            run.add(
                Uncordon(
                    id=f"uncordon:{name}",
                    target=name,
                    pool=pv.name,
                    reason=(
                        f"{name} was cordoned by gpupool for a repartition that is complete; "
                        "schedule on it again"
                    ),
                )
            )


def unresolved(labels: dict[str, str]) -> str:
    """Why the node's last gpupool repartition is not resolved by its labels: mig-manager has
    not finished a config gpupool named ('' when it has, or the config is not gpupool's)."""
    config = labels.get(MIG_CONFIG_LABEL, "")
    state = labels.get(MIG_STATE_LABEL, "")
    if config.startswith(CONFIG_NAME_PREFIX) and state in ("", "pending"):
        return f"mig-manager has not finished {config} ({MIG_STATE_LABEL}={state or 'unset'})"
    return ""
