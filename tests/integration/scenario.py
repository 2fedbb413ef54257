"""The standard scenario: two H100 nodes, a high-priority training job filling h100-1, two
low-priority jobs sharing h100-2, and two pending MIG inference pods that need a 3g.40gb pair.
The plan: checkpoint + preempt the younger low-priority job, cordon h100-2, reconfigure GPU 4
to MIG [3g.40gb, 3g.40gb] through mig-manager, uncordon. (tests/plan/scenarios.py's
inference_preempts_low_training on Hopper, where a MIG mode change needs only its own card idle;
the Ampere case is tests/integration/test_nvidia_stack.py.)"""

from __future__ import annotations

from datetime import timedelta

from reconciler.plan.quotas import desired_priority_classes
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import desired_text

from .harness import Clock, add_gpu_node, create_pod, ensure_namespace, write_policy

TEXT = desired_text(train_min=0).replace("A100-SXM4-80GB", "H100-SXM5-80GB").replace("a100", "h100")


def seed_priority_classes(kube, text: str = TEXT) -> None:
    """The PriorityClasses a converged cluster has (pods need them to be admitted)."""
    for pc in desired_priority_classes(load([SourceFile("d.yaml", text)])).values():
        kube.scheduling.create_priority_class(
            {
                "metadata": {"name": pc.name},
                "value": pc.value,
                "preemptionPolicy": pc.preemption_policy,
                "globalDefault": pc.global_default,
            }
        )


def base(
    kube, tmp_path, clock: Clock, *, text: str = TEXT, workloads: bool = True, pending: bool = True
) -> None:
    for ns in ("team-a", "team-b"):
        ensure_namespace(kube, ns)
    add_gpu_node(kube, "h100-1")
    add_gpu_node(kube, "h100-2")
    write_policy(tmp_path, text)
    if not workloads:
        return
    seed_priority_classes(kube, text)
    ago = lambda h: clock.now - timedelta(hours=h)  # noqa: E731
    ck = lambda h: {  # noqa: E731
        "gpupool.io/checkpointable": "true",
        "gpupool.io/last-checkpoint": ago(h).isoformat(),
    }
    create_pod(
        kube,
        "team-a",
        "resnet",
        node="h100-1",
        gpus=8,
        cls="training-high",
        started=ago(3),
        annotations={"gpupool.io/checkpointable": "true"},
    )
    create_pod(
        kube,
        "team-b",
        "bert-old",
        node="h100-2",
        gpus=4,
        cls="training-low",
        started=ago(6),
        annotations=ck(0.5),
    )
    create_pod(
        kube,
        "team-b",
        "bert-new",
        node="h100-2",
        gpus=4,
        cls="training-low",
        started=ago(2),
        annotations=ck(0.1),
    )
    if pending:
        for i in range(2):
            create_pod(kube, "team-b", f"ranker-{i}", mig="3g.40gb", cls="serving")
        kube.settle()
