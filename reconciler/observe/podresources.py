"""The kubelet's PodResources API: which devices each pod on this node holds. Read-only.

The kubelet serves the gRPC service `v1.PodResourcesLister` on the unix socket
`/var/lib/kubelet/pod-resources/kubelet.sock`. Its `List` takes an empty
`ListPodResourcesRequest` and answers every pod with, per container, the device IDs each
device plugin assigned (the GPU UUID, a MIG device UUID, or `<GPU UUID>::<n>` for a
time-sliced replica of the NVIDIA plugin). Only the kubelet knows this: the scheduler picks a
node, the plugin picks the cards.

Messages and field numbers are those of Kubernetes' own definition, the k8s.io/kubelet
staging module `pkg/apis/podresources/v1/api.proto` (read at v0.37.2); the method path
`/v1.PodResourcesLister/List` is the one in its `api_grpc.pb.go`. The fields read here:

    ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
    PodResources             { string name = 1; string namespace = 2;
                               repeated ContainerResources containers = 3; }
    ContainerResources       { string name = 1; repeated ContainerDevices devices = 2; }
    ContainerDevices         { string resource_name = 1; repeated string device_ids = 2;
                               TopologyInfo topology = 3; }
    TopologyInfo             { repeated NUMANode nodes = 1; }
    NUMANode                 { int64 ID = 1; }

No generated code and no protobuf runtime: the request is empty (zero bytes on the wire) and
the answer is decoded here from the protobuf wire format (varints and length-delimited
fields). Fields not listed above (CPU ids, memory, DRA resources, anything newer) are skipped,
as protobuf skips unknown fields.

Every failure - no socket, the kubelet not answering (UNAVAILABLE), the deadline passing, an
answer that does not parse - raises `PodResourcesError`; callers report it and go on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
"""Where the kubelet serves PodResources (its pod-resources dir, socket name `kubelet`)."""
LIST_METHOD = "/v1.PodResourcesLister/List"
DEFAULT_TIMEOUT = 5.0
"""Seconds one List may take. The kubelet answers from memory; its rate limit is 100/s."""
MAX_MESSAGE = 16 * 1024 * 1024
"""A node with many pods answers more than gRPC's default 4 MiB receive limit allows."""


class PodResourcesError(RuntimeError):
    """The PodResources List failed; `code` is the gRPC status name when there was one."""

    def __init__(self, message: str, code: str | None = None):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ContainerDevices:
    resource_name: str
    device_ids: tuple[str, ...] = ()
    numa_nodes: tuple[int, ...] = ()


@dataclass(frozen=True)
class ContainerResources:
    name: str
    devices: tuple[ContainerDevices, ...] = ()


@dataclass(frozen=True)
class PodResources:
    namespace: str
    name: str
    containers: tuple[ContainerResources, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def device_ids(self) -> list[str]:
        """Every device ID of every container, in the order the kubelet listed them."""
        return [i for c in self.containers for d in c.devices for i in d.device_ids]


# --- the protobuf wire format, decoding only ----------------------------------------------

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise PodResourcesError("PodResources answer: truncated varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise PodResourcesError("PodResources answer: varint longer than 10 bytes")


def _fields(buf: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: an int for varints, bytes for length-delimited
    fields; fixed-width fields are skipped (none of the fields read here is one)."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(buf, pos)
            yield number, value
        elif wire == _LEN:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise PodResourcesError("PodResources answer: field runs past its message")
            yield number, buf[pos : pos + size]
            pos += size
        elif wire in (_I64, _I32):
            pos += 8 if wire == _I64 else 4
            if pos > len(buf):
                raise PodResourcesError("PodResources answer: truncated fixed-width field")
        else:  # 3/4 (groups) are not proto3; 6/7 do not exist
            raise PodResourcesError(f"PodResources answer: wire type {wire} in field {number}")


def _bytes(value: int | bytes, what: str) -> bytes:
    if not isinstance(value, bytes):
        raise PodResourcesError(f"PodResources answer: {what} is not length-delimited")
    return value


def _str(value: int | bytes, what: str) -> str:
    try:
        return _bytes(value, what).decode()
    except UnicodeDecodeError as exc:
        raise PodResourcesError(f"PodResources answer: {what} is not UTF-8") from exc


def _int64(value: int | bytes, what: str) -> int:
    if not isinstance(value, int):
        raise PodResourcesError(f"PodResources answer: {what} is not a varint")
    return value - (1 << 64) if value >= 1 << 63 else value


def _numa_nodes(buf: bytes) -> tuple[int, ...]:
    nodes = []
    for n, v in _fields(buf):  # TopologyInfo
        if n == 1:
            node_id = 0
            for m, w in _fields(_bytes(v, "TopologyInfo.nodes")):  # NUMANode
                if m == 1:
                    node_id = _int64(w, "NUMANode.ID")
            nodes.append(node_id)
    return tuple(nodes)


def _devices(buf: bytes) -> ContainerDevices:
    name, ids, numa = "", [], ()
    for n, v in _fields(buf):
        if n == 1:
            name = _str(v, "ContainerDevices.resource_name")
        elif n == 2:
            ids.append(_str(v, "ContainerDevices.device_ids"))
        elif n == 3:
            numa = _numa_nodes(_bytes(v, "ContainerDevices.topology"))
    return ContainerDevices(name, tuple(ids), numa)


def _container(buf: bytes) -> ContainerResources:
    name, devices = "", []
    for n, v in _fields(buf):
        if n == 1:
            name = _str(v, "ContainerResources.name")
        elif n == 2:
            devices.append(_devices(_bytes(v, "ContainerResources.devices")))
    return ContainerResources(name, tuple(devices))


def _pod(buf: bytes) -> PodResources:
    name, namespace, containers = "", "", []
    for n, v in _fields(buf):
        if n == 1:
            name = _str(v, "PodResources.name")
        elif n == 2:
            namespace = _str(v, "PodResources.namespace")
        elif n == 3:
            containers.append(_container(_bytes(v, "PodResources.containers")))
    return PodResources(namespace, name, tuple(containers))


def decode_list_response(buf: bytes) -> list[PodResources]:
    """A serialized `ListPodResourcesResponse` as `PodResources`."""
    return [
        _pod(_bytes(v, "ListPodResourcesResponse.pod_resources")) for n, v in _fields(buf) if n == 1
    ]


# --- the call -------------------------------------------------------------------------------


def _raw(data: bytes) -> bytes:
    return data


def list_pod_resources(
    socket_path: str = DEFAULT_SOCKET, timeout: float = DEFAULT_TIMEOUT
) -> list[PodResources]:
    """Every pod the kubelet reports, with its containers' devices. One gRPC `List` call over
    the unix socket, within `timeout` seconds; any failure raises `PodResourcesError`."""
    import grpc

    path = os.path.abspath(socket_path)
    if not os.path.exists(path):
        raise PodResourcesError(f"PodResources: no socket at {path}", "UNAVAILABLE")
    options = [("grpc.max_receive_message_length", MAX_MESSAGE)]
    try:
        with grpc.insecure_channel(f"unix://{path}", options=options) as channel:
            list_call = channel.unary_unary(
                LIST_METHOD, request_serializer=_raw, response_deserializer=_raw
            )
            answer = list_call(b"", timeout=timeout)  # ListPodResourcesRequest has no fields
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
        name = code.name if code is not None else None
        raise PodResourcesError(f"PodResources List on {path}: {name}: {details}", name) from exc
    return decode_list_response(answer)
