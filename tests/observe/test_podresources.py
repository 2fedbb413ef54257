"""Which pod holds which card: the kubelet's PodResources List (client and wire format).

The server is tests/nvidia/podresources_server.py: the real `v1.PodResourcesLister` List over
a unix socket, encoded by its own wire-format encoder."""

from __future__ import annotations

import os
import socket
import time

import grpc
import pytest

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
