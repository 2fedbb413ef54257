"""Fixtures for the fake API server's own tests (the top-level conftest may import them too)."""

from .fixtures import kube, kube_server  # noqa: F401
