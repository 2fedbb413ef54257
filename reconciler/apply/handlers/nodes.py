"""Node handlers: cordon, uncordon, node labels."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context, Outcome, _node, handles
from reconciler.plan.actions import Cordon, LabelNode, Uncordon


@handles(Cordon)
def cordon(a: Cordon, ctx: Context) -> Outcome:
    node = _node(ctx, a.target)
    if node.unschedulable:
        return Outcome(a.id, "done", "already cordoned")
    ctx.ops.patch_node(
        a.target, unschedulable=True, annotations={C.CORDONED_FOR_ANN: "repartition"}
    )
    return Outcome(a.id, "done", "cordoned", changed=True)


@handles(Uncordon)
def uncordon(a: Uncordon, ctx: Context) -> Outcome:
    node = _node(ctx, a.target)
    if not node.unschedulable:
        return Outcome(a.id, "done", "already schedulable")
    if C.CORDONED_FOR_ANN not in node.annotations:
        return Outcome(a.id, "done", "cordoned by someone else: left alone")
    mig = node.labels.get(C.MIG_CONFIG_LABEL, "")
    if mig.startswith(C.CONFIG_NAME_PREFIX) and node.labels.get(C.MIG_STATE_LABEL) == "pending":
        return Outcome(a.id, "waiting", f"mig-manager is still applying {mig}")
    ctx.ops.patch_node(a.target, unschedulable=None, annotations={C.CORDONED_FOR_ANN: None})
    return Outcome(a.id, "done", "uncordoned", changed=True)


@handles(LabelNode)
def label_node(a: LabelNode, ctx: Context) -> Outcome:
    node = _node(ctx, a.target)
    if all(node.labels.get(k) == v for k, v in a.labels.items()):
        return Outcome(a.id, "done", "labels present")
    ctx.ops.patch_node(a.target, labels=dict(a.labels))
    return Outcome(a.id, "done", "labelled", changed=True)
