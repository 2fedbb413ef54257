"""The node agent (`gpupool agent`, a DaemonSet): publish this node's NVML view.

It writes a `GpuNodeState` (gpupool.io/v1alpha1, cluster-scoped, named after the node) whose
`status.gpus` the controller's Kubernetes adapter reads. Read-only towards the GPU.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler.conventions import GROUP, NODE_STATE_KIND, NODE_STATE_PLURAL, VERSION
from reconciler.observe.agent import collect_node
from reconciler.observe.model import Gpu, Node

KIND = NODE_STATE_KIND


def publish(api_client: Any, node: Node) -> None:
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    try:
        api.get_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL, node.name)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": {"name": node.name}}
        try:
            api.create_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL, body)
        except client.ApiException as exc2:
            if exc2.status != 409:
                raise
    gpus = [g.model_dump(mode="json", by_alias=True, exclude_defaults=True) for g in node.gpus]
    api.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        NODE_STATE_PLURAL,
        node.name,
        {"status": {"gpus": gpus, "updatedAt": datetime.now(UTC).isoformat()}},
        _content_type="application/merge-patch+json",
    )


def previous(api_client: Any, node_name: str) -> Node | None:
    """The last publication, so idle-since times carry over across agent restarts."""
    from kubernetes import client

    try:
        obj = client.CustomObjectsApi(api_client).get_cluster_custom_object(
            GROUP, VERSION, NODE_STATE_PLURAL, node_name
        )
    except client.ApiException:
        return None
    gpus = [Gpu.model_validate(g) for g in (obj.get("status") or {}).get("gpus", [])]
    return Node(name=node_name, gpus=gpus)


def run_once(api_client: Any, node_name: str, nvml: Any = None) -> Node:
    node = collect_node(node_name, nvml=nvml, previous=previous(api_client, node_name))
    publish(api_client, node)
    return node
