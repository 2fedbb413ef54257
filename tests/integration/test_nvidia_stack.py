"""What NVIDIA's node components really do to gpupool's plans (stand-ins in tests/nvidia, each
behaviour cited there). The stand-ins are not kinder than the components, so these tests show
where the executor still assumes friendlier behaviour: each is a strict xfail naming the issue
that fixes it (issue 12, "Partitions the way NVIDIA's stack really makes them"), and turns into
a failure the day the behaviour is fixed without the test being updated."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.apply.configs import render_sharing, yaml_text
from reconciler.plan.actions import CardChange, SetSharing
from tests.nvidia.device_plugin import parse_sharing

from .harness import A100, add_gpu_node, controller, converge, create_pod, write_policy
from .scenario import TEXT, base, seed_priority_classes


def _run(ctl, kube, clock, cycles: int) -> None:
    for _ in range(cycles):
        ctl.cycle()
        kube.settle()
        kube.step_nodes()
        kube.settle()
        clock.advance(60)


def test_stand_in_fails_a_label_set_before_the_config_is_mounted(kube, tmp_path):
    """The behaviour the executor's wait guards against: label and ConfigMap written together
    (as the executor did before) make mig-manager fail, and it stays failed."""
    base(kube, tmp_path, kube.clock, workloads=False)
    sim = kube.nodes["h100-2"]
    sim.step()  # mig-manager starts: no label yet
    cm = kube.core.read_namespaced_config_map("gpupool-mig-parted-config", kube.operator_namespace)
    text = (
        cm.data["config.yaml"]
        + "  late:\n  - devices: [0]\n    mig-enabled: true\n    mig-devices: {7g.80gb: 1}\n"
    )
    kube.core.patch_namespaced_config_map(
        "gpupool-mig-parted-config", kube.operator_namespace, {"data": {"config.yaml": text}}
    )
    kube.core.patch_node("h100-2", {"metadata": {"labels": {"nvidia.com/mig.config": "late"}}})
    assert sim.mig_manager.step() == "failed"
    kube.clock.advance(600)  # the mounted copy has it now, but the label did not change
    assert sim.mig_manager.step() is None
    assert kube.core.read_node("h100-2").metadata.labels["nvidia.com/mig.config.state"] == "failed"


@pytest.mark.xfail(
    strict=True,
    reason="issue 12: on Ampere a MIG mode change resets every GPU of the node, so the "
    "plan must drain the whole node; it drains only the changed card",
)
def test_ampere_mode_change_needs_the_whole_node_idle(kube, tmp_path):
    clock = kube.clock
    text = TEXT.replace("H100-SXM5-80GB", "A100-SXM4-80GB").replace("h100", "a100")
    for ns in ("team-a", "team-b"):
        kube.ensure_namespace(ns)
    add_gpu_node(kube, "a100-1", model=A100, pool="a100")
    add_gpu_node(kube, "a100-2", model=A100, pool="a100")
    write_policy(tmp_path, text)
    seed_priority_classes(kube, text)
    ago = lambda h: clock.now - timedelta(hours=h)  # noqa: E731
    create_pod(
        kube,
        "team-a",
        "resnet",
        node="a100-1",
        gpus=8,
        cls="training-high",
        started=ago(3),
        pool="a100",
    )
    create_pod(
        kube,
        "team-b",
        "bert-old",
        node="a100-2",
        gpus=4,
        cls="training-high",
        started=ago(6),
        pool="a100",
    )
    create_pod(
        kube,
        "team-b",
        "bert-new",
        node="a100-2",
        gpus=4,
        cls="training-low",
        started=ago(2),
        pool="a100",
        annotations={
            "gpupool.io/checkpointable": "true",
            "gpupool.io/last-checkpoint": ago(0.1).isoformat(),
        },
    )
    for i in range(2):
        create_pod(kube, "team-b", f"ranker-{i}", mig="3g.40gb", cls="serving", pool="a100")
    kube.settle()
    converge(controller(kube, tmp_path, clock), kube, clock=clock)


def _shared_setup(kube, tmp_path):
    text = TEXT.replace("prefer: mig", "prefer: shared")
    base(kube, tmp_path, kube.clock, text=text, workloads=False)
    seed_priority_classes(kube, text)
    create_pod(kube, "team-b", "chat-0", shared=1, cls="serving")
    kube.settle()
    return controller(kube, tmp_path, kube.clock)


@pytest.mark.xfail(
    strict=True,
    reason="issue 12: the device plugin time-slices every whole card of a node (it "
    "ignores `devices`); gpupool counts only the converted cards as shared",
)
def test_sharing_one_card_shares_the_node(kube, tmp_path):
    ctl = _shared_setup(kube, tmp_path)
    _run(ctl, kube, kube.clock, 4)
    nodes = {n.metadata.name: n for n in kube.core.list_node().items}
    shared = [
        n
        for n in ("h100-1", "h100-2")
        if "nvidia.com/gpu.shared" in (nodes[n].status.allocatable or {})
    ]
    assert shared, "no node was converted"
    alloc = nodes[shared[0]].status.allocatable
    assert alloc.get("nvidia.com/gpu") == "7"  # what the plan counted: one card shared, seven whole


@pytest.mark.xfail(
    strict=True,
    reason="issue 12: turning shared cards back to whole renders `replicas: 1`, which "
    "the device plugin rejects (it must drop the sharing config instead)",
)
def test_unsharing_renders_a_config_the_plugin_accepts():
    back = SetSharing(
        id="set-sharing:n",
        target="n",
        reason="back to whole",
        cards=(CardChange(gpu=0, before="shared x4", after="whole"),),
        shared_slices=(),
    )
    parse_sharing(yaml_text(render_sharing(back)))  # the device plugin's own check
