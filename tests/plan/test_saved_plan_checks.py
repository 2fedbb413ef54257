"""A saved plan is checked as it is read: its format version exactly, the revision it was made at
(part of its fingerprint: a plan made at one commit is stale at another), and a time `apply` can
plan at again. Each problem is one located line from `gpupool apply`, never "plan is current",
never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import git
import pytest

from reconciler.cli import main
from reconciler.plan.fingerprint import revision_fingerprint
from reconciler.plan.model import (
    FORMAT_VERSION,
    TIME_MAX,
    TIME_MIN,
    Plan,
    SavedPlanError,
    time_problem,
)
from reconciler.plan.render import to_json

INPUTS = ["pools", "policies", "--observed", "examples/observed.yaml"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["plan", "pools", "policies", "--out", str(out)]) == 0
    return json.loads(out.read_text())


def apply(tmp_path: Path, doc: dict, capsys, *inputs: str) -> tuple[int, str, str]:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    capsys.readouterr()
    rc = main(["apply", str(path), *(inputs or INPUTS)])
    got = capsys.readouterr()
    assert "Traceback" not in got.err
    return rc, got.out, got.err


def refused(tmp_path: Path, doc: dict, capsys, field: str) -> str:
    """`apply` refuses `doc` as not a saved plan, in one line naming the file and `field`."""
    rc, out, err = apply(tmp_path, doc, capsys)
    assert rc == 1 and "plan is current" not in out, (rc, out, err)
    assert err.count("\n") == 1 and "not a saved plan" in err and str(tmp_path) in err, err
    assert f"not a saved plan: {field}: " in err, err
    return err


def test_the_saved_plan_itself_is_current(saved, tmp_path, capsys):
    assert set(saved["fingerprint"]) == {"desired", "observed", "actions", "revision"}
    assert saved["fingerprint"]["revision"] == revision_fingerprint(None)
    rc, out, _ = apply(tmp_path, saved, capsys)
    assert rc == 0 and "plan is current" in out
    plan = Plan.model_validate(saved)
    assert Plan.model_validate_json(to_json(plan)) == plan


# --------------------------------------------------------------------------- format_version


@pytest.mark.parametrize(
    "version",
    [0, 1, 3, "2", "1", 10**19, -(10**19), True, False, 2.0, None, [2], {"v": 2}],
    ids=repr,
)
def test_a_format_version_that_is_not_exactly_this_one_is_refused(saved, tmp_path, capsys, version):
    err = refused(tmp_path, {**saved, "format_version": version}, capsys, "format_version")
    assert f"the int {FORMAT_VERSION}" in err and "gpupool plan --out" in err


def test_format_version_is_checked_by_the_model_too():
    data = {"format_version": "2", "observed_at": "2026-12-02T00:00:00+00:00"}
    with pytest.raises(SavedPlanError, match=r"^format_version: '2' \(str\) is not"):
        Plan.model_validate(data)
    with pytest.raises(SavedPlanError, match=r"^format_version: True \(bool\)"):
        Plan.model_validate_json('{"format_version": true, "observed_at": "t"}')
    assert Plan.model_validate({**data, "format_version": 2}).format_version == 2
    assert isinstance(SavedPlanError("x"), ValueError)  # what apply catches


# --------------------------------------------------------------------------- revision


def test_a_changed_revision_field_is_refused(saved, tmp_path, capsys):
    for rev in ("0123456789abcdef0123456789abcdef01234567", ""):
        err = refused(tmp_path, {**saved, "revision": rev}, capsys, "revision")
        assert repr(rev) in err
    # a fingerprint without the revision (an older gpupool's) is no current plan either
    older = {**saved, "fingerprint": {**saved["fingerprint"]}}
    del older["fingerprint"]["revision"]
    refused(tmp_path, older, capsys, "fingerprint")


def _commit(repo: git.Repo, message: str) -> str:
    root = Path(repo.working_dir)
    repo.index.add([p for p in ("pools", "policies", "README.md") if (root / p).exists()])
    actor = git.Actor("test", "test@example.com")
    return repo.index.commit(message, author=actor, committer=actor).hexsha


def test_a_plan_made_at_one_revision_is_stale_at_another(tmp_path, capsys):
    """Two commits whose policy documents read the same: the plan made at the first is stale at
    the second (the revision is part of the desired state's fingerprint)."""
    root = tmp_path / "desired"
    repo = git.Repo.init(root, initial_branch="main")
    for d in ("pools", "policies"):
        shutil.copytree(d, root / d)
    first = _commit(repo, "policies")
    (root / "README.md").write_text("the same policies, one commit later\n")
    second = _commit(repo, "a readme")
    out = tmp_path / "plan.json"
    assert main(["plan", "--repo", str(root), "--rev", first, "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["revision"] == first
    observed = ["--observed", "examples/observed.yaml"]
    rc, stdout, _ = apply(tmp_path, doc, capsys, "--repo", str(root), "--rev", first, *observed)
    assert rc == 0 and "plan is current" in stdout
    rc, stdout, err = apply(tmp_path, doc, capsys, "--repo", str(root), "--rev", second, *observed)
    assert rc == 1 and "plan is current" not in stdout
    assert "saved plan is stale: the desired state changed" in err, err
    # the plan's revision field set to the second commit: refused as it is read
    refused(tmp_path, {**doc, "revision": second}, capsys, "revision")


# --------------------------------------------------------------------------- observed_at


@pytest.mark.parametrize(
    "at",
    [
        "0001-01-01T00:00:00+00:00",
        "0001-01-01T00:00:00+05:00",
        "9999-12-31T23:59:59+00:00",
        "9999-12-31T23:59:59-05:00",
        f"{TIME_MIN - 1}-12-31T23:59:59+00:00",
        f"{TIME_MAX + 1}-01-01T00:00:00+00:00",
        "2026-12-02T14:00:00",
        "tomorrow",
        "",
    ],
)
def test_a_saved_plan_time_apply_cannot_plan_at_is_refused(saved, tmp_path, capsys, at):
    refused(tmp_path, {**saved, "observed_at": at}, capsys, "observed_at")


def test_the_time_range_is_inclusive_and_read_as_written():
    assert time_problem(f"{TIME_MIN}-01-01T00:00:00+14:00") == ""
    assert time_problem(f"{TIME_MAX}-12-31T23:59:59-12:00") == ""
    assert "outside the years" in time_problem("1999-12-31T23:59:59-05:00")
    assert "no timezone" in time_problem("2026-01-01T00:00:00")
    # a plan without a fingerprint is not a saved one: tests and the executor make such plans
    assert Plan(observed_at="t").observed_at == "t"
