"""The fixture's own support: a missing binary is a clear error (the fixture turns it into a
failure unless GPUPOOL_SKIP_PROMETHEUS=1), and the exporter serves the text exposition format."""

from __future__ import annotations

import urllib.request

import pytest

from tests.prometheus.server import Exporter, PrometheusUnavailable, prometheus_binary


def test_a_missing_binary_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PROMETHEUS_BINARY", str(tmp_path / "nothing-here"))
    with pytest.raises(PrometheusUnavailable, match="is not an executable file"):
        prometheus_binary()


def test_the_exporter_serves_what_the_test_set():
    ex = Exporter()
    try:
        ex.set("vllm:num_requests_waiting", {"namespace": "serve", "pod": 'a"b'}, 12)
        ex.set("DCGM_FI_DEV_GPU_UTIL", {"UUID": "GPU-1", "gpu": "0", "Hostname": "node-a"}, 0)
        with urllib.request.urlopen(f"http://{ex.address}/metrics", timeout=5) as r:
            text = r.read().decode()
        assert text.splitlines() == [
            'DCGM_FI_DEV_GPU_UTIL{Hostname="node-a",UUID="GPU-1",gpu="0"} 0',
            'vllm:num_requests_waiting{namespace="serve",pod="a\\"b"} 12',
        ]
    finally:
        ex.stop()
