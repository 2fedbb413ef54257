"""Post or update gpupool's plan comment on a pull request (GitHub REST + GraphQL).

One logical comment per PR, found by a hidden marker **and its author**. A new plan updates it
in place; when a plan no longer fits in one comment (65,536 characters) it is split into
numbered parts; comments from earlier runs that are no longer needed are hidden as outdated
(minimizeComment), not deleted, so the review history stays readable.

The marker alone proves nothing: anyone can type it (a reviewer quoting the plan, another bot
echoing it). A comment is ours only when it carries the marker and was written by the identity
the workflow posts as (`author`, compared with the comment's `user.login`). Anyone else's
comment is never edited nor hidden, marker or not; `upsert` says which it left alone.

How that identity is known:
- An issue comment's author is its `user` object (`login`; `type` "User", "Bot", ...) in GitHub's
  "List issue comments" response (https://docs.github.com/rest/issues/comments).
- The workflow's GITHUB_TOKEN "is a GitHub App installation access token" of the app that
  GitHub Actions installs on the repository
  (https://docs.github.com/actions/concepts/security/github_token); what it writes is attributed
  to that app's bot account, `github-actions[bot]` (type "Bot"), the default `author`.
- An installation token cannot ask who it is: "Get the authenticated user" (`GET /user`) answers
  403 "Resource not accessible by integration" to it, so the login is configured, not
  discovered. A token of one's own GitHub App posts as `<app-slug>[bot]` (the
  actions/create-github-app-token README builds it as `${{ steps.app-token.outputs.app-slug
  }}[bot]`); a personal token posts as that person (type "User").
- A person's login holds only letters, digits, hyphens (and `_` for managed users), never
  `[bot]`; a `[bot]` author must still have type "Bot" to count.

The token goes only to the API host: the scheme, host and port of `api` (`--api-url`). A URL
off it (a `Link: rel="next"` naming another host, scheme or port; a redirect there) is a
`GitHubError` naming it, and nothing is sent to it.

The HTTP transport is injected (`Transport`), like httpx's MockTransport, so tests replay
recorded GitHub responses without a network.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

MARKER = "<!-- gpupool-plan -->"
DEFAULT_AUTHOR = "github-actions[bot]"  # whom the workflow's GITHUB_TOKEN posts as
LIMIT = 65536
TIMEOUT_S = 30.0
"""Seconds allowed for connecting to GitHub and for each read."""
PART_BUDGET = LIMIT - 1000

Transport = Callable[[str, str, dict[str, str], bytes | None], tuple[int, dict[str, str], bytes]]


DEFAULT_PORTS = {"http": 80, "https": 443}
ONLY_THERE = "the token is sent only to the API's scheme, host and port"


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of `url`, lower-cased, the scheme's default port filled in; a port
    that is not a number is None (no origin matches it)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port


def _shown(o: tuple[str, str, int | None]) -> str:
    scheme, host, port = o
    return f"{scheme}://{host}" + ("" if port == DEFAULT_PORTS.get(scheme) else f":{port}")


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects followed only on the host the request went to: urllib's own handler follows
    one to any host and takes every header along, the token's Authorization included."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if origin(newurl) != origin(req.full_url):
            fp.close()
            raise GitHubError(
                f"{req.get_method()} {req.full_url}: HTTP {code} redirects to {newurl}, off the "
                f"API host {_shown(origin(req.full_url))}: not followed ({ONLY_THERE})"
            )
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def urllib_transport(
    method: str, url: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with _OPENER.open(req, timeout=TIMEOUT_S) as r:  # noqa: S310 - the API URL
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers or {}), e.read()


class GitHubError(Exception):
    pass


@dataclass
class GitHub:
    token: str
    api: str = "https://api.github.com"
    transport: Transport = urllib_transport

    def url(self, path: str) -> str:
        """The URL of `path`: an absolute URL as it is, else `api` followed by it."""
        return path if urlsplit(path).scheme else self.api + path

    def on_api_host(self, url: str) -> bool:
        """`url` has the scheme, host and port of `api`: the only place the token goes."""
        return origin(url) == origin(self.api)

    def call(
        self, method: str, path: str, payload: dict | None = None
    ) -> tuple[int, dict[str, str], object]:
        url = self.url(path)
        if not self.on_api_host(url):
            raise GitHubError(
                f"{method} {url}: not on the API host {_shown(origin(self.api))}: not sent "
                f"({ONLY_THERE})"
            )
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "gpupool",
        }
        body = None
        if payload is not None:
            body = json.dumps(payload).encode()
            headers["Content-Type"] = "application/json"
        status, resp_headers, data = self.transport(method, url, headers, body)
        try:
            parsed = json.loads(data) if data else None
        except ValueError:  # a proxy's HTML page, a truncated answer: not GitHub's JSON
            raise GitHubError(
                f"{method} {path}: HTTP {status}: the answer is not JSON ({bytes(data[:80])!r})"
            ) from None
        if status >= 400:
            msg = parsed.get("message") if isinstance(parsed, dict) else data[:200]
            raise GitHubError(f"{method} {path}: HTTP {status}: {msg}")
        return status, resp_headers, parsed

    def comments(self, repo: str, pr: int) -> list[dict]:
        """Every comment of the PR, page after page (`Link: rel="next"`, on the API host
        only: a next page elsewhere is an error, and nothing is sent there)."""
        out, seen = [], set()
        url: str | None = self.url(f"/repos/{repo}/issues/{pr}/comments?per_page=100")
        while url is not None:
            seen.add(url)
            _, headers, page = self.call("GET", url)
            if not isinstance(page, list):
                raise GitHubError(f"GET {url}: the answer is not a list of comments")
            out.extend(page)
            nxt = _next_link(headers.get("Link") or headers.get("link") or "")
            if nxt is None:
                break
            url = urljoin(url, nxt)  # a relative link is relative to the page that gave it
            if not self.on_api_host(url):
                raise GitHubError(
                    f'the comment list\'s next page {url} (Link: rel="next") is not on the API '
                    f"host {_shown(origin(self.api))}: not followed ({ONLY_THERE})"
                )
            if url in seen:
                raise GitHubError(
                    f'the comment list\'s next page {url} (Link: rel="next") '
                    "was read already: the pages go round in a loop"
                )
        return out


_LINK = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,]*)*)")


def _next_link(link: str) -> str | None:
    """The target of the `rel="next"` link in a Link header (RFC 8288), None without one."""
    for target, params in _LINK.findall(link):
        for param in params.split(";"):
            name, _, value = param.partition("=")
            if name.strip().lower() == "rel" and "next" in value.strip().strip('"').split():
                return target.strip()
    return None


def split_body(markdown: str, budget: int = PART_BUDGET) -> list[str]:
    """Parts that each fit a comment, cut at line boundaries, numbered when more than one."""
    if len(markdown) + len(MARKER) + 1 <= budget:
        return [f"{MARKER}\n{markdown}"]
    parts, cur = [], []
    size = 0
    for line in markdown.splitlines(keepends=True):
        if size + len(line) > budget - 200 and cur:
            parts.append("".join(cur))
            cur, size = [], 0
        cur.append(line[: budget - 200])
        size += len(line)
    if cur:
        parts.append("".join(cur))
    n = len(parts)
    return [f"{MARKER}\n_gpupool plan, part {i}/{n}_\n\n{p}" for i, p in enumerate(parts, 1)]


def _author(comment: dict) -> tuple[str, str]:
    user = comment.get("user") or {}  # null for a deleted account ("ghost")
    return str(user.get("login") or ""), str(user.get("type") or "")


def is_ours(comment: dict, author: str = DEFAULT_AUTHOR) -> bool:
    """Ours: carries the marker AND was written by `author` (a bot login must also be a Bot)."""
    if MARKER not in (comment.get("body") or ""):
        return False
    login, kind = _author(comment)
    if not author or login.casefold() != author.casefold():  # logins are case-insensitive
        return False
    return kind == "Bot" if author.endswith("[bot]") else True


def upsert(
    gh: GitHub, repo: str, pr: int, markdown: str, author: str = DEFAULT_AUTHOR
) -> list[str]:
    """Update our comment(s) in place; create what is missing; hide what is left over.

    Only comments that `is_ours` are updated or hidden; a comment by anyone else that carries
    the marker is left alone, and the result says so ("left ... alone")."""
    if not author:
        raise ValueError("the comment author must be named (e.g. github-actions[bot])")
    parts = split_body(markdown)
    ours, foreign = [], []
    for c in gh.comments(repo, pr):
        if is_ours(c, author):
            ours.append(c)
        elif MARKER in (c.get("body") or ""):
            foreign.append(c)
    ours.sort(key=lambda c: c["id"])
    done = []
    for i, body in enumerate(parts):
        if i < len(ours):
            c = ours[i]
            if c.get("body") != body:
                gh.call("PATCH", f"/repos/{repo}/issues/comments/{c['id']}", {"body": body})
                done.append(f"updated {c['id']}")
            else:
                done.append(f"unchanged {c['id']}")
        else:
            _, _, c = gh.call("POST", f"/repos/{repo}/issues/{pr}/comments", {"body": body})
            done.append(f"created {c['id']}")
    for c in ours[len(parts) :]:
        if c.get("node_id"):
            query = (
                "mutation($id: ID!) { minimizeComment(input: "
                "{subjectId: $id, classifier: OUTDATED}) { minimizedComment { isMinimized } } }"
            )
            gh.call("POST", "/graphql", {"query": query, "variables": {"id": c["node_id"]}})
            done.append(f"hid {c['id']}")
    for c in foreign:
        login, kind = _author(c)
        who = f"{login} ({kind})" if login else "a deleted account"
        done.append(
            f"left {c.get('id')} alone: it carries the gpupool marker but was written by {who}, "
            f"not {author}"
        )
    return done
