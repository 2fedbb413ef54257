"""The health and metrics listeners (reconciler/loop/health.py) cannot be held by slow or idle
clients: a bounded number of handler threads, a per-connection timeout, and probes that still
answer while hundreds of connections sit idle; /metrics only where it is asked for."""

from __future__ import annotations

import argparse
import contextlib
import socket
import threading
import time
import urllib.error
import urllib.request

import pytest

from reconciler.commands import reconcile
from reconciler.loop.health import parse_bind_address, serve


def _get(url: str, timeout: float = 3.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def server():
    started = []

    def start(**kw):
        s = serve(0, lambda: True, host="127.0.0.1", **kw)
        started.append(s)
        return s, f"http://127.0.0.1:{s.server_address[1]}"

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


def _idle_clients(port: int, n: int) -> list[socket.socket]:
    """Sockets that connect and send nothing (a slowloris)."""
    out = []
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(c)
    return out


def test_slow_clients_hold_a_bounded_number_of_threads_and_probes_still_answer(server):
    s, url = server(timeout=2.0, max_connections=8)
    before = threading.active_count()
    clients = _idle_clients(s.server_address[1], 300)
    try:
        time.sleep(0.5)  # let the server accept what it will
        assert threading.active_count() - before <= 8, threading.active_count() - before
        # a probe gets an answer promptly: an idle connection holds a slot at most 2 s, and a
        # refused one is retried (the kubelet's probe period is seconds)
        t0 = time.monotonic()
        while True:
            try:
                code, body = _get(url + "/healthz", timeout=1)
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                assert time.monotonic() - t0 < 6, "no answer while slow clients are connected"
                time.sleep(0.05)
        assert (code, body) == (200, "ok\n")
        assert time.monotonic() - t0 < 6
        assert s.refused > 0
    finally:
        for c in clients:
            c.close()


def test_an_idle_connection_is_dropped_after_the_timeout(server):
    s, _ = server(timeout=0.5)
    (c,) = _idle_clients(s.server_address[1], 1)
    with contextlib.closing(c):
        c.settimeout(5)
        t0 = time.monotonic()
        assert c.recv(1024) == b""  # closed by the server, no answer
        assert time.monotonic() - t0 < 3


def test_threads_are_returned_after_the_clients_leave(server):
    s, url = server(timeout=0.3, max_connections=4)
    before = threading.active_count()
    for c in _idle_clients(s.server_address[1], 20):
        c.close()
    deadline = time.monotonic() + 5
    while threading.active_count() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert threading.active_count() <= before
    assert _get(url + "/healthz")[0] == 200


def test_probe_and_metrics_listeners_answer_only_their_paths(server):
    _, probes = server(metrics=False)
    _, metrics = server(probes=False)
    assert _get(probes + "/healthz")[0] == 200 and _get(probes + "/readyz")[0] == 200
    assert _get(probes + "/metrics")[0] == 404
    assert _get(metrics + "/healthz")[0] == 404
    code, text = _get(metrics + "/metrics")
    assert code == 200 and "gpupool_" in text


def test_metrics_bind_address():
    assert parse_bind_address("127.0.0.1:8081") == ("127.0.0.1", 8081)
    assert parse_bind_address(":8081") == ("0.0.0.0", 8081)
    assert parse_bind_address("[::1]:9000") == ("::1", 9000)
    assert parse_bind_address("0") is None
    for bad in ("8081", "host:", "a:99999", "a:x"):
        with pytest.raises(ValueError):
            parse_bind_address(bad)
    parser = argparse.ArgumentParser()
    reconcile.register(parser.add_subparsers())
    args = parser.parse_args(["reconcile", "--path=."])
    # metrics only on the loopback unless asked: they are not authenticated
    assert parse_bind_address(args.metrics_bind_address) == ("127.0.0.1", 8081)


def test_healthz_fails_while_the_loop_is_stuck(server, tmp_path):
    """Liveness follows the loop: a cycle running past `stuck_after_seconds` (every call, watch
    and git operation is bounded, so only a defect gets there) makes /healthz 503, and the
    kubelet restarts the container; readiness is its own question."""
    from kubernetes import client

    from reconciler.loop.controller import Controller
    from reconciler.loop.sources import DirectorySource

    (tmp_path / "pools").mkdir()
    ctl = Controller(
        DirectorySource(tmp_path),
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")),
        namespace="gpupool-system",
        identity="t",
        stuck_after_seconds=60,
    )
    _, url = server(metrics=False, alive=ctl.alive)
    assert ctl.alive() and _get(url + "/healthz")[0] == 200  # between cycles
    ctl._cycle_started = time.monotonic() - 30
    assert _get(url + "/healthz")[0] == 200  # a cycle under way
    ctl._cycle_started = time.monotonic() - 61
    assert _get(url + "/healthz") == (503, "stuck\n")
