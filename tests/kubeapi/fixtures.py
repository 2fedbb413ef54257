"""Dual-target pytest fixtures: the fake API server by default, a real cluster on request.

    from tests.kubeapi.fixtures import kube, kube_server  # in a conftest.py

``kube`` yields a ``KubeTarget``:

* ``.api_client`` — a configured ``kubernetes.client.ApiClient``;
* ``.server`` — the ``FakeKubeApiServer`` or ``None`` on a real cluster;
* ``.namespace`` — a fresh namespace created for this test (deleted afterwards);
* ``.require_fake()`` — skip the test unless it runs against the fake (fault injection,
  nodes, kubelet stand-ins, anything that would disturb a shared cluster);
* ``.core`` / ``.apps`` / ``.coordination`` / ``.policy`` / ``.scheduling`` / ``.custom`` /
  ``.apiextensions`` — API objects bound to ``api_client``;
* ``.unique(prefix)`` — a name for cluster-scoped objects; ``.cleanup(fn)`` runs ``fn`` at teardown.

Set ``GPUPOOL_TEST_KUBECONFIG=/path/to/kubeconfig`` to run the same tests against that cluster.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import kubernetes
import pytest

from .server import FakeKubeApiServer

KUBECONFIG_ENV = "GPUPOOL_TEST_KUBECONFIG"


@dataclass
class KubeTarget:
    api_client: kubernetes.client.ApiClient
    server: FakeKubeApiServer | None
    namespace: str
    _cleanups: list[Callable[[], object]] = field(default_factory=list)

    @property
    def is_fake(self) -> bool:
        return self.server is not None

    def require_fake(self) -> FakeKubeApiServer:
        if self.server is None:
            pytest.skip("needs the fake API server (fault injection or cluster-wide state)")
        return self.server

    def unique(self, prefix: str) -> str:
        return f"{prefix}-{uuid.uuid4().hex[:8]}"

    def cleanup(self, fn: Callable[[], object]) -> None:
        self._cleanups.append(fn)

    @property
    def core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self.api_client)

    @property
    def apps(self) -> kubernetes.client.AppsV1Api:
        return kubernetes.client.AppsV1Api(self.api_client)

    @property
    def coordination(self) -> kubernetes.client.CoordinationV1Api:
        return kubernetes.client.CoordinationV1Api(self.api_client)

    @property
    def policy(self) -> kubernetes.client.PolicyV1Api:
        return kubernetes.client.PolicyV1Api(self.api_client)

    @property
    def scheduling(self) -> kubernetes.client.SchedulingV1Api:
        return kubernetes.client.SchedulingV1Api(self.api_client)

    @property
    def custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.api_client)

    @property
    def apiextensions(self) -> kubernetes.client.ApiextensionsV1Api:
        return kubernetes.client.ApiextensionsV1Api(self.api_client)


@pytest.fixture
def kube_server() -> Iterator[FakeKubeApiServer]:
    """A fresh fake API server, stopped at teardown."""
    server = FakeKubeApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def kube() -> Iterator[KubeTarget]:
    """The API the test talks to: the fake, or the cluster named by ``GPUPOOL_TEST_KUBECONFIG``."""
    kubeconfig = os.environ.get(KUBECONFIG_ENV)
    server = None
    if kubeconfig:
        api_client = kubernetes.config.new_client_from_config(config_file=kubeconfig)
    else:
        server = FakeKubeApiServer().start()
        api_client = server.api_client()
    namespace = f"gpupool-test-{uuid.uuid4().hex[:8]}"
    target = KubeTarget(api_client, server, namespace)
    kubernetes.client.CoreV1Api(api_client).create_namespace({"metadata": {"name": namespace}})
    try:
        yield target
    finally:
        for fn in reversed(target._cleanups):
            with contextlib.suppress(Exception):
                fn()
        if server is None or server.running:
            with contextlib.suppress(Exception):
                kubernetes.client.CoreV1Api(api_client).delete_namespace(namespace)
        with contextlib.suppress(Exception):
            api_client.close()
        if server is not None:
            server.stop()
