"""A stand-in for the kubelet's PodResources gRPC service on a unix socket.

It speaks the real `v1.PodResourcesLister` `List` (k8s.io/kubelet staging module
`pkg/apis/podresources/v1/api.proto`, read at v0.37.2; method path `/v1.PodResourcesLister/List`
from its `api_grpc.pb.go`) with grpcio, and serves whatever `pods()` returns at each call:
pod key "namespace/name" -> device IDs, one container (`main`) per pod, the IDs grouped by
`resource_of(id)` into `ContainerDevices` as the kubelet's device manager reports them.

The answer is encoded here with its own small protobuf wire-format encoder, independent of the
decoder in reconciler/observe/podresources.py, and carries fields gpupool does not read (CPU
ids, memory blocks, NUMA topology, a DRA entry) the way a real kubelet's answer may, so the
client's skipping of them is exercised. `delay` holds each answer back (for timeouts); `abort`
fails each call with that gRPC status.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from pathlib import Path

import grpc

SERVICE, METHOD = "v1.PodResourcesLister", "List"


# --- protobuf wire format, encoding only ------------------------------------------------------
def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1  # int64: negative numbers take ten bytes
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _tag(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _int(number: int, value: int) -> bytes:
    return _tag(number, 0) + _varint(value) if value else b""  # proto3: zero is not sent


def _msg(number: int, payload: bytes) -> bytes:
    return _tag(number, 2) + _varint(len(payload)) + payload


def _str(number: int, text: str) -> bytes:
    return _msg(number, text.encode()) if text else b""


def _packed(number: int, values: list[int]) -> bytes:
    return _msg(number, b"".join(_varint(v) for v in values)) if values else b""


def encode_list_response(
    pods: Mapping[str, list[str]], resource_of: Callable[[str], str], numa_node: int = 0
) -> bytes:
    """A `ListPodResourcesResponse` for pod key -> device IDs."""
    out = b""
    for key, ids in pods.items():
        ns, _, name = key.partition("/")
        by_resource: dict[str, list[str]] = {}
        for dev in ids:
            by_resource.setdefault(resource_of(dev), []).append(dev)
        topology = _msg(3, _msg(1, _int(1, numa_node)))  # TopologyInfo{nodes: [NUMANode{ID}]}
        container = _str(1, "main")  # ContainerResources.name
        for resource, devs in by_resource.items():  # ContainerResources.devices = 2
            container += _msg(2, _str(1, resource) + b"".join(_str(2, d) for d in devs) + topology)
        container += _packed(3, [2, 3])  # cpu_ids
        container += _msg(4, _str(1, "memory") + _int(2, 1 << 30) + topology)  # ContainerMemory
        # a DRA entry: DynamicResource{claim_name = 2, claim_namespace = 3}
        container += _msg(5, _str(2, "claim") + _str(3, ns))
        pod = _str(1, name) + _str(2, ns) + _msg(3, container) + _packed(4, [2, 3])
        out += _msg(1, pod)  # ListPodResourcesResponse.pod_resources
    return out


def gpu_resource(dev: str) -> str:
    """The NVIDIA device plugin's resource for a device ID, as the simulated nodes name them."""
    if dev.startswith("MIG-"):
        return "nvidia.com/mig"
    return "nvidia.com/gpu.shared" if "::" in dev else "nvidia.com/gpu"


class PodResourcesServer:
    """`List` on `<tmp dir>/kubelet.sock`; use as a context manager or call `stop()`."""

    def __init__(
        self,
        pods: Callable[[], Mapping[str, list[str]]] | Mapping[str, list[str]],
        resource_of: Callable[[str], str] = gpu_resource,
    ):
        self.pods = pods if callable(pods) else (lambda: pods)
        self.resource_of = resource_of
        self.delay = 0.0
        self.abort: grpc.StatusCode | None = None
        self.calls = 0
        # unix socket paths are limited to 107 bytes: keep the directory short
        self.dir = Path(
            tempfile.mkdtemp(prefix="podres-", dir="/tmp" if Path("/tmp").is_dir() else None)
        )
        self.socket = str(self.dir / "kubelet.sock")
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handler = grpc.unary_unary_rpc_method_handler(self._list)  # no (de)serializers: bytes
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler}),)
        )
        self._server.add_insecure_port(f"unix:{self.socket}")
        self._server.start()

    def _list(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        self.calls += 1
        if self.abort is not None:
            context.abort(self.abort, "stand-in told to fail")
        if self.delay:
            time.sleep(self.delay)
        return encode_list_response(dict(self.pods()), self.resource_of)

    def stop(self) -> None:
        self._server.stop(grace=None).wait(5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PodResourcesServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
