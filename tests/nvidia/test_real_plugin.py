"""NVIDIA's own nvidia-device-plugin v0.19.3 on simulated nodes without MIG (real_plugin.py):
it starts with every sharing config gpupool renders and advertises exactly what gpupool counted
(`sharing_resources`), refuses what NVIDIA refuses in its own words, answers Allocate and
GetPreferredAllocation, and drops a card that reports a critical Xid."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reconciler.apply.configs import render_sharing, sharing_resources, yaml_text
from reconciler.conventions import GPU_RESOURCE, SHARED_RESOURCE
from reconciler.plan.actions import CardChange, SetSharing
from tests.nvidia.device_plugin import OPERATOR_ENV
from tests.nvidia.nvmlsim import device
from tests.nvidia.real_plugin import RealDevicePlugin, require

ROOT = Path(__file__).resolve().parents[2]
INSTALL = yaml.safe_load((ROOT / "deploy/gpu-operator/device-plugin-config.yaml").read_text())


@pytest.fixture(autouse=True)
def _plugin_can_run():
    require()


def cards(n: int, model: str = "H100-SXM5-80GB", **extra) -> list[dict]:
    return [device(model, "dp", i, numaNode=i * 2 // n, **extra) for i in range(n)]


def sharing(slices: int | None, strategy: str = "time-slicing", plain: int = 4) -> SetSharing:
    return SetSharing(
        id="set-sharing:dp",
        target="dp",
        reason="test",
        cards=(CardChange(gpu=0, before="whole", after="shared"),),
        slices=slices,
        strategy=strategy,
        plain_cards=plain,
    )


def counted(a: SetSharing) -> dict[str, int]:
    """gpupool's count, without the resources it expects at 0."""
    return {k: v for k, v in sharing_resources(a).items() if v}


def run(tmp_path: Path, config: str, devices: list[dict], **kw) -> RealDevicePlugin:
    return RealDevicePlugin(tmp_path / "plugin", devices, config, env=OPERATOR_ENV, **kw)


def test_the_install_default_advertises_whole_cards(tmp_path):
    devs = cards(4)
    with run(tmp_path, INSTALL["data"]["default"], devs) as plugin:
        assert plugin.outcome()["event"] == "devices", plugin.log()
        got = plugin.advertised()
        assert {r: len(ids) for r, ids in got.items()} == counted(sharing(None))
        assert sorted(got[GPU_RESOURCE]) == sorted(d["uuid"] for d in devs)
        answer = plugin.allocate(GPU_RESOURCE, [devs[2]["uuid"]])
        assert answer["envs"]["NVIDIA_VISIBLE_DEVICES"] == devs[2]["uuid"]


@pytest.mark.parametrize("slices", [2, 7])
def test_time_slicing_as_gpupool_renders_it(tmp_path, slices):
    a = sharing(slices)
    devs = cards(4)
    with run(tmp_path, yaml_text(render_sharing(a)), devs) as plugin:
        assert plugin.outcome()["event"] == "devices", plugin.log()
        got = plugin.advertised()
        assert {r: len(ids) for r, ids in got.items()} == counted(a)
        ids = sorted(got[SHARED_RESOURCE])
        assert ids == sorted(f"{d['uuid']}::{k}" for d in devs for k in range(slices))
        answer = plugin.allocate(SHARED_RESOURCE, [f"{devs[1]['uuid']}::0"])
        assert answer["envs"]["NVIDIA_VISIBLE_DEVICES"] == devs[1]["uuid"]


def test_mps_as_gpupool_renders_it_starts_under_the_operators_environment(tmp_path):
    """The MPS rendering regression of issue 30: with `migStrategy: mixed` in the file, the real
    plugin exits; gpupool's config must start it."""
    a = sharing(4, "mps")
    devs = cards(2)
    with run(tmp_path, yaml_text(render_sharing(a)), devs, mps_daemon=True) as plugin:
        assert plugin.outcome()["event"] == "devices", plugin.log()
        assert {r: len(ids) for r, ids in plugin.advertised().items()} == counted(
            sharing(4, "mps", plain=2)
        )
        answer = plugin.allocate(SHARED_RESOURCE, [f"{devs[0]['uuid']}::3"])
        assert answer["envs"]["NVIDIA_VISIBLE_DEVICES"] == devs[0]["uuid"]
        assert "CUDA_MPS_PIPE_DIRECTORY" in answer["envs"]


def _refusal(tmp_path: Path, config: str, env: dict[str, str], **kw) -> str:
    with RealDevicePlugin(tmp_path / "p", cards(2), config, env=env, **kw) as plugin:
        out = plugin.outcome()
        assert out["event"] == "plugin-exit" and out["code"] != 0, plugin.log()
        assert plugin.advertised() == {}
        return plugin.exit_reason()


def test_what_nvidia_refuses_stops_the_plugin_in_its_own_words(tmp_path):
    mps = yaml.safe_load(yaml_text(render_sharing(sharing(4, "mps"))))
    mixed = yaml_text({**mps, "flags": {"migStrategy": "mixed"}})
    assert "mixed is not supported with MPS" in _refusal(
        tmp_path / "a", mixed, OPERATOR_ENV, mps_daemon=True
    )
    # the operator's MIG_STRATEGY overrides the file (api/config/v1 NewConfig)
    rendered = yaml_text(mps)
    forced = {**OPERATOR_ENV, "MIG_STRATEGY": "mixed"}
    assert "mixed is not supported with MPS" in _refusal(
        tmp_path / "b", rendered, forced, mps_daemon=True
    )
    assert "requires --mps-root" in _refusal(tmp_path / "c", rendered, {}, mps_daemon=True)
    ts = yaml.safe_load(yaml_text(render_sharing(sharing(2))))
    ts["sharing"]["timeSlicing"]["resources"][0]["replicas"] = 1
    assert "replicas must be >= 2" in _refusal(tmp_path / "d", yaml_text(ts), OPERATOR_ENV)


def test_mps_without_its_daemon_does_not_come_up(tmp_path):
    """No MPS control daemon answering: the plugin's health check of it fails, and it retries
    (every 30 s) without registering anything."""
    config = yaml_text(render_sharing(sharing(4, "mps")))
    with RealDevicePlugin(tmp_path / "p", cards(2), config, env=OPERATOR_ENV) as plugin:
        plugin.wait_log("error waiting for MPS daemon")
        assert plugin.advertised() == {} and plugin.registered() == {}


def test_preferred_allocation_keeps_a_pair_on_one_numa_node(tmp_path):
    devs = cards(4)  # NUMA 0, 0, 1, 1
    with run(tmp_path, INSTALL["data"]["default"], devs) as plugin:
        assert plugin.outcome()["event"] == "devices", plugin.log()
        assert plugin.registered()[GPU_RESOURCE]["preferred"]
        uuids = [d["uuid"] for d in devs]
        pair = plugin.preferred(GPU_RESOURCE, [uuids[1], uuids[2], uuids[3]], 2)
        assert sorted(pair) == sorted(uuids[2:]), pair


def test_a_card_with_a_critical_xid_is_withdrawn(tmp_path):
    devs = cards(2)
    devs[1]["xid"] = 79  # "GPU has fallen off the bus"
    with run(tmp_path, INSTALL["data"]["default"], devs) as plugin:
        assert plugin.outcome()["event"] == "devices", plugin.log()
        plugin._wait(
            "device 1 unhealthy",
            lambda e: (
                e["event"] == "devices" and any(d["health"] == "Unhealthy" for d in e["devices"])
            ),
            30,
        )
        assert plugin.advertised() == {GPU_RESOURCE: [devs[0]["uuid"]]}
