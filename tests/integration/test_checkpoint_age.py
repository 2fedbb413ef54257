"""A checkpoint request left from an abandoned plan is asked again, and its grace waited again."""

from __future__ import annotations

from datetime import timedelta

from reconciler.apply.executor import Executor
from reconciler.apply.kube import KubeOps
from reconciler.conventions import CHECKPOINT_REQUESTED_ANN as CHECKPOINT_ANN
from reconciler.plan.actions import Checkpoint, Preempt
from reconciler.plan.model import Plan
from tests.integration.harness import add_gpu_node, create_pod


def _plan(ns: str) -> Plan:
    ck = Checkpoint(
        id=f"checkpoint:{ns}/job",
        target=f"{ns}/job",
        reason="checkpoint first",
        grace_period_seconds=300,
        checkpointable=True,
    )
    ev = Preempt(
        id=f"preempt:{ns}/job",
        target=f"{ns}/job",
        reason="make room",
        depends_on=(ck.id,),
        node=None,
        gpus=(),
    )
    return Plan(observed_at="t", actions=(ck, ev))


def test_old_checkpoint_request_is_renewed_and_the_grace_period_waited(kube):
    ns = kube.new_namespace()
    clock = kube.clock
    add_gpu_node(kube, "ck-1", count=1)
    old = (clock.now - timedelta(hours=3)).isoformat()
    create_pod(
        kube, ns, "job", node="ck-1", gpus=1, pool=None, cls=None, annotations={CHECKPOINT_ANN: old}
    )
    ex = Executor(KubeOps(kube.controller_client()), clock=clock)
    out = {o.action: o for o in ex.apply(_plan(ns)).outcomes}
    assert out[f"checkpoint:{ns}/job"].message == "checkpoint requested"
    assert (
        out[f"preempt:{ns}/job"].status == "waiting"
    )  # not evicted on the strength of a 3-hour-old request
    anns = kube.core.read_namespaced_pod("job", ns).metadata.annotations
    assert anns[CHECKPOINT_ANN] == clock.now.isoformat()

    clock.advance(301)
    out = {o.action: o for o in ex.apply(_plan(ns)).outcomes}
    assert out[f"checkpoint:{ns}/job"].message.startswith(
        "requested at"
    )  # the fresh request stands
    assert out[f"preempt:{ns}/job"].status == "done"
