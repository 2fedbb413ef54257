"""The controller's git source: gpupool's own cache (a foreign or tampered one is cloned
afresh, never trusted), no repository config that runs a program, every git process bounded
in time, and no source silently replaced by another (an empty --git-url is an error)."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.loop.sources import DirectorySource, GitSource, check_git_url
from reconciler.policy.files import SourceError
from tests.loop.git_origin import POOL, make_origin
from tests.loop.git_origin import git as _git


@pytest.fixture
def spy(tmp_path: Path) -> tuple[Path, Path]:
    """A program that records that it ran (then acts as git-upload-pack when so invoked)."""
    marker = tmp_path / "ran"
    script = tmp_path / "spy.sh"
    script.write_text(
        f'#!/bin/sh\necho "$0 $*" >> {marker}\n'
        'case "$0" in *upload*) exec git-upload-pack "$@";; esac\nexit 0\n'
    )
    script.chmod(0o755)
    return script, marker


# ------------------------------------------------------------------------- the cache


def test_a_planted_cache_config_runs_nothing_and_is_replaced(tmp_path: Path, spy):
    """A cache that gpupool did not write (here `remote.origin.uploadpack`, which a fetch from a
    local or ssh remote runs) is removed and cloned afresh; nothing in it runs."""
    script, marker = spy
    origin, sha = make_origin(tmp_path / "origin")
    src = GitSource(str(origin), "main", tmp_path / "cache")
    src.repo_dir.parent.mkdir(parents=True, exist_ok=True)
    _git(tmp_path, "clone", "-q", "--bare", str(origin), str(src.repo_dir))
    upload = tmp_path / "upload-pack-spy.sh"
    upload.symlink_to(script)
    for key, value in {
        "remote.origin.uploadpack": str(upload),
        "core.sshCommand": str(script),
        "core.fsmonitor": str(script),
        "core.alternateRefsCommand": str(script),
        "credential.helper": f"!{script}",
    }.items():
        _git(src.repo_dir, "config", key, value)
    (src.repo_dir / "planted").write_text("x")

    snap = src.read()
    assert snap.revision == sha and [f.path for f in snap.files] == ["pools/a100.yaml"]
    assert not marker.exists(), marker.read_text()
    assert not (src.repo_dir / "planted").exists(), "the foreign cache was not replaced"
    assert "uploadpack" not in (src.repo_dir / "config").read_text()
    assert src.read().revision == sha  # and the fresh cache is reused as it is
    assert not marker.exists()


def test_hooks_in_the_cache_do_not_run(tmp_path: Path, spy):
    """Hooks are not in the config, so the cache check cannot see them: git runs with
    core.hooksPath=/dev/null (fetch runs reference-transaction)."""
    script, marker = spy
    origin, _ = make_origin(tmp_path / "origin")
    src = GitSource(str(origin), "main", tmp_path / "cache")
    src.read()
    for hook in ("reference-transaction", "pre-auto-gc", "post-checkout", "post-merge"):
        (src.repo_dir / "hooks" / hook).symlink_to(script)
    (origin / "pools" / "h100.yaml").write_text(POOL.format(name="h100"))
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", "h100")
    snap = src.read()
    assert snap.revision == _git(origin, "rev-parse", "HEAD")
    assert not marker.exists(), marker.read_text()


def test_a_changed_url_is_followed_not_the_old_repository(tmp_path: Path):
    a, sha_a = make_origin(tmp_path / "a", pool="a100")
    b, sha_b = make_origin(tmp_path / "b", pool="h100")
    cache = tmp_path / "cache"
    assert GitSource(str(a), "main", cache).read().revision == sha_a
    snap = GitSource(str(b), "main", cache).read()
    assert snap.revision == sha_b and [f.path for f in snap.files] == ["pools/h100.yaml"]


@pytest.mark.parametrize(
    "plant",
    [
        lambda d, o: _git(d.parent, "clone", "-q", str(o), str(d)),  # a working tree, not bare
        lambda d, o: (d.mkdir(), (d / "HEAD").write_text("ref: refs/heads/main\n")),
        lambda d, o: d.symlink_to(o / ".git", target_is_directory=True),
        lambda d, o: d.write_text("not a directory"),
        lambda d, o: (
            _git(d.parent, "clone", "-q", "--bare", str(o), str(d)),
            (d / "objects" / "info" / "alternates").write_text(str(o / ".git" / "objects")),
        ),
        lambda d, o: (
            _git(d.parent, "clone", "-q", "--bare", str(o), str(d)),
            _git(d, "config", "include.path", "/etc/gitconfig"),
        ),
    ],
    ids=["working tree", "half made", "symlink", "file", "alternates", "include"],
)
def test_anything_not_made_by_gpupool_is_cloned_afresh(tmp_path: Path, plant):
    origin, sha = make_origin(tmp_path / "origin")
    src = GitSource(str(origin), "main", tmp_path / "cache")
    src.repo_dir.parent.mkdir(parents=True, exist_ok=True)
    plant(src.repo_dir, origin)
    assert src._cache_problem() is not None
    assert src.read().revision == sha
    assert src._cache_problem() is None
    assert not src.repo_dir.is_symlink() and (origin / ".git").is_dir()


def test_a_deleted_branch_is_an_error_not_the_last_commit(tmp_path: Path):
    origin, _ = make_origin(tmp_path / "origin")
    _git(origin, "branch", "release")
    src = GitSource(str(origin), "release", tmp_path / "cache")
    src.read()
    _git(origin, "branch", "-D", "release")
    with pytest.raises(SourceError, match="release"):
        src.read()


# ------------------------------------------------------------------------ time bounds


@pytest.fixture
def stalling_server():
    """An HTTP server that accepts connections and never answers (a hung git host)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield srv.getsockname()[1]
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    srv.close()


@pytest.mark.parametrize(
    "scheme, expect",
    [
        # git's own low-speed limit (http.lowSpeedTime) or the wall clock, whichever is first
        ("http://gpupool:s3cret-token@", r"timed out after 1.5s|Operation too slow"),
        ("git://", r"timed out after 1.5s"),  # no transfer limit: only the wall clock ends it
    ],
)
def test_a_clone_that_stalls_times_out(
    tmp_path: Path, stalling_server: int, scheme: str, expect: str
):
    url = f"{scheme}127.0.0.1:{stalling_server}/policy.git"
    src = GitSource(url, "main", tmp_path / "cache", timeout=1.5)
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=expect) as info:
        src.read()
    assert time.monotonic() - t0 < 10
    msg = str(info.value)
    assert msg.startswith("git clone ") and "\n" not in msg
    assert "s3cret-token" not in msg  # no credential in the status object
    assert not src.repo_dir.exists(), "a half-made clone must not become the cache"
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []


def test_a_fetch_that_stalls_times_out(tmp_path: Path, stalling_server: int):
    origin, _ = make_origin(tmp_path / "origin")
    url = f"git://127.0.0.1:{stalling_server}/policy.git"
    src = GitSource(url, "main", tmp_path / "cache", timeout=1.5)
    src.repo_dir.parent.mkdir(parents=True, exist_ok=True)
    _git(tmp_path, "clone", "-q", "--bare", str(origin), str(src.repo_dir))
    _git(src.repo_dir, "config", "remote.origin.url", url)  # a valid cache for this URL
    assert src._cache_problem() is None
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=r"git fetch .*: timed out after 1.5s"):
        src.read()
    assert time.monotonic() - t0 < 10


# ------------------------------------------------------------- no silent source fallback


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "$(GIT_URL)",  # the ConfigMap key is missing: Kubernetes leaves the reference as is
        "https://git.example.com/x.git\n",
        "ext::sh -c touch% /tmp/pwned",
        "fd::3",
        "-uecho pwned",
        "--upload-pack=touch /tmp/pwned",
        "ftp://git.example.com/x.git",
        "https:///x.git",
        "relative/dir",
        "file://relative",
        "https://host:notaport/x.git",
    ],
)
def test_malformed_git_urls_are_errors(url: str):
    with pytest.raises(SourceError, match="git URL"):
        check_git_url(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com/platform/gpu-pool-policy.git",
        "http://127.0.0.1:8080/x.git",
        "ssh://git@git.example.com:2222/platform/policy.git",
        "git@github.com:org/repo.git",
        "git://git.example.com/x.git",
        "file:///srv/git/policy.git",
        "/srv/git/policy.git",
    ],
)
def test_git_urls_gpupool_accepts(url: str):
    assert check_git_url(url) == url


@pytest.mark.parametrize("branch", ["", "-f", "main:refs/heads/x", "a..b", "a b", "x.lock"])
def test_malformed_branches_are_errors(tmp_path: Path, branch: str):
    with pytest.raises(SourceError, match="branch"):
        GitSource("https://git.example.com/x.git", branch, tmp_path)


@pytest.mark.parametrize("url", ["", " ", "$(GIT_URL)"])
def test_reconcile_with_an_empty_git_url_fails_before_reading_anything(
    tmp_path: Path, monkeypatch, capsys, url: str
):
    # a working directory full of YAML that must not become desired state
    (tmp_path / "pools").mkdir()
    (tmp_path / "pools" / "a100.yaml").write_text(POOL.format(name="a100"))
    monkeypatch.chdir(tmp_path)

    def no_cluster(*a, **k):
        raise AssertionError("the controller must not start")

    monkeypatch.setattr("reconciler.commands.reconcile.make_api_client", no_cluster)
    assert main(["reconcile", "--git-url", url, "--once"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: git URL") and err.count("\n") == 1
    assert "Traceback" not in err


def test_directory_source_reads_only_pools_and_policies(tmp_path: Path):
    (tmp_path / "stray.yaml").write_text(POOL.format(name="stray"))
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "controller.yaml").write_text("kind: Deployment\n")
    src = DirectorySource(tmp_path)
    with pytest.raises(SourceError, match=r"neither pools/ nor policies/ exists"):
        src.read()
    (tmp_path / "policies").mkdir()
    assert src.read().files == []
    with pytest.raises(SourceError, match="no such directory"):
        DirectorySource(tmp_path / "missing").read()
    with pytest.raises(SourceError, match="empty"):
        DirectorySource("")
