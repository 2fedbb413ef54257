"""What NVIDIA's node components really do to gpupool's plans (stand-ins in tests/nvidia, each
behaviour cited there). The stand-ins are not kinder than the components: the first tests pin
the stand-ins' own behaviour on the real control plane (mig-manager's label protocol, its
mounted config, Ampere's whole-node reset, mig-parted's clearing of listed MIG cards), then the
controller meets them. Where gpupool still assumes friendlier behaviour the test is a strict
xfail naming the issue that fixes it (issue 12, "Partitions the way NVIDIA's stack really makes
them"), and turns into a failure the day the behaviour is fixed without the test being
updated."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconciler.apply.configs import config_name, render_sharing, sharing_resources, yaml_text
from reconciler.apply.executor import Executor
from reconciler.apply.handlers import ApplyConfig, Context, set_sharing
from reconciler.apply.kube import KubeOps
from reconciler.conventions import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_RESOURCE,
    GROUP,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    NODE_STATE_PLURAL,
    SHARED_RESOURCE,
    VERSION,
)
from reconciler.observe.kube import _node as observe_node
from reconciler.observe.kube import observe_cluster
from reconciler.plan.actions import CardChange, CardLayout, MigReconfigure, SetSharing
from reconciler.plan.model import Plan
from tests.apply.memory import MemoryCluster
from tests.nvidia import real_plugin
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
from .world import SHARING_CM, SHARING_DEFAULTS

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


def _mig_steps(sim) -> list[str]:
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
    sim.gpus.hold("team-a/job", 0)  # card 0 (the device plugin's preference may differ)
    _configs(kube, a=ON0, **{"a-r1": ON0})
    _label(kube, "h100-2", "a")
    assert _mig_steps(sim) == ["pending", "failed"]  # card 0 is in use
    sim.gpus.release("team-a/job")
    assert _mig_steps(sim) == []  # the label did not change: failed stays
    _label(kube, "h100-2", None)
    assert _mig_steps(sim) == []
    _label(kube, "h100-2", "a-r1")
    assert _mig_steps(sim) == ["pending", "success"]
    assert sim.gpus.mig_cards() == {0}
    _label(kube, "h100-2", "a")  # a new value, already applied: success, nothing stopped
    assert _mig_steps(sim) == ["success"]
    assert [o for _, o in sim.mig_manager.runs] == ["failed", "success", "success"]


def test_stand_in_ampere_mode_change_resets_every_gpu(kube, tmp_path):
    """Card 0 is idle, card 1 (a whole card, not in the config) has work: on A100 enabling MIG
    on card 0 needs a reset of every GPU and fails; on H100 it takes effect on card 0 alone."""
    base(kube, tmp_path, kube.clock, workloads=False)
    a100 = add_gpu_node(kube, "a100-1", model=A100, pool="a100")
    h100 = kube.nodes["h100-2"]
    for sim in (a100, h100):
        sim.step()
        sim.gpus.hold("team-a/job", 1)  # card 1 (the device plugin's preference may differ)
        assert sim.gpus.busy_cards() == {1}
    _configs(kube, on0=ON0)
    for node in ("a100-1", "h100-2"):
        _label(kube, node, "on0")
    assert _mig_steps(a100) == ["pending", "failed"]
    assert a100.gpus.mig_cards() == set()
    assert _mig_steps(h100) == ["pending", "success"]
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
    assert _mig_steps(sim) == ["pending", "failed"]
    assert sim.gpus.mig_cards() == {1} and len(sim.gpus.layout(1)) == 2  # not cleared
    _label(kube, "h100-9", "only0")
    assert _mig_steps(sim) == ["pending", "success"]
    _label(kube, "h100-9", "both")
    assert _mig_steps(sim) == ["success"]  # already applied: nothing touched
    assert sim.gpus.busy_cards() == {1} and sim.gpus.mig_cards() == {0, 1}


def test_stand_in_fails_a_config_file_it_cannot_parse(kube, tmp_path):
    """mig-parted parses the whole file before it selects a config: one bad entry anywhere
    fails every label."""
    base(kube, tmp_path, kube.clock, workloads=False)
    sim = kube.nodes["h100-2"]
    sim.step()
    _configs(kube, good=OFF1, bad=[{"devices": [0], "mig-enabled": True}])  # no mig-devices
    _label(kube, "h100-2", "good")
    assert _mig_steps(sim) == ["failed"]


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
    """The executor's side of Ampere's whole-node reset, a backstop for a plan that asks for
    it anyway (the planner drains the whole node first: the test below): it does not point
    mig-manager at a MIG mode change while any GPU of the A100 node runs work (the label would
    only fail), says so, and goes ahead once the node is idle: one run, no failure."""
    clock = kube.clock
    _ampere_setup(kube, tmp_path)
    kube.core.delete_namespaced_pod("bert-new", "team-b", grace_period_seconds=0)  # cards 4-7
    kube.settle()
    kube.core.patch_node("a100-2", {"spec": {"unschedulable": True}})  # the plan's cordon
    ex = Executor(KubeOps(kube.controller_client()), clock=clock)
    layout = tuple(
        CardLayout(gpu=i, profiles=("3g.40gb", "3g.40gb") if i in (4, 5) else None)
        for i in range(8)
    )
    change = MigReconfigure(
        id="mig-reconfigure:a100-2",
        target="a100-2",
        reason="cards 4, 5 to MIG",
        cards=tuple(
            CardChange(gpu=i, before="whole", after="MIG[3g.40gb, 3g.40gb]") for i in (4, 5)
        ),
        layout=layout,
    )
    (out,) = ex.apply(Plan(observed_at="t", actions=(change,))).outcomes
    assert out.status == "waiting"
    assert "bert-old" in out.message and "A100-SXM4-80GB resets every GPU" in out.message
    labels = kube.core.read_node("a100-2").metadata.labels or {}
    assert not (labels.get(MIG_CONFIG_LABEL) or "").startswith("gpupool-")
    assert kube.nodes["a100-2"].mig_manager.runs == []
    # the job finishes: the change goes ahead
    kube.core.delete_namespaced_pod("bert-old", "team-b", grace_period_seconds=0)
    kube.settle()
    for _ in range(20):
        (out,) = ex.apply(Plan(observed_at="t", actions=(change,))).outcomes
        kube.step_nodes()
        kube.settle()
        if out.status in ("done", "failed"):
            break
        clock.advance(30)
    assert out.status == "done", out.message
    assert [o for _, o in kube.nodes["a100-2"].mig_manager.runs] == ["success"]


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


def test_ampere_mode_change_needs_the_whole_node_idle(kube, tmp_path):
    """The planner drains a whole A100 node for a MIG mode change (a100-1 runs non-preemptible
    work; a100-2's low-priority job is preempted, its high-priority one is not preemptible, so
    it waits for it): the plan converges, with no mig-manager failure and nothing cordoned."""
    ctl = _ampere_setup(kube, tmp_path)
    converge(ctl, kube, clock=kube.clock)
    assert all(o == "success" for sim in kube.nodes.values() for _, o in sim.mig_manager.runs)


def _shared_setup(kube, tmp_path):
    text = TEXT.replace("prefer: mig", "prefer: shared")
    base(kube, tmp_path, kube.clock, text=text, workloads=False)
    seed_priority_classes(kube, text)
    create_pod(kube, "team-b", "chat-0", shared=1, cls="serving")
    kube.settle()
    return controller(kube, tmp_path, kube.clock)


def test_sharing_shares_the_whole_node_as_the_plan_counted(kube, tmp_path):
    """One shared pod waits: the planner shares a whole node (the device plugin shares every
    card of a node not in MIG mode), and what the node advertises is what gpupool counts."""
    ctl = _shared_setup(kube, tmp_path)
    _run(ctl, kube, kube.clock, 4)
    nodes = {n.metadata.name: n for n in kube.core.list_node().items}
    shared = [
        n
        for n in ("h100-1", "h100-2")
        if "nvidia.com/gpu.shared" in (nodes[n].status.allocatable or {})
    ]
    assert len(shared) == 1, "one node is shared, whole"
    alloc = nodes[shared[0]].status.allocatable
    seen = {n.name: n for n in observe_cluster(kube.controller_client()).nodes}[shared[0]]
    assert int(alloc["nvidia.com/gpu.shared"]) == sum(g.shared_slices or 0 for g in seen.gpus)
    assert int(alloc.get("nvidia.com/gpu", "0")) == sum(1 for g in seen.gpus if g.mode == "whole")
    assert all(g.mode != "whole" for g in seen.gpus)
    if real_plugin.in_use():  # NVIDIA's plugin advertised it
        assert kube.nodes[shared[0]].gpus.real_plugin is not None
    assert (
        kube.nodes[shared[0]].device_plugin.rejected,
        kube.nodes[shared[0]].device_plugin.crashes,
    ) == (0, 0)


def test_unsharing_renders_a_config_the_plugin_accepts():
    """Back to whole cards is no rendered config at all (never `replicas: 1`): the handler
    points the node's label at the install's `default`, which the plugin accepts and which
    shares nothing; every config gpupool does render passes the plugin's own check."""
    back = SetSharing(
        id="set-sharing:n",
        target="n",
        reason="back to whole",
        cards=(CardChange(gpu=0, before="shared x4", after="whole"),),
        slices=None,
        plain_cards=1,
    )
    assert render_sharing(back) is None
    cluster = MemoryCluster(namespaces={OPERATOR_NS})
    cluster.add_node("n", unschedulable=True, labels={DEVICE_PLUGIN_CONFIG_LABEL: "gpupool-x"})
    cfg = ApplyConfig()
    out = set_sharing(back, Context(cluster, cfg, clock=lambda: datetime.now(UTC)))
    assert out.status == "waiting"
    selected = cluster.read_node("n").labels[DEVICE_PLUGIN_CONFIG_LABEL]
    assert selected == cfg.sharing_default_config
    assert cluster.write_ops() == ["patch_node"]  # no config written for it
    assert parse_sharing(SHARING_DEFAULTS[selected]) is None  # exists from install, no sharing
    for strategy in ("time-slicing", "mps"):
        for slices in (2, 4, 8):
            spec = render_sharing(back.model_copy(update={"slices": slices, "strategy": strategy}))
            assert parse_sharing(yaml_text(spec)).replicas == slices  # the device plugin's check


# ------------------------------------------------------------- set-sharing through the executor
def _drive(kube, sim, ex: Executor, action: SetSharing, limit: int = 20) -> list[tuple]:
    """Apply `action` every 30 s of the test clock until it is done or failed, the node's
    components (config-manager and plugin, the kubelet's mount sync) stepping in between;
    returns (seconds since the first apply, outcome)."""
    start, seen = kube.clock.now, []
    for _ in range(limit):
        (out,) = ex.apply(Plan(observed_at="t", actions=(action,))).outcomes
        seen.append(((kube.clock.now - start).total_seconds(), out))
        sim.observe()  # the kubelet syncs the mounted ConfigMap whether or not anyone looks
        sim.step()
        if out.status in ("done", "failed"):
            break
        kube.clock.advance(30)
    return seen


def _allocatable(kube, node: str) -> dict[str, str]:
    alloc = kube.core.read_node(node).status.allocatable or {}
    return {k: v for k, v in alloc.items() if k.startswith("nvidia.com/")}


def test_executor_shares_a_whole_node_and_back(kube):
    """SetSharing through the executor on a cordoned idle node, against the faithful device
    plugin (config-manager reading a late mounted copy): the config is written, the label waits
    out the propagation, the plugin shares every card out of MIG mode, and the step is done
    only when allocatable shows it; back to `default` converges the same way. The plugin never
    rejects a config and its config-manager never crashes."""
    node = "share-1"
    sim = add_gpu_node(kube, node, count=4, mig={0: ["7g.80gb"]})  # cards 1..3 out of MIG mode
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})  # the plan's cordon
    ex = Executor(KubeOps(kube.controller_client()), clock=kube.clock)
    plain = (1, 2, 3)
    share = SetSharing(
        id=f"set-sharing:{node}",
        target=node,
        reason="cards 1-3: whole -> 4 slices",
        cards=tuple(CardChange(gpu=i, before="whole", after="shared x4") for i in plain),
        slices=4,
        plain_cards=len(plain),
    )
    seen = _drive(kube, sim, ex, share)
    t_end, last = seen[-1]
    assert last.status == "done", [(t, o.status, o.message) for t, o in seen]
    labelled = next(t for t, o in seen if o.message.startswith(DEVICE_PLUGIN_CONFIG_LABEL))
    assert labelled >= ApplyConfig().config_propagation_seconds  # waited for the mounted copy
    assert t_end > labelled  # done only once allocatable showed it, after the label
    name = config_name(render_sharing(share))
    assert kube.core.read_node(node).metadata.labels[DEVICE_PLUGIN_CONFIG_LABEL] == name
    assert _allocatable(kube, node) == {SHARED_RESOURCE: "12", "nvidia.com/mig-7g.80gb": "1"}
    state = kube.custom.get_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL, node)
    observed = observe_node(kube.core.read_node(node), state)
    assert [g.shared_slices for g in observed.gpus] == [None, 4, 4, 4]  # read from allocatable

    back = share.model_copy(
        update={
            "reason": "cards 1-3: 4 slices -> whole",
            "cards": tuple(CardChange(gpu=i, before="shared x4", after="whole") for i in plain),
            "slices": None,
        }
    )
    seen = _drive(kube, sim, ex, back)
    assert seen[-1][1].status == "done", [(t, o.status, o.message) for t, o in seen]
    assert seen[0][1].message.startswith(f"{DEVICE_PLUGIN_CONFIG_LABEL}=default")  # no wait
    assert kube.core.read_node(node).metadata.labels[DEVICE_PLUGIN_CONFIG_LABEL] == "default"
    assert _allocatable(kube, node) == {GPU_RESOURCE: "3", "nvidia.com/mig-7g.80gb": "1"}
    assert (sim.device_plugin.rejected, sim.device_plugin.crashes) == (0, 0)
    assert sim.gpus.plugin_healthy


@pytest.mark.parametrize("strategy", ["time-slicing", "mps"])
def test_executor_shares_a_node_through_nvidias_plugin_and_back(kube, strategy):
    """A node with no card in MIG mode: NVIDIA's own nvidia-device-plugin v0.19.3 reads the
    config the config-manager selected (tests/nvidia/real_plugin.py); the step is done when
    what it advertises reaches allocatable, exactly gpupool's count (`sharing_resources`); a
    pod gets a replica through its GetPreferredAllocation and Allocate; back to `default`."""
    real_plugin.require_in_world()
    node = f"nv-share-{strategy[:3]}"
    sim = add_gpu_node(kube, node, count=4)
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    ex = Executor(KubeOps(kube.controller_client()), clock=kube.clock)
    share = SetSharing(
        id=f"set-sharing:{node}",
        target=node,
        reason="whole -> 4 slices",
        cards=tuple(CardChange(gpu=i, before="whole", after="shared x4") for i in range(4)),
        slices=4,
        strategy=strategy,
        plain_cards=4,
    )
    seen = _drive(kube, sim, ex, share)
    assert seen[-1][1].status == "done", [(t, o.status, o.message) for t, o in seen]
    assert sim.gpus.real_plugin is not None, sim.device_plugin.refusals
    counted = {k: str(v) for k, v in sharing_resources(share).items() if v}
    assert _allocatable(kube, node) == counted == {SHARED_RESOURCE: "16"}
    (replica,) = sim.gpus.allocate("team-a/p", {SHARED_RESOURCE: 1})
    assert replica.split("::")[0] in {d["uuid"] for d in sim.gpus.nvml_devices()}
    sim.gpus.release("team-a/p")
    back = share.model_copy(update={"slices": None, "reason": "back to whole"})
    seen = _drive(kube, sim, ex, back)
    assert seen[-1][1].status == "done", [(t, o.status, o.message) for t, o in seen]
    assert _allocatable(kube, node) == {GPU_RESOURCE: "4"} and sim.gpus.real_plugin is not None
    assert (sim.device_plugin.rejected, sim.device_plugin.crashes) == (0, 0)


def test_nvidias_plugin_refuses_replicas_1_and_the_node_advertises_nothing(kube):
    """A hand-written `replicas: 1` config selected for a node: NVIDIA's plugin stops with its
    own message (FAIL_ON_INIT_ERROR) and the node's GPU resources disappear."""
    real_plugin.require_in_world()
    node = "nv-replicas-1"
    sim = add_gpu_node(kube, node, count=2)
    text = yaml_text(render_sharing(SetSharing(
        id="s", target=node, reason="r", cards=(), slices=2, plain_cards=2
    ))).replace("replicas: 2", "replicas: 1")  # fmt: skip
    cm = kube.core.read_namespaced_config_map(SHARING_CM, OPERATOR_NS)
    kube.core.patch_namespaced_config_map(
        SHARING_CM, OPERATOR_NS, {"data": {**cm.data, "one": text}}
    )
    kube.core.patch_node(node, {"metadata": {"labels": {DEVICE_PLUGIN_CONFIG_LABEL: "one"}}})
    for _ in range(20):
        sim.observe()
        sim.step()
        if sim.device_plugin.applied == "one":
            break
        kube.clock.advance(30)
    assert sim.device_plugin.applied == "one"
    assert sim.device_plugin.rejected == 1
    assert "number of replicas must be >= 2" in sim.device_plugin.refusals[0]
    assert _allocatable(kube, node) == {}


def test_executor_fails_a_sharing_the_plugin_never_shows(kube):
    """A device plugin that never advertises the config's resources (here: it is not running)
    leaves the step waiting, then failed past `sharing_timeout_seconds` with the reason; the
    node stays cordoned."""
    node = "share-2"
    add_gpu_node(kube, node, count=2)
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    cfg = ApplyConfig(config_propagation_seconds=0, sharing_timeout_seconds=120)
    ex = Executor(KubeOps(kube.controller_client()), config=cfg, clock=kube.clock)
    share = SetSharing(
        id=f"set-sharing:{node}",
        target=node,
        reason="whole -> 2 slices",
        cards=(CardChange(gpu=0, before="whole", after="shared x2"),),
        slices=2,
        plain_cards=2,
    )
    statuses = []
    for _ in range(6):
        (out,) = ex.apply(Plan(observed_at="t", actions=(share,))).outcomes
        statuses.append(out.status)
        kube.clock.advance(60)
    assert statuses[:3] == ["waiting"] * 3 and statuses[-1] == "failed", statuses
    assert "stuck for over 120s" in out.message and GPU_RESOURCE in out.message
    assert kube.core.read_node(node).spec.unschedulable
