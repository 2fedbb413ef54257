"""The PR comment: update in place, split when too long, hide what is superseded; and touch
only our own comments (the marker and our author), never anyone else's.

Driven through an injected transport that replays a recorded GitHub response
(tests/prflow/recorded/issue_comments.json, the shape of GET /repos/{o}/{r}/issues/{n}/comments;
issue_comments_impostors.json: the marker in comments by a person, by another bot, quoted by a
reviewer, by a deleted account, next to two parts of ours and a markerless comment of our bot).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.cli import build_parser, main
from reconciler.commands import pr_comment
from reconciler.github import comment
from reconciler.github.comment import LIMIT, MARKER, GitHub, GitHubError, split_body, upsert

RECORDED = json.loads((Path(__file__).parent / "recorded" / "issue_comments.json").read_text())
IMPOSTORS = json.loads(
    (Path(__file__).parent / "recorded" / "issue_comments_impostors.json").read_text()
)
NOT_OURS = {3001, 3002, 3005, 3006, 3007}  # mallory, renovate[bot], alice, ghost, markerless


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


def touched(rec):
    """The comment ids and node ids that writes named (PATCH URLs, minimize variables)."""
    out = set()
    for _, url, payload in rec.writes():
        if "/issues/comments/" in url:
            out.add(url.rsplit("/", 1)[1])
        if payload and "variables" in payload:
            out.add(payload["variables"]["id"])
    return out


def foreign_ids():
    return {str(c["id"]) for c in IMPOSTORS if c["id"] in NOT_OURS} | {
        c["node_id"] for c in IMPOSTORS if c["id"] in NOT_OURS
    }


def test_a_marker_in_anyone_elses_comment_does_not_make_it_ours():
    rec = Recorder(IMPOSTORS)
    done = upsert(gh(rec), "o/r", 7, "### gpupool plan\n\nnew plan\n")
    assert done[:2] == ["updated 3003", "hid 3004"]
    assert touched(rec) == {"3003", "IC_kwDOAAAAAc4AAAu8"}
    assert not touched(rec) & foreign_ids()
    # what was left alone, and why, is said (pr-comment prints it in the workflow's log)
    left = done[2:]
    assert [line.split()[1] for line in left] == ["3001", "3002", "3005", "3006"]
    assert "mallory (User)" in left[0] and "renovate[bot] (Bot)" in left[1]
    assert "a deleted account" in left[3]
    assert all("not github-actions[bot]" in line for line in left)


def test_a_long_plan_updates_and_creates_but_never_takes_over_anyone_elses():
    table = "".join(f"| `node-{i:05d}` | {i % 8} | whole |\n" for i in range(6000))
    rec = Recorder(IMPOSTORS)
    done = upsert(gh(rec), "o/r", 7, "### plan\n\n" + table)
    assert done[:2] == ["updated 3003", "updated 3004"]
    assert any(d.startswith("created") for d in done)
    assert not touched(rec) & foreign_ids()
    assert not any(u == "/graphql" for _, u, _ in rec.writes())  # nothing of ours left over


def test_only_others_carry_the_marker_so_ours_is_created():
    rec = Recorder([c for c in IMPOSTORS if c["id"] in NOT_OURS])
    done = upsert(gh(rec), "o/r", 7, "plan")
    assert done[0] == "created 2001"
    assert [m for m, _, _ in rec.writes()] == ["POST"]
    assert rec.writes()[0][1] == "/repos/o/r/issues/7/comments"


def test_ours_means_the_marker_and_our_login_and_a_bot_for_a_bot_login():
    body = f"{MARKER}\nplan"
    bot = {"login": "github-actions[bot]", "type": "Bot"}
    assert comment.is_ours({"body": body, "user": bot})
    assert comment.is_ours({"body": body, "user": {**bot, "login": "GitHub-Actions[bot]"}})
    assert not comment.is_ours({"body": "plan", "user": bot})  # our bot, not our comment
    assert not comment.is_ours({"body": body, "user": {**bot, "type": "User"}})
    assert not comment.is_ours({"body": body, "user": {"login": "renovate[bot]", "type": "Bot"}})
    assert not comment.is_ours({"body": body, "user": {"login": "mallory", "type": "User"}})
    assert not comment.is_ours({"body": body, "user": None})
    # a GitHub App's token posts as <app-slug>[bot]; a personal token as that person
    app = {"login": "gpupool-ci[bot]", "type": "Bot"}
    assert comment.is_ours({"body": body, "user": app}, author="gpupool-ci[bot]")
    assert not comment.is_ours({"body": body, "user": bot}, author="gpupool-ci[bot]")
    person = {"login": "ci-user", "type": "User"}
    assert comment.is_ours({"body": body, "user": person}, author="ci-user")


def test_another_author_takes_over_nothing_of_github_actions():
    app_comment = {
        **IMPOSTORS[2],
        "id": 3010,
        "node_id": "IC_app",
        "user": {"login": "gpupool-ci[bot]", "type": "Bot"},
    }
    rec = Recorder([*IMPOSTORS, app_comment])
    done = upsert(gh(rec), "o/r", 7, "plan", author="gpupool-ci[bot]")
    assert done[0] == "updated 3010"
    assert touched(rec) == {"3010"}


def _cli(argv, rec, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    args = build_parser().parse_args(argv)
    assert args.func is pr_comment.cmd_pr_comment
    return pr_comment.cmd_pr_comment(args, transport=rec)


def test_cli_posts_as_github_actions_by_default_and_says_what_it_left_alone(
    tmp_path, capsys, monkeypatch
):
    f = tmp_path / "plan.md"
    f.write_text("plan")
    argv = ["pr-comment", "--repo", "o/r", "--pr", "7", "--body-file", str(f)]
    argv += ["--api-url", "https://api.github.test"]
    assert pr_comment.DEFAULT_AUTHOR == comment.DEFAULT_AUTHOR == "github-actions[bot]"
    rec = Recorder(IMPOSTORS)
    assert _cli(argv, rec, monkeypatch) == 0
    out = capsys.readouterr().out
    assert "updated 3003" in out and "hid 3004" in out
    assert "left 3001 alone" in out and "mallory" in out
    assert not touched(rec) & foreign_ids()
    rec = Recorder(IMPOSTORS)
    assert _cli([*argv, "--author", "renovate[bot]"], rec, monkeypatch) == 0
    assert touched(rec) == {"3002"}  # told it is renovate, it edits renovate's comment only


def test_cli_refuses_an_empty_author(tmp_path, capsys, monkeypatch):
    f = tmp_path / "plan.md"
    f.write_text("plan")
    rec = Recorder(IMPOSTORS)
    argv = ["pr-comment", "--repo", "o/r", "--pr", "7", "--body-file", str(f), "--author", " "]
    assert _cli(argv, rec, monkeypatch) == 1
    assert "--author is empty" in capsys.readouterr().err
    assert rec.calls == []
