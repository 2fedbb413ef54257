"""Fixtures for tests against a real Prometheus (server.py). Shared through tests/conftest.py,
so that a session starts one server for every folder that uses it.

`prometheus` (session): a started `PrometheusServer` scraping `prometheus.exporter` every
second. Tests set series on the exporter and wait with `prometheus.wait_for` until a query sees
them; the `signals_exporter` fixture clears the exporter before and after each test. When the
binary cannot be obtained the fixture fails with the reason (CI must run these tests), unless
GPUPOOL_SKIP_PROMETHEUS=1 is set: then they are skipped.
"""

from __future__ import annotations

import os

import pytest

from tests.prometheus.server import (
    Exporter,
    PrometheusServer,
    PrometheusUnavailable,
    prometheus_binary,
)


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory):
    if os.environ.get("GPUPOOL_SKIP_PROMETHEUS"):
        pytest.skip("GPUPOOL_SKIP_PROMETHEUS is set: no real Prometheus in this run")
    try:
        binary = prometheus_binary()
    except PrometheusUnavailable as exc:
        pytest.fail(
            f"no Prometheus binary for the signal tests: {exc} "
            "(set GPUPOOL_SKIP_PROMETHEUS=1 to skip them)",
            pytrace=False,
        )
    exporter = Exporter()
    server = PrometheusServer(binary, tmp_path_factory.mktemp("prometheus"), exporter)
    try:
        server.start()
        yield server
    finally:
        server.stop()
        exporter.stop()


@pytest.fixture
def signals_exporter(prometheus):
    """The session's exporter, emptied before and after the test."""
    prometheus.exporter.clear()
    yield prometheus.exporter
    prometheus.exporter.clear()
