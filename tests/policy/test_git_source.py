"""Loading desired state from a git revision with GitPython, without checking anything out."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from reconciler.cli import main
from reconciler.policy.files import SourceError, files_from_git
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState

POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: a100
spec:
  gpuModel: A100-SXM4-80GB
  capacity: {{nodes: {nodes}, gpusPerNode: 8}}
"""
QUOTA = """\
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata:
  name: vision
spec:
  namespaces: [vision]
  pools:
    - pool: a100
      whole: {guaranteed: 4}
"""
BAD = """\
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata:
  name: search
spec:
  namespaces: [search]
  pools:
    - pool: v100
"""


def _commit(repo: git.Repo, files: dict[str, str], message: str) -> git.Commit:
    root = Path(repo.working_tree_dir)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    repo.index.add(list(files))
    actor = git.Actor("test", "test@example.com")
    return repo.index.commit(message, author=actor, committer=actor)


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    """main: a valid pool (1 node) and quota. feature: pool grows to 2 nodes, plus a bad quota.
    The working tree is left on main, with an uncommitted edit and an untracked file."""
    r = git.Repo.init(tmp_path / "desired", initial_branch="main")
    _commit(
        r,
        {
            "pools/a100.yaml": POOL.format(nodes=1),
            "policies/quotas.yaml": QUOTA,
            "README.md": "x\n",
        },
        "initial",
    )
    r.create_head("feature").checkout()
    _commit(r, {"pools/a100.yaml": POOL.format(nodes=2)}, "grow a100")
    _commit(r, {"policies/bad.yaml": BAD}, "add a bad quota")
    r.heads.main.checkout()
    root = Path(r.working_tree_dir)
    (root / "policies/quotas.yaml").write_text(QUOTA + "# local edit\n")
    (root / "pools/scratch.yaml").write_text("not: [valid\n")
    return r


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.parts
    }


def test_reads_each_branch_without_checkout(repo: git.Repo):
    root = Path(repo.working_tree_dir)
    before, head = _snapshot(root), repo.head.commit.hexsha

    files, sha = files_from_git(root, "main")
    assert sha == repo.heads.main.commit.hexsha
    assert [f.path for f in files] == ["pools/a100.yaml", "policies/quotas.yaml"]
    state = load(files, revision=sha)
    assert state.revision == sha
    assert state.pools["a100"].spec.capacity.nodes == 1

    files, sha = files_from_git(root, "feature~1")
    assert load(files, revision=sha).pools["a100"].spec.capacity.nodes == 2

    files, sha = files_from_git(root, "feature")
    assert "policies/bad.yaml" in [f.path for f in files]
    with pytest.raises(InvalidDesiredState) as info:
        load(files, revision=sha)
    [p] = info.value.problems
    assert (p.file, p.line, p.path) == ("policies/bad.yaml", 8, "spec.pools[0].pool")

    assert _snapshot(root) == before, "the working tree changed"
    assert repo.head.commit.hexsha == head and repo.active_branch.name == "main"
    assert repo.is_dirty(untracked_files=True)


def test_by_sha_and_tag(repo: git.Repo):
    root = Path(repo.working_tree_dir)
    sha = repo.heads.feature.commit.parents[0].hexsha
    repo.create_tag("v1", ref=sha)
    assert files_from_git(root, sha[:10])[1] == sha
    assert files_from_git(root, "v1")[1] == sha


@pytest.mark.parametrize("rev", ["no-such-branch", "deadbeefdeadbeef", "main~99", "HEAD:pools", ""])
def test_unknown_revision_is_a_clean_error(repo: git.Repo, rev: str):
    with pytest.raises(SourceError, match="unknown revision"):
        files_from_git(repo.working_tree_dir, rev)


def test_not_a_repository(tmp_path: Path):
    with pytest.raises(SourceError, match="not a git repository"):
        files_from_git(tmp_path, "HEAD")
    with pytest.raises(SourceError, match="not a git repository"):
        files_from_git(tmp_path / "missing", "HEAD")


def test_repository_without_commits(tmp_path: Path):
    git.Repo.init(tmp_path / "empty")
    with pytest.raises(SourceError, match="unknown revision"):
        files_from_git(tmp_path / "empty", "HEAD")


def test_cli_repo_rev(repo: git.Repo, capsys):
    root = Path(repo.working_tree_dir)
    before = _snapshot(root)
    assert main(["validate", "--repo", str(root), "--rev", "main"]) == 0
    out = capsys.readouterr().out
    assert f"at {repo.heads.main.commit.hexsha[:12]}" in out

    assert main(["validate", "--repo", str(root), "--rev", "feature"]) == 1
    err = capsys.readouterr().err
    assert "policies/bad.yaml:8:7: Quota/search spec.pools[0].pool: refers to Pool 'v100'" in err
    assert "Traceback" not in err

    assert main(["validate", "--repo", str(root), "--rev", "nope"]) == 1
    err = capsys.readouterr().err
    assert "unknown revision 'nope'" in err and "Traceback" not in err
    assert _snapshot(root) == before
