"""Post or update gpupool's plan comment on a pull request (GitHub REST + GraphQL).

One logical comment per PR, found by a hidden marker. A new plan updates it in place; when a
plan no longer fits in one comment (65,536 characters) it is split into numbered parts;
comments from earlier runs that are no longer needed are hidden as outdated (minimizeComment),
not deleted, so the review history stays readable.

The HTTP transport is injected (`Transport`), like httpx's MockTransport, so tests replay
recorded GitHub responses without a network.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

MARKER = "<!-- gpupool-plan -->"
LIMIT = 65536
PART_BUDGET = LIMIT - 1000

Transport = Callable[[str, str, dict[str, str], bytes | None], tuple[int, dict[str, str], bytes]]


def urllib_transport(
    method: str, url: str, headers: dict[str, str], body: bytes | None
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - the GitHub API URL
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

    def call(
        self, method: str, path: str, payload: dict | None = None
    ) -> tuple[int, dict[str, str], object]:
        url = path if path.startswith("http") else self.api + path
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
        parsed = json.loads(data) if data else None
        if status >= 400:
            msg = parsed.get("message") if isinstance(parsed, dict) else data[:200]
            raise GitHubError(f"{method} {path}: HTTP {status}: {msg}")
        return status, resp_headers, parsed

    def comments(self, repo: str, pr: int) -> list[dict]:
        out, url = [], f"/repos/{repo}/issues/{pr}/comments?per_page=100"
        while url:
            _, headers, page = self.call("GET", url)
            out.extend(page)
            url = _next_link(headers.get("Link") or headers.get("link") or "")
        return out


def _next_link(link: str) -> str | None:
    for part in link.split(","):
        if 'rel="next"' in part:
            return part[part.index("<") + 1 : part.index(">")]
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


def upsert(gh: GitHub, repo: str, pr: int, markdown: str) -> list[str]:
    """Update our comment(s) in place; create what is missing; hide what is left over."""
    parts = split_body(markdown)
    ours = [c for c in gh.comments(repo, pr) if MARKER in (c.get("body") or "")]
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
    return done
