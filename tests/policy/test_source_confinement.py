"""The directory and git readers stay inside the policy tree: no symbolic link is followed (in
the tree or out of it), git symlink blobs and submodules are refused without being read, and
reading a revision is bounded in time. Each case names the path in a one-line SourceError."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import git
import pytest

from reconciler.cli import main
from reconciler.policy.files import SourceError, files_from_git, files_from_paths

POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: a100
spec:
  gpuModel: A100-SXM4-80GB
  capacity: {nodes: 1, gpusPerNode: 8}
"""
SECRET = "token: s3cr3t-do-not-echo\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file and a directory outside the policy tree, holding something secret."""
    d = tmp_path / "outside"
    d.mkdir()
    (d / "token.yaml").write_text(SECRET)
    return d


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "pools").mkdir(parents=True)
    (root / "pools" / "a100.yaml").write_text(POOL)
    (root / "policies").mkdir()
    return root


def _link(tree: Path, outside: Path, case: str) -> Path:
    """Make the case's symbolic link; return the link's path."""
    pools = tree / "pools"
    if case == "file out of the tree":
        (pools / "evil.yaml").symlink_to(outside / "token.yaml")
        return pools / "evil.yaml"
    if case == "absolute system file":
        (pools / "passwd.yaml").symlink_to("/etc/passwd")
        return pools / "passwd.yaml"
    if case == "directory out of the tree":
        (pools / "team").symlink_to(outside, target_is_directory=True)
        return pools / "team"
    if case == "pools itself":
        (tree / "policies" / "x").mkdir()
        os.rename(pools, tree / "real-pools")
        pools.symlink_to(outside, target_is_directory=True)
        return pools
    if case == "in-tree file":
        (tree / "policies" / "same.yaml").symlink_to(pools / "a100.yaml")
        return tree / "policies" / "same.yaml"
    if case == "in-tree directory":
        (tree / "policies" / "pools-again").symlink_to(pools, target_is_directory=True)
        return tree / "policies" / "pools-again"
    if case == "non-YAML name to a YAML file":
        (pools / "README").symlink_to(outside / "token.yaml")
        return pools / "README"
    if case == "dangling":
        (pools / "gone.yaml").symlink_to(tree / "nowhere.yaml")
        return pools / "gone.yaml"
    if case == "loop of two":
        (pools / "a.yaml").symlink_to(pools / "b.yaml")
        (pools / "b.yaml").symlink_to(pools / "a.yaml")
        return pools / "a.yaml"
    if case == "loop to an ancestor":
        (pools / "sub").mkdir()
        (pools / "sub" / "up").symlink_to(pools, target_is_directory=True)
        return pools / "sub" / "up"
    raise AssertionError(case)


CASES = [
    "file out of the tree",
    "absolute system file",
    "directory out of the tree",
    "pools itself",
    "in-tree file",
    "in-tree directory",
    "non-YAML name to a YAML file",
    "dangling",
    "loop of two",
    "loop to an ancestor",
]


@pytest.mark.parametrize("case", CASES)
def test_directory_reader_follows_no_symlink(tree: Path, outside: Path, case: str):
    link = _link(tree, outside, case)
    t0 = time.monotonic()
    with pytest.raises(SourceError) as info:
        files_from_paths([tree / "pools", tree / "policies"])
    assert time.monotonic() - t0 < 5, "a link loop must not hang the reader"
    msg = str(info.value)
    assert "symbolic links are not followed" in msg
    assert msg.startswith(f"{link}: ")
    assert "s3cr3t" not in msg and "root:" not in msg and "\n" not in msg


@pytest.mark.parametrize("case", ["file out of the tree", "absolute system file", "pools itself"])
def test_validate_in_ci_never_echoes_a_linked_file(
    tree: Path, outside: Path, case: str, monkeypatch, capsys
):
    """`gpupool validate` as the pull-request workflow runs it: defaults, in the checkout."""
    _link(tree, outside, case)
    monkeypatch.chdir(tree)
    assert main(["validate"]) == 1
    out, err = capsys.readouterr()
    assert "symbolic links are not followed" in err
    assert "Traceback" not in err
    assert "s3cr3t" not in out + err and "root:x:" not in out + err


def test_regular_trees_still_read(tree: Path):
    (tree / "policies" / "nested").mkdir()
    (tree / "policies" / "nested" / "crlf.yml").write_bytes(b"a: 1\r\nb: 2\r\n")
    (tree / "policies" / "notes.txt").write_text("ignored")
    files = files_from_paths([tree / "pools", tree / "policies"])
    assert [Path(f.path).name for f in files] == ["a100.yaml", "crlf.yml"]
    assert files[1].text == "a: 1\nb: 2\n"  # newlines as text-mode reading gave them


def test_a_fifo_is_not_read(tree: Path):
    os.mkfifo(tree / "pools" / "pipe.yaml")
    files = files_from_paths([tree / "pools"])  # skipped like any non-regular file: no hang
    assert [Path(f.path).name for f in files] == ["a100.yaml"]
    with pytest.raises(SourceError, match="not a regular file or directory"):
        files_from_paths([tree / "pools" / "pipe.yaml"])


# ------------------------------------------------------------------------------ git reader


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    git.Repo.init(root, initial_branch="main")
    _git(root, "config", "user.name", "t")
    _git(root, "config", "user.email", "t@example.com")
    (root / "pools").mkdir()
    (root / "pools" / "a100.yaml").write_text(POOL)
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "initial")
    return root


def _commit_all(root: Path) -> str:
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "change")
    return _git(root, "rev-parse", "HEAD").strip()


@pytest.mark.parametrize(
    "make, path",
    [
        (lambda r: (r / "pools" / "p.yaml").symlink_to("/etc/passwd"), "pools/p.yaml"),
        (lambda r: (r / "pools" / "up.yaml").symlink_to("../../outside.yaml"), "pools/up.yaml"),
        (lambda r: (r / "pools" / "docs").symlink_to("../docs"), "pools/docs"),
        (lambda r: (r / "pools" / "same.yaml").symlink_to("a100.yaml"), "pools/same.yaml"),
    ],
    ids=["absolute", "out of the tree", "directory", "in-tree"],
)
def test_git_reader_refuses_symlink_blobs(tmp_path: Path, make, path: str):
    root = _repo(tmp_path)
    make(root)
    sha = _commit_all(root)
    with pytest.raises(SourceError) as info:
        files_from_git(root, "main")
    msg = str(info.value)
    assert msg == f"{path}@{sha[:12]}: symbolic links are not followed " + (
        "(a policy tree holds regular files only)"
    )


def test_git_pools_that_is_a_symlink(tmp_path: Path, capsys):
    """The traceback of the issue: `pools` itself a symlink (to a file, or to a directory)."""
    root = _repo(tmp_path)
    _git(root, "rm", "-rq", "pools")
    (root / "pools").symlink_to("/etc/passwd")
    sha = _commit_all(root)
    with pytest.raises(SourceError, match=rf"^pools@{sha[:12]}: symbolic links are not followed"):
        files_from_git(root, "main")
    assert main(["validate", "--repo", str(root), "--rev", "main"]) == 1
    err = capsys.readouterr().err
    assert "pools@" in err and "Traceback" not in err and "root:x:" not in err


def test_git_pools_that_is_a_file(tmp_path: Path):
    root = _repo(tmp_path)
    _git(root, "rm", "-rq", "pools")
    (root / "pools").write_text(POOL)
    sha = _commit_all(root)
    with pytest.raises(SourceError, match=rf"^pools@{sha[:12]}: not a directory$"):
        files_from_git(root, "main")


def test_git_submodule_under_pools(tmp_path: Path):
    root = _repo(tmp_path)
    head = _git(root, "rev-parse", "HEAD").strip()
    _git(root, "update-index", "--add", "--cacheinfo", f"160000,{head},pools/vendored")
    _git(root, "commit", "-qm", "a gitlink")
    with pytest.raises(SourceError, match=r"^pools/vendored@\w{12}: a git submodule"):
        files_from_git(root, "main")


def test_git_read_that_stalls_is_bounded(tmp_path: Path):
    """An object store that blocks (a hung file system; here a FIFO in place of a loose object)
    ends in a SourceError after the timeout instead of stopping the caller for ever."""
    root = _repo(tmp_path)
    blob = _git(root, "rev-parse", "HEAD:pools/a100.yaml").strip()
    obj = root / ".git" / "objects" / blob[:2] / blob[2:]
    obj.unlink()
    os.mkfifo(obj)
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=r"reading 'main' timed out after 1s"):
        files_from_git(root, "main", timeout=1)
    assert time.monotonic() - t0 < 10


def test_reading_a_users_repository_runs_nothing_from_its_config(tmp_path: Path):
    """`plan --base` / `validate --rev` on a checkout: only objects are read (git cat-file), so
    no hook, filter, textconv, pager, fsmonitor or transport setting of that repository runs."""
    root = _repo(tmp_path)
    (root / ".gitattributes").write_text("*.yaml filter=evil diff=evil\n")
    sha = _commit_all(root)
    marker = tmp_path / "ran"
    script = tmp_path / "evil.sh"
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    script.chmod(0o755)
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("reference-transaction", "post-checkout", "pre-auto-gc", "post-index-change"):
        (hooks / hook).symlink_to(script)
    for key, value in {
        "core.hooksPath": str(hooks),
        "core.fsmonitor": str(script),
        "core.pager": str(script),
        "core.alternateRefsCommand": str(script),
        "core.sshCommand": str(script),
        "core.askPass": str(script),
        "credential.helper": f"!{script}",
        "diff.external": str(script),
        "diff.evil.textconv": str(script),
        "filter.evil.smudge": str(script),
        "filter.evil.clean": str(script),
        "remote.origin.url": "ssh://example.invalid/x",
        "remote.origin.uploadpack": str(script),
        "gc.auto": "1",
    }.items():
        _git(root, "config", key, value)
    files, got = files_from_git(root, "main")
    assert got == sha and [f.path for f in files] == ["pools/a100.yaml"]
    files_from_git(root, sha[:10])  # an abbreviated SHA: resolved by git rev-parse
    assert not marker.exists(), marker.read_text()
