"""`gpupool validate` and `gpupool schema`: exit codes, messages on stderr, nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.policy.models import KINDS
from tests.policy.loading import BROKEN, CASES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(ROOT)


def _files(root: Path) -> set[Path]:
    return {
        p
        for p in root.rglob("*")
        if ".git" not in p.parts and "__pycache__" not in p.parts and ".hypothesis" not in p.parts
    }


def test_validate_bundled_example(in_repo, capsys):
    assert main(["validate", "pools", "policies"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("valid: 11 documents")
    assert "2 Pool" in out and "4 Quota" in out
    assert err == ""


def test_validate_defaults_to_pools_and_policies(in_repo, capsys):
    assert main(["validate"]) == 0
    assert capsys.readouterr().out.startswith("valid: 11 documents")


def test_validate_json(in_repo, capsys):
    assert main(["validate", "--format", "json", "pools", "policies"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["valid"] is True and data["documents"]["Pool"] == 2


@pytest.mark.parametrize(
    ("case", "file", "line", "col", "path", "fragment"), CASES, ids=[c[0] for c in CASES]
)
def test_validate_broken(case, file, line, col, path, fragment, capsys):
    assert main(["validate", str(BROKEN / case)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    assert f"{BROKEN / file}:{line}:{col}: " in err
    assert fragment in err
    assert err.rstrip().endswith("1 problem found; nothing was changed.")


def test_validate_json_reports_problems(capsys):
    assert main(["validate", "--format", "json", str(BROKEN / "several_problems.yaml")]) == 1
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["valid"] is False
    assert [p["line"] for p in data["problems"]] == [16, 25, 35, 46]
    assert "4 problems found" in err


def test_validate_missing_path(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope")]) == 1
    err = capsys.readouterr().err
    assert "no such file or directory" in err and "Traceback" not in err


def test_validate_no_policy_dirs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["validate"]) == 1
    assert "no policy files" in capsys.readouterr().err


def test_validate_writes_nothing(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    (work / "bad.yaml").write_text((BROKEN / "several_problems.yaml").read_text())
    monkeypatch.chdir(work)
    before = {p: p.read_bytes() for p in _files(work)}
    assert main(["validate", "bad.yaml"]) == 1
    assert main(["validate", str(ROOT / "pools"), str(ROOT / "policies")]) == 0
    capsys.readouterr()
    assert {p: p.read_bytes() for p in _files(work)} == before


def test_validate_does_not_touch_the_repository(in_repo, capsys):
    before = {p: p.stat().st_mtime_ns for p in _files(ROOT / "pools") | _files(ROOT / "policies")}
    assert main(["validate", str(BROKEN)]) == 1
    capsys.readouterr()
    after = {p: p.stat().st_mtime_ns for p in _files(ROOT / "pools") | _files(ROOT / "policies")}
    assert after == before


@pytest.mark.parametrize(
    "command",
    [
        [str(Path(sys.executable).parent / "gpupool")],
        [sys.executable, "-m", "reconciler.cli"],
    ],
    ids=["console-script", "python-m"],
)
def test_console_entry(command, tmp_path):
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} is not installed (pip install -e .)")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    ok = subprocess.run(
        [*command, "validate", "pools", "policies"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("valid: 11 documents")
    bad = subprocess.run(
        [*command, "validate", str(BROKEN / "unplaceable_mig_layout.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 1
    assert (
        "unplaceable_mig_layout.yaml:17:11: Pool/a100 spec.inference.mig.layouts[1].profiles:"
        in bad.stderr
    )
    assert "Traceback" not in bad.stderr
    assert list(tmp_path.iterdir()) == [], "validate wrote into the working directory"


def test_schema_writes_one_file_per_kind(tmp_path, capsys):
    out = tmp_path / "schemas"
    assert main(["schema", "--out", str(out)]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(f"{k.lower()}.json" for k in KINDS)
    for kind in KINDS:
        schema = json.loads((out / f"{kind.lower()}.json").read_text())
        assert schema["properties"]["kind"]["const"] == kind
        assert "apiVersion" in schema["properties"]
    assert capsys.readouterr().out.count("wrote ") == len(KINDS)


def test_schema_out_is_a_file(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    assert main(["schema", "--out", str(target)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(target) in err
