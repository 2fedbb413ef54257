"""A fake kube-apiserver over real HTTP on 127.0.0.1 — TEST SUPPORT, NOT A KUBERNETES SERVER.

It substitutes for kube-apiserver in integration tests (no apiserver binary can be installed on
the project's machines).  Clients talk to it with the unmodified official ``kubernetes`` client.
See README.md in this folder for what it does and does not implement.

    server = FakeKubeApiServer().start()
    api = kubernetes.client.CoreV1Api(server.api_client())
    server.fail_next("POST", r"/api/v1/namespaces/.*/pods/.*/eviction", status=500)
    server.restart()                      # same port, same state, open connections dropped
    server.requests(method="POST")        # the request log
    server.stop()
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from .cluster import ApiError, Cluster, bad_request
from .resources import KUBE_VERSION, ResourceType

JSON = "application/json"
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json", "application/apply-patch+yaml")


@dataclass
class RequestRecord:
    """One request as the fake saw it (the request log)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str | None
    body: Any
    user_agent: str | None
    status: int | None = None
    injected: bool = False
    time: float = field(default_factory=time.time)

    @property
    def is_watch(self) -> bool:
        return self.query.get("watch") in ("true", "1")


@dataclass
class Fault:
    """Make the next ``times`` requests matching ``method`` and ``path`` (a regex that must match
    the whole URL path) fail.  ``drop=True`` closes the connection without an answer."""

    method: str | None
    path: re.Pattern
    status: int = 500
    times: int = 1
    reason: str | None = None
    message: str | None = None
    delay: float = 0.0
    drop: bool = False
    retry_after: int | None = None
    hits: int = 0

    @property
    def remaining(self) -> int:
        return self.times - self.hits

    def matches(self, method: str, path: str) -> bool:
        return (self.remaining > 0 and (self.method is None or self.method == method)
                and bool(self.path.fullmatch(path)))


@dataclass
class Hook:
    method: str | None
    path: re.Pattern
    fn: Callable[[FakeKubeApiServer, RequestRecord], None]
    times: int = 1
    hits: int = 0


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
            405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 422: "Invalid",
            429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
            504: "Timeout"}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, addr, fake: FakeKubeApiServer):
        self.fake = fake
        self.stopped = False
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(addr, _Handler)

    def process_request(self, request, client_address):
        with self.conn_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.conn_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if self.stopped or isinstance(exc, OSError):
            return  # connections cut by stop()/drop faults, or clients that went away
        super().handle_error(request, client_address)

    def drop_connections(self) -> None:
        with self.conn_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class FakeKubeApiServer:
    """Fake kube-apiserver: state in ``self.cluster``, HTTP on ``self.url``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, history_size: int = 10_000,
                 cluster: Cluster | None = None, default_watch_timeout: float = 1800.0,
                 bookmark_interval: float = 60.0, pod_termination_seconds: float | None = None):
        self.host, self.port = host, port
        self.cluster = cluster or Cluster(history_size=history_size,
                                          pod_termination_seconds=pod_termination_seconds)
        self.default_watch_timeout = default_watch_timeout
        self.bookmark_interval = bookmark_interval
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._log: list[RequestRecord] = []
        self._faults: list[Fault] = []
        self._hooks: list[Hook] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._httpd is not None

    def start(self) -> FakeKubeApiServer:
        if self._httpd is not None:
            return self
        self._httpd = _HTTPServer((self.host, self.port), self)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"fake-kube-apiserver:{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: close the listener and every open connection (watches end abruptly).
        The stored state is kept; ``start()`` serves it again on the same port."""
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.stopped = True
        with self.cluster.changed:
            self.cluster.changed.notify_all()
        httpd.shutdown()
        httpd.server_close()
        httpd.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def restart(self, downtime: float = 0.0) -> None:
        """Simulate an apiserver restart: same port, same state, connections dropped."""
        self.stop()
        if downtime:
            time.sleep(downtime)
        self.start()

    @contextlib.contextmanager
    def down(self):
        """``with server.down(): ...`` — the server refuses connections inside the block."""
        self.stop()
        try:
            yield self
        finally:
            self.start()

    def __enter__(self) -> FakeKubeApiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ client helpers

    def configuration(self):
        import kubernetes.client

        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        return cfg

    def api_client(self):
        """A ``kubernetes.client.ApiClient`` pointed at this server."""
        import kubernetes.client

        return kubernetes.client.ApiClient(self.configuration())

    def write_kubeconfig(self, path: str, namespace: str = "default") -> str:
        """Write a kubeconfig for code that loads one (``kubernetes.config.load_kube_config``)."""
        doc = {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake",
                                                      "namespace": namespace}}],
        }
        with open(path, "w") as f:
            yaml.safe_dump(doc, f)
        return path

    # ------------------------------------------------------------------ fault injection

    def fail_next(self, method: str | None, path: str, status: int = 500, *, times: int = 1,
                  reason: str | None = None, message: str | None = None, delay: float = 0.0,
                  drop: bool = False, retry_after: int | None = None) -> Fault:
        """Make the next ``times`` matching requests fail with ``status`` (a ``Status`` body).

        ``path`` is a regular expression matched against the whole URL path (no query string).
        ``delay`` sleeps before answering; ``drop`` closes the connection without answering.
        """
        fault = Fault(method.upper() if method else None, re.compile(path), status, times, reason,
                      message, delay, drop, retry_after)
        with self._lock:
            self._faults.append(fault)
        return fault

    def before(self, method: str | None, path: str,
               fn: Callable[[FakeKubeApiServer, RequestRecord], None], *, times: int = 1) -> Hook:
        """Run ``fn(server, request)`` before handling the next ``times`` matching requests —
        e.g. to change an object between a client's read and its write."""
        hook = Hook(method.upper() if method else None, re.compile(path), fn, times)
        with self._lock:
            self._hooks.append(hook)
        return hook

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._hooks.clear()

    # ------------------------------------------------------------------ request log

    def requests(self, method: str | None = None, path: str | None = None, *,
                 include_watches: bool = True) -> list[RequestRecord]:
        """Requests received so far, oldest first; ``path`` is a full-match regex."""
        with self._lock:
            log = list(self._log)
        return [r for r in log
                if (method is None or r.method == method.upper())
                and (path is None or re.fullmatch(path, r.path))
                and (include_watches or not r.is_watch)]

    def clear_requests(self) -> None:
        with self._lock:
            self._log.clear()

    def _record(self, rec: RequestRecord) -> tuple[Fault | None, list[Hook]]:
        with self._lock:
            self._log.append(rec)
            fault = next((f for f in self._faults if f.matches(rec.method, rec.path)), None)
            if fault:
                fault.hits += 1
            hooks = []
            for h in self._hooks:
                if h.hits < h.times and (h.method is None or h.method == rec.method) \
                        and h.path.fullmatch(rec.path):
                    h.hits += 1
                    hooks.append(h)
            return fault, hooks


# ---------------------------------------------------------------------- HTTP handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self):  # noqa: N802
        self._handle("GET")

    def do_POST(self):  # noqa: N802
        self._handle("POST")

    def do_PUT(self):  # noqa: N802
        self._handle("PUT")

    def do_PATCH(self):  # noqa: N802
        self._handle("PATCH")

    def do_DELETE(self):  # noqa: N802
        self._handle("DELETE")

    # ------------------------------------------------------------------ plumbing

    @property
    def fake(self) -> FakeKubeApiServer:
        return self.server.fake

    @property
    def cluster(self) -> Cluster:
        return self.server.fake.cluster

    def _send(self, code: int, body: Any, headers: dict | None = None) -> None:
        data = json.dumps(body).encode() if not isinstance(body, bytes) else body
        self.send_response(code)
        self.send_header("Content-Type", JSON if not isinstance(body, bytes) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip() or None
        rec = RequestRecord(method, path, query, content_type, None, self.headers.get("User-Agent"))
        decode_error = None
        try:
            rec.body = self._decode(raw, content_type)
        except ApiError as e:
            rec.body, decode_error = raw, e
        fault, hooks = self.fake._record(rec)
        try:
            if fault is not None:
                rec.injected = True
                if fault.delay:
                    time.sleep(fault.delay)
                if fault.drop:
                    rec.status = 0
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                raise ApiError(fault.status, fault.reason or _REASONS.get(fault.status, "Unknown"),
                               fault.message or f"injected fault ({fault.status})",
                               headers={"Retry-After": str(fault.retry_after)}
                               if fault.retry_after is not None else None)
            for hook in hooks:
                hook.fn(self.fake, rec)
            if decode_error is not None:
                raise decode_error
            result = self._route(method, path, query, raw, content_type, rec)
            if result is None:  # streamed (watch)
                return
            code, body, headers = result
            rec.status = code
            self._send(code, body, headers)
        except ApiError as e:
            rec.status = e.code
            self._send(e.code, e.status(), e.headers)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug in the fake: answer 500 and say so on stderr
            traceback.print_exc(file=sys.stderr)
            rec.status = 500
            with contextlib.suppress(OSError):
                self._send(500, ApiError(500, "InternalError", f"fake apiserver bug: {e!r}").status())

    def _decode(self, raw: bytes, content_type: str | None) -> Any:
        if not raw:
            return None
        try:
            if content_type == "application/apply-patch+yaml":
                return yaml.safe_load(raw.decode())
            return json.loads(raw)
        except (ValueError, yaml.YAMLError) as e:
            raise bad_request(f"couldn't get version/kind; json parse error: {e}") from e

    # ------------------------------------------------------------------ routing

    def _route(self, method, path, query, raw, content_type, rec):
        parts = [p for p in path.split("/") if p]
        if path in ("/healthz", "/readyz", "/livez"):
            return 200, b"ok", None
        if parts == ["version"]:
            return 200, {"major": "1", "minor": KUBE_VERSION.split(".")[1],
                         "gitVersion": f"v{KUBE_VERSION}.0-gpupool-fake", "gitCommit": "0" * 40,
                         "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                         "platform": "linux/amd64", "goVersion": "go1.25", "compiler": "gc"}, None
        if parts == ["api"]:
            return 200, {"kind": "APIVersions", "versions": ["v1"],
                         "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0",
                                                         "serverAddress": f"{self.fake.host}:{self.fake.port}"}]}, None
        if parts == ["apis"]:
            groups = [self._group_doc(g, vs) for g, vs in sorted(self.cluster.group_versions().items())
                      if g]
            return 200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}, None
        if len(parts) == 2 and parts[0] == "apis":
            versions = self.cluster.group_versions().get(parts[1])
            if not versions:
                raise _not_found_path()
            return 200, {"kind": "APIGroup", "apiVersion": "v1",
                         **self._group_doc(parts[1], versions)}, None
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_found_path()
        if not rest:
            if method != "GET" or not self.cluster.types_in(group, version):
                raise _not_found_path()
            return 200, self._resource_list(group, version), None

        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and not group and rest[2] in ("status", "finalize") \
                and len(rest) == 3:
            pass  # /api/v1/namespaces/{name}/status
        elif rest[0] == "namespaces" and len(rest) >= 3:
            ns, rest = rest[1], rest[2:]
        if not group and ns and rest == ["bindings"] and method == "POST":  # legacy Binding
            name = ((rec.body or {}).get("metadata") or {}).get("name", "")
            return 201, self.cluster.bind(ns, name, rec.body), None
        rt = self.cluster.find_type(group, version, rest[0])
        if rt is None or (ns is not None and not rt.namespaced):
            raise _not_found_path()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if len(rest) > 3 or (name and rt.namespaced and ns is None):
            raise _not_found_path()
        if sub and sub not in rt.subresources:
            raise _not_found_path()

        body = rec.body
        dry_run = query.get("dryRun") == "All"
        field_validation = query.get("fieldValidation") or "Warn"
        manager = query.get("fieldManager") or (rec.user_agent or "unknown").split("/")[0]
        c = self.cluster

        if name is None:
            if method == "GET":
                if query.get("watch") in ("true", "1"):
                    self._watch(rt, ns, query, rec)
                    return None
                items, rv, token, remaining = c.list(
                    rt, ns, query.get("labelSelector"), query.get("fieldSelector"),
                    int(query["limit"]) if query.get("limit") else None, query.get("continue"))
                meta: dict[str, Any] = {"resourceVersion": str(rv)}
                if token:
                    meta["continue"] = token
                    meta["remainingItemCount"] = remaining
                return 200, {"kind": f"{rt.kind}List", "apiVersion": rt.api_version,
                             "metadata": meta, "items": items}, None
            if method == "POST":
                obj, warnings = c.create(rt, ns, body, manager=manager, dry_run=dry_run,
                                         field_validation=field_validation)
                return 201, obj, _warnings(warnings)
            if method == "DELETE":
                return 200, c.delete_collection(rt, ns, query.get("labelSelector"),
                                                query.get("fieldSelector"),
                                                _delete_options(body, query), dry_run), None
            raise _method_not_allowed(method)

        if sub == "eviction":
            if method != "POST":
                raise _method_not_allowed(method)
            return 201, c.evict(ns, name, body, dry_run=dry_run), None
        if sub == "binding":
            if method != "POST":
                raise _method_not_allowed(method)
            return 201, c.bind(ns, name, body), None
        if sub == "scale":
            if method == "GET":
                return 200, c.get_scale(rt, ns, name), None
            if method == "PUT":
                return 200, c.set_scale(rt, ns, name, body, manager), None
            if method == "PATCH":
                return 200, c.set_scale(rt, ns, name, body, manager, content_type or ""), None
            raise _method_not_allowed(method)

        if method == "GET":
            return 200, c.render(rt, c.get_object(rt, ns, name)), None
        if method == "PUT":
            obj, warnings, created = c.update(rt, ns, name, body, manager=manager, subresource=sub,
                                              dry_run=dry_run, field_validation=field_validation)
            return (201 if created else 200), obj, _warnings(warnings)
        if method == "PATCH":
            if content_type not in PATCH_TYPES:
                raise ApiError(415, "UnsupportedMediaType",
                               f"the body of the request was in an unknown format - accepted "
                               f"media types include: {', '.join(PATCH_TYPES)}")
            if content_type == "application/apply-patch+yaml" and query.get("fieldManager") is None:
                manager = None
            obj, warnings, created = c.patch(
                rt, ns, name, body, content_type, manager=manager,
                force=query.get("force") == "true", subresource=sub, dry_run=dry_run,
                field_validation=field_validation)
            return (201 if created else 200), obj, _warnings(warnings)
        if method == "DELETE" and sub is None:
            return 200, c.delete(rt, ns, name, _delete_options(body, query), dry_run=dry_run), None
        raise _method_not_allowed(method)

    # ------------------------------------------------------------------ discovery docs

    def _group_doc(self, group: str, versions: list[str]) -> dict:
        gvs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": gvs, "preferredVersion": gvs[0]}

    def _resource_list(self, group: str, version: str) -> dict:
        entries = []
        for rt in sorted(self.cluster.types_in(group, version), key=lambda t: t.plural):
            entry = {"name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced,
                     "kind": rt.kind, "verbs": list(rt.verbs)}
            if rt.short_names:
                entry["shortNames"] = list(rt.short_names)
            entries.append(entry)
            for sub in sorted(rt.subresources):
                sub_entry = {"name": f"{rt.plural}/{sub}", "singularName": "",
                             "namespaced": rt.namespaced, "kind": rt.kind,
                             "verbs": ["get", "patch", "update"]}
                if sub == "scale":
                    sub_entry.update(kind="Scale", group="autoscaling", version="v1")
                elif sub == "eviction":
                    sub_entry.update(kind="Eviction", group="policy", version="v1", verbs=["create"])
                elif sub == "binding":
                    sub_entry.update(kind="Binding", verbs=["create"])
                entries.append(sub_entry)
        return {"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": f"{group}/{version}" if group else version, "resources": entries}

    # ------------------------------------------------------------------ watch

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            if readable:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _watch(self, rt: ResourceType, ns: str | None, query: dict, rec: RequestRecord) -> None:
        c = self.cluster
        match = c.matcher(rt, query.get("labelSelector"), query.get("fieldSelector"))
        timeout = float(query.get("timeoutSeconds") or self.fake.default_watch_timeout)
        rv_param = query.get("resourceVersion") or ""
        send_initial = query.get("sendInitialEvents") == "true"
        bookmarks = query.get("allowWatchBookmarks") == "true"
        initial: list[dict] = []
        with c.lock:
            if rv_param in ("", "0") or send_initial:
                items, _, _, _ = c.list(rt, ns, query.get("labelSelector"), query.get("fieldSelector"))
                initial = [{"type": "ADDED", "object": c.render(rt, c.get_object(
                    rt, i["metadata"].get("namespace"), i["metadata"]["name"]))} for i in items]
                cursor = c.rv
            else:
                try:
                    cursor = int(rv_param)
                except ValueError as e:
                    raise bad_request(f"invalid resource version: {rv_param}") from e
        rec.status = 200
        self.send_response(200)
        self.send_header("Content-Type", JSON)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True

        def bookmark(extra_annotations: dict | None = None) -> dict:
            meta: dict[str, Any] = {"resourceVersion": str(cursor)}
            if extra_annotations:
                meta["annotations"] = extra_annotations
            return {"type": "BOOKMARK", "object": {"kind": rt.kind, "apiVersion": rt.api_version,
                                                   "metadata": meta}}

        try:
            for ev in initial:
                self._write_chunk(json.dumps(ev).encode() + b"\n")
            if send_initial and bookmarks:
                self._write_chunk(json.dumps(bookmark({"k8s.io/initial-events-end": "true"})).encode() + b"\n")
            deadline = time.monotonic() + timeout
            next_bookmark = time.monotonic() + self.fake.bookmark_interval
            while True:
                expired = False
                with c.changed:
                    while (not self.server.stopped and c.rv <= cursor
                           and time.monotonic() < deadline and not self._client_gone()
                           and not (bookmarks and time.monotonic() >= next_bookmark)):
                        c.changed.wait(min(0.2, max(0.0, deadline - time.monotonic())))
                    if self.server.stopped or self._client_gone():
                        return  # connection is being torn down: no clean end of stream
                    if cursor < c.compacted_rv:
                        expired = True
                        events = []
                    else:
                        events = []
                        for e in reversed(c.history):  # newest first; stop at the cursor
                            if e.rv <= cursor:
                                break
                            events.append(e)
                        events.reverse()
                        if events:
                            cursor = events[-1].rv
                if expired:
                    status = ApiError(410, "Expired", f"too old resource version: {rv_param or cursor} "
                                      f"({c.compacted_rv + 1})").status()
                    self._write_chunk(json.dumps({"type": "ERROR", "object": status}).encode() + b"\n")
                    break
                for e in events:
                    out = self._translate(rt, ns, match, e)
                    if out is not None:
                        self._write_chunk(json.dumps(out).encode() + b"\n")
                if bookmarks and time.monotonic() >= next_bookmark:
                    self._write_chunk(json.dumps(bookmark()).encode() + b"\n")
                    next_bookmark = time.monotonic() + self.fake.bookmark_interval
                if time.monotonic() >= deadline:
                    break
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            return

    def _translate(self, rt: ResourceType, ns: str | None, match, e) -> dict | None:
        if e.storage != rt.storage_key:
            return None
        if ns and rt.namespaced and e.obj["metadata"].get("namespace") != ns:
            return None
        now_match = match(e.obj)
        old_match = bool(e.old) and match(e.old)
        if e.type == "ADDED":
            kind = "ADDED" if now_match else None
        elif e.type == "DELETED":
            kind = "DELETED" if now_match else None
        elif now_match and old_match:
            kind = "MODIFIED"
        elif now_match:
            kind = "ADDED"
        elif old_match:
            kind = "DELETED"
        else:
            kind = None
        if kind is None:
            return None
        return {"type": kind, "object": self.cluster.render(rt, e.obj)}


def _warnings(warnings: list[str]) -> dict | None:
    if not warnings:
        return None
    return {"Warning": ", ".join('299 - "{}"'.format(w.replace('"', '\\"')) for w in warnings)}


def _delete_options(body: Any, query: dict) -> dict:
    options = dict(body) if isinstance(body, dict) else {}
    if query.get("propagationPolicy"):
        options["propagationPolicy"] = query["propagationPolicy"]
    if query.get("gracePeriodSeconds"):
        options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
    if query.get("orphanDependents"):
        options["orphanDependents"] = query["orphanDependents"] == "true"
    return options


def _not_found_path() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def _method_not_allowed(method: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the "
                    f"requested resource ({method})", {})
