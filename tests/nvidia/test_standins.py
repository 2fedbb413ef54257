"""The stand-ins' own behaviour, each as read in NVIDIA's source (cited in the modules)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pynvml
import pytest
from kubernetes import client

from reconciler.conventions import GPU_RESOURCE, SHARED_RESOURCE
from reconciler.policy.catalog import catalog_from_data, default_catalog
from tests.nvidia.device_plugin import ConfigError, node_refuses, parse_sharing
from tests.nvidia.gpunode import Sharing, SimulatedGpuNode, Unschedulable
from tests.nvidia.mounted import MountedConfigMap, server_write_time

TS = (
    "version: v1\nsharing:\n  timeSlicing:\n    renameByDefault: true\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: {r}\n{extra}"
)


def test_time_slicing_ignores_devices_and_needs_two_replicas():
    s = parse_sharing(TS.format(r=4, extra="      devices: [0, 1]\n"))
    assert s == Sharing(replicas=4, rename=True)  # the devices list is ignored: every card
    with pytest.raises(ConfigError, match=">= 2"):
        parse_sharing(TS.format(r=1, extra=""))
    assert parse_sharing("version: v1\nflags: {migStrategy: mixed}\n") is None  # no sharing


MPS = (
    "version: v1\nsharing:\n  mps:\n    renameByDefault: true\n    resources:\n"
    "    - name: nvidia.com/gpu\n      replicas: {r}\n"
)


def test_mps_is_parsed_like_time_slicing_and_refused_beside_mig():
    s = parse_sharing(MPS.format(r=4))
    assert s == Sharing(replicas=4, rename=True, strategy="mps")
    with pytest.raises(ConfigError, match=">= 2"):
        parse_sharing(MPS.format(r=1))
    whole = SimulatedGpuNode("n", "H100-SXM5-80GB", 2)
    assert node_refuses(s, whole) is None
    assert "maximum allowed replicas" in node_refuses(parse_sharing(MPS.format(r=49)), whole)
    mixed = SimulatedGpuNode("m", "H100-SXM5-80GB", 2, mig={0: [("7g.80gb", 0)]})
    assert "MIG" in node_refuses(s, mixed)
    assert node_refuses(parse_sharing(TS.format(r=4, extra="")), mixed) is None
    whole.sharing = s
    assert whole.advertised() == {SHARED_RESOURCE: "8"}


def test_sharing_applies_to_every_whole_card_of_the_node():
    node = SimulatedGpuNode("n", "H100-SXM5-80GB", 4, mig={0: [("3g.40gb", 0), ("3g.40gb", 4)]})
    assert node.advertised() == {"nvidia.com/mig-3g.40gb": "2", GPU_RESOURCE: "3"}
    node.sharing = Sharing(replicas=4)
    assert node.advertised() == {"nvidia.com/mig-3g.40gb": "2", SHARED_RESOURCE: "12"}
    node.plugin_healthy = False
    assert node.advertised() == {}


def test_device_manager_allocates_and_nvml_sees_the_work():
    node = SimulatedGpuNode("n", "H100-SXM5-80GB", 2)
    assert [node.card_of(d)[0] for d in node.allocate("a/job", {GPU_RESOURCE: 1})] == [0]
    assert node.busy_cards() == {0}
    with pytest.raises(Unschedulable):
        node.allocate("a/big", {GPU_RESOURCE: 2})
    node.release("a/job")
    assert node.busy_cards() == set() and node.pod_resources() == {}


def test_mig_changes_need_the_card_idle():
    node = SimulatedGpuNode("n", "H100-SXM5-80GB", 2)
    node.allocate("a/job", {GPU_RESOURCE: 1})
    with pytest.raises(pynvml.NVMLError):
        node.set_mig(0, True, ["3g.40gb"])
    node.set_mig(1, True, ["3g.40gb", "3g.40gb"])
    assert sorted(p for p, _ in node.layout(1)) == ["3g.40gb", "3g.40gb"]
    assert node.family == "hopper" and SimulatedGpuNode("m", "A100-SXM4-80GB", 1).family == "ampere"


def test_clearing_a_mig_card_needs_it_idle_and_keeps_its_mode():
    node = SimulatedGpuNode("n", "A100-SXM4-80GB", 2, mig={0: [("3g.40gb", 0), ("3g.40gb", 4)]})
    node.allocate("a/infer", {"nvidia.com/mig-3g.40gb": 1})
    with pytest.raises(pynvml.NVMLError):
        node.clear_mig(0)
    node.release("a/infer")
    node.clear_mig(0)
    assert node.layout(0) == [] and node.mig_cards() == {0}


def test_the_catalog_says_what_the_stand_in_hardware_does_on_a_mode_change():
    """`GpuModel.mig_mode_change` (what the planner reads) and the stand-in's family (what
    mig_manager.py acts on) agree for every MIG-capable model: node on Ampere, card on Hopper."""
    for name, model in default_catalog().models.items():
        if model.mig_capable:
            family = SimulatedGpuNode("n", name, 1).family
            assert model.mig_mode_change == {"ampere": "node", "hopper": "card"}[family], name


def test_a_mig_capable_model_must_say_what_its_mode_change_costs():
    data = {
        "memory_slices": 8,
        "compute_slices": 7,
        "max_instances": 7,
        "models": {"X": {"memory_gib": 80, "profiles": [["7g.80gb", 7, 8, 1, [0], 4]]}},
    }
    with pytest.raises(ValueError, match="mig_mode_change"):
        catalog_from_data(data)
    data["models"]["X"]["mig_mode_change"] = "card"
    assert catalog_from_data(data).model("X").mig_mode_change == "card"
    data["models"]["Y"] = {"memory_gib": 24, "profiles": []}  # no MIG: not asked
    assert catalog_from_data(data).model("Y").mig_mode_change == "node"


def test_mps_is_refused_with_the_mixed_mig_strategy_from_the_file_or_the_environment():
    """main.go `validateFlags`: MPS and `mixed` never start; the environment (the GPU operator's
    MIG_STRATEGY) wins over the file; an MPS root is needed (the operator sets MPS_ROOT). The
    MPS config gpupool renders starts (issue 30: it used to say `mixed`)."""
    from reconciler.apply.configs import render_sharing, yaml_text
    from reconciler.plan.actions import SetSharing

    a = SetSharing(id="s", target="n", reason="r", cards=(), slices=4, strategy="mps")
    rendered = yaml_text(render_sharing(a))
    assert parse_sharing(rendered) == Sharing(replicas=4, rename=True, strategy="mps")
    mixed = MPS.format(r=4).replace("version: v1\n", "version: v1\nflags: {migStrategy: mixed}\n")
    with pytest.raises(ConfigError, match="mig-strategy=mixed is not supported with MPS"):
        parse_sharing(mixed)
    with pytest.raises(ConfigError, match="mig-strategy=mixed"):
        parse_sharing(rendered, {"MIG_STRATEGY": "mixed", "MPS_ROOT": "/run/nvidia/mps"})
    with pytest.raises(ConfigError, match="--mps-root"):
        parse_sharing(rendered, {})
    assert parse_sharing(
        TS.format(r=4, extra="").replace("v1\n", "v1\nflags: {migStrategy: mixed}\n")
    )


class _Core:
    """The one ConfigMap read a MountedConfigMap makes, answered from a list of versions."""

    def __init__(self, *versions: client.V1ConfigMap):
        self.versions = list(versions)

    def read_namespaced_config_map(self, name: str, namespace: str) -> client.V1ConfigMap:
        return self.versions[0]


def _cm(rv: str, data: dict[str, str], written: datetime) -> client.V1ConfigMap:
    field = client.V1ManagedFieldsEntry(manager="gpupool", operation="Update", time=written)
    meta = client.V1ObjectMeta(name="cm", resource_version=rv, managed_fields=[field])
    return client.V1ConfigMap(metadata=meta, data=data)


@pytest.mark.parametrize("written", [None, server_write_time])
def test_a_mounted_configmap_counts_its_delay_from_the_write_when_told(written):
    t0 = datetime(2026, 12, 5, tzinfo=UTC)
    now = [t0]
    core = _Core(_cm("1", {"k": "old"}, t0))
    mounted = MountedConfigMap(None, "ns", "cm", lambda: now[0], written=written, core=core)
    mounted.view()  # the pod started with version 1
    core.versions[0] = _cm("2", {"k": "new"}, t0 + timedelta(seconds=10))
    now[0] = t0 + timedelta(seconds=100)  # a loop that looks 90 s after the write
    assert mounted.view() == {"k": "old"}
    now[0] = t0 + timedelta(seconds=161)  # 151 s after the write, 61 s after it was first seen
    assert mounted.view() == ({"k": "new"} if written else {"k": "old"})
