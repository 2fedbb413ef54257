"""The node agent (`gpupool agent`, a DaemonSet): publish this node's NVML view and who holds
which card.

It writes a `GpuNodeState` (gpupool.io/v1alpha1, cluster-scoped, named after the node) whose
`status.gpus` (NVML) and `status.pods` (the kubelet's PodResources List, mapped to cards through
the same NVML read) the controller's Kubernetes adapter reads. Read-only towards the GPU and the
kubelet.

`status.pods` is absent when the agent was not given a PodResources socket or the List failed;
then `status.podsError` says why, and the controller falls back to the pods' `gpupool.io/gpus`
annotation. An empty list means the kubelet reported no pod holding a GPU.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from reconciler.conventions import GROUP, NODE_STATE_KIND, NODE_STATE_PLURAL, VERSION
from reconciler.observe.agent import collect_node, pod_gpus
from reconciler.observe.kube import published_gpus
from reconciler.observe.model import Node, PodGpus
from reconciler.observe.podresources import (
    DEFAULT_TIMEOUT,
    PodResourcesError,
    list_pod_resources,
)

KIND = NODE_STATE_KIND
log = logging.getLogger("gpupool.agent")


def publish(
    api_client: Any,
    node: Node,
    pods: list[PodGpus] | None = None,
    pods_error: str | None = None,
) -> None:
    """Create the node's object if needed and merge-patch its status. `pods` None removes a
    previous `status.pods` (nothing known now is better than a stale answer)."""
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
    held = (
        None
        if pods is None
        else [p.model_dump(mode="json", by_alias=True, exclude_defaults=True) for p in pods]
    )
    status = {
        "gpus": gpus,
        "pods": held,
        "podsError": pods_error,
        "updatedAt": datetime.now(UTC).isoformat(),
    }
    api.patch_cluster_custom_object_status(
        GROUP,
        VERSION,
        NODE_STATE_PLURAL,
        node.name,
        {"status": status},
        _content_type="application/merge-patch+json",
    )


def previous(api_client: Any, node_name: str) -> Node | None:
    """The last publication, so idle-since times carry over across agent restarts."""
    from kubernetes import client

    try:
        obj = client.CustomObjectsApi(api_client).get_cluster_custom_object(
            GROUP, VERSION, NODE_STATE_PLURAL, node_name
        )
    except client.ApiException as exc:
        if exc.status != 404:  # none yet is normal; anything else is worth a line, not a stop
            log.warning(
                "cannot read the last GpuNodeState of %s (HTTP %s %s): idle-since times start over",
                node_name,
                exc.status,
                exc.reason,
            )
        return None
    # a hand-edited publication must not stop the agent: cards that do not validate are left
    # out (logged), times without a timezone read as UTC
    return Node(
        name=node_name, gpus=published_gpus(node_name, (obj.get("status") or {}).get("gpus"))
    )


def run_once(
    api_client: Any,
    node_name: str,
    nvml: Any = None,
    pod_resources_socket: str | None = None,
    pod_resources_timeout: float = DEFAULT_TIMEOUT,
) -> Node:
    """One publication: NVML, then (with a socket) the kubelet's PodResources List mapped onto
    the cards just read. A failed List is logged and published as `podsError`, never raised:
    the GPUs are still worth publishing."""
    node = collect_node(node_name, nvml=nvml, previous=previous(api_client, node_name))
    pods: list[PodGpus] | None = None
    error: str | None = None
    if pod_resources_socket:
        try:
            found = list_pod_resources(pod_resources_socket, pod_resources_timeout)
            pods = pod_gpus(found, node.gpus)
        except PodResourcesError as exc:
            error = str(exc)
            log.warning("%s; publishing without pods", exc)
    publish(api_client, node, pods, error)
    return node
