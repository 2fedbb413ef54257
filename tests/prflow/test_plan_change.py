"""`gpupool plan --base`: a real git repository with a base and a head commit on two branches."""

from __future__ import annotations

import json
from pathlib import Path

import git
import pytest

from reconciler.cli import main
from reconciler.observe.builders import gpu, mig_pod, node, snapshot, training
from reconciler.observe.snapshot import dump_snapshot
from tests.plan.scenarios import A100, NOW, _objects, ago, desired_text

H100 = "H100-SXM5-80GB"

GATES = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ChangePolicy
metadata: {{name: gates}}
spec:
  gates: {{maxPreemptions: {max_pre}, maxRepartitions: 8, maxDrainedNodes: 2}}
"""


def _write(repo_dir: Path, inf_max: int, max_pre: int) -> None:
    # H100: a MIG mode change costs one card (on A100 it resets the whole node)
    text = (
        desired_text(train_min=4)
        .replace("maxGPUs: 8\n    prefer", f"maxGPUs: {inf_max}\n    prefer")
        .replace(A100, H100)
    )
    assert f"maxGPUs: {inf_max}" in text
    pool, policies = text.split("---\n", 1)
    (repo_dir / "pools").mkdir(exist_ok=True)
    (repo_dir / "policies").mkdir(exist_ok=True)
    (repo_dir / "pools" / "a100.yaml").write_text(pool)
    (repo_dir / "policies" / "policies.yaml").write_text(
        "---\n" + policies + GATES.format(max_pre=max_pre)
    )


@pytest.fixture
def repo(tmp_path):
    """main: no card may serve inference; feature: up to 8 may. Cluster: all training, and
    eight 3g.40gb serving pods wait (four cards' worth in the two-3g layout)."""
    d = tmp_path / "policy-repo"
    d.mkdir()
    r = git.Repo.init(d, initial_branch="main")
    with r.config_writer() as c:
        c.set_value("user", "name", "test").set_value("user", "email", "t@example.com")
    _write(d, inf_max=0, max_pre=2)
    r.index.add(["pools/a100.yaml", "policies/policies.yaml"])
    r.index.commit("base: all cards for training")
    r.create_head("feature").checkout()
    _write(d, inf_max=8, max_pre=2)
    r.index.add(["pools/a100.yaml", "policies/policies.yaml"])
    r.index.commit("let inference have up to 8 cards")
    r.heads.main.checkout()
    nodes = [
        node(f"a100-{i}", "a100", H100, [gpu(k, model=H100) for k in range(8)]) for i in (1, 2)
    ]
    work = [
        training(
            "team-b",
            "sweep-old",
            "a100-1",
            [0, 1, 2, 3],
            cls="training-low",
            started=ago(6),
            checkpoint=ago(0.5),
        ),
        training(
            "team-b",
            "sweep-new",
            "a100-1",
            [4, 5, 6, 7],
            cls="training-low",
            started=ago(3),
            checkpoint=ago(0.1),
        ),
        training("team-a", "resnet", "a100-2", 8, cls="training-high", started=ago(3)),
    ]
    work += [mig_pod("search", f"ranker-{i}", None, "3g.40gb", pool="a100") for i in range(8)]
    obs = tmp_path / "observed.yaml"
    obs.write_text(dump_snapshot(snapshot(NOW, nodes, work, **_objects(desired_text()))))
    return d, r, obs


def run(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_moves_four_cards_and_names_the_disrupted_workload(repo, capsys):
    d, r, obs = repo
    before = r.head.commit.hexsha
    rc, out, err = run(
        capsys,
        "plan",
        "--repo",
        str(d),
        "--base",
        "main",
        "--rev",
        "feature",
        "--observed",
        str(obs),
        "--format",
        "markdown",
    )
    assert rc == 0, err
    assert "a100: 4 GPUs training -> inference" in out
    assert "| a100 | 16 / 0 / 0 | 12 / 4 / 0 | -4 | +4 | +0 |" in out
    assert (
        "`team-b/sweep-new`" in out and "`preempt`" in out
    )  # the least work lost since checkpoint
    assert "sweep-old" not in out
    assert out.count("| `a100-1` |") == 4  # the four cards, before -> after
    assert "whole | MIG[" in out
    assert "`Pool/a100 spec.inference.maxGPUs: 0 -> 8`" in out
    assert r.head.commit.hexsha == before and r.active_branch.name == "main"  # nothing checked out


def test_json_report(repo, capsys):
    d, _, obs = repo
    rc, out, _ = run(
        capsys,
        "plan",
        "--repo",
        str(d),
        "--base",
        "main",
        "--rev",
        "feature",
        "--observed",
        str(obs),
        "--format",
        "json",
    )
    data = json.loads(out)
    assert rc == 0
    assert data["capacity"]["a100"]["delta"] == {"whole": -4, "mig": 4, "shared": 0}
    assert [x["workload"] for x in data["disruptions"]] == ["team-b/sweep-new"]
    assert len(data["repartitions"]) == 4
    assert data["gates"] == []


def test_gate_trips_and_exits_1(repo, capsys):
    d, r, obs = repo
    # the base's gate allows no preemption at all; the head cannot loosen it
    _write(d, inf_max=0, max_pre=0)
    r.index.add(["policies/policies.yaml"])
    r.index.commit("tighten gates on main")
    rc, out, err = run(
        capsys,
        "plan",
        "--repo",
        str(d),
        "--base",
        "main",
        "--rev",
        "feature",
        "--observed",
        str(obs),
        "--format",
        "markdown",
    )
    assert rc == 1
    assert "BLOCKED" in out and "Safety gates tripped" in out
    assert (
        "1 workloads would be preempted/moved/reclaimed by this change; ChangePolicy/gates allows 0"
        in err
    )


def test_same_revision_changes_nothing(repo, capsys):
    d, _, obs = repo
    rc, out, _ = run(
        capsys,
        "plan",
        "--repo",
        str(d),
        "--base",
        "main",
        "--rev",
        "main",
        "--observed",
        str(obs),
        "--detailed-exitcode",
    )
    assert rc == 0
    assert "no capacity moves; 0 repartitions; 0 workloads disrupted" in out


def test_deleting_a_pool_needs_confirmation(repo, capsys):
    d, r, obs = repo
    r.heads.feature.checkout()
    (d / "pools" / "a100.yaml").unlink()
    # quotas and policies refer to the pool; drop them too so the head is valid
    (d / "policies" / "policies.yaml").write_text(GATES.format(max_pre=2))
    r.index.remove(["pools/a100.yaml"])
    r.index.add(["policies/policies.yaml"])
    r.index.commit("decommission a100")
    r.heads.main.checkout()
    rc, _, err = run(
        capsys,
        "plan",
        "--repo",
        str(d),
        "--base",
        "main",
        "--rev",
        "feature",
        "--observed",
        str(obs),
    )
    assert rc == 1
    assert "Pool/a100 is deleted" in err and "every Quota (2) is deleted" in err
    rc, _, err = run(
        capsys,
        "plan",
        "--repo",
        str(d),
        "--base",
        "main",
        "--rev",
        "feature",
        "--observed",
        str(obs),
        "--confirm",
        "empty-pool",
        "--confirm",
        "delete-all-quotas",
    )
    assert rc == 0, err


def test_invalid_head_is_reported_not_planned(repo, capsys):
    d, r, obs = repo
    r.heads.feature.checkout()
    (d / "pools" / "a100.yaml").write_text(
        (d / "pools" / "a100.yaml").read_text().replace("minGPUs: 4", "minGPUs: four", 1)
    )
    r.index.add(["pools/a100.yaml"])
    r.index.commit("typo")
    r.heads.main.checkout()
    rc, out, err = run(
        capsys,
        "plan",
        "--repo",
        str(d),
        "--base",
        "main",
        "--rev",
        "feature",
        "--observed",
        str(obs),
        "--format",
        "markdown",
    )
    assert rc == 1
    assert "head revision is invalid" in out and "pools/a100.yaml:" in out
    assert "Traceback" not in err
