"""The pull-request workflow judges a change with the BASE revision's gpupool.

`.github/workflows/plan.yml` must never install or run the pull request's own code: the head is
read only as data (`--repo head --rev`), gpupool is installed from a checkout of the base
revision, and only the job that posts the comment may write to the pull request (it never has
the head on disk). These tests read the workflow file; they do not run it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

WORKFLOW = Path(__file__).resolve().parents[2] / ".github" / "workflows" / "plan.yml"
BASE_SHA = "${{ github.event.pull_request.base.sha }}"
WRITE = "write"


def load() -> dict:
    return YAML(typ="safe").load(WORKFLOW.read_text(encoding="utf-8"))


def is_checkout(step: dict) -> bool:
    return str(step.get("uses", "")).startswith("actions/checkout@")


def is_base_checkout(step: dict) -> bool:
    return is_checkout(step) and (step.get("with") or {}).get("ref") == BASE_SHA


def checkout_dir(step: dict) -> str:
    return str((step.get("with") or {}).get("path") or ".").strip("/") or "."


def run_dir(step: dict) -> str:
    return str(step.get("working-directory") or ".").strip("/") or "."


def jobs(wf: dict) -> dict[str, dict]:
    return wf["jobs"]


@pytest.mark.parametrize("job_name", ["plan", "comment"])
def test_gpupool_is_installed_from_the_base_checkout_before_the_head_exists(job_name):
    job = jobs(load())[job_name]
    base_dirs: set[str] = set()
    head_seen = False
    installs = 0
    for step in job["steps"]:
        if is_checkout(step):
            if is_base_checkout(step):
                base_dirs.add(checkout_dir(step))
            else:
                head_seen = True
            continue
        run = str(step.get("run") or "")
        if re.search(r"\bpip\b.*\binstall\b", run):
            installs += 1
            assert not head_seen, f"{job_name}: gpupool installed after the head was checked out"
            assert run_dir(step) in base_dirs, (
                f"{job_name}: pip install runs in {run_dir(step)!r}, not in a checkout of the "
                f"base revision {sorted(base_dirs)}"
            )
            assert re.search(r"install( -\w+)* \.\s*$", run.strip()), run  # the base dir itself
            assert " -e " not in f" {run} " and "--editable" not in run
    assert installs == 1, f"{job_name}: expected one install of gpupool, found {installs}"


def test_the_base_checkout_is_the_base_revision_and_the_head_is_elsewhere():
    for name, job in jobs(load()).items():
        dirs: dict[str, str] = {}
        for step in filter(is_checkout, job["steps"]):
            kind = "base" if is_base_checkout(step) else "head"
            d = checkout_dir(step)
            assert d != ".", f"{name}: a checkout into the workspace root mixes base and head"
            assert dirs.setdefault(d, kind) == kind, f"{name}: {d} holds both base and head"
            assert (step.get("with") or {}).get("persist-credentials") is False, (
                f"{name}: the checkout into {d} leaves the token in .git/config"
            )


def test_gpupool_runs_in_the_base_checkout_and_reads_the_head_only_as_data():
    ran = 0
    for name, job in jobs(load()).items():
        for step in job["steps"]:
            uses = str(step.get("uses", ""))
            assert not uses.startswith("."), f"{name}: {uses} would run the checkout's action"
        base_dirs = {checkout_dir(s) for s in job["steps"] if is_base_checkout(s)}
        head_dirs = {
            checkout_dir(s) for s in job["steps"] if is_checkout(s) and not is_base_checkout(s)
        }
        for step in job["steps"]:
            run = str(step.get("run") or "")
            if not run:
                continue
            assert run_dir(step) not in head_dirs, f"{name}: a step runs inside the head checkout"
            for d in head_dirs:  # the head is named only as `--repo <head>`
                for m in re.finditer(rf"\S*\b{re.escape(d)}\b\S*", run):
                    before = run[: m.start()].rstrip()
                    assert before.endswith("--repo"), f"{name}: head used as {m.group()!r}: {run}"
            if re.search(r"(^|\s)gpupool\s", run):
                ran += 1
                assert run_dir(step) in base_dirs, f"{name}: gpupool runs outside the base"
                assert "python -m reconciler" not in run
    assert ran >= 2  # plan, pr-comment


def test_plan_compares_the_head_with_the_base_revision():
    plan_job = jobs(load())["plan"]
    runs = [str(s.get("run") or "") for s in plan_job["steps"]]
    (plan_run,) = [r for r in runs if re.search(r"gpupool plan\b", r)]
    assert "--base" in plan_run and "--repo" in plan_run and "--rev" in plan_run
    assert plan_job["env"]["BASE_SHA"] == BASE_SHA
    assert '--base "$BASE_SHA"' in plan_run


def test_least_privilege_only_the_commenting_job_writes_and_it_never_sees_the_head():
    wf = load()
    # pull_request, never pull_request_target: a fork's run gets a read-only token, no secrets
    assert set(wf["on"]) == {"pull_request"}, wf["on"]
    assert wf["permissions"] == {"contents": "read"}
    writers = []
    for name, job in jobs(wf).items():
        perms = job.get("permissions")
        assert isinstance(perms, dict), f"{name}: permissions must be explicit"
        assert perms.get("contents") == "read", f"{name}: {perms}"
        granted = {k for k, v in perms.items() if v == WRITE}
        if granted:
            writers.append(name)
            assert granted == {"pull-requests"}, f"{name}: writes {granted}"
            assert all(is_base_checkout(s) for s in job["steps"] if is_checkout(s)), (
                f"{name}: a job that can write to the pull request checks out the head"
            )
            assert any("gpupool pr-comment" in str(s.get("run") or "") for s in job["steps"])
    assert writers == ["comment"]
    comment = jobs(wf)["comment"]
    assert "plan" in (
        comment["needs"] if isinstance(comment["needs"], list) else [comment["needs"]]
    )
    assert "head.repo.full_name == github.repository" in comment["if"]  # forks: read-only token


def test_the_comment_is_posted_as_github_actions():
    comment = jobs(load())["comment"]
    (post,) = [s for s in comment["steps"] if "gpupool pr-comment" in str(s.get("run") or "")]
    assert '--author "github-actions[bot]"' in post["run"]
    assert post["env"]["GITHUB_TOKEN"] == "${{ secrets.GITHUB_TOKEN }}"
