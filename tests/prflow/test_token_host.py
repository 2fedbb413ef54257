"""`gpupool pr-comment` sends its token only to the API host: the scheme, host and port of
`--api-url`. A `Link: rel="next"` to anywhere else, or a redirect there, is an error naming
the link, and nothing is sent to it.

Two real HTTP servers on 127.0.0.1 (different ports), driven through the command line with the
real urllib transport: `api` plays GitHub's REST API, `other` records whatever reaches it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

import pytest

from reconciler.cli import main
from reconciler.github.comment import MARKER

TOKEN = "t0ken-that-must-stay-home"
COMMENTS = "/repos/o/r/issues/7/comments"


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None


@dataclass
class Server:
    """A recording HTTP server; `answer(handler) -> (status, headers, body)` decides replies."""

    answer: Callable[[BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def serve(self) -> Iterator[Server]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.body = self.rfile.read(length) if length else b""
                server.seen.append(Seen(self.command, self.path, self.headers["Authorization"]))
                status, headers, body = server.answer(self)
                self.send_response(status)
                for k, v in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = _any

        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
        t.start()
        try:
            yield self
        finally:
            httpd.shutdown()
            httpd.server_close()
            t.join(5)


def _json(status: int, obj, headers: dict[str, str] | None = None):
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(obj).encode()


@pytest.fixture
def other() -> Iterator[Server]:
    """Another server on 127.0.0.1 (another port): it must never see a request."""
    yield from Server(lambda h: _json(200, [])).serve()


@pytest.fixture
def api(other) -> Iterator[Server]:
    """The API: page 1 of the comments links to `api.next` (set by each test; a template with
    {api} and {other}); page 2 (`?page=2`, on the API) holds our comment; writes succeed."""

    def answer(h):
        s = api_server
        if len(s.seen) > 10:  # a client going round in circles: stop it here, not hang
            return _json(500, {"message": "more requests than this test makes"})
        if h.command == "GET" and h.path.startswith(COMMENTS) and "page=2" in h.path:
            ours = {"id": 11, "body": f"{MARKER}\nold", "user": {"login": "bot", "type": "User"}}
            return _json(200, [ours])
        if h.command == "GET" and h.path.startswith(COMMENTS):
            if s.redirect:
                return 302, {"Location": s.redirect.format(api=s.url, other=other.url)}, b""
            link = s.next.format(api=s.url, other=other.url)
            return _json(200, [], {"Link": f'<{link}>; rel="next"'} if link else {})
        if h.command in ("POST", "PATCH"):
            return _json(200 if h.command == "PATCH" else 201, {"id": 11, "body": "x"})
        return _json(404, {"message": "Not Found"})

    api_server = Server(answer)
    api_server.next, api_server.redirect = "", ""
    yield from api_server.serve()


@pytest.fixture
def run(api, tmp_path, monkeypatch, capsys) -> Callable[[], tuple[int, str]]:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("no_proxy", "*")  # never through a proxy from the environment
    body = tmp_path / "plan.md"
    body.write_text("new plan\n")

    def run() -> tuple[int, str]:
        argv = ["pr-comment", "--repo", "o/r", "--pr", "7", "--body-file", str(body)]
        rc = main([*argv, "--author", "bot", "--api-url", api.url])
        return rc, capsys.readouterr().err

    return run


@pytest.mark.parametrize("base", ["{api}", ""], ids=["absolute", "relative"])
def test_a_next_link_on_the_api_host_is_followed_with_the_token(api, other, run, base):
    """What must keep working: GitHub's own pagination, on the API host (a relative link,
    which RFC 8288 allows, is read from the page that gave it)."""
    api.next = base + COMMENTS + "?per_page=100&page=2"
    rc, err = run()
    assert rc == 0, err
    assert [(s.method, s.path) for s in api.seen] == [
        ("GET", COMMENTS + "?per_page=100"),
        ("GET", COMMENTS + "?per_page=100&page=2"),
        ("PATCH", "/repos/o/r/issues/comments/11"),  # our comment, found on page 2
    ]
    assert {s.authorization for s in api.seen} == {f"Bearer {TOKEN}"}
    assert other.seen == []


@pytest.mark.parametrize(
    "link",
    [
        pytest.param("{other}/repos/o/r/issues/7/comments?page=2", id="another-port"),
        pytest.param("http://localhost:{port}/repos/o/r/issues/7/comments?page=2", id="other-host"),
        pytest.param("https://127.0.0.1:{port}/repos/o/r/issues/7/comments?page=2", id="https"),
        pytest.param("http://127.0.0.1:{port}@127.0.0.1:{oport}/x?page=2", id="userinfo-trick"),
    ],
)
def test_a_next_link_off_the_api_host_is_an_error_and_gets_nothing(api, other, run, link):
    api.next = link.format(
        other="{other}",
        port=urlsplit(api.url).port,
        oport=urlsplit(other.url).port,
    )
    shown = api.next.format(api=api.url, other=other.url)
    rc, err = run()
    assert other.seen == []  # no request at all, let alone the token
    assert rc == 1, err
    assert [(s.method, s.path) for s in api.seen] == [("GET", COMMENTS + "?per_page=100")]
    (line,) = err.splitlines()  # one line: `gpupool pr-comment: error: ...`
    assert "error: " in line and shown in line, err
    assert 'rel="next"' in line and f"API host {api.url}" in line, err
    assert TOKEN not in err


@pytest.mark.parametrize("where", ["{other}", "http://localhost:{port}"])
def test_a_redirect_off_the_api_host_is_not_followed(api, other, run, where):
    """urllib follows redirects to any host and takes the Authorization header along; the
    transport follows them only on the host the request went to."""
    api.redirect = where.format(other="{other}", port=urlsplit(api.url).port) + "/elsewhere"
    shown = api.redirect.format(api=api.url, other=other.url)
    rc, err = run()
    assert other.seen == []
    assert rc == 1, err
    assert [(s.method, s.path) for s in api.seen] == [("GET", COMMENTS + "?per_page=100")]
    (line,) = err.splitlines()
    assert "error: " in line and shown in line and "HTTP 302" in line, err


def test_a_redirect_on_the_api_host_is_still_followed(api, other, run):
    """GitHub answers a renamed repository with a 301 to its new address, on the API host."""
    api.redirect = "{api}" + COMMENTS + "?per_page=100&page=2"
    rc, err = run()
    assert rc == 0, err
    assert [(s.method, s.path, s.authorization) for s in api.seen][:2] == [
        ("GET", COMMENTS + "?per_page=100", f"Bearer {TOKEN}"),
        ("GET", COMMENTS + "?per_page=100&page=2", f"Bearer {TOKEN}"),
    ]
    assert other.seen == []


def test_a_next_link_back_to_a_page_read_is_an_error_not_a_loop(api, other, run):
    api.next = "{api}" + COMMENTS + "?per_page=100"
    rc, err = run()
    assert rc == 1 and "loop" in err, err
    assert len(api.seen) == 1 and other.seen == []
