"""Desired-state sources for the controller: a git remote polled on a pinned branch, or a
local directory watched for changes. Each read yields the files and the revision they came
from (a commit SHA, or a content digest for a directory), which the status records.

The git cache is gpupool's own: cloned by it into `<cache>/origin.git`, checked before every
use (a bare repository, owned by this user, whose config holds only what `git clone` writes,
with `remote.origin.url` equal to the configured URL and no alternates) and otherwise removed
and cloned afresh. Git runs with no system or global config and with every setting that can
start a program during clone/fetch overridden on the command line (see `_HARDENING`), and
each git process is killed after `timeout` seconds (its whole process group)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from reconciler.policy.files import (
    DEFAULT_DIRS,
    GIT_TIMEOUT_S,
    SourceError,
    SourceFile,
    files_from_git,
    files_from_paths,
)

log = logging.getLogger(__name__)


@dataclass
class PolicyRevision:
    files: list[SourceFile]
    revision: str


class DirectorySource:
    """Policy files in a directory; `changes()` wakes the loop when a file changes (watchfiles).

    Only `dirs` (pools/ and policies/) under the root are read, never the whole root: a root
    with neither is a SourceError, so a wrong `--path` (or the working directory) cannot turn
    every YAML file lying there into desired state."""

    def __init__(self, root: str | Path, dirs: tuple[str, ...] = DEFAULT_DIRS):
        if not str(root).strip():
            raise SourceError("directory source: the path is empty")
        self.root = Path(root)
        self.dirs = dirs

    def paths(self) -> list[Path]:
        """The policy directories present (possibly none)."""
        return [self.root / d for d in self.dirs if os.path.lexists(self.root / d)]

    def read(self, *, fresh: bool = False) -> PolicyRevision:
        """The files as they are now (every read reads them: `fresh` changes nothing)."""
        paths = self.paths()
        if not paths:
            if not self.root.is_dir():
                raise SourceError(f"{self.root}: no such directory")
            wanted = " nor ".join(f"{d}/" for d in self.dirs)
            raise SourceError(f"{self.root}: neither {wanted} exists; nothing else is read")
        files = files_from_paths(paths)
        digest = hashlib.sha256()
        for f in files:
            digest.update(f.path.encode() + b"\0" + f.text.encode() + b"\0")
        return PolicyRevision(files, "dir:" + digest.hexdigest()[:12])

    def changes(self, stop: threading.Event) -> Iterator[set]:
        from watchfiles import watch

        # the root itself while no policy directory exists, so creating one wakes the loop
        paths = self.paths() or [self.root]
        yield from watch(*paths, stop_event=stop, yield_on_timeout=False, debounce=500)


# ----------------------------------------------------------------------------------- git

_SCHEMES = ("https", "http", "ssh", "git", "file")
_SCP_LIKE = re.compile(r"^(?:[A-Za-z0-9._~+-]+@)?[A-Za-z0-9._-]+:(?!//)[^\s]+$")
_BRANCH = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._/+-]*$")

# Settings that make git run a program, or look beyond the repository, during clone/fetch;
# given with `-c`, which outranks every config file (git-config(1), "FILES"/"SCOPES").
# Sources: git-config(1) and githooks(5) of git 2.39 (/usr/share/man), git docs
# https://git-scm.com/docs/git-config, config/protocol.txt (git/git Documentation).
_HARDENING = (
    # githooks(5): "reference-transaction ... invoked by any Git command that performs
    # reference updates" -- fetch included; /dev/null is no directory, so no hook is found.
    "core.hooksPath=/dev/null",
    # git-config(1) core.fsmonitor: a hook or daemon for working-tree commands (defence in
    # depth: the cache is bare).
    "core.fsmonitor=false",
    # protocol.allow: `ext::` runs an arbitrary command and other remote helpers default to
    # "user"; only the built-in transports are allowed.
    "protocol.allow=never",
    *(f"protocol.{p}.allow=always" for p in _SCHEMES),
    # gitcredentials(7): "If credential.helper is configured to the empty string, this resets
    # the helper list to empty" (a helper may be a `!shell command`).
    "credential.helper=",
    # git-config(1) core.askPass runs a program to ask for a password; prompts are off anyway.
    "core.askPass=",
    # fetch runs `git maintenance run --auto` / `gc --auto` afterwards (which can detach and
    # outlive the time bound and runs the pre-auto-gc hook); gc.auto=0 disables it.
    "gc.auto=0",
    "maintenance.auto=false",
)
# What `git clone --bare` writes into the config; anything else means it is not our cache.
_CLONE_KEYS = frozenset(
    {
        "core.repositoryformatversion",
        "core.filemode",
        "core.bare",
        "core.ignorecase",
        "core.precomposeunicode",
        "core.symlinks",
        "core.logallrefupdates",
        "remote.origin.url",
        "extensions.objectformat",
    }
)
# Environment variables that would point git at another repository, object store or config.
_ENV_DROP = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CONFIG",
    "GIT_CONFIG_SYSTEM",
    "GIT_CEILING_DIRECTORIES",
)


def check_git_url(url: object) -> str:
    """The URL if it names a git remote gpupool will fetch from, else a SourceError: an https,
    http, ssh, git or file URL, an scp-like `user@host:path`, or an absolute local path."""
    shown = _redact(url) if isinstance(url, str) else url
    if not isinstance(url, str) or not url.strip():
        raise SourceError(f"git URL {shown!r}: empty; give the policy repository's URL")
    if url != url.strip() or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        raise SourceError(f"git URL {shown!r}: contains whitespace or control characters")
    if url.startswith("-"):
        raise SourceError(f"git URL {shown!r}: starts with '-'")
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*)::", url)
    if m:
        raise SourceError(f"git URL {shown!r}: remote helper {m.group(1)}:: is not allowed")
    if "://" in url:
        scheme = url.split("://", 1)[0].lower()
        if scheme not in _SCHEMES:
            raise SourceError(
                f"git URL {shown!r}: scheme {scheme!r} is not one of {', '.join(_SCHEMES)}"
            )
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 -- validates the port
        except ValueError as exc:
            raise SourceError(f"git URL {shown!r}: {exc}") from exc
        if scheme != "file" and not parts.hostname:
            raise SourceError(f"git URL {shown!r}: no host")
        if scheme == "file" and not parts.path.startswith("/"):
            raise SourceError(f"git URL {shown!r}: a file URL needs an absolute path")
        return url
    if url.startswith("/") or _SCP_LIKE.match(url):
        return url
    raise SourceError(
        f"git URL {shown!r}: not a git URL (https://, ssh://, git@host:path or an absolute path)"
    )


def check_branch(branch: object) -> str:
    if (
        not isinstance(branch, str)
        or not _BRANCH.match(branch)
        or ".." in branch
        or "//" in branch
        or branch.endswith(("/", ".", ".lock"))
    ):
        raise SourceError(f"git branch {branch!r}: not a valid branch name")
    return branch


def _redact(url: str) -> str:
    """The URL without a password or token in it (messages end up in the status object)."""
    m = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/@]*@)(.*)$", url)
    return f"{m.group(1)}***@{m.group(3)}" if m else url


class GitSource:
    """A git remote, cloned once into `<cache>/origin.git` and fetched at most once per
    `poll_seconds`; the branch is pinned. Every git process ends within `timeout` seconds or the
    read is a SourceError.

    The controller reads its source every cycle, and events (a gated pod, a freed card, a queue
    signal) start cycles up to several times a second: a fetch per cycle would put a network
    round trip and a git process on every admission's path and ask the git server as often. So
    a read within `poll_seconds` of the last fetch gets that fetch's outcome again (its files,
    or its SourceError); `fresh` (a reconcile asked for through the trigger annotation) and
    `expire` (a push webhook) fetch at the next read. `gpupool reconcile` polls at its
    `--interval`; 0 fetches on every read."""

    def __init__(
        self,
        url: str,
        branch: str,
        cache: str | Path,
        dirs: tuple[str, ...] = DEFAULT_DIRS,
        *,
        timeout: float = GIT_TIMEOUT_S,
        poll_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url, self.branch = check_git_url(url), check_branch(branch)
        if not poll_seconds >= 0:
            raise SourceError(f"git poll interval {poll_seconds!r}: must be 0 or more")
        self.poll_seconds, self._clock = float(poll_seconds), clock
        self._last: tuple[float, PolicyRevision | SourceError] | None = None
        """When the last fetch started, and what it gave."""
        self._stale = False
        """Set by `expire` (a push webhook): the next read fetches."""
        self.fetches = 0
        if not str(cache).strip():
            raise SourceError("git cache: the path is empty")
        if not timeout > 0:
            raise SourceError(f"git timeout {timeout!r}: must be positive")
        self.cache, self.dirs, self.timeout = Path(cache), dirs, float(timeout)
        self.repo_dir = self.cache / "origin.git"

    # -- running git

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _ENV_DROP}
        env.update(
            GIT_CONFIG_NOSYSTEM="1",  # no /etc/gitconfig
            GIT_CONFIG_GLOBAL=os.devnull,  # no ~/.gitconfig (git >= 2.32)
            GIT_TERMINAL_PROMPT="0",  # never wait for a password on a terminal
            # git-config(1) http.lowSpeedLimit/Time (overridden by these variables): an HTTP
            # transfer below 1 byte/s for that long is aborted, before the wall-clock bound.
            GIT_HTTP_LOW_SPEED_LIMIT="1",
            GIT_HTTP_LOW_SPEED_TIME=str(max(1, int(min(self.timeout, 60)))),
        )
        return env

    def _git(self, *args: str, cwd: Path | None = None) -> str:
        cmd = ["git"]
        for setting in _HARDENING:
            cmd += ["-c", setting]
        cmd += args
        what = f"git {args[0]} {_redact(self.url)}"
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd or self.cache,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # its own process group: killed with its helpers
            )
        except OSError as exc:
            raise SourceError(f"{what}: cannot run git: {exc.strerror or exc}") from exc
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # git and its transport helpers
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream:
                    stream.close()
            raise SourceError(f"{what}: timed out after {self.timeout:g}s") from None
        if proc.returncode != 0:
            lines = [ln for ln in err.decode("utf-8", "replace").splitlines() if ln.strip()]
            detail = (lines[-1] if lines else f"exit status {proc.returncode}").strip()
            detail = detail.replace(self.url, _redact(self.url))[:300]
            raise SourceError(f"{what}: {detail}")
        return out.decode("utf-8", "replace")

    # -- the cache

    def _cache_problem(self) -> str | None:
        """Why `repo_dir` is not a cache this source made for this URL; None when it is."""
        d = self.repo_dir
        try:
            st = d.lstat()
        except FileNotFoundError:
            return "absent"
        if not d.is_dir() or d.is_symlink():
            return "not a directory"
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            return "owned by another user"
        for name in ("HEAD", "config", "objects", "refs"):
            p = d / name
            if not os.path.lexists(p) or p.is_symlink():
                return f"no {name}"
        for name in ("commondir", "objects/info/alternates", "objects/info/http-alternates"):
            if os.path.lexists(d / name):
                return f"has {name}"
        try:
            listing = self._git(
                "config", "--file", str(d / "config"), "--no-includes", "--null", "--list"
            )
        except SourceError as exc:
            return f"unreadable config ({exc})"
        seen: dict[str, list[str]] = {}
        for item in filter(None, listing.split("\0")):
            key, _, value = item.partition("\n")
            seen.setdefault(key.lower(), []).append(value)
        extra = sorted(set(seen) - _CLONE_KEYS)
        if extra:
            return f"config has {', '.join(extra)}"
        if any(len(v) > 1 for v in seen.values()):
            return "config repeats a setting"
        if seen.get("core.bare") != ["true"]:
            return "not a bare repository"
        if seen.get("remote.origin.url") != [self.url]:
            return "cloned from another URL"
        return None

    def _ensure_clone(self) -> Path:
        problem = self._cache_problem()
        if problem is None:
            return self.repo_dir
        try:
            self.cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise SourceError(f"git cache {self.cache}: {exc.strerror or exc}") from exc
        if problem != "absent":
            log.warning("git cache %s: %s; cloning afresh", self.repo_dir, problem)
            self._remove(self.repo_dir)
        tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=self.cache))  # 0700, ours
        try:
            self._git("clone", "--bare", "--quiet", "--", self.url, str(tmp))
            os.rename(tmp, self.repo_dir)
        except BaseException:
            self._remove(tmp)
            raise
        return self.repo_dir

    def _remove(self, path: Path) -> None:
        try:
            if path.is_symlink() or not path.is_dir():
                path.unlink(missing_ok=True)
            else:
                shutil.rmtree(path)  # does not follow links inside
        except OSError as exc:
            raise SourceError(f"git cache {path}: cannot remove it: {exc.strerror or exc}") from exc

    # -- the source

    def read(self, *, fresh: bool = False) -> PolicyRevision:
        """The branch's policy files: fetched, or the last fetch's within `poll_seconds`."""
        now, last = self._clock(), self._last
        if last is None or fresh or self._stale or now - last[0] >= self.poll_seconds:
            self._stale = False  # a push during this fetch sets it again: fetched once more
            self.fetches += 1
            try:
                got: PolicyRevision | SourceError = self._fetch()
            except SourceError as exc:
                got = exc
            self._last = last = (now, got)
        got = last[1]
        if isinstance(got, SourceError):
            raise got.with_traceback(None)
        return got

    def expire(self) -> None:
        """The branch moved (a push webhook said so): the next read fetches. Safe to call
        from another thread."""
        self._stale = True

    def _fetch(self) -> PolicyRevision:
        repo_dir = self._ensure_clone()
        # by URL, not by remote name: no remote.origin.* setting (uploadpack, vcs, proxy) is used
        self._git(
            "fetch",
            "--quiet",
            "--no-tags",
            "--",
            self.url,
            f"+refs/heads/{self.branch}:refs/remotes/origin/{self.branch}",
            cwd=repo_dir,
        )
        files, sha = files_from_git(
            repo_dir, f"refs/remotes/origin/{self.branch}", self.dirs, timeout=self.timeout
        )
        return PolicyRevision(files, sha)

    def changes(self, stop: threading.Event) -> Iterator[set]:
        return iter(())  # polled: the loop's interval is the trigger
