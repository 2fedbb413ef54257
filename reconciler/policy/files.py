"""Where desired-state YAML comes from: a directory tree, or a git revision (never checked out).

Both readers stay inside the tree they are given. Symbolic links are never followed: a policy
tree holds regular files and directories only, so a pull request cannot make CI (or the
controller) read a file outside it, such as /etc/passwd or a token, and echo it in a message.
In-tree links are refused too: the rule is the same for the directory and git readers, needs
no resolution (so link loops cannot hang it) and a link cannot change meaning between the CI
checkout and the controller's clone. Git submodules are refused for the same reason.

Both readers bound what they read, in bytes, before reading it (`MAX_FILE_BYTES`,
`MAX_TOTAL_BYTES`): a file past either bound is a SourceError naming it, and is never read.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from reconciler.policy.limits import locate_bad_utf8

YAML_SUFFIXES = (".yaml", ".yml")
DEFAULT_DIRS = ("pools", "policies")
GIT_TIMEOUT_S = 120.0  # wall-clock bound on reading one revision (git cat-file)
NOT_FOLLOWED = "symbolic links are not followed (a policy tree holds regular files only)"
_SYMLINK_MODE, _GITLINK_MODE, _TYPE_MASK = 0o120000, 0o160000, 0o170000

# Sizes. limits.py bounds what a text may make the loader build (aliases, nesting, one value);
# these bound the text itself, which limits.py cannot: loading is linear in the bytes, but the
# round-trip parser that keeps every position is pure Python, at about 7 s of CPU and 85 MB
# per MiB (a 4.4 MB pools file took 88 s and 460 MB), and the controller loads the policy
# every cycle (30 s by default) as CI does on every pull request. A real policy file is a few
# KB (this repository's largest is 1.3 KB; a Quota file for 1,000 teams is about 300 KB).
MAX_FILE_BYTES = 1 << 20
"""One policy file: 1 MiB, three times a 1,000-team Quota file, about 7 s to load."""
MAX_TOTAL_BYTES = 2 << 20
"""All policy files of one read together: 2 MiB, so that loading stays well inside a cycle."""


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str  # as shown in messages: relative to the repo or as given
    text: str


class SourceError(Exception):
    """The source itself cannot be read (missing path, unknown revision, a symlink, a timeout,
    a file too large)."""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):g} MiB"


def size_refusal(size: int, total: int = 0) -> str | None:
    """Why a file of `size` bytes, read after `total` bytes of others, is refused; None when it
    is within both bounds. The message follows the file's name (`pools/a.yaml: ...`)."""
    if size > MAX_FILE_BYTES:
        return (
            f"the file is {size:,} bytes, over the limit of {MAX_FILE_BYTES:,} "
            f"({_mib(MAX_FILE_BYTES)}) for one policy file; policy files are a few KB: "
            "split it, or remove what does not belong in it"
        )
    if total + size > MAX_TOTAL_BYTES:
        return (
            f"the policy files come to {total + size:,} bytes with this one, over the limit of "
            f"{MAX_TOTAL_BYTES:,} ({_mib(MAX_TOTAL_BYTES)}) for all of them together; "
            "remove what does not belong in pools/ and policies/"
        )
    return None


def files_from_paths(paths: list[str | Path]) -> list[SourceFile]:
    """Every YAML file under the given files/directories, in a stable order.

    A given path that is itself a symbolic link, and any symbolic link below a given directory
    (whatever its name or target, dangling or looping), is a SourceError naming the link; its
    target is never read. Directories above a given path are the caller's and may be links.
    A file over `MAX_FILE_BYTES`, or one that takes the files over `MAX_TOTAL_BYTES`, is a
    SourceError naming it; it is not read."""
    out: list[SourceFile] = []
    total = 0
    for raw in paths:
        p = Path(raw)
        if p.is_symlink():
            raise SourceError(f"{raw}: {NOT_FOLLOWED}")
        if p.is_file():
            candidates = [p]
        elif p.is_dir():
            candidates = _yaml_under(p)
        elif p.exists():
            raise SourceError(f"{raw}: not a regular file or directory")
        else:
            raise SourceError(f"{raw}: no such file or directory")
        for f in candidates:
            text, size = _read_regular(f, total)
            total += size
            out.append(SourceFile(str(f), text))
    return out


def _yaml_under(root: Path) -> list[Path]:
    found: list[Path] = []
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = sorted(it, key=lambda e: e.name)  # the same link reported each time
        except OSError as exc:
            raise SourceError(f"{d}: cannot read: {exc.strerror or exc}") from exc
        subdirs = []
        for e in entries:
            path = Path(e.path)
            if e.is_symlink():
                raise SourceError(f"{path}: {NOT_FOLLOWED}")
            if e.is_dir(follow_symlinks=False):
                subdirs.append(path)
            elif e.is_file(follow_symlinks=False) and path.suffix in YAML_SUFFIXES:
                found.append(path)
        stack.extend(reversed(subdirs))
    return sorted(found)


def _read_regular(f: Path, total: int = 0) -> tuple[str, int]:
    """The text of regular file `f` and its size in bytes; refused over the size bounds
    (`total`: the bytes already read) before it is read."""
    # O_NOFOLLOW: a file swapped for a link after the walk is refused, not followed;
    # O_NONBLOCK: one swapped for a FIFO cannot block the open (fstat then refuses it).
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(f, flags | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SourceError(f"{f}: {NOT_FOLLOWED}") from exc
        raise SourceError(f"{f}: cannot read: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{f}: not a regular file")
        _check_size(str(f), st.st_size, total)
        data = fh.read(MAX_FILE_BYTES + 1)  # a file that grew since fstat is still bounded
        _check_size(str(f), len(data), total)
    text = _text(data, str(f)).replace("\r\n", "\n").replace("\r", "\n")  # as text mode did
    return text, len(data)


def _check_size(name: str, size: int, total: int, at: str = "") -> None:
    why = size_refusal(size, total)
    if why is not None:
        raise SourceError(f"{name}{at}: {why}")


def _text(data: bytes, name: str, at: str = "") -> str:
    """UTF-8 text, or a SourceError at the line and column of the first invalid byte."""
    bad = locate_bad_utf8(data)
    if bad is not None:
        raise SourceError(f"{name}:{bad.line}:{bad.column}{at}: {bad.message}")
    return data.decode("utf-8")


def files_from_git(
    repo_path: str | Path,
    rev: str,
    dirs: tuple[str, ...] = DEFAULT_DIRS,
    *,
    timeout: float | None = GIT_TIMEOUT_S,
) -> tuple[list[SourceFile], str]:
    """YAML files under `dirs` at revision `rev`, read from git objects; and the commit SHA.

    Only objects are read (GitPython's persistent `git cat-file --batch`, which runs no hook,
    filter, textconv or fsmonitor: nothing a repository's config can name). A symbolic link
    (mode 120000), a submodule, or a `dirs` entry that is not a directory is a SourceError
    naming the path and revision; a link's blob is never read. So is a blob over the size
    bounds (its size is read from the object's header first). Reading takes at most `timeout`
    seconds: then the cat-file processes are killed and it is a SourceError."""
    import git  # GitPython; imported here so directory use needs no git binary

    try:
        repo = git.Repo(repo_path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise SourceError(f"{repo_path}: not a git repository") from exc
    watchdog = _CatFileWatchdog(repo, timeout)
    try:
        with watchdog:
            return _read_revision(repo, repo_path, rev, dirs)
    except Exception as exc:
        if watchdog.fired:
            raise SourceError(f"{repo_path}: reading {rev!r} timed out after {timeout:g}s") from exc
        raise
    finally:
        repo.close()  # ends the cat-file processes now, not at garbage collection


def _read_revision(repo, repo_path, rev: str, dirs: tuple[str, ...]):
    import git

    try:
        commit = repo.commit(rev)
    except (git.BadName, ValueError, git.GitCommandError) as exc:
        raise SourceError(f"{repo_path}: unknown revision {rev!r}") from exc
    at = f"@{commit.hexsha[:12]}"
    out: list[SourceFile] = []
    total = 0
    for d in dirs:
        try:
            top = commit.tree / d
        except KeyError:
            continue
        _check_entry(top, at)
        if top.type != "tree":
            raise SourceError(f"{top.path}{at}: not a directory")
        entries = list(top.traverse())
        for e in entries:
            _check_entry(e, at)
        blobs = [e for e in entries if e.type == "blob" and e.path.endswith(YAML_SUFFIXES)]
        for b in sorted(blobs, key=lambda b: b.path):
            _check_size(b.path, b.size, total, at)  # the header (cat-file --batch-check) only
            data = b.data_stream.read()
            _check_size(b.path, len(data), total, at)
            total += len(data)
            out.append(SourceFile(b.path, _text(data, b.path, at)))
    return out, commit.hexsha


def _check_entry(entry, at: str) -> None:
    """Refuse what git stores but a checkout would turn into something outside the tree."""
    kind = entry.mode & _TYPE_MASK
    if kind == _SYMLINK_MODE:
        raise SourceError(f"{entry.path}{at}: {NOT_FOLLOWED}")
    if kind == _GITLINK_MODE or entry.type == "submodule":
        raise SourceError(f"{entry.path}{at}: a git submodule; submodules are not followed")


class _CatFileWatchdog:
    """Kills the repository's persistent `git cat-file` processes once `timeout` has passed, so
    a read blocked on the object store (a hung file system, a FIFO) ends with an error. Reads
    outside cat-file (GitPython parses refs and objects in Python) cannot block on git."""

    def __init__(self, repo, timeout: float | None):
        self.repo, self.timeout = repo, timeout
        self.fired = False
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self):
        if self.timeout is not None:
            self._thread = threading.Thread(target=self._watch, daemon=True, name="git-watchdog")
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self) -> None:
        if self._done.wait(self.timeout):
            return
        self.fired = True
        while not self._done.is_set():  # a process started after the first kill dies too
            for name in ("cat_file_all", "cat_file_header"):
                proc = getattr(getattr(self.repo.git, name, None), "proc", None)
                if proc is not None and proc.poll() is None:
                    proc.kill()
            self._done.wait(0.05)
