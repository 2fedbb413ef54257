"""The push webhook receiver on a real local listener, spoken to with urllib."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from reconciler.loop.webhook import PATH, read_secret, serve_webhook, sign, verify_signature

SECRET = b"It's a Secret to Everybody"


def test_the_signature_is_githubs():
    """GitHub's own test vector (docs: "Validating webhook deliveries")."""
    want = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert sign(SECRET, b"Hello, World!") == want
    assert verify_signature(SECRET, b"Hello, World!", want)
    assert not verify_signature(SECRET, b"Hello, World?", want)
    assert not verify_signature(SECRET, b"Hello, World!", want.removeprefix("sha256="))
    assert not verify_signature(SECRET, b"Hello, World!", None)
    assert not verify_signature(b"", b"Hello, World!", want)


def test_the_secret_comes_from_a_file(tmp_path):
    (tmp_path / "s").write_text("abc\n")
    assert read_secret(str(tmp_path / "s")) == b"abc"
    (tmp_path / "e").write_text("\n")
    with pytest.raises(ValueError):
        read_secret(str(tmp_path / "e"))
    with pytest.raises(ValueError):
        serve_webhook(0, b"", "main", lambda: None)


@pytest.fixture
def hook():
    woken = threading.Event()
    server = serve_webhook(0, SECRET, "main", woken.set, "127.0.0.1", max_body=4096)
    yield server, woken
    server.shutdown()
    server.server_close()


def post(server, body: bytes, *, event="push", signature: str | None = "sign", path=PATH):
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event}
    if signature == "sign":
        signature = sign(SECRET, body)
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def push(ref: str) -> bytes:
    return json.dumps({"ref": ref, "after": "0" * 40, "repository": {"name": "x"}}).encode()


def test_a_signed_push_to_the_branch_wakes_the_loop(hook):
    server, woken = hook
    assert post(server, push("refs/heads/main")) == 202
    assert woken.is_set()


def test_a_missing_or_wrong_signature_is_refused_and_wakes_nothing(hook):
    server, woken = hook
    body = push("refs/heads/main")
    assert post(server, body, signature=None) == 401
    assert post(server, body, signature=sign(b"another secret", body)) == 403
    assert post(server, body, signature="sha256=") == 403
    assert post(server, body + b" ", signature=sign(SECRET, body)) == 403  # body changed
    assert not woken.is_set()


def test_other_branches_and_events_are_ignored(hook):
    server, woken = hook
    assert post(server, push("refs/heads/feature")) == 204
    assert post(server, push("refs/tags/main")) == 204
    assert post(server, push("refs/heads/main"), event="issues") == 204
    assert not woken.is_set()


def test_ping_is_answered_without_waking(hook):
    server, woken = hook
    assert post(server, b'{"zen": "Keep it logically awesome."}', event="ping") == 200
    assert not woken.is_set()


def test_an_oversize_body_is_refused_unread(hook):
    server, woken = hook
    body = push("refs/heads/main") + b" " * 5000
    assert post(server, body) == 413
    assert not woken.is_set()


def test_only_the_hook_path_is_served(hook):
    server, woken = hook
    assert post(server, push("refs/heads/main"), path="/metrics") == 404
    assert not woken.is_set()


def test_the_cli_refuses_a_receiver_without_a_secret(tmp_path, capsys, monkeypatch):
    from reconciler.commands import reconcile

    monkeypatch.setattr(reconcile, "make_api_client", lambda _: None)
    ran = []

    class Stub:
        def __init__(self, *a, **kw):
            pass

        wake = ready = alive = None

        def run(self, *a):
            ran.append(a)

    monkeypatch.setattr("reconciler.loop.controller.Controller", Stub)
    argv = ["--git-url", str(tmp_path), "--health-port", "0", "--metrics-bind-address", "0"]
    argv += ["--webhook-bind-address", "127.0.0.1:19443"]
    import argparse

    parser = argparse.ArgumentParser()
    reconcile.register(parser.add_subparsers())
    args = parser.parse_args(["reconcile", *argv])
    assert reconcile.cmd_reconcile(args) == 1
    assert "--webhook-secret-file" in capsys.readouterr().err and not ran
    (tmp_path / "secret").write_text("\n")
    args = parser.parse_args(
        ["reconcile", *argv, "--webhook-secret-file", str(tmp_path / "secret")]
    )
    assert reconcile.cmd_reconcile(args) == 1
    assert "empty" in capsys.readouterr().err and not ran
