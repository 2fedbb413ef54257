"""`gpupool pr-comment`: post or update the plan comment on a pull request (used by CI)."""

from __future__ import annotations

import argparse
import os
import sys

DEFAULT_AUTHOR = "github-actions[bot]"  # reconciler.github.comment.DEFAULT_AUTHOR (lazy import)


def cmd_pr_comment(args: argparse.Namespace, transport=None) -> int:
    """`transport` (a reconciler.github.comment.Transport) replaces HTTP in tests."""
    from reconciler.github.comment import GitHub, GitHubError, upsert, urllib_transport

    token = os.environ.get(args.token_env, "")
    if not token:
        print(
            f"error: ${args.token_env} is empty: give the workflow's GITHUB_TOKEN", file=sys.stderr
        )
        return 1
    author = (args.author or "").strip()
    if not author:
        print(
            "error: --author is empty: give the login the token posts as "
            f"({DEFAULT_AUTHOR} for the workflow's GITHUB_TOKEN, <app-slug>[bot] for an app's)",
            file=sys.stderr,
        )
        return 1
    try:
        with open(args.body_file, encoding="utf-8") as f:
            body = f.read()
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    gh = GitHub(token=token, api=args.api_url, transport=transport or urllib_transport)
    try:
        for line in upsert(gh, args.repo, args.pr, body, author=author):
            print(line)
    except GitHubError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pr-comment",
        help="post/update the plan as one comment on a pull request",
        description="Post the Markdown plan on a GitHub pull request, updating gpupool's earlier "
        "comment in place, splitting when too long and hiding superseded parts. A comment is "
        "gpupool's only when it carries gpupool's marker AND was written by --author; anyone "
        "else's comment is never edited nor hidden, even with the marker in it.",
    )
    p.add_argument("--repo", required=True, help="owner/name")
    p.add_argument("--pr", required=True, type=int, help="pull request number")
    p.add_argument(
        "--body-file",
        required=True,
        help="the Markdown to post (from `gpupool plan --format markdown`)",
    )
    p.add_argument(
        "--token-env", default="GITHUB_TOKEN", help="environment variable holding the token"
    )
    p.add_argument(
        "--author",
        metavar="LOGIN",
        default=DEFAULT_AUTHOR,
        help="the login the token posts as; only its comments are updated or hidden (default: "
        f"{DEFAULT_AUTHOR}, the workflow's GITHUB_TOKEN; a GitHub App token posts as "
        "<app-slug>[bot], a personal token as that person)",
    )
    p.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL", "https://api.github.com"))
    p.set_defaults(func=cmd_pr_comment)
