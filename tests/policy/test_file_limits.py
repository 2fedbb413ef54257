"""Policy files are bounded in bytes (reconciler/policy/files.py, MAX_FILE_BYTES and
MAX_TOTAL_BYTES): a file over 1 MiB, or one that takes the files read together over 2 MiB, is
refused by name before it is read (from a directory or from a git revision) and so before it
is parsed; a text handed to the loader another way is held to the same bounds. Loading is
linear in the bytes but slow (a 4.4 MB pools file took 88 s and 460 MB), every cycle.

What a small text may make the loader build (an alias bomb, deep nesting) was bounded already
(reconciler/policy/limits.py, tests/policy/test_limits.py); the last tests check that those
bounds and the byte bound hold together on the same way in, through the directory reader.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import git
import pytest

from reconciler.cli import main
from reconciler.policy.files import (
    MAX_FILE_BYTES,
    MAX_TOTAL_BYTES,
    SourceError,
    SourceFile,
    files_from_git,
    files_from_paths,
)
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState

POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: a100
spec:
  gpuModel: A100-SXM4-80GB
  capacity: {nodes: 1, gpusPerNode: 8}
"""
ONE = "the limit of 1,048,576 (1 MiB) for one policy file; policy files are a few KB: split it, "
ONE += "or remove what does not belong in it"
ALL = "the limit of 2,097,152 (2 MiB) for all of them together; remove what does not belong in "
ALL += "pools/ and policies/"


def test_the_limits():
    assert (MAX_FILE_BYTES, MAX_TOTAL_BYTES) == (1 << 20, 2 << 20)


def filler(size: int, head: str = POOL) -> str:
    """A YAML file of exactly `size` bytes: `head`, then comment lines."""
    lines, last = divmod(size - len(head), 100)
    return head + ("#" * 99 + "\n") * lines + ("#" * (last - 1) + "\n" if last else "")


@pytest.fixture
def pools(tmp_path: Path) -> Path:
    d = tmp_path / "pools"
    d.mkdir()
    (d / "a100.yaml").write_text(POOL)
    return d


def test_a_file_over_the_limit_is_refused_unread(pools: Path):
    big = pools / "big.yaml"
    with big.open("wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB that are never read
    t = time.monotonic()
    with pytest.raises(SourceError) as info:
        files_from_paths([pools])
    assert time.monotonic() - t < 1
    assert str(info.value) == f"{big}: the file is 67,108,864 bytes, over {ONE}"


def test_a_file_at_the_limit_is_read(pools: Path):
    (pools / "big.yaml").write_text(filler(MAX_FILE_BYTES))
    files = files_from_paths([pools])
    assert [len(f.text) for f in files] == [len(POOL), MAX_FILE_BYTES]


def test_the_files_together_are_bounded(tmp_path: Path, pools: Path):
    policies = tmp_path / "policies"
    policies.mkdir()
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (policies / name).write_text(filler(800_000))
    with pytest.raises(SourceError) as info:
        files_from_paths([pools, policies])
    assert str(info.value) == (
        f"{policies / 'c.yaml'}: the policy files come to {len(POOL) + 2_400_000:,} bytes with "
        f"this one, over {ALL}"
    )


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _repo(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    root = tmp_path / "repo"
    git.Repo.init(root, initial_branch="main")
    _git(root, "config", "user.name", "t")
    _git(root, "config", "user.email", "t@example.com")
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "policy")
    return root, _git(root, "rev-parse", "HEAD")[:12]


def test_a_blob_over_the_limit_is_refused(tmp_path: Path):
    root, sha = _repo(
        tmp_path, {"pools/a100.yaml": POOL, "pools/big.yaml": filler(MAX_FILE_BYTES + 1)}
    )
    with pytest.raises(SourceError) as info:
        files_from_git(root, "main")
    assert str(info.value) == f"pools/big.yaml@{sha}: the file is 1,048,577 bytes, over {ONE}"


def test_blobs_together_are_bounded(tmp_path: Path):
    half = filler(MAX_TOTAL_BYTES // 2)
    root, sha = _repo(
        tmp_path, {"policies/a.yaml": half, "policies/b.yaml": half, "pools/a100.yaml": POOL}
    )
    with pytest.raises(SourceError) as info:
        files_from_git(root, "main")
    # pools/ is read before policies/ (DEFAULT_DIRS), then each directory's files by path
    assert str(info.value) == (
        f"policies/b.yaml@{sha}: the policy files come to {len(POOL) + MAX_TOTAL_BYTES:,} "
        f"bytes with this one, over {ALL}"
    )


def test_a_text_over_the_limit_is_not_parsed():
    """A SourceFile that did not come through the readers (bytes, not characters, count)."""
    text = "é" * (MAX_FILE_BYTES // 2 + 1)  # 524,289 characters, 1,048,578 bytes
    t = time.monotonic()
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("pools/big.yaml", text), SourceFile("pools/a100.yaml", POOL)])
    assert time.monotonic() - t < 1
    assert [str(p) for p in info.value.problems] == [
        f"pools/big.yaml: the file is 1,048,578 bytes, over {ONE}"
    ]


def test_texts_together_are_bounded():
    text = filler(800_000, head="")
    files = [SourceFile(f"policies/{n}.yaml", text) for n in "abcd"]
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("pools/a100.yaml", POOL), *files])
    assert [str(p) for p in info.value.problems] == [
        f"policies/c.yaml: the policy files come to {len(POOL) + 2_400_000:,} bytes with this "
        f"one, over {ALL}"
    ]


def test_validate_says_which_file_and_exits_1(pools: Path, capsys):
    (pools / "big.yaml").write_text(filler(MAX_FILE_BYTES + 1))
    assert main(["validate", str(pools)]) == 1
    out, err = capsys.readouterr()
    assert err == f"error: {pools / 'big.yaml'}: the file is 1,048,577 bytes, over {ONE}\n"
    assert out == ""


# -- what a small file may make the loader build (limits.py) -----------------------------------


def _bomb(levels: int) -> str:
    lines = [POOL + "  x0: &a0 [" + ", ".join(["x"] * 10) + "]"]
    lines += [f"  x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (_bomb(9), "refused: aliases expand to more than 10,000 values"),  # 10^9 values, 600 B
        (POOL + "  x: " + "[" * 5000 + "]" * 5000 + "\n", "refused: nested more than 64"),
    ],
    ids=["alias-bomb", "deep-nesting"],
)
def test_small_bombs_are_refused_fast(pools: Path, text: str, message: str):
    (pools / "a100.yaml").write_text(text)
    assert len(text.encode()) < MAX_FILE_BYTES
    t = time.monotonic()
    with pytest.raises(InvalidDesiredState) as info:
        load(files_from_paths([pools]))
    assert time.monotonic() - t < 5
    (problem,) = info.value.problems
    assert problem.line > 0 and problem.message.startswith(message), str(problem)


def test_sizes_in_this_repository_are_far_below_the_limits():
    root = Path(__file__).resolve().parents[2]
    sizes = [os.path.getsize(p) for d in ("pools", "policies") for p in (root / d).glob("*.y*ml")]
    assert sizes and max(sizes) < MAX_FILE_BYTES // 100 and sum(sizes) < MAX_TOTAL_BYTES // 100
