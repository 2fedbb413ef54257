"""The PR comment: update in place, split when too long, hide what is superseded.

Driven through an injected transport that replays a recorded GitHub response
(tests/prflow/recorded/issue_comments.json, the shape of GET /repos/{o}/{r}/issues/{n}/comments).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.github.comment import LIMIT, MARKER, GitHub, GitHubError, split_body, upsert

RECORDED = json.loads((Path(__file__).parent / "recorded" / "issue_comments.json").read_text())


class Recorder:
    """A fake GitHub: serves the recorded comment list (in two pages) and records writes."""

    def __init__(self, comments, fail=None):
        self.comments = comments
        self.calls: list[tuple[str, str, dict | None]] = []
        self.fail = fail
        self.next_id = 2000

    def __call__(self, method, url, headers, body):
        payload = json.loads(body) if body else None
        self.calls.append((method, url, payload))
        assert headers["Authorization"] == "Bearer t0ken"
        if self.fail and self.fail in url:
            return (
                403,
                {},
                json.dumps({"message": "Resource not accessible by integration"}).encode(),
            )
        if method == "GET" and "page=2" in url:
            return 200, {}, json.dumps(self.comments[2:]).encode()
        if method == "GET":
            link = (
                "<https://api.github.test/repos/o/r/issues/7/comments?per_page=100&page=2>;"
                ' rel="next"'
            )
            return 200, {"Link": link}, json.dumps(self.comments[:2]).encode()
        if method == "POST" and url.endswith("/graphql"):
            return (
                200,
                {},
                json.dumps(
                    {"data": {"minimizeComment": {"minimizedComment": {"isMinimized": True}}}}
                ).encode(),
            )
        if method == "POST":
            self.next_id += 1
            return 201, {}, json.dumps({"id": self.next_id, "body": payload["body"]}).encode()
        return (
            200,
            {},
            json.dumps({"id": int(url.rsplit("/", 1)[1]), "body": payload["body"]}).encode(),
        )

    def writes(self):
        return [
            (m, u.replace("https://api.github.test", ""), p) for m, u, p in self.calls if m != "GET"
        ]


def gh(rec):
    return GitHub(token="t0ken", api="https://api.github.test", transport=rec)


def test_updates_the_first_part_and_hides_the_leftover_part():
    rec = Recorder(RECORDED)
    done = upsert(gh(rec), "o/r", 7, "### gpupool plan\n\nnew plan\n")
    assert done == ["updated 1002", "hid 1003"]
    writes = rec.writes()
    assert writes[0][0] == "PATCH" and writes[0][1] == "/repos/o/r/issues/comments/1002"
    assert writes[0][2]["body"].startswith(MARKER) and "new plan" in writes[0][2]["body"]
    assert writes[1][1] == "/graphql" and writes[1][2]["variables"] == {"id": "IC_kwDOAAAAAc4AAAPr"}
    assert all("1001" not in u for _, u, _ in writes)  # a person's comment is never touched


def test_creates_when_there_is_none_yet():
    rec = Recorder([RECORDED[0]])
    assert upsert(gh(rec), "o/r", 7, "plan") == ["created 2001"]
    assert rec.writes()[0][:2] == ("POST", "/repos/o/r/issues/7/comments")


def test_same_plan_writes_nothing():
    body = split_body(
        "### gpupool plan for this change\n\n:white_check_mark: "
        "**Change: no capacity moves; 0 repartitions; 0 workloads disrupted**\n"
    )[0]
    rec = Recorder([RECORDED[0], {**RECORDED[1], "body": body}])
    assert upsert(gh(rec), "o/r", 7, body.split("\n", 1)[1]) == ["unchanged 1002"]
    assert rec.writes() == []


def test_long_plan_is_split_into_numbered_parts_that_fit():
    table = "".join(
        f"| `node-{i:05d}` | {i % 8} | whole | MIG[3g.40gb, 3g.40gb] |\n" for i in range(4000)
    )
    parts = split_body("### plan\n\n" + table)
    assert len(parts) >= 3
    assert all(len(p) < LIMIT for p in parts)
    assert all(p.startswith(MARKER) for p in parts)
    assert f"part 1/{len(parts)}" in parts[0] and f"part {len(parts)}/{len(parts)}" in parts[-1]
    assert sum(p.count("| `node-") for p in parts) == 4000  # nothing lost
    rec = Recorder(RECORDED)
    done = upsert(gh(rec), "o/r", 7, "### plan\n\n" + table)
    assert done[:2] == ["updated 1002", "updated 1003"] and all(
        d.startswith("created") for d in done[2:]
    )


def test_api_error_is_reported():
    rec = Recorder(RECORDED, fail="/issues/comments/1002")
    with pytest.raises(GitHubError, match="HTTP 403: Resource not accessible"):
        upsert(gh(rec), "o/r", 7, "plan")


def test_cli_needs_a_token(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    f = tmp_path / "plan.md"
    f.write_text("plan")
    assert main(["pr-comment", "--repo", "o/r", "--pr", "7", "--body-file", str(f)]) == 1
    assert "GITHUB_TOKEN" in capsys.readouterr().err
