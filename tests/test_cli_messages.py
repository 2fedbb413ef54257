"""Messages that lead somewhere: each names what the user gave (or the default that was tried)
and what to give instead; an example time is marked as one ("e.g.") or is the user's own
time; and what no message was written for is still one line, never a traceback.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reconciler.cli import main

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOT = ROOT / "examples" / "observed.yaml"
OLD_EXAMPLE = "2026-12-02"  # the date every message used to show as if it were the user's


def lines(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.strip()]


def test_plan_without_the_default_snapshot_names_it_and_the_ways_out(tmp_path, capsys, monkeypatch):
    shutil.copytree(ROOT / "pools", tmp_path / "pools")
    shutil.copytree(ROOT / "policies", tmp_path / "policies")
    monkeypatch.chdir(tmp_path)
    assert main(["plan"]) == 1
    (line,) = lines(capsys.readouterr().err)
    assert line.startswith("gpupool plan: error: no observed state")
    assert "the default snapshot examples/observed.yaml does not exist" in line
    assert str(tmp_path) in line  # where it was looked for
    assert "--observed FILE" in line and "--kubeconfig FILE" in line


def test_plan_with_the_default_snapshot_still_plans(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["plan"]) == 0
    assert capsys.readouterr().out


@pytest.mark.parametrize(
    ("given", "utc"),
    [("2031-01-05T10:30", "2031-01-05T10:30:00Z"), ("2031-01-05", "2031-01-05T00:00:00Z")],
)
def test_now_without_a_timezone_is_answered_with_the_users_own_time(given, utc, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "--now", given])
    assert exit_.value.code == 1
    message = lines(capsys.readouterr().err)[-1]
    assert f"argument --now: {given!r} has no timezone" in message
    assert f"if it is UTC, give {utc}" in message
    assert "e.g. " in message  # the offset form is an example, and says so
    assert OLD_EXAMPLE not in message


def test_now_that_is_not_a_time_marks_its_examples(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--now", "tomorrow"])
    message = lines(capsys.readouterr().err)[-1]
    assert "'tomorrow' is not an ISO 8601 time" in message
    assert "e.g. 2026-12-02T06:00:00Z" in message


def test_now_that_is_huge_is_quoted_short(capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--now", "9" * 100_000])
    message = lines(capsys.readouterr().err)[-1]
    assert len(message) < 400 and "(100000 chars)" in message


def test_a_snapshot_time_without_timezone_is_answered_with_its_own_time(tmp_path, capsys):
    text = SNAPSHOT.read_text()
    assert "observedAt: '2026-12-02T14:00:00Z'" in text
    snap = tmp_path / "snap.yaml"
    snap.write_text(text.replace("'2026-12-02T14:00:00Z'", "'2031-01-05T10:30:00'", 1))
    argv = ["plan", str(ROOT / "pools"), str(ROOT / "policies"), "--observed", str(snap)]
    assert main(argv) == 1
    message = next(line for line in lines(capsys.readouterr().err) if "observedAt" in line)
    assert "time 2031-01-05T10:30:00 has no timezone" in message
    assert "if it is UTC, write 2031-01-05T10:30:00Z" in message
    assert "e.g. 2031-01-05T10:30:00+02:00" in message
    assert OLD_EXAMPLE not in message


def test_a_huge_malformed_duration_is_quoted_short():
    from reconciler.policy.quantity import parse_duration

    with pytest.raises(ValueError) as err:
        parse_duration("9" * 100_000 + "q")
    assert len(str(err.value)) < 200
    assert "(100001 characters)" in str(err.value)


@pytest.mark.parametrize("when", ["0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])
def test_a_now_outside_the_sane_years_is_a_usage_error(when, capsys):
    from reconciler.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["plan", "pools", "policies", "--observed", "examples/observed.yaml", "--now", when])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "outside the years 2000-2199" in err and "Traceback" not in err


def test_an_annotation_time_outside_the_sane_years_reads_as_absent():
    from reconciler.apply.handlers.base import parse_time

    assert parse_time("9999-12-31T23:59:59Z") is None
    assert parse_time("0001-01-01T00:00:00Z") is None
    assert parse_time("2026-12-02T06:00:00Z") is not None
