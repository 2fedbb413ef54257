"""A failed cycle is on the status object whenever the status can be written, whatever failed.

The controller used to take a connection dropped on the pod list (the server closing the TCP
connection unanswered, or cutting a response off mid-body: urllib3's ProtocolError, or its
MaxRetryError once a GET's retries are spent) for "API server unreachable" and skip the status
write, although status writes still worked: the status kept saying Ready=True with the time of
the last good cycle. Now the failure report is always tried, bounded in time, and only given up
when that write itself fails (then one log line, no traceback, and the loop goes on).

The API server here is a small in-process fake (`FakeApiServer`): real HTTP on 127.0.0.1, so
the official client and urllib3 raise exactly what they raise for a dropped connection; every
collection lists empty, objects are created, read and merge-patched, and `drop` / `hang`
rules pick the requests that get no answer (tests/faultproxy does the same in front of the real
API server; this runs without one).
"""

from __future__ import annotations

import copy
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from reconciler.loop.controller import Controller
from reconciler.loop.sources import DirectorySource
from reconciler.loop.status import StatusPacer

NS = "gpupool-system"
STATUS = rf"^/apis/gpupool\.io/v1alpha1/namespaces/{NS}/reconcilerstatuses/gpupool"
PODS = r"^/api/v1/pods$"


class FakeApiServer:
    """Just enough of a Kubernetes API server for one controller cycle over an empty cluster.

    Rules, each `(method or None, path regex)`: `drop` reads the request and closes the
    connection without an answer ("cut": answers the headers and half the body, then closes);
    `hang` never answers (until the server stops). `down` set: every request is dropped;
    `down_after`, a rule: `down` is set by the first request it matches."""

    def __init__(self) -> None:
        self.objects: dict[str, dict] = {}
        self.log: list[tuple[str, str, str]] = []  # (method, path, what happened)
        self.drop: list[tuple[str | None, str]] = []
        self.cut: list[tuple[str | None, str]] = []
        self.hang: list[tuple[str | None, str]] = []
        self.forbid: list[tuple[str | None, str]] = []  # answered 403 Forbidden
        self.down = False
        self.down_after: tuple[str | None, str] | None = None
        self._stop = threading.Event()
        self._rv = 0
        self._lock = threading.Lock()
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.block_on_close = False
        server.fake = self
        self.server = server
        self.url = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()

    def stop(self) -> None:
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def api_client(self) -> client.ApiClient:
        cfg = client.Configuration()
        cfg.host = self.url
        cfg.proxy = None
        return client.ApiClient(cfg)

    def requests(self, method: str, path: str) -> list[str]:
        """What happened to each matching request, oldest first."""
        return [what for m, p, what in self.log if m == method and re.search(path, p)]

    @staticmethod
    def _hit(rules, method: str, path: str) -> bool:
        return any((m is None or m == method) and re.search(p, path) for m, p in rules)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def answer(self, method: str, path: str, body: dict | None) -> tuple[int, dict]:
        if self._hit(self.forbid, method, path):
            return 403, _status(403, "Forbidden")
        with self._lock:
            item = _item_path(path)
            if item is None:  # a collection
                if method == "GET":
                    meta = {"resourceVersion": self._next_rv()}
                    return 200, {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": []}
                if method == "POST":
                    name = (body.get("metadata") or {}).get("name")
                    key = f"{path}/{name}"
                    if key in self.objects:
                        return 409, _status(409, "AlreadyExists")
                    obj = copy.deepcopy(body)
                    obj["metadata"].update(resourceVersion=self._next_rv(), generation=1)
                    self.objects[key] = obj
                    return 201, obj
                return 405, _status(405, "MethodNotAllowed")
            key, sub = item
            obj = self.objects.get(key)
            if obj is None:
                return 404, _status(404, "NotFound")
            if method == "GET":
                return 200, obj
            if method == "PUT":
                obj = copy.deepcopy(body)
                obj["metadata"]["resourceVersion"] = self._next_rv()
                self.objects[key] = obj
                return 200, obj
            if method == "PATCH":
                _merge(obj, body if sub is None else {sub: body.get(sub)})
                obj["metadata"]["resourceVersion"] = self._next_rv()
                return 200, obj
            return 405, _status(405, "MethodNotAllowed")


def _item_path(path: str) -> tuple[str, str | None] | None:
    """(the object's path, its subresource) for an object's path; None for a collection's."""
    parts = path.strip("/").split("/")
    head = 2 if parts[0] == "api" else 3  # api/v1 | apis/GROUP/VERSION
    rest = parts[head:]
    if rest and rest[0] == "namespaces" and len(rest) >= 3:
        head, rest = head + 2, rest[2:]
    if len(rest) <= 1:
        return None
    return "/" + "/".join(parts[: head + 2]), (rest[2] if len(rest) > 2 else None)


def _merge(target: dict, patch: dict) -> None:
    """An RFC 7386 merge patch."""
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        elif isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge(target[k], v)
        else:
            target[k] = copy.deepcopy(v)


def _status(code: int, reason: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "reason": reason,
        "code": code,
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:
        pass

    def _serve(self) -> None:
        fake: FakeApiServer = self.server.fake
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        method = self.command
        if fake.down_after and fake._hit([fake.down_after], method, path):
            fake.down = True
        if fake.down or fake._hit(fake.drop, method, path):
            fake.log.append((method, path, "dropped"))
            self.close_connection = True  # closed without an answer
            return
        if fake._hit(fake.hang, method, path):
            fake.log.append((method, path, "hung"))
            fake._stop.wait(30)
            self.close_connection = True
            return
        code, obj = fake.answer(method, path, body)
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if fake._hit(fake.cut, method, path):
            fake.log.append((method, path, "cut"))
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True  # the rest never comes
            return
        fake.log.append((method, path, str(code)))
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def fake():
    server = FakeApiServer()
    yield server
    server.stop()


@pytest.fixture
def make_controller(fake, tmp_path) -> Callable[..., tuple[Controller, Clock]]:
    (tmp_path / "pools").mkdir()
    made = []

    def make(**kw) -> tuple[Controller, Clock]:
        clock = Clock()
        api = fake.api_client()
        made.append(api)
        ctl = Controller(
            DirectorySource(tmp_path), api, namespace=NS, identity="t", clock=clock, **kw
        )
        return ctl, clock

    yield make
    for api in made:
        api.close()


def status(fake: FakeApiServer) -> dict:
    obj = fake.objects[f"/apis/gpupool.io/v1alpha1/namespaces/{NS}/reconcilerstatuses/gpupool"]
    return obj["status"]


def conditions(fake: FakeApiServer) -> dict[str, dict]:
    return {c["type"]: c for c in status(fake)["conditions"]}


def ours(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("gpupool")]


def test_a_good_cycle_on_the_fake_says_ready(make_controller, fake):
    ctl, clock = make_controller()
    r = ctl.cycle()
    assert r.error is None and r.leader, r.error
    assert conditions(fake)["Ready"]["status"] == "True"
    assert status(fake)["lastReconcileTime"] == clock.now.isoformat()


def test_a_cycle_reads_its_status_object_once(make_controller, fake):
    """The status write of a cycle starts from the object the cycle read at its start (gpupool
    alone writes the status): one GET, one PATCH; the transition time of a condition that
    holds is kept."""
    ctl, clock = make_controller()
    assert ctl.cycle().error is None  # creates the object
    since = conditions(fake)["Ready"]["lastTransitionTime"]
    clock.advance(60)
    fake.log.clear()
    assert ctl.cycle().error is None
    assert len(fake.requests("GET", STATUS + "$")) == 1
    assert len(fake.requests("PATCH", STATUS + "/status$")) == 1
    assert conditions(fake)["Ready"]["lastTransitionTime"] == since
    assert status(fake)["lastReconcileTime"] == clock.now.isoformat()


@pytest.mark.parametrize(
    ("how", "error"),
    [
        # closed unanswered: the GET is retried (urllib3's default three times), then given up
        pytest.param("drop", "MaxRetryError: ", id="closed-unanswered"),
        # the answer cut off after half its body: a ProtocolError, not retried
        pytest.param("cut", "ProtocolError: ('Connection broken", id="reset-mid-response"),
    ],
)
def test_a_dropped_pod_list_is_on_the_status_with_the_time(
    make_controller, fake, caplog, how, error
):
    ctl, clock = make_controller()
    assert ctl.cycle().error is None
    before = status(fake)["lastReconcileTime"]
    assert conditions(fake)["Ready"]["status"] == "True"
    clock.advance(60)
    getattr(fake, how).append(("GET", PODS))
    with caplog.at_level(logging.INFO, logger="gpupool"):
        r = ctl.cycle()
    assert r.error and r.error.startswith(error), r.error
    assert set(fake.requests("GET", PODS)[1:]) == {"dropped" if how == "drop" else "cut"}
    # the status says the cycle failed, why, and when
    st, conds = status(fake), conditions(fake)
    ready = conds["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "ReconcileError"), ready
    assert ready["message"].startswith(error), ready["message"]
    assert ready["lastTransitionTime"] == clock.now.isoformat()
    assert (conds["Stalled"]["status"], conds["Stalled"]["reason"]) == ("True", "ReconcileError")
    assert st["lastReconcileTime"] == clock.now.isoformat() != before
    # one line for the failure, no traceback: a lost connection is an operational condition
    records = ours(caplog)
    assert not [rec for rec in records if rec.exc_info], [rec.getMessage() for rec in records]
    (line,) = [rec for rec in records if rec.levelno >= logging.WARNING]
    assert "reported on the status" in line.getMessage(), line.getMessage()


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param([("PATCH", STATUS)], id="status-patch-dropped"),
        pytest.param("down", id="server-gone-after-the-pod-list"),
    ],
)
def test_when_the_status_write_fails_too_one_line_and_the_loop_goes_on(
    make_controller, fake, caplog, broken
):
    ctl, clock = make_controller()
    assert ctl.cycle().error is None
    good = copy.deepcopy(status(fake))
    clock.advance(60)
    fake.log.clear()
    if broken == "down":
        fake.down_after = ("GET", PODS)  # the server goes away with the pod list
    else:
        fake.drop.append(("GET", PODS))
        fake.drop.extend(broken)
    with caplog.at_level(logging.INFO, logger="gpupool"):
        r = ctl.cycle()
    assert r.error
    # the report was tried after the pod list failed, and failed itself: nothing written
    after = fake.log[[p for _, p, _ in fake.log].index("/api/v1/pods") :]
    assert [w for _, p, w in after if re.search(STATUS, p)][-1:] == ["dropped"], after
    assert status(fake) == good
    records = ours(caplog)
    assert not [rec for rec in records if rec.exc_info], [rec.getMessage() for rec in records]
    failed = [rec for rec in records if rec.name == "gpupool.controller"]
    assert len(failed) == 1, [rec.getMessage() for rec in failed]
    msg = failed[0].getMessage()
    assert "reconcile cycle failed" in msg and "status" in msg, msg
    # the loop goes on: the next cycle, with the server back, is a good one
    fake.drop.clear()
    fake.down, fake.down_after = False, None
    clock.advance(60)
    assert ctl.cycle().error is None
    assert conditions(fake)["Ready"]["status"] == "True"


def test_the_failure_report_is_bounded_in_time(make_controller, fake, caplog):
    """A status write that hangs does not hold the loop: the failure report's requests have a
    timeout of their own (`status_report_timeout`), and the write is given up after it."""
    ctl, clock = make_controller(status_report_timeout=(1.0, 0.5))
    assert ctl.cycle().error is None
    clock.advance(60)
    fake.log.clear()
    fake.drop.append(("GET", PODS))
    fake.hang.append(("PATCH", STATUS))
    t0 = time.monotonic()
    with caplog.at_level(logging.INFO, logger="gpupool"):
        r = ctl.cycle()
    elapsed = time.monotonic() - t0
    assert r.error and elapsed < 5, elapsed
    assert fake.requests("PATCH", STATUS) == ["hung"]
    failed = [rec for rec in ours(caplog) if rec.name == "gpupool.controller"]
    assert len(failed) == 1 and not failed[0].exc_info, [rec.getMessage() for rec in failed]


# ---- the same on the real API server, through tests/faultproxy ------------------------------


@pytest.mark.kube
def test_on_the_real_api_server_a_dropped_pod_list_is_on_the_status(kube, tmp_path, caplog):
    """The FaultProxy closes the pod list's connection unanswered (each of the GET's four
    tries); the status write right after it goes through the same proxy and succeeds. Then the
    status writes are dropped too: one line, and the status is left as it was."""
    from tests.faultproxy.proxy import FaultProxy
    from tests.integration.harness import CONTROLLER_SA, controller
    from tests.integration.harness import NS as CONTROLLER_NS
    from tests.integration.scenario import base

    clock = kube.clock
    base(kube, tmp_path, clock)
    pki = kube.plane.cert_dir
    with FaultProxy(kube.plane.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key") as p:
        token = kube.plane.service_account_token(CONTROLLER_NS, CONTROLLER_SA, create=False)
        api = p.api_client(token)
        kube.cleanup(api.close)
        ctl = controller(kube, tmp_path, clock, api_client=api)

        def real_status() -> dict:
            return kube.custom.get_namespaced_custom_object(
                "gpupool.io", "v1alpha1", CONTROLLER_NS, "reconcilerstatuses", "gpupool"
            )["status"]

        assert ctl.cycle().error is None
        good = real_status()
        assert {c["type"]: c["status"] for c in good["conditions"]}["Stalled"] == "False"
        clock.advance(60)
        with p.drop_request("GET", PODS), caplog.at_level(logging.INFO, logger="gpupool"):
            r = ctl.cycle()
        assert r.error and r.error.startswith("MaxRetryError"), r.error
        assert len(p.requests("GET", PODS, fault="drop_request")) == 4
        bad = real_status()
        ready = {c["type"]: c for c in bad["conditions"]}["Ready"]
        assert (ready["status"], ready["reason"]) == ("False", "ReconcileError"), ready
        assert "/api/v1/pods" in ready["message"], ready["message"]
        assert bad["lastReconcileTime"] == clock.now.isoformat() > good["lastReconcileTime"]
        records = ours(caplog)
        assert not [rec for rec in records if rec.exc_info]
        (line,) = [rec for rec in records if rec.levelno >= logging.WARNING]
        assert "reported on the status" in line.getMessage(), line.getMessage()

        caplog.clear()
        clock.advance(60)
        with (
            p.drop_request("GET", PODS),
            p.drop_request("PATCH", r"/reconcilerstatuses/gpupool/status$"),
            caplog.at_level(logging.INFO, logger="gpupool"),
        ):
            r = ctl.cycle()
        assert r.error
        assert p.requests("PATCH", r"/reconcilerstatuses/", fault="drop_request")
        assert real_status() == bad
        records = ours(caplog)
        assert not [rec for rec in records if rec.exc_info]
        (line,) = [rec for rec in records if rec.levelno >= logging.WARNING]
        assert "the status could not be written either" in line.getMessage(), line.getMessage()


def test_an_error_answer_is_one_line_on_the_log_and_on_the_status(make_controller, fake, caplog):
    """RBAC's 403 on the pod list is the API server's answer, not a defect of gpupool: one log
    line without a traceback, and the status says the cycle failed."""
    ctl, clock = make_controller()
    assert ctl.cycle().error is None
    clock.advance(60)
    fake.forbid.append(("GET", PODS))
    with caplog.at_level(logging.INFO, logger="gpupool"):
        r = ctl.cycle()
    assert r.error and "403" in r.error, r.error
    assert conditions(fake)["Ready"]["status"] == "False"
    records = ours(caplog)
    assert not [rec for rec in records if rec.exc_info], [rec.getMessage() for rec in records]
    (line,) = [rec for rec in records if rec.levelno >= logging.WARNING]
    assert "HTTP 403" in line.getMessage(), line.getMessage()


# the loop's paced status writes (`StatusPacer`; its rule: test_status_pacer.py)
def test_the_loop_writes_the_report_it_held_back(make_controller, fake):
    """Cycles in a row under pacing: the one that says nothing new is not written; resting
    writes it (its time) before the interval ends."""
    ctl, clock = make_controller()
    tick = [100.0]
    ctl.status_pacer = StatusPacer(30.0, monotonic=lambda: tick[0])  # `run` sets the refresh
    assert ctl.cycle().error is None  # creates the object
    assert ctl.cycle().error is None  # the generation it created is news
    first = status(fake)["lastReconcileTime"]
    clock.advance(5)
    fake.log.clear()
    assert ctl.cycle().error is None
    assert fake.requests("PATCH", STATUS + "/status$") == []
    assert status(fake)["lastReconcileTime"] == first
    tick[0] += 29.9  # the held report is due in 0.1 s
    ctl.rest(threading.Event(), threading.Event(), 0.6)
    assert len(fake.requests("PATCH", STATUS + "/status$")) == 1
    assert status(fake)["lastReconcileTime"] == clock.now.isoformat()


def test_a_lone_cycle_writes_every_report(make_controller, fake):
    ctl, clock = make_controller()
    assert ctl.cycle().error is None
    clock.advance(5)
    fake.log.clear()
    assert ctl.cycle().error is None
    assert len(fake.requests("PATCH", STATUS + "/status$")) == 1
