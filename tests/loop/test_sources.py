"""The controller's desired-state sources, on real git repositories and a real directory."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import git

from reconciler.loop.sources import DirectorySource, GitSource
from reconciler.policy.loader import load

ROOT = Path(__file__).resolve().parents[2]


def _policy_repo(path: Path) -> git.Repo:
    repo = git.Repo.init(path, initial_branch="main")
    with repo.config_writer() as c:
        c.set_value("user", "name", "t").set_value("user", "email", "t@example.com")
    shutil.copytree(ROOT / "pools", path / "pools")
    shutil.copytree(ROOT / "policies", path / "policies")
    repo.index.add(["pools", "policies"])
    repo.index.commit("bundled policy")
    return repo


def test_git_source_follows_its_pinned_branch(tmp_path):
    origin = _policy_repo(tmp_path / "origin")
    src = GitSource(str(tmp_path / "origin"), "main", tmp_path / "cache")
    first = src.read()
    assert first.revision == origin.head.commit.hexsha
    assert load(first.files, revision=first.revision).pools.keys() == {"a100", "h100"}

    # a commit on another branch is not followed
    origin.create_head("experiment").checkout()
    (tmp_path / "origin" / "pools" / "h100.yaml").unlink()
    origin.index.remove(["pools/h100.yaml"])
    origin.index.commit("drop h100 (experiment only)")
    origin.heads.main.checkout()
    assert src.read().revision == first.revision

    # a commit on main is, at the next read
    p = tmp_path / "origin" / "pools" / "a100.yaml"
    p.write_text(p.read_text().replace("minGPUs: 4", "minGPUs: 6", 1))
    origin.index.add(["pools/a100.yaml"])
    new = origin.index.commit("more warm inference").hexsha
    snap = src.read()
    assert snap.revision == new
    assert load(snap.files).pools["a100"].spec.inference.min_gpus == 6


def test_directory_source_revision_tracks_content(tmp_path):
    shutil.copytree(ROOT / "pools", tmp_path / "pools")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    src = DirectorySource(tmp_path)
    a = src.read()
    assert a.revision.startswith("dir:") and src.read().revision == a.revision
    f = tmp_path / "pools" / "a100.yaml"
    f.write_text(f.read_text() + "\n# touched\n")
    assert src.read().revision != a.revision


def test_directory_source_wakes_on_change(tmp_path):
    shutil.copytree(ROOT / "pools", tmp_path / "pools")
    src = DirectorySource(tmp_path, dirs=("pools",))
    stop = threading.Event()
    seen: list[set] = []

    def watch():
        for changes in src.changes(stop):
            seen.append(changes)
            stop.set()

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    for _ in range(40):  # until the watcher is up and notices the write (bounded)
        (tmp_path / "pools" / "a100.yaml").write_text(
            (tmp_path / "pools" / "a100.yaml").read_text() + "\n"
        )
        t.join(0.25)
        if seen:
            break
    stop.set()
    t.join(5)
    assert seen and any(str(path).endswith("a100.yaml") for change in seen for _, path in change)
