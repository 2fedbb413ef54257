"""Fake kube-apiserver for gpupool's integration tests (test support, not a Kubernetes server).

See README.md in this folder.  Entry points:

* ``FakeKubeApiServer`` (``server.py``) — HTTP server on 127.0.0.1, fault injection, request log.
* ``Cluster`` (``cluster.py``) — the state behind it; also kubelet/scheduler stand-ins.
* ``fixtures.py`` — the dual-target ``kube`` pytest fixture.
"""

from .cluster import ApiError, Cluster
from .server import FakeKubeApiServer, Fault, RequestRecord

__all__ = ["ApiError", "Cluster", "FakeKubeApiServer", "Fault", "RequestRecord"]
