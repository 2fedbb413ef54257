"""Snapshots and saved plans are bounded in bytes: past the limit, one located line and exit 1,
before the file is read (a sparse file of that size costs no disk and no time here). Policy
files have their own bounds (tests/policy/test_file_limits.py)."""

from __future__ import annotations

from pathlib import Path

from reconciler.cli import main
from reconciler.conventions import MAX_SAVED_PLAN_BYTES, MAX_SNAPSHOT_BYTES


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def _run(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit_:
        return exit_.code


def test_a_snapshot_over_the_limit_is_refused_unread(tmp_path, capsys):
    snap = _sparse(tmp_path / "huge.yaml", MAX_SNAPSHOT_BYTES + 1)
    code = _run(["plan", "pools", "policies", "--observed", str(snap)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{snap}" in err and "over the limit" in err and "snapshot" in err
    assert "Traceback" not in err


def test_a_saved_plan_over_the_limit_is_refused_unread(tmp_path, capsys):
    plan = _sparse(tmp_path / "plan.json", MAX_SAVED_PLAN_BYTES + 1)
    code = _run(["apply", str(plan), "--observed", "examples/observed.yaml"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{plan}" in err and "over the limit" in err and "saved plan" in err
    assert "Traceback" not in err
