"""Which pod holds which card: the kubelet's PodResources List (client and wire format), the node
agent's mapping of device IDs onto NVML cards and its `status.pods`, and the controller's
Kubernetes adapter reading allocations from there before the `gpupool.io/gpus` annotation.

The server is tests/nvidia/podresources_server.py: the real `v1.PodResourcesLister` List over
a unix socket, encoded by its own wire-format encoder."""

from __future__ import annotations

import os
import socket
import time

import grpc
import pytest

from reconciler.conventions import AGENT_FIELD_MANAGER, GPUS_ANN
from reconciler.loop.agent import run_once
from reconciler.observe.agent import pod_gpus
from reconciler.observe.kube import observe_cluster, published_pods
from reconciler.observe.model import Allocation
from reconciler.observe.nvml import read_gpus
from reconciler.observe.podresources import (
    ContainerDevices,
    ContainerResources,
    PodResources,
    PodResourcesError,
    decode_list_response,
    list_pod_resources,
)
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml
from tests.nvidia.podresources_server import PodResourcesServer, encode_list_response

A100 = "A100-SXM4-80GB"
MERGE = "application/merge-patch+json"


def _fake_node() -> FakeNvml:
    """GPU 0 whole, GPU 1 MIG (3g.40gb at 0 and 4), GPU 2 whole (time-sliced by the plugin)."""
    return FakeNvml(
        [
            FakeGpu(A100),
            FakeGpu(A100, mig=True, instances=[("3g.40gb", 0), ("3g.40gb", 4)]),
            FakeGpu(A100),
        ]
    )


def _ids(nvml: FakeNvml) -> tuple[str, str, str, str]:
    """(GPU 0 UUID, MIG UUID at start 0, MIG UUID at start 4, GPU 2 UUID)."""
    d = nvml.devices
    mig = {gi.start: gi.mig_uuid for gi in d[1].gis.values()}
    return d[0].uuid, mig[0], mig[4], d[2].uuid


# --- the wire format ---------------------------------------------------------------------------


def test_decodes_a_hand_written_answer_and_skips_unknown_fields():
    # ContainerDevices{resource_name "r", device_ids "x", topology{nodes [{ID -1}]}}
    # + unknown fields of every wire type a newer kubelet might add
    numa = b"\x0a\x0b" + b"\x08" + b"\xff" * 9 + b"\x01"  # NUMANode{ID: -1}, ten-byte varint
    devices = b"\x0a\x01r\x12\x01x\x1a\x0d" + numa
    devices += (
        b"\x21" + b"\x00" * 8 + b"\x2d" + b"\x00" * 4 + b"\x30\x07"
    )  # fixed64, fixed32, varint
    container = b"\x0a\x01c\x12" + bytes([len(devices)]) + devices + b"\x1a\x02\x02\x03"
    pod = b"\x0a\x01p\x12\x01n\x1a" + bytes([len(container)]) + container
    answer = b"\x0a" + bytes([len(pod)]) + pod + b"\x10\x01"  # + an unknown top-level varint
    assert decode_list_response(answer) == [
        PodResources(
            "n",
            "p",
            (ContainerResources("c", (ContainerDevices("r", ("x",), (-1,)),)),),
        )
    ]
    assert decode_list_response(b"") == []


@pytest.mark.parametrize(
    "bad",
    [
        b"\x0a\x05abc",  # a field longer than its message
        b"\x0a",  # a tag without its value
        b"\x08" + b"\xff" * 10 + b"\x01",  # an eleven-byte varint
        b"\x0b",  # wire type 3 (a group): not proto3
        b"\x08\x01",  # pod_resources as a varint
        b"\x0a\x03\x0a\x01\xff",  # a name that is not UTF-8
    ],
)
def test_malformed_answers_are_errors_not_crashes(bad):
    with pytest.raises(PodResourcesError):
        decode_list_response(bad)


def test_the_stand_in_encoder_round_trips_through_the_decoder():
    pods = {"ns/a": ["GPU-1", "GPU-2"], "ns/b": ["MIG-9", "GPU-3::0", "GPU-3::1"], "ns/c": []}
    res = {"GPU-1": "nvidia.com/gpu", "GPU-2": "nvidia.com/gpu", "MIG-9": "nvidia.com/mig-1g.10gb"}
    decoded = decode_list_response(
        encode_list_response(pods, lambda d: res.get(d, "nvidia.com/gpu.shared"), numa_node=1)
    )
    assert {p.key: p.device_ids for p in decoded} == pods
    b = next(p for p in decoded if p.name == "b")
    assert [(d.resource_name, d.device_ids, d.numa_nodes) for d in b.containers[0].devices] == [
        ("nvidia.com/mig-1g.10gb", ("MIG-9",), (1,)),
        ("nvidia.com/gpu.shared", ("GPU-3::0", "GPU-3::1"), (1,)),
    ]


# --- the client against the gRPC stand-in -------------------------------------------------------


def test_list_whole_mig_and_replicas():
    nvml = _fake_node()
    gpu0, mig0, mig4, gpu2 = _ids(nvml)
    served = {"team-a/train": [gpu0], "team-b/infer": [mig4], "team-c/notebook": [f"{gpu2}::3"]}
    with PodResourcesServer(served) as kubelet:
        got = list_pod_resources(kubelet.socket, timeout=5)
    assert {p.key: p.device_ids for p in got} == served
    assert got[0].containers[0].name == "main"


def test_server_down_is_reported():
    kubelet = PodResourcesServer({})
    path = kubelet.socket
    kubelet.stop()
    with pytest.raises(PodResourcesError, match="no socket") as err:
        list_pod_resources(path)
    assert err.value.code == "UNAVAILABLE"


def test_socket_nobody_listens_on_is_unavailable():
    path = f"/tmp/podres-dead-{time.monotonic_ns()}.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)  # the file exists, nothing accepts: a kubelet that died
    s.close()
    try:
        with pytest.raises(PodResourcesError) as err:
            list_pod_resources(path, timeout=2)
        assert err.value.code == "UNAVAILABLE"
    finally:
        os.unlink(path)


def test_a_slow_kubelet_times_out():
    with PodResourcesServer({"a/b": ["GPU-1"]}) as kubelet:
        kubelet.delay = 2.0
        started = time.monotonic()
        with pytest.raises(PodResourcesError) as err:
            list_pod_resources(kubelet.socket, timeout=0.2)
        assert err.value.code == "DEADLINE_EXCEEDED"
        assert time.monotonic() - started < 1.5  # did not wait for the answer


def test_an_error_status_is_reported():
    with PodResourcesServer({}) as kubelet:
        kubelet.abort = grpc.StatusCode.RESOURCE_EXHAUSTED  # the kubelet's rate limit
        with pytest.raises(PodResourcesError, match="RESOURCE_EXHAUSTED"):
            list_pod_resources(kubelet.socket)


# --- device IDs onto cards ------------------------------------------------------------------


def test_device_ids_map_to_cards_through_nvml_uuids():
    nvml = _fake_node()
    gpu0, mig0, mig4, gpu2 = _ids(nvml)
    gpus = read_gpus(nvml)
    pods = [
        PodResources("a", "whole", (ContainerResources("c", (ContainerDevices("r", (gpu0,)),)),)),
        PodResources("a", "mig", (ContainerResources("c", (ContainerDevices("r", (mig4,)),)),)),
        PodResources(
            "a",
            "slices",
            (
                ContainerResources("c1", (ContainerDevices("r", (f"{gpu2}::0", f"{gpu2}::5")),)),
                ContainerResources("c2", (ContainerDevices("r", (f"{gpu2}::7",)),)),
            ),
        ),
        PodResources(
            "a", "mig-slice", (ContainerResources("c", (ContainerDevices("r", (f"{mig0}::1",)),)),)
        ),
        PodResources(
            "a", "nic", (ContainerResources("c", (ContainerDevices("rdma/hca", ("mlx5_0",)),)),)
        ),
        PodResources("a", "cpu-only"),
    ]
    held = {p.key: p.allocations for p in pod_gpus(pods, gpus)}
    assert held == {
        "a/whole": [Allocation(gpu=0)],
        "a/mig": [Allocation(gpu=1, mig_start=4, mig_profile="3g.40gb")],
        "a/slices": [Allocation(gpu=2, slices=3)],
        "a/mig-slice": [Allocation(gpu=1, mig_start=0, mig_profile="3g.40gb")],
    }


# --- the agent's publication and the controller's adapter (real control plane) ----------------


def _node_state(kube, node: str) -> dict:
    return kube.custom.get_cluster_custom_object("gpupool.io", "v1alpha1", "gpunodestates", node)


def test_agent_publishes_pods_and_reports_a_failed_list(kube):
    from tests.integration.harness import add_gpu_node

    add_gpu_node(kube, "a100-pr1", model=A100, pool="a100", count=3, state=False)
    agent = kube.agent_client("a100-pr1")
    nvml = _fake_node()
    gpu0, _, mig4, gpu2 = _ids(nvml)
    served = {
        "team-a/train": [gpu0],
        "team-b/infer": [mig4],
        "team-c/nb": [f"{gpu2}::0", f"{gpu2}::1"],
    }
    with PodResourcesServer(served) as kubelet:
        run_once(agent, "a100-pr1", nvml=nvml, pod_resources_socket=kubelet.socket)
        st = _node_state(kube, "a100-pr1")["status"]
        assert st["pods"] == [
            {"namespace": "team-a", "name": "train", "allocations": [{"gpu": 0}]},
            {
                "namespace": "team-b",
                "name": "infer",
                "allocations": [{"gpu": 1, "migStart": 4, "migProfile": "3g.40gb"}],
            },
            {"namespace": "team-c", "name": "nb", "allocations": [{"gpu": 2, "slices": 2}]},
        ]
        assert "podsError" not in st and len(st["gpus"]) == 3
        assert published_pods(_node_state(kube, "a100-pr1"))["team-b/infer"] == [
            Allocation(gpu=1, mig_start=4, mig_profile="3g.40gb")
        ]
        kubelet.abort = grpc.StatusCode.UNAVAILABLE
        run_once(agent, "a100-pr1", nvml=nvml, pod_resources_socket=kubelet.socket)
    st = _node_state(kube, "a100-pr1")["status"]
    assert "pods" not in st and "UNAVAILABLE" in st["podsError"]  # no stale answer stays
    assert len(st["gpus"]) == 3  # the GPUs are published all the same
    run_once(agent, "a100-pr1", nvml=nvml, pod_resources_socket=kubelet.socket)  # socket gone
    assert "no socket" in _node_state(kube, "a100-pr1")["status"]["podsError"]
    run_once(agent, "a100-pr1", nvml=nvml)  # not asked: says nothing about pods
    assert {"pods", "podsError"}.isdisjoint(_node_state(kube, "a100-pr1")["status"])


def _allocs(kube, ns: str) -> dict[str, list[Allocation]]:
    return {
        w.name: w.allocations
        for w in observe_cluster(kube.api_client).workloads
        if w.namespace == ns
    }


def test_adapter_takes_allocations_from_the_agent_not_the_annotation(kube):
    """Running pods admitted by the simulated kubelet; the node's agent publishes them from its
    PodResources socket. A wrong annotation is ignored on that node."""
    from tests.integration.harness import add_gpu_node, create_pod

    sim = add_gpu_node(kube, "h100-pr2", count=4, mig={3: ["3g.40gb", "3g.40gb"]})
    ns = kube.new_namespace("pr")
    create_pod(kube, ns, "two", node="h100-pr2", gpus=2, pool=None, cls=None)
    create_pod(kube, ns, "mig", node="h100-pr2", mig="3g.40gb", pool=None, cls=None)
    held = published_pods(_node_state(kube, "h100-pr2"))
    assert held[f"{ns}/two"] == [Allocation(gpu=0), Allocation(gpu=1)]
    assert held[f"{ns}/mig"] == [Allocation(gpu=3, mig_start=0, mig_profile="3g.40gb")]
    for pod in ("two", "mig"):  # what an out-of-date writer might have left
        kube.core.patch_namespaced_pod(
            pod, ns, {"metadata": {"annotations": {GPUS_ANN: "2"}}}, _content_type=MERGE
        )
    assert _allocs(kube, ns) == {
        "two": [Allocation(gpu=0), Allocation(gpu=1)],
        "mig": [Allocation(gpu=3, mig_start=0, mig_profile="3g.40gb")],
    }
    # a pod started since the agent's last publication: its whole cards are guessed among
    # those nobody is known to hold (not from its annotation, on a node that publishes pods)
    before = _node_state(kube, "h100-pr2")["status"]["pods"]
    create_pod(kube, ns, "late", node="h100-pr2", gpus=1, pool=None, cls=None)
    kube.custom.patch_cluster_custom_object_status(
        "gpupool.io", "v1alpha1", "gpunodestates", "h100-pr2", {"status": {"pods": before}}
    )
    kube.core.patch_namespaced_pod(
        "late", ns, {"metadata": {"annotations": {GPUS_ANN: "0"}}}, _content_type=MERGE
    )
    assert f"{ns}/late" not in published_pods(_node_state(kube, "h100-pr2"))
    assert sim.gpus.pod_resources()[f"{ns}/late"]  # the kubelet did give it a card
    assert _allocs(kube, ns)["late"] == [Allocation(gpu=2)]


def test_annotation_is_the_fallback_where_the_agent_publishes_no_pods(kube):
    from tests.integration.harness import add_gpu_node, create_pod

    sim = add_gpu_node(kube, "h100-pr3", count=4)
    ns = kube.new_namespace("pr")
    create_pod(kube, ns, "one", node="h100-pr3", gpus=1, pool=None, cls=None)
    run_once(sim.agent_client(), "h100-pr3", nvml=sim.gpus.nvml)  # an agent without the socket
    assert "pods" not in _node_state(kube, "h100-pr3")["status"]
    # written by anyone but the node agent's field manager (here the test's client): not
    # believed, the pod's cards are unknown (it holds any card of its node, fenced in the plan)
    kube.core.patch_namespaced_pod(
        "one", ns, {"metadata": {"annotations": {GPUS_ANN: "3"}}}, _content_type=MERGE
    )
    assert _allocs(kube, ns) == {"one": []}
    # as the agent writes it (gpupool-agent): believed
    kube.core.patch_namespaced_pod(
        "one",
        ns,
        {"metadata": {"annotations": {GPUS_ANN: "2"}}},
        _content_type=MERGE,
        field_manager=AGENT_FIELD_MANAGER,
    )
    assert _allocs(kube, ns) == {"one": [Allocation(gpu=2)]}


def test_published_pods_is_lenient_with_newer_agents():
    state = {
        "status": {
            "pods": [
                {
                    "namespace": "a",
                    "name": "p",
                    "uid": "1234",  # a field this controller does not know
                    "allocations": [{"gpu": 1, "slices": 2, "memoryMib": 9}],
                },
                {"namespace": "a", "name": "broken", "allocations": [{"gpu": -1}]},
                {"name": "no-namespace"},
                "not an object",
            ]
        }
    }
    assert published_pods(state) == {"a/p": [Allocation(gpu=1, slices=2)]}
    assert published_pods({"status": {"gpus": []}}) is None
    assert published_pods(None) is None
    assert published_pods({"status": {"pods": []}}) == {}
