"""A fault-injecting HTTP proxy between the official client and the test kube-apiserver.

The client talks plain HTTP/1.1 to 127.0.0.1; the proxy forwards each request over HTTPS, with
the client's Authorization header (so a ServiceAccount token's identity and RBAC apply), or with
the admin client certificate when the request has none. Rules, added and removed while it runs,
answer matching requests with a fault instead (see README.md here). Stdlib only.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import re
import select
import socket
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

# Not passed on in either direction: they describe one hop, not the message.
# fmt: off
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade", "host", "content-length",
})
# metav1.StatusReason for the codes the apiserver itself answers with.
REASONS = {
    400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
    405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 415: "UnsupportedMediaType",
    422: "Invalid", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
    504: "Timeout",
}
# fmt: on


@dataclass(frozen=True)
class ProxyRequest:
    """A request as the proxy received it; what rule predicates (`when=`) are given."""

    method: str
    path: str  # without the query
    query: dict[str, list[str]]
    headers: dict[str, str]  # names lower-cased
    body: bytes

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch", [""])[-1].lower() in ("true", "1")

    def json(self):
        return json.loads(self.body) if self.body else None


@dataclass
class LoggedRequest:
    """One request in the proxy's log. `status` is what the client got (None: no answer, the
    connection was closed); `fault` the kind of rule that handled it (None: passed through);
    `forwarded` whether the apiserver saw it; `connection` numbers the client's connections."""

    method: str
    path: str
    query: str
    connection: int
    authorization: bool
    status: int | None = None
    fault: str | None = None
    forwarded: bool = False
    error: str | None = None  # why forwarding failed, if it did
    started: float = field(default_factory=time.monotonic)
    duration: float | None = None


class Rule:
    """A fault rule. Matches requests by method (None: any), `path` regex (re.search on the
    path without query; None: any) and `when(ProxyRequest)`; fires at most `times` times (None:
    until removed). A context manager: leaving the block removes it."""

    def __init__(self, proxy, kind, method, path, times, when, **params):
        self.proxy, self.kind, self.params = proxy, kind, params
        self.method = method.upper() if method else None
        self.path = re.compile(path) if path else None
        self.remaining, self.when = times, when
        self.hits = 0
        self.active = True
        self._hit = threading.Event()

    def matches(self, req: ProxyRequest) -> bool:
        return (
            (self.method is None or req.method == self.method)
            and (self.path is None or self.path.search(req.path) is not None)
            and (self.kind != "hang_watch" or req.is_watch)
            and (self.when is None or bool(self.when(req)))
        )

    def wait(self, timeout: float = 5) -> bool:
        """Whether the rule fired (at least once) within `timeout` seconds."""
        return self._hit.wait(timeout)

    def remove(self) -> None:
        self.proxy.remove(self)

    def __enter__(self) -> Rule:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def __repr__(self) -> str:
        pat = self.path.pattern if self.path else None
        return f"<Rule {self.kind} {self.method or '*'} {pat!r} hits={self.hits} {self.params}>"


class _Server(ThreadingHTTPServer):
    """A client that goes away mid-request (a controller killed by the soak, a watch cut) is
    the proxy's everyday business, not an error to print a traceback for."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionResetError | BrokenPipeError | TimeoutError):
            return
        super().handle_error(request, client_address)


class FaultProxy:
    """See the module docstring. `start()` (or `with`) binds a free port on 127.0.0.1; `url` is
    then the address to give the client."""

    def __init__(self, upstream_url: str, ca_file, client_cert=None, client_key=None):
        up = urlsplit(upstream_url)
        self.upstream_host, self.upstream_port = up.hostname, up.port or 443
        self._token_ctx = ssl.create_default_context(cafile=str(ca_file))
        self._admin_ctx = ssl.create_default_context(cafile=str(ca_file))
        if client_cert:
            self._admin_ctx.load_cert_chain(str(client_cert), str(client_key or client_cert))
        self._lock = threading.Lock()
        self._rules: list[Rule] = []
        self._log: list[LoggedRequest] = []
        self._socks: set[socket.socket] = set()
        self._conn_ids = itertools.count(1)
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.url = ""

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._stopping.clear()
        server = _Server(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.block_on_close = False
        server.proxy = self
        self._server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        """Stop serving; hung watches and delays end, open connections (both sides) close."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.reset_connections()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def reset_connections(self) -> None:
        """Shut down every open connection, the clients' and the upstream ones."""
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- rules -----------------------------------------------------------------------------

    def fail(
        self,
        status=500,
        method=None,
        path=None,
        *,
        times=None,
        when=None,
        reason=None,
        message=None,
        retry_after=None,
    ) -> Rule:
        """Answer with `status` and a Kubernetes Status body, without forwarding.
        `retry_after` (seconds) sets the Retry-After header and details.retryAfterSeconds."""
        reason = reason or REASONS.get(status, "InternalError" if status >= 500 else "BadRequest")
        message = message or f"injected by FaultProxy: {status} {reason}"
        params = {"status": status, "reason": reason, "message": message}
        return self._add("fail", method, path, times, when, retry_after=retry_after, **params)

    def drop_response(self, method=None, path=None, *, times=None, when=None) -> Rule:
        """Forward the request (the apiserver applies it), then close the client's connection
        without an answer: written, but the reply was lost."""
        return self._add("drop_response", method, path, times, when)

    def drop_request(self, method=None, path=None, *, times=None, when=None) -> Rule:
        """Read the request, then close the connection without forwarding or answering."""
        return self._add("drop_request", method, path, times, when)

    def delay(
        self, seconds, method=None, path=None, *, times=None, when=None, after_upstream=False
    ) -> Rule:
        """Wait `seconds` before forwarding (the apiserver sees the request late), or, with
        `after_upstream`, forward at once and wait before answering (applied, answer slow)."""
        return self._add("delay", method, path, times, when, seconds=seconds, after=after_upstream)

    def hang_watch(self, method="GET", path=None, *, times=None, when=None) -> Rule:
        """Answer a watch (?watch=true) with 200 and chunked headers, then nothing, until the
        rule is removed, the proxy stops or the client goes away. Not forwarded."""
        return self._add("hang_watch", method, path, times, when)

    def remove(self, rule: Rule) -> None:
        with self._lock:
            rule.active = False
            if rule in self._rules:
                self._rules.remove(rule)

    def clear_rules(self) -> None:
        with self._lock:
            rules, self._rules = self._rules, []
        for r in rules:
            r.active = False

    def _add(self, kind, method, path, times, when, **params) -> Rule:
        if times is not None and times < 1:
            raise ValueError("times must be None (until removed) or >= 1")
        rule = Rule(self, kind, method, path, times, when, **params)
        with self._lock:
            self._rules.append(rule)
        return rule

    def _take(self, req: ProxyRequest) -> Rule | None:
        """The first active rule matching `req` (in the order added), its count taken."""
        with self._lock:
            for rule in self._rules:
                if rule.matches(req):
                    rule.hits += 1
                    if rule.remaining is not None:
                        rule.remaining -= 1
                        if rule.remaining == 0:
                            self._rules.remove(rule)  # still active: a hang lasts until removed
                    rule._hit.set()
                    return rule
        return None

    # ---- log -------------------------------------------------------------------------------

    def requests(self, method=None, path=None, *, fault=..., forwarded=None) -> list[LoggedRequest]:
        """Logged requests, oldest first; `path` is a regex (re.search), `fault` a kind or None
        (passed through); omitted filters match anything."""
        with self._lock:
            log = list(self._log)
        pat = re.compile(path) if path else None
        return [
            e
            for e in log
            if (method is None or e.method == method.upper())
            and (pat is None or pat.search(e.path))
            and (fault is ... or e.fault == fault)
            and (forwarded is None or e.forwarded == forwarded)
        ]

    def clear_log(self) -> None:
        with self._lock:
            self._log.clear()

    # ---- clients ---------------------------------------------------------------------------

    def configuration(self, token: str | None = None, *, retries=None):
        """An official-client Configuration for the proxy: bearer `token`, or none (then the
        proxy uses the admin certificate). `retries` goes to urllib3 (None: its default, 3)."""
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        cfg.proxy = None  # never route through an http_proxy from the environment
        if token:
            cfg.api_key = {"authorization": token}
            cfg.api_key_prefix = {"authorization": "Bearer"}
        cfg.retries = retries
        return cfg

    def api_client(self, token: str | None = None, *, retries=None):
        from kubernetes import client

        return client.ApiClient(self.configuration(token, retries=retries))

    def kubeconfig(self, token: str | None = None, path=None) -> Path:
        """Write a kubeconfig for the proxy (to `path`, or a file removed at stop) and return
        its path, for code that takes a kubeconfig file (gpupool's --kubeconfig)."""
        if path is None:
            if self._tmp is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="faultproxy-")
            path = Path(self._tmp.name) / f"kubeconfig-{next(self._conn_ids)}"
        user = {"token": token} if token else {}
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "faultproxy", "cluster": {"server": self.url}}],
            "users": [{"name": "faultproxy", "user": user}],
            "contexts": [
                {"name": "faultproxy", "context": {"cluster": "faultproxy", "user": "faultproxy"}}
            ],
            "current-context": "faultproxy",
        }
        Path(path).write_text(json.dumps(kc, indent=2))
        return Path(path)

    # ---- internals used by the handler -----------------------------------------------------

    def _record(self, entry: LoggedRequest) -> None:
        with self._lock:
            self._log.append(entry)

    def _track(self, sock, on: bool) -> None:
        with self._lock:
            (self._socks.add if on else self._socks.discard)(sock)

    def _upstream(self, authorized: bool) -> http.client.HTTPSConnection:
        ctx = self._token_ctx if authorized else self._admin_ctx
        return http.client.HTTPSConnection(self.upstream_host, self.upstream_port, context=ctx)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, chunked responses

    def setup(self) -> None:
        super().setup()
        self.proxy: FaultProxy = self.server.proxy
        self.conn_id = next(self.proxy._conn_ids)
        self.proxy._track(self.connection, True)

    def finish(self) -> None:
        self.proxy._track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format, *args) -> None:  # the request log replaces stderr lines
        pass

    def handle_one(self) -> None:
        split = urlsplit(self.path)
        body = self._read_body()
        req = ProxyRequest(
            self.command,
            split.path,
            parse_qs(split.query, keep_blank_values=True),
            {k.lower(): v for k, v in self.headers.items()},
            body,
        )
        entry = LoggedRequest(
            req.method, req.path, split.query, self.conn_id, "authorization" in req.headers
        )
        self.proxy._record(entry)
        try:
            rule = self.proxy._take(req)
        except Exception as e:  # a `when` predicate raised: no answer, and the log says why
            entry.error, self.close_connection = f"predicate raised {e!r}", True
            return
        entry.fault = rule.kind if rule else None
        try:
            if rule is None:
                self._forward(req, entry)
            elif rule.kind == "fail":
                self._fail(entry, **rule.params)
            elif rule.kind == "drop_request":
                self.close_connection = True
            elif rule.kind == "drop_response":
                self._forward(req, entry, reply=False)
            elif rule.kind == "delay":
                if rule.params["after"]:
                    self._forward(req, entry, hold=rule.params["seconds"])
                elif self.proxy._stopping.wait(rule.params["seconds"]):
                    self.close_connection = True  # stopped meanwhile: not forwarded
                else:
                    self._forward(req, entry)
            elif rule.kind == "hang_watch":
                self._hang(rule, entry)
        except (OSError, http.client.HTTPException) as e:  # a side went away, or stopping
            entry.error = entry.error or repr(e)
            self.close_connection = True
        finally:
            entry.duration = time.monotonic() - entry.started

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = handle_one

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(parts)
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _forward(self, req: ProxyRequest, entry: LoggedRequest, *, reply=True, hold=0.0) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        conn = self.proxy._upstream(entry.authorization)
        try:
            try:
                conn.request(req.method, self.path, body=req.body or None, headers=headers)
                self.proxy._track(conn.sock, True)
                resp = conn.getresponse()
            except OSError as e:  # apiserver down: the client gets no answer either
                entry.error = repr(e)
                self.close_connection = True
                return
            entry.forwarded = True
            bodiless = req.method == "HEAD" or resp.status in (204, 304)
            streamed = not bodiless and resp.getheader("Content-Length") is None
            data = b"" if bodiless or streamed else resp.read()
            if not reply:
                self.close_connection = True
                return
            if hold:
                self.proxy._stopping.wait(hold)
            entry.status = resp.status  # before the client can see it: tests read the log next
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in HOP_BY_HOP:
                    self.send_header(k, v)
            if bodiless:
                if resp.getheader("Content-Length") is not None:
                    self.send_header("Content-Length", resp.getheader("Content-Length"))
            elif streamed:
                self.send_header("Transfer-Encoding", "chunked")
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if streamed:  # watches: pass each piece on as it arrives
                self.wfile.flush()
                while chunk := resp.read1(65536):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(data)
            self.wfile.flush()
        finally:
            if conn.sock is not None:
                self.proxy._track(conn.sock, False)
            conn.close()

    def _fail(self, entry, *, status, reason, message, retry_after) -> None:
        details = {"retryAfterSeconds": retry_after} if retry_after is not None else None
        st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        st |= {"message": message, "reason": reason, "code": status}
        if details:
            st["details"] = details
        body = json.dumps(st).encode()
        entry.status = status
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.wfile.flush()

    def _hang(self, rule: Rule, entry: LoggedRequest) -> None:
        entry.status = 200
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True  # the stream never ends properly
        while rule.active and not self.proxy._stopping.is_set():
            readable, _, _ = select.select([self.connection], [], [], 0.1)
            if readable and not self.connection.recv(1, socket.MSG_PEEK):
                return  # the client closed its end
