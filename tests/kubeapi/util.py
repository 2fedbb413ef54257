"""Small builders shared by the fake API server's tests."""

from __future__ import annotations

import json

import pytest
from kubernetes.client import ApiException


def pod(name: str, labels: dict | None = None, gpus: int = 0, priority_class: str | None = None,
        cpu: str | None = None, node: str | None = None, **spec) -> dict:
    resources: dict = {}
    if gpus:
        resources = {"limits": {"nvidia.com/gpu": str(gpus)}}
    if cpu:
        resources.setdefault("requests", {})["cpu"] = cpu
    container = {"name": "main", "image": "registry.local/trainer:1.0"}
    if resources:
        container["resources"] = resources
    body = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"containers": [container], **spec}}
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    if node:
        body["spec"]["nodeName"] = node
    return body


def status_of(exc: ApiException) -> dict:
    """The ``Status`` body the server answered with."""
    return json.loads(exc.body)


def expect_status(code: int, fn, *args, **kwargs) -> dict:
    with pytest.raises(ApiException) as info:
        fn(*args, **kwargs)
    assert info.value.status == code, info.value.body
    body = status_of(info.value)
    assert body["kind"] == "Status" and body["code"] == code
    return body


def raw(api_client, method: str, path: str, body=None, content_type: str = "application/json",
        query: list | None = None) -> tuple[int, dict, object]:
    """Send a request the client's own request-body validation would refuse to send.

    Returns (status, decoded body, response).  Goes through the same ``ApiClient`` transport.
    """
    resp = api_client.call_api(*api_client.param_serialize(
        method, path, body=body, query_params=query or [],
        header_params={"Content-Type": content_type, "Accept": "application/json"}))
    data = resp.read()
    return resp.status, (json.loads(data) if data else {}), resp


def eventually(fn, timeout: float = 10.0, interval: float = 0.1):
    """Retry ``fn`` until it stops raising ApiException/AssertionError.

    Needed only on a real cluster, where quota release, root-CA ConfigMaps, garbage collection
    and the like happen asynchronously; against the fake the first call succeeds.
    """
    import time

    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (ApiException, AssertionError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)
