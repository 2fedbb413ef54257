"""`gpupool pr-comment`: post or update the plan comment on a pull request (used by CI)."""

from __future__ import annotations

import argparse
import os
import re
import sys

from reconciler.commands.errors import CommandError, file_message

DEFAULT_AUTHOR = "github-actions[bot]"  # reconciler.github.comment.DEFAULT_AUTHOR (lazy import)
DEFAULT_API = "https://api.github.com"
API_URL_ENV = "GITHUB_API_URL"  # set by GitHub Actions (GitHub Enterprise Server: its own API)


def cmd_pr_comment(args: argparse.Namespace, transport=None) -> int:
    """`transport` (a reconciler.github.comment.Transport) replaces HTTP in tests."""
    import http.client

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
        raise CommandError(file_message(exc, "--body-file", args.body_file)) from exc
    except UnicodeDecodeError as exc:
        raise CommandError(
            f"--body-file {args.body_file}: not UTF-8 text (byte {exc.start}); give the "
            "Markdown `gpupool plan --format markdown` wrote"
        ) from exc
    gh = GitHub(token=token, api=args.api_url, transport=transport or urllib_transport)
    try:
        for line in upsert(gh, args.repo, args.pr, body, author=author):
            print(line)
    except GitHubError as exc:  # GitHub's own answer: an error status, not JSON, ...
        raise CommandError(f"GitHub at {args.api_url} (--api-url): {exc}") from exc
    except (OSError, http.client.HTTPException) as exc:  # URLError, timeouts, resets, ...
        reason = getattr(exc, "reason", None) or exc
        why = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        raise CommandError(
            f"cannot reach GitHub at {args.api_url} (--api-url): {why.lower()}"
        ) from exc
    return 0


def repo_arg(text: str) -> str:
    """argparse type of `--repo`: owner/name, as GitHub spells it."""
    owner, _, name = text.partition("/")
    if not all(re.fullmatch(r"[A-Za-z0-9_.-]+", x) and x not in (".", "..") for x in (owner, name)):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not owner/name (e.g. the workflow's ${{{{ github.repository }}}})"
        )
    return text


def pr_arg(text: str) -> int:
    """argparse type of `--pr`: a pull request number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not a pull request number (1 or more; in a workflow "
            "${{ github.event.pull_request.number }})"
        )
    return value


def api_url_arg(text: str) -> str:
    """argparse type of `--api-url`: an http(s) URL with a host; no trailing slash."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a port out of range
    except ValueError:
        ok = False
    if not ok:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not an http:// or https:// URL (e.g. {DEFAULT_API})"
        )
    return text.rstrip("/")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pr-comment",
        help="post/update the plan as one comment on a pull request",
        description="Post the Markdown plan on a GitHub pull request, updating gpupool's earlier "
        "comment in place, splitting when too long and hiding superseded parts. A comment is "
        "gpupool's only when it carries gpupool's marker AND was written by --author; anyone "
        "else's comment is never edited nor hidden, even with the marker in it.",
    )
    p.add_argument("--repo", required=True, type=repo_arg, help="owner/name")
    p.add_argument("--pr", required=True, type=pr_arg, help="pull request number")
    p.add_argument(
        "--body-file",
        required=True,
        help="the Markdown to post (from `gpupool plan --format markdown`)",
    )
    p.add_argument(
        "--token-env",
        default="GITHUB_TOKEN",
        help="environment variable holding the token (default: GITHUB_TOKEN)",
    )
    p.add_argument(
        "--author",
        metavar="LOGIN",
        default=DEFAULT_AUTHOR,
        help="the login the token posts as; only its comments are updated or hidden (default: "
        f"{DEFAULT_AUTHOR}, the workflow's GITHUB_TOKEN; a GitHub App token posts as "
        "<app-slug>[bot], a personal token as that person)",
    )
    p.add_argument(
        "--api-url",
        metavar="URL",
        type=api_url_arg,
        default=os.environ.get(API_URL_ENV, DEFAULT_API),
        help=f"GitHub's REST API, for GitHub Enterprise Server (default: ${API_URL_ENV}, else "
        f"{DEFAULT_API})",
    )
    p.set_defaults(func=cmd_pr_comment)
