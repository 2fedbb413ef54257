"""`gpupool plan --base --twin-load`: the digital twin replayed over a load file for the base
and the head desired state, one line in the change report (issue 15 item 5).

A 2-node x 4-card pool (the twin tests' desired state, tests/sim/twin_inputs.py); the head caps
the service at 2 replicas where the base allows 8. Three hours of synthetic load (1, then 6,
then 1 req/s at 1 req/s per replica) and a few training jobs, in tmp.
"""

from __future__ import annotations

import json
from datetime import timedelta

import git
import pytest

from reconciler.cli import main
from reconciler.observe.builders import node, snapshot
from reconciler.observe.snapshot import dump_snapshot
from tests.sim.twin_inputs import POLICIES, POOL, START

HEAD_POLICIES = POLICIES.replace("maxReplicas: 8", "maxReplicas: 2")


def _commit(r: git.Repo, d, policies: str, message: str) -> None:
    (d / "pools").mkdir(exist_ok=True)
    (d / "policies").mkdir(exist_ok=True)
    (d / "pools" / "p.yaml").write_text(POOL)
    (d / "policies" / "policies.yaml").write_text(policies)
    r.index.add(["pools/p.yaml", "policies/policies.yaml"])
    r.index.commit(message)


@pytest.fixture
def repo(tmp_path):
    assert HEAD_POLICIES != POLICIES
    d = tmp_path / "policy-repo"
    d.mkdir()
    r = git.Repo.init(d, initial_branch="main")
    with r.config_writer() as c:
        c.set_value("user", "name", "test").set_value("user", "email", "t@example.com")
    _commit(r, d, POLICIES, "base: up to 8 replicas")
    r.create_head("feature").checkout()
    _commit(r, d, HEAD_POLICIES, "cap the service at 2 replicas")
    r.heads.main.checkout()
    obs = tmp_path / "observed.yaml"
    nodes = [node(f"p-{i:03d}", "p", "A100-SXM4-80GB", count=4) for i in range(2)]
    obs.write_text(dump_snapshot(snapshot(START, nodes, [])))
    load = tmp_path / "load.csv"
    rows, t = ["Time,TIMESTAMP"], START
    for seconds, rate in ((3600, 1), (3600, 6), (3600, 1)):
        for _ in range(seconds // 10):
            rows.append(f"{t:%Y-%m-%d %H:%M:%S},{rate * 10}")
            t += timedelta(seconds=10)
    load.write_text("\n".join(rows) + "\n")
    jobs = tmp_path / "jobs.csv"
    jobs.write_text(
        "arrival,gpus,duration,checkpoint_period\n"
        + "".join(f"{60 * i},1,14400,1200\n" for i in range(8))
    )
    return d, obs, load, jobs


def plan(capsys, repo, *extra, fmt="text"):
    d, obs, load, jobs = repo
    argv = ["plan", "--repo", str(d), "--base", "main", "--rev", "feature"]
    argv += ["--observed", str(obs), "--format", fmt, *extra]
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def twin_args(repo, load=None):
    _, _, default_load, jobs = repo
    return (
        "--twin-load",
        str(load or default_load),
        "--twin-service-rate",
        "1",
        "--twin-training",
        str(jobs),
    )


def test_no_load_no_line(repo, capsys):
    rc, out, err = plan(capsys, repo)
    assert rc == 0, err
    assert "Twin replay" not in out
    rc, out, _ = plan(capsys, repo, fmt="json")
    assert json.loads(out)["replay"] is None


def test_the_replay_line_shows_what_the_cap_costs(repo, capsys):
    rc, out, err = plan(capsys, repo, *twin_args(repo), fmt="json")
    assert rc == 0, err
    replay = json.loads(out)["replay"]
    b, h = replay["base"], replay["head"]
    assert replay["problem"] is None and replay["hours"] == 2
    # capped at 2 replicas, the head serves the 6 req/s hour worse ...
    assert h["slo_attainment"] < b["slo_attainment"] - 0.1
    # ... and preempts less training for serving replicas
    assert h["preemptions_per_hour"] < b["preemptions_per_hour"]
    assert h["gpu_h_lost"] <= b["gpu_h_lost"]
    # ... so training keeps the cards: more of the pool does useful work
    assert h["useful_utilisation"] > b["useful_utilisation"]
    # the same numbers in the text report's line
    rc, text, _ = plan(capsys, repo, *twin_args(repo))
    assert rc == 0
    line = next(x for x in text.splitlines() if x.startswith("Twin replay"))
    assert f"over 2 h of {repo[2]}" in line
    assert (
        f"inference SLO {100 * b['slo_attainment']:.2f}% -> {100 * h['slo_attainment']:.2f}%"
        in line
    )
    assert (
        f"preemptions {b['preemptions_per_hour']:.2f}/h -> {h['preemptions_per_hour']:.2f}/h"
        in line
    )
    assert "useful utilisation" in line and "GPU-hours lost" in line


def test_the_pr_comment_carries_the_line(repo, capsys):
    from reconciler.github.comment import MARKER, split_body

    rc, md, err = plan(capsys, repo, *twin_args(repo), fmt="markdown")
    assert rc == 0, err
    line = next(x for x in md.splitlines() if x.startswith("Twin replay"))
    assert f"over 2 h of `{repo[2]}`" in line and " → " in line and "inference SLO" in line
    # above the capacity table: kept however long the rest of the comment is
    assert md.index(line) < md.index("| pool |")
    (body,) = split_body(md)
    assert body.startswith(MARKER) and line in body


def test_same_revision_same_numbers(repo, capsys):
    d, obs, load, jobs = repo
    rc = main(
        ["plan", "--repo", str(d), "--base", "main", "--rev", "main", "--observed", str(obs)]
        + ["--format", "json", *twin_args(repo)]
    )
    replay = json.loads(capsys.readouterr().out)["replay"]
    assert rc == 0 and replay["base"] == replay["head"]


@pytest.mark.parametrize(
    "content, where",
    [
        ("Time,TIMESTAMP\n2024-05-10 00:00:00,10\n2024-05-10 00:00:10,-3\n", ":3: "),
        ("Time,requests\n2024-05-10 00:00:00,10\n", ":1: missing column TIMESTAMP"),
        (
            "Time,TIMESTAMP\n2024-05-10 00:00:10,1\n2024-05-10 00:00:00,1\n",
            ":3: Time 2024-05-10 00:00:00 is not after",
        ),
    ],
    ids=["negative", "missing-column", "unsorted"],
)
def test_bad_load_file_is_one_line_exit_1(repo, capsys, tmp_path, content, where):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    rc, out, err = plan(capsys, repo, *twin_args(repo, load=bad))
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and f"{bad}{where}" in err, err


def test_bad_options(repo, capsys):
    _, _, load, _ = repo
    rc, _, err = plan(capsys, repo, "--twin-load", str(load))
    assert rc == 1 and "--twin-service-rate" in err
    rc, _, err = plan(capsys, repo, *twin_args(repo)[:3], "0")
    assert rc == 1 and "--twin-service-rate must be positive" in err
    bad = load.parent / "bad-jobs.csv"
    bad.write_text("arrival,gpus,duration\n0,1,60\n10,1.5,60\n")
    rc, out, err = plan(capsys, repo, *twin_args(repo)[:4], "--twin-training", str(bad))
    assert rc == 1 and out == "" and f"{bad}:3: gpus 1.5 is not a whole number" in err
    d, obs, *_ = repo
    rc = main(["plan", "--observed", str(obs), "--repo", str(d), "--twin-load", str(load)])
    assert rc == 1 and "--base" in capsys.readouterr().err


def test_a_revision_the_twin_cannot_run_is_said_not_failed(repo, capsys, tmp_path):
    """A head without a ScalingPolicy has no service for the load to feed: the line says so,
    the change is still planned."""
    d, obs, load, jobs = repo
    r = git.Repo(d)
    r.heads.feature.checkout()
    (d / "policies" / "policies.yaml").write_text(POLICIES[: POLICIES.index("---\napiVersion")])
    r.index.add(["policies/policies.yaml"])
    r.index.commit("no autoscaling")
    r.heads.main.checkout()
    rc, out, err = plan(capsys, repo, *twin_args(repo))
    assert rc == 0, err
    assert "Twin replay over 2 h of" in out
    assert "not compared: head: the desired state has no ScalingPolicy" in out
