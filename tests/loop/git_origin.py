"""A local git remote holding policy files, for the git source's tests (test_git_cache.py,
test_git_poll.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: {name}
spec:
  gpuModel: A100-SXM4-80GB
  capacity: {{nodes: 1, gpusPerNode: 8}}
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def make_origin(path: Path, pool: str = "a100") -> tuple[Path, str]:
    """A repository at `path` on branch main, one commit with pools/<pool>.yaml; its SHA."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "--initial-branch=main")
    git(path, "config", "user.name", "t")
    git(path, "config", "user.email", "t@example.com")
    (path / "pools").mkdir()
    (path / "pools" / f"{pool}.yaml").write_text(POOL.format(name=pool))
    git(path, "add", "-A")
    git(path, "commit", "-qm", "initial")
    return path, git(path, "rev-parse", "HEAD")
