"""Servers on 127.0.0.1 that answer badly, and kubeconfigs pointing at them: a closed port, a
server that answers 403 to everything, one that accepts connections and never answers.

Only loopback addresses: nothing here reaches outside the machine. A test that talks to the
silent server must bound its client's waits (its request timeouts), not this server.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FORBIDDEN_MESSAGE = (
    'gpunodestates.gpupool.io is forbidden: User "system:anonymous" cannot list resource '
    '"gpunodestates" in API group "gpupool.io" at the cluster scope'
)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose only cluster is `server`, with a bearer token."""
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}"}}
contexts:
- name: c
  context: {{cluster: c, user: u}}
current-context: c
users:
- name: u
  user: {{token: t0ken}}
"""
    )
    return path


class _Forbid(BaseHTTPRequestHandler):
    """403 with a Kubernetes Status body, to every request (GET, POST, PATCH, ...)."""

    body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": FORBIDDEN_MESSAGE,
            "reason": "Forbidden",
            "code": 403,
        }
    ).encode()

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@contextlib.contextmanager
def forbidding_server() -> Iterator[str]:
    """http://127.0.0.1:PORT answering 403 to everything, for the block's duration."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Forbid)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    """http://127.0.0.1:PORT that accepts connections (the kernel's backlog) and never
    answers, for the block's duration."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
