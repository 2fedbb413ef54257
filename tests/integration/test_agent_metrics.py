"""The node agent publishes from (fake) NVML; the controller serves /healthz, /readyz, /metrics."""

from __future__ import annotations

import urllib.request

import pytest
from kubernetes import client

from reconciler.loop.agent import run_once
from reconciler.loop.health import serve
from reconciler.observe.kube import observe_cluster
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml, FakeProcess

from .harness import A100, add_gpu_node, controller, converge, node_state
from .scenario import base


def test_agent_publishes_gpu_node_state_from_nvml(kube):
    add_gpu_node(kube, "a100-7", model=A100, pool="a100", state=False)
    agent = kube.agent_client("a100-7")  # gpupool-agent, token bound to a pod on a100-7
    nvml = FakeNvml(
        [
            FakeGpu("A100-SXM4-80GB", mig=True, instances=[("3g.40gb", 0), ("3g.40gb", 4)]),
            FakeGpu("A100-SXM4-80GB", processes=[FakeProcess(4242, 30000)], utilization=97),
            FakeGpu("A100-SXM4-80GB"),
        ]
    )
    published = run_once(agent, "a100-7", nvml=nvml)
    assert len(published.gpus) == 3
    st = node_state(kube, "a100-7")["status"]
    gpus = {g["index"]: g for g in st["gpus"]}
    assert gpus[0]["migEnabled"] and sorted(
        (i["profile"], i["start"]) for i in gpus[0]["migInstances"]
    ) == [("3g.40gb", 0), ("3g.40gb", 4)]
    assert gpus[1]["utilization"] == 97 and gpus[1]["processes"][0]["pid"] == 4242
    assert "idleSince" in gpus[2] and st["updatedAt"]
    # the controller's adapter reads it back; idle-since carries over the next publication
    node = next(n for n in observe_cluster(kube.api_client).nodes if n.name == "a100-7")
    assert [g.mode for g in node.gpus] == ["mig", "whole", "whole"]
    first_idle = node.gpus[2].idle_since
    run_once(agent, "a100-7", nvml=nvml)
    again = next(n for n in observe_cluster(kube.api_client).nodes if n.name == "a100-7")
    assert again.gpus[2].idle_since == first_idle
    # only NVML reads: the agent never changes the GPU
    assert not {
        "nvmlDeviceSetMigMode",
        "nvmlDeviceCreateGpuInstance",
        "nvmlGpuInstanceDestroy",
    } & set(nvml.called())


def test_agent_may_publish_only_its_own_node(kube):
    """deploy/agent-admission.yaml, enforced by the real API server: the agent's token names its
    node, and a GpuNodeState of another node is refused."""
    add_gpu_node(kube, "a100-5", model=A100, pool="a100", state=False)
    add_gpu_node(kube, "a100-6", model=A100, pool="a100", state=False)
    agent = kube.agent_client("a100-5")
    with pytest.raises(client.ApiException) as err:
        run_once(agent, "a100-6", nvml=FakeNvml([FakeGpu("A100-SXM4-80GB")]))
    assert err.value.status in (403, 422) and "own node" in err.value.body
    run_once(agent, "a100-5", nvml=FakeNvml([FakeGpu("A100-SXM4-80GB")]))


def test_node_without_published_state_falls_back_to_capacity(kube):
    add_gpu_node(kube, "a100-8", model=A100, pool="a100", state=False)
    kube.custom.create_cluster_custom_object(
        "gpupool.io",
        "v1alpha1",
        "gpunodestates",
        {
            "apiVersion": "gpupool.io/v1alpha1",
            "kind": "GpuNodeState",
            "metadata": {"name": "a100-8"},
        },
    )
    node = next(n for n in observe_cluster(kube.api_client).nodes if n.name == "a100-8")
    assert len(node.gpus) == 8


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_health_and_metrics_endpoints(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    http = serve(0, ctl.ready, host="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{http.server_address[1]}"
        assert _get(url + "/healthz")[0] == 200
        assert _get(url + "/readyz")[0] == 503  # no cycle yet
        converge(ctl, kube, clock=clock)
        assert _get(url + "/readyz")[0] == 200
        code, text = _get(url + "/metrics")
        assert code == 200
        for line in (
            "gpupool_leader 1.0",
            "gpupool_suspended 0.0",
            "gpupool_drift_actions 0.0",
            'gpupool_gpus{partition="mig",pool="h100"} 1.0',
            'gpupool_team_gpus_cap{team="team-b"} 16.0',
            'gpupool_actions_total{kind="preempt",result="done"}',
            'gpupool_reconciles_total{result="ok"}',
            "gpupool_reconcile_duration_seconds_bucket",
            "gpupool_last_success_timestamp_seconds",
        ):
            assert line in text, line
        assert _get(url + "/nope")[0] == 404
        clock.advance(600)
        assert _get(url + "/readyz")[0] == 503  # stale: no successful cycle for 10 minutes
    finally:
        http.shutdown()
