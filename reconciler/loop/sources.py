"""Desired-state sources for the controller: a git remote polled on a pinned branch, or a
local directory watched for changes. Each read yields the files and the revision they came
from (a commit SHA, or a content digest for a directory), which the status records."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from reconciler.policy.files import DEFAULT_DIRS, SourceFile, files_from_git, files_from_paths


@dataclass
class PolicyRevision:
    files: list[SourceFile]
    revision: str


class DirectorySource:
    """Policy files in a directory; `changes()` wakes the loop when a file changes (watchfiles)."""

    def __init__(self, root: str | Path, dirs: tuple[str, ...] = DEFAULT_DIRS):
        self.root = Path(root)
        self.dirs = dirs

    def paths(self) -> list[Path]:
        present = [self.root / d for d in self.dirs if (self.root / d).exists()]
        return present or [self.root]

    def read(self) -> PolicyRevision:
        files = files_from_paths(self.paths())
        digest = hashlib.sha256()
        for f in files:
            digest.update(f.path.encode() + b"\0" + f.text.encode() + b"\0")
        return PolicyRevision(files, "dir:" + digest.hexdigest()[:12])

    def changes(self, stop: threading.Event) -> Iterator[set]:
        from watchfiles import watch

        yield from watch(*self.paths(), stop_event=stop, yield_on_timeout=False, debounce=500)


class GitSource:
    """A git remote, cloned once into `cache` and fetched on every read; the branch is pinned."""

    def __init__(
        self, url: str, branch: str, cache: str | Path, dirs: tuple[str, ...] = DEFAULT_DIRS
    ):
        self.url, self.branch, self.cache, self.dirs = url, branch, Path(cache), dirs

    def _repo(self):
        import git

        if (self.cache / ".git").exists() or (self.cache / "HEAD").exists():
            return git.Repo(self.cache)
        self.cache.mkdir(parents=True, exist_ok=True)
        return git.Repo.clone_from(self.url, self.cache, bare=True)

    def read(self) -> PolicyRevision:
        repo = self._repo()
        repo.git.fetch(
            "origin", f"+refs/heads/{self.branch}:refs/remotes/origin/{self.branch}", "--prune"
        )
        files, sha = files_from_git(self.cache, f"origin/{self.branch}", self.dirs)
        return PolicyRevision(files, sha)

    def changes(self, stop: threading.Event) -> Iterator[set]:
        return iter(())  # polled: the loop's interval is the trigger
