"""`/healthz` (the loop is not stuck), `/readyz` (the cluster was observed recently), `/metrics`.

Two kinds of listener (`serve`): the probes' (`/healthz`, `/readyz`), which the kubelet must
reach on the pod's address, and the metrics' (`/metrics`), which `gpupool reconcile` binds to
`--metrics-bind-address` (127.0.0.1 unless told otherwise: the metrics name teams and their GPU
use and are served without authentication). A listener may serve both (`metrics=True` with
`probes=True`, as the tests do).

Neither can be held by slow or idle clients: every connection has a socket timeout (`TIMEOUT`
seconds for the request line, headers and the answer), and at most `MAX_CONNECTIONS` are
handled at once; a connection beyond that is closed at once, without a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from reconciler.loop.metrics import REGISTRY

TIMEOUT = 5.0
"""Seconds a connection may take to send its request (and to take the answer)."""
MAX_CONNECTIONS = 16
"""Connections handled at once per listener; more are closed without an answer."""


class BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server with at most `max_connections` handler threads: the semaphore is
    taken before a thread is started and given back when it ends; a connection that finds none
    free is closed on the spot (the client sees a reset or EOF, and retries, as Prometheus and
    the kubelet do)."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64

    def __init__(self, address, handler, *, max_connections: int = MAX_CONNECTIONS):
        self.slots = threading.BoundedSemaphore(max_connections)
        self.refused = 0
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.refused += 1
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def handle_error(self, request, client_address):  # timeouts, resets: nothing to report
        pass


def serve(
    port: int,
    ready: Callable[[], bool],
    host: str = "0.0.0.0",
    *,
    probes: bool = True,
    metrics: bool = True,
    timeout: float = TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    alive: Callable[[], bool] = lambda: True,
) -> BoundedServer:
    """Start a listener on (host, port) in a daemon thread; `probes`/`metrics` choose which
    paths it answers (others are 404). `/healthz` answers 503 when `alive()` says the loop is
    stuck (the kubelet's liveness probe then restarts the container); `/readyz` follows
    `ready()`."""
    conn_timeout = timeout

    class Handler(BaseHTTPRequestHandler):
        # StreamRequestHandler.setup() sets this on the socket: a client that sends nothing
        # (or takes no answer) is dropped after it, and its thread ends
        timeout = conn_timeout

        def do_GET(self):  # noqa: N802 - the stdlib's name
            if probes and self.path == "/healthz":
                ok = alive()
                self._send(200 if ok else 503, b"ok\n" if ok else b"stuck\n", "text/plain")
            elif probes and self.path == "/readyz":
                ok = ready()
                self._send(200 if ok else 503, b"ready\n" if ok else b"not ready\n", "text/plain")
            elif metrics and self.path == "/metrics":
                self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True  # one request per connection: no idle keep-alive

        def log_message(self, *args):  # quiet
            pass

    server = BoundedServer((host, port), Handler, max_connections=max_connections)
    threading.Thread(target=server.serve_forever, name="gpupool-health", daemon=True).start()
    return server


def parse_bind_address(value: str) -> tuple[str, int] | None:
    """`host:port`, `:port` (all addresses) or `0` (off: None), as controller-runtime's
    `--metrics-bind-address` takes it."""
    if value.strip() == "0":
        return None
    host, sep, port = value.strip().rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: want host:port, :port or 0")
    return host.strip("[]") or "0.0.0.0", int(port)
