"""What NVIDIA's node components really do to gpupool's plans (stand-ins in tests/nvidia, each
behaviour cited there). The stand-ins are not kinder than the components: the first tests pin
the stand-ins' own behaviour on the real control plane (mig-manager's label protocol, its
mounted config, Ampere's whole-node reset, mig-parted's clearing of listed MIG cards), then the
controller meets them. Where gpupool still assumes friendlier behaviour the test is a strict
xfail naming the issue that fixes it (issue 12, "Partitions the way NVIDIA's stack really makes
them"), and turns into a failure the day the behaviour is fixed without the test being
updated."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.apply.configs import render_sharing, yaml_text
from reconciler.conventions import MIG_CONFIG_LABEL, MIG_STATE_LABEL
from reconciler.plan.actions import CardChange, SetSharing
from tests.nvidia.device_plugin import parse_sharing

from .harness import (
    A100,
    OPERATOR_NS,
    add_gpu_node,
    conditions,
    controller,
    converge,
    create_pod,
    write_policy,
)
from .scenario import TEXT, base, seed_priority_classes

MIG_CM = "gpupool-mig-parted-config"


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


def _configs(kube, **configs: list[dict]) -> None:
    """Add mig-parted configs to mig-manager's ConfigMap and let every mounted copy see them."""
    cm = kube.core.read_namespaced_config_map(MIG_CM, OPERATOR_NS)
    text = cm.data["config.yaml"] + "".join(
        f"  {name}:\n"
        + "".join(
            f"  - devices: {i['devices']}\n    mig-enabled: {str(i['mig-enabled']).lower()}\n"
            + (f"    mig-devices: {i['mig-devices']}\n" if "mig-devices" in i else "")
            for i in items
        )
        for name, items in configs.items()
    )
    kube.core.patch_namespaced_config_map(MIG_CM, OPERATOR_NS, {"data": {"config.yaml": text}})
    for sim in kube.nodes.values():
        sim.observe()
    kube.clock.advance(600)


def _label(kube, node: str, value: str | None) -> None:
    kube.core.patch_node(node, {"metadata": {"labels": {MIG_CONFIG_LABEL: value}}})


def _run(sim) -> list[str]:
    """mig-manager's steps until it is idle again: the states it wrote."""
    out = []
    while (st := sim.mig_manager.step()) is not None:
        out.append(st)
    return out


ON0 = [{"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
OFF1 = [{"devices": [1], "mig-enabled": False}]


def test_stand_in_acts_on_value_changes_only_and_retries_on_a_new_value(kube, tmp_path):
    """A new value naming an identical config is how a failed reconfiguration is retried;
    removing the label while idle wakes nothing; setting it back runs it again."""
    base(kube, tmp_path, kube.clock, workloads=False)
    sim = kube.nodes["h100-2"]
    sim.step()
    sim.gpus.allocate("team-a/job", {"nvidia.com/gpu": 1})  # holds card 0
    _configs(kube, a=ON0, **{"a-r1": ON0})
    _label(kube, "h100-2", "a")
    assert _run(sim) == ["pending", "failed"]  # card 0 is in use
    sim.gpus.release("team-a/job")
    assert _run(sim) == []  # the label did not change: failed stays
    _label(kube, "h100-2", None)
    assert _run(sim) == []
    _label(kube, "h100-2", "a-r1")
    assert _run(sim) == ["pending", "success"]
    assert sim.gpus.mig_cards() == {0}
    _label(kube, "h100-2", "a")  # a new value, already applied: success, nothing stopped
    assert _run(sim) == ["success"]
    assert [o for _, o in sim.mig_manager.runs] == ["failed", "success", "success"]


def test_stand_in_ampere_mode_change_resets_every_gpu(kube, tmp_path):
    """Card 0 is idle, card 1 (a whole card, not in the config) has work: on A100 enabling MIG
    on card 0 needs a reset of every GPU and fails; on H100 it takes effect on card 0 alone."""
    base(kube, tmp_path, kube.clock, workloads=False)
    a100 = add_gpu_node(kube, "a100-1", model=A100, pool="a100")
    h100 = kube.nodes["h100-2"]
    for sim in (a100, h100):
        sim.step()
        sim.gpus.allocate("team-a/filler", {"nvidia.com/gpu": 1})  # card 0
        sim.gpus.allocate("team-a/job", {"nvidia.com/gpu": 1})  # card 1
        sim.gpus.release("team-a/filler")
        assert sim.gpus.busy_cards() == {1}
    _configs(kube, on0=ON0)
    for node in ("a100-1", "h100-2"):
        _label(kube, node, "on0")
    assert _run(a100) == ["pending", "failed"]
    assert a100.gpus.mig_cards() == set()
    assert _run(h100) == ["pending", "success"]
    assert h100.gpus.mig_cards() == {0}


def test_stand_in_mode_change_clears_every_listed_mig_card(kube, tmp_path):
    """H100, card 1 in MIG mode with work on an instance: a config that enables MIG on card 0
    and also lists card 1 fails (mig-parted clears every listed MIG card on a mode change); the
    config of card 0 alone succeeds, and then the whole-node config is already applied."""
    base(kube, tmp_path, kube.clock, workloads=False)
    sim = add_gpu_node(kube, "h100-9", mig={1: ["3g.40gb", "3g.40gb"]})
    sim.step()
    sim.gpus.allocate("team-a/infer", {"nvidia.com/mig-3g.40gb": 1})
    assert sim.gpus.busy_cards() == {1}
    keep1 = [{"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
    _configs(kube, both=keep1 + ON0, only0=ON0)
    _label(kube, "h100-9", "both")
    assert _run(sim) == ["pending", "failed"]
    assert sim.gpus.mig_cards() == {1} and len(sim.gpus.layout(1)) == 2  # not cleared
    _label(kube, "h100-9", "only0")
    assert _run(sim) == ["pending", "success"]
    _label(kube, "h100-9", "both")
    assert _run(sim) == ["success"]  # already applied: nothing touched
    assert sim.gpus.busy_cards() == {1} and sim.gpus.mig_cards() == {0, 1}


def test_stand_in_fails_a_config_file_it_cannot_parse(kube, tmp_path):
    """mig-parted parses the whole file before it selects a config: one bad entry anywhere
    fails every label."""
    base(kube, tmp_path, kube.clock, workloads=False)
    sim = kube.nodes["h100-2"]
    sim.step()
    _configs(kube, good=OFF1, bad=[{"devices": [0], "mig-enabled": True}])  # no mig-devices
    _label(kube, "h100-2", "good")
    assert _run(sim) == ["failed"]


def test_a_failed_reconfiguration_is_retried_under_a_new_label_value(kube, tmp_path):
    """A kubelet slower than the wait (a longer sync period): mig-manager's mounted copy does
    not have the config yet when the label names it, so it fails; the controller retries with
    the config's retry name (declared with it) one propagation period later, and converges."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    sim = kube.nodes["h100-2"]
    sim.mig_manager.mounted.delay = 200  # > config_propagation_seconds (150)
    ctl = controller(kube, tmp_path, clock)
    converge(ctl, kube, clock=clock)
    (first, failed), (second, ok) = sim.mig_manager.runs
    assert (failed, ok, second) == ("failed", "success", f"{first}-r1")
    node = kube.core.read_node("h100-2")
    assert node.metadata.labels[MIG_CONFIG_LABEL] == second
    assert node.metadata.labels[MIG_STATE_LABEL] == "success"
    assert not node.spec.unschedulable
    assert conditions(kube)["Ready"]["status"] == "True"


def test_ampere_mode_change_waits_for_the_whole_node(kube, tmp_path):
    """The executor's side of Ampere's whole-node reset: it does not point mig-manager at a MIG
    mode change while any GPU of the A100 node runs work (the label would only fail), says so,
    and goes ahead once the node is idle: one run, no failure, uncordoned."""
    clock = kube.clock
    ctl = _ampere_setup(kube, tmp_path)
    out = None
    for _ in range(15):
        r = ctl.cycle()
        kube.settle()
        kube.step_nodes()
        kube.settle()
        out = {o.action: o for o in r.applied.outcomes}.get("mig-reconfigure:a100-2")
        if out is not None and "resets every GPU" in out.message:
            break
        clock.advance(60)
    assert out is not None and out.status == "waiting"
    assert "bert-old" in out.message and "A100-SXM4-80GB resets every GPU" in out.message
    labels = kube.core.read_node("a100-2").metadata.labels or {}
    assert not (labels.get(MIG_CONFIG_LABEL) or "").startswith("gpupool-")
    assert kube.nodes["a100-2"].mig_manager.runs == []
    # the job finishes (what the planner's whole-node drain will do): the change goes ahead
    kube.core.delete_namespaced_pod("bert-old", "team-b", grace_period_seconds=0)
    kube.settle()
    converge(ctl, kube, clock=clock)
    assert [o for _, o in kube.nodes["a100-2"].mig_manager.runs] == ["success"]
    assert not kube.core.read_node("a100-2").spec.unschedulable


def _ampere_setup(kube, tmp_path):
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
    return controller(kube, tmp_path, clock)


@pytest.mark.xfail(
    strict=True,
    reason="issue 12: on Ampere a MIG mode change resets every GPU of the node, so the "
    "plan must drain the whole node (catalog `mig_mode_change: node`); it drains only the "
    "changed card, and the executor then waits for the rest of the node forever",
)
def test_ampere_mode_change_needs_the_whole_node_idle(kube, tmp_path):
    ctl = _ampere_setup(kube, tmp_path)
    converge(ctl, kube, clock=kube.clock)


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
