"""Where desired-state YAML comes from: a directory tree, or a git revision (never checked out)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

YAML_SUFFIXES = (".yaml", ".yml")
DEFAULT_DIRS = ("pools", "policies")


@dataclass(frozen=True, slots=True)
class SourceFile:
    path: str  # as shown in messages: relative to the repo or as given
    text: str


class SourceError(Exception):
    """The source itself cannot be read (missing path, unknown revision)."""


def files_from_paths(paths: list[str | Path]) -> list[SourceFile]:
    """Every YAML file under the given files/directories, in a stable order."""
    out: list[SourceFile] = []
    for raw in paths:
        p = Path(raw)
        if p.is_file():
            candidates = [p]
        elif p.is_dir():
            candidates = sorted(
                f for f in p.rglob("*") if f.is_file() and f.suffix in YAML_SUFFIXES
            )
        else:
            raise SourceError(f"{raw}: no such file or directory")
        for f in candidates:
            try:
                out.append(SourceFile(str(f), f.read_text(encoding="utf-8")))
            except (OSError, UnicodeDecodeError) as exc:
                raise SourceError(f"{f}: cannot read: {exc}") from exc
    return out


def files_from_git(
    repo_path: str | Path, rev: str, dirs: tuple[str, ...] = DEFAULT_DIRS
) -> tuple[list[SourceFile], str]:
    """YAML files under `dirs` at revision `rev`, read from git objects; and the commit SHA."""
    import git  # GitPython; imported here so directory use needs no git binary

    try:
        repo = git.Repo(repo_path, search_parent_directories=False)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
        raise SourceError(f"{repo_path}: not a git repository") from exc
    try:
        commit = repo.commit(rev)
    except (git.BadName, ValueError, git.GitCommandError) as exc:
        raise SourceError(f"{repo_path}: unknown revision {rev!r}") from exc
    out: list[SourceFile] = []
    for d in dirs:
        try:
            tree = commit.tree / d
        except KeyError:
            continue
        blobs = [b for b in tree.traverse() if b.type == "blob" and b.path.endswith(YAML_SUFFIXES)]
        for b in sorted(blobs, key=lambda b: b.path):
            try:
                text = b.data_stream.read().decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SourceError(f"{b.path}@{commit.hexsha[:12]}: not UTF-8 text") from exc
            out.append(SourceFile(b.path, text))
    return out, commit.hexsha
