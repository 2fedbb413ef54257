"""The git source polls: however often events start cycles, the remote is fetched at most once
per `poll_seconds` (the loop's interval), and a reconcile asked for fetches at once."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconciler.loop.sources import GitSource
from reconciler.policy.files import SourceError
from tests.loop.git_origin import POOL, make_origin
from tests.loop.git_origin import git as _git


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _commit(origin: Path, pool: str) -> str:
    (origin / "pools" / f"{pool}.yaml").write_text(POOL.format(name=pool))
    _git(origin, "add", "-A")
    _git(origin, "commit", "-qm", pool)
    return _git(origin, "rev-parse", "HEAD")


def test_reads_within_the_interval_get_the_last_fetch(tmp_path: Path):
    origin, sha = make_origin(tmp_path / "origin")
    clock = Clock()
    src = GitSource(str(origin), "main", tmp_path / "cache", poll_seconds=30, clock=clock)
    first = src.read()
    assert first.revision == sha and src.fetches == 1
    newer = _commit(origin, "h100")
    clock.t += 29.9
    assert src.read() is first and src.fetches == 1  # a cycle an event started: no fetch
    clock.t += 0.1
    later = src.read()
    assert later.revision == newer and src.fetches == 2
    assert sorted(Path(f.path).name for f in later.files) == ["a100.yaml", "h100.yaml"]


def test_a_reconcile_asked_for_fetches_at_once(tmp_path: Path):
    origin, _ = make_origin(tmp_path / "origin")
    clock = Clock()
    src = GitSource(str(origin), "main", tmp_path / "cache", poll_seconds=30, clock=clock)
    src.read()
    newer = _commit(origin, "h100")
    clock.t += 1
    assert src.read(fresh=True).revision == newer and src.fetches == 2
    clock.t += 1
    assert src.read().revision == newer and src.fetches == 2  # the window starts again


def test_a_failed_fetch_is_not_retried_every_cycle(tmp_path: Path):
    origin, _ = make_origin(tmp_path / "origin")
    clock = Clock()
    src = GitSource(str(origin), "main", tmp_path / "cache", poll_seconds=30, clock=clock)
    src.read()
    shutil.rmtree(origin)  # the remote is gone
    clock.t += 30
    with pytest.raises(SourceError) as first:
        src.read()
    for _ in range(3):
        clock.t += 5
        with pytest.raises(SourceError) as again:
            src.read()
        assert str(again.value) == str(first.value)
    assert src.fetches == 2
    make_origin(origin)  # back: the next poll reads it
    clock.t += 30
    assert src.read().files and src.fetches == 3


def test_poll_zero_fetches_on_every_read_and_a_negative_one_is_refused(tmp_path: Path):
    origin, _ = make_origin(tmp_path / "origin")
    src = GitSource(str(origin), "main", tmp_path / "cache")
    src.read()
    src.read()
    assert src.fetches == 2
    with pytest.raises(SourceError, match="poll interval"):
        GitSource(str(origin), "main", tmp_path / "cache", poll_seconds=-1)


def test_a_push_expires_the_last_fetch(tmp_path: Path):
    origin, _ = make_origin(tmp_path / "origin")
    clock = Clock()
    src = GitSource(str(origin), "main", tmp_path / "cache", poll_seconds=30, clock=clock)
    src.read()
    newer = _commit(origin, "h100")
    src.expire()  # the push webhook's call, from its own thread
    assert src.read().revision == newer and src.fetches == 2
    assert src.read().revision == newer and src.fetches == 2
