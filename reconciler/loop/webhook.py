"""A receiver for GitHub push webhooks: a push to the followed branch wakes the loop (the cycle
fetches git afresh), so a merged policy does not wait for the poll interval.

Only `POST /hooks/git` is answered. Every delivery must carry `X-Hub-Signature-256:
sha256=<hex HMAC-SHA256 of the raw body, keyed with the shared secret>`, compared in constant
time (GitHub's "Validating webhook deliveries", docs.github.com/en/webhooks/using-webhooks/
validating-webhook-deliveries: "an HMAC hex digest", "always starts with `sha256=`", never a
plain `==`). Missing: 401; wrong: 403; a body over `MAX_BODY` bytes: 413, unread. Then by
`X-GitHub-Event`: `ping` 200 (the hook was set up), `push` to `refs/heads/<branch>` 202 and
the loop wakes, any other push or event 204. Nothing in the body is trusted beyond `ref`: the
cycle reads git itself. The signature covers no time, so a replayed delivery can wake the loop
again, which costs one fetch.

It runs on the bounded server of `health.py` (per-connection timeout, thread cap)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from reconciler.loop.health import MAX_CONNECTIONS, TIMEOUT, BoundedServer

PATH = "/hooks/git"
MAX_BODY = 1 << 20
"""Bytes a delivery may have (GitHub caps payloads at 25 MB; a push that matters is small)."""


def sign(secret: bytes, body: bytes) -> str:
    """The `X-Hub-Signature-256` value GitHub sends for `body`."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify_signature(secret: bytes, body: bytes, header: str | None) -> bool:
    """Whether `header` is the signature of `body` under `secret` (constant-time compare)."""
    if not secret or not header:
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().encode())


def read_secret(path: str) -> bytes:
    """The shared secret from a file (a mounted Secret); surrounding whitespace (the newline
    an editor or `echo` leaves) is not part of it. Empty is an error."""
    secret = Path(path).read_bytes().strip()
    if not secret:
        raise ValueError(f"{path}: the webhook secret is empty")
    return secret


def serve_webhook(
    port: int,
    secret: bytes,
    branch: str,
    on_push: Callable[[], None],
    host: str = "0.0.0.0",
    *,
    timeout: float = TIMEOUT,
    max_connections: int = MAX_CONNECTIONS,
    max_body: int = MAX_BODY,
) -> BoundedServer:
    """Start the receiver on (host, port) in a daemon thread; `on_push` is called for each
    authenticated push to `branch`."""
    if not secret:
        raise ValueError("the webhook receiver needs a secret")
    conn_timeout, ref = timeout, f"refs/heads/{branch}"

    class Handler(BaseHTTPRequestHandler):
        timeout = conn_timeout

        def do_POST(self):  # noqa: N802 - the stdlib's name
            if self.path.split("?", 1)[0] != PATH:
                return self._send(404, b"not found\n")
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                return self._send(411, b"Content-Length required\n")
            if length < 0:
                return self._send(400, b"bad Content-Length\n")
            if length > max_body:
                return self._send(413, b"body too large\n")
            body = self.rfile.read(length)
            header = self.headers.get("X-Hub-Signature-256")
            if not header:
                return self._send(401, b"X-Hub-Signature-256 missing\n")
            if len(body) != length or not verify_signature(secret, body, header):
                return self._send(403, b"signature does not match\n")
            event = self.headers.get("X-GitHub-Event", "")
            if event == "ping":
                return self._send(200, b"pong\n")
            if event != "push":
                return self._send(204, b"")
            try:
                pushed = json.loads(body).get("ref")
            except (ValueError, AttributeError):
                return self._send(400, b"not a push payload\n")
            if pushed != ref:
                return self._send(204, b"")
            on_push()
            return self._send(202, b"reconcile requested\n")

        def do_GET(self):  # noqa: N802
            self._send(405, b"POST only\n")

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            if code != 204:
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if code != 204:
                self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args):  # quiet
            pass

    server = BoundedServer((host, port), Handler, max_connections=max_connections)
    threading.Thread(target=server.serve_forever, name="gpupool-webhook", daemon=True).start()
    return server
