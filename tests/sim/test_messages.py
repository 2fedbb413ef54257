"""The simulator's messages lead somewhere: each names what the user gave (the file, the option,
where a default was looked for) and what to give instead, with the flag of the command the
user ran (`gpupool simulate` or `gpupool plan --base ... --twin-load`); and every option of
`gpupool simulate` says what it does and its default.
"""

from __future__ import annotations

import argparse
import re
from datetime import timedelta

import pytest

import reconciler.sim.trace as trace_mod
from reconciler.cli import build_parser, main
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.sim.trace import OPENB_ENV
from reconciler.sim.twin_cli import ReplayInputError, replay_change
from tests.sim.twin_inputs import POLICIES, POOL, START

TARGET = "    - {namespace: serve, name: llm, kind: Deployment, minReplicas: 1, maxReplicas: 8}\n"
TWO_TARGETS = POLICIES.replace(
    TARGET,
    TARGET + TARGET.replace("name: llm", "name: embed").replace("maxReplicas: 8", "maxReplicas: 4"),
)
SIMULATE_SERVICE = re.compile(r"(?<![\w-])--service\b(?!-)")  # not --service-rate


def write_load(path, hours: float = 1.0, rate: float = 1.0):
    rows, t = ["Time,TIMESTAMP"], START
    for _ in range(int(hours * 360)):
        rows.append(f"{t:%Y-%m-%d %H:%M:%S},{rate * 10:g}")
        t += timedelta(seconds=10)
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture
def files(tmp_path):
    """The twin's pool and policies in a folder, a one-hour load, two training jobs."""
    d = tmp_path / "desired"
    d.mkdir()
    (d / "pool.yaml").write_text(POOL)
    (d / "policies.yaml").write_text(POLICIES)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("arrival,gpus,duration\n0,1,3600\n60,2,3600\n")
    return d, write_load(tmp_path / "load.csv"), jobs


@pytest.fixture
def no_trace(tmp_path, monkeypatch):
    """No openb trace where the simulator looks by default: ../shared/data/openb next to a
    repository in tmp, and GPUPOOL_OPENB_DIR unset. Returns the folder it looks in."""
    monkeypatch.delenv(OPENB_ENV, raising=False)
    monkeypatch.setattr(trace_mod, "repo_root", lambda: tmp_path / "checkout" / "gpupool")
    return tmp_path / "checkout" / "shared" / "data" / "openb"


def simulate(capsys, *argv) -> tuple[int, str]:
    rc = main(["simulate", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) <= 1, err  # one line, no traceback
    return rc, err[0] if err else ""


def twin(files, *extra) -> list[str]:
    d, load_csv, jobs = files
    return ["--mode", "twin", "--desired", str(d), "--load", str(load_csv)] + [
        "--service-rate", "1", "--training", str(jobs), "--warmup", "10m", *extra
    ]  # fmt: skip


def plan_args(*extra) -> argparse.Namespace:
    return build_parser().parse_args(["plan", "--base", "main", *extra])


def desired(policies: str):
    return load([SourceFile("pool.yaml", POOL), SourceFile("policies.yaml", policies)])


# ------------------------------------------------------------- the flag of the command run


def test_several_services_name_the_flag_of_the_command_run(files, capsys):
    d, load_csv, jobs = files
    (d / "policies.yaml").write_text(TWO_TARGETS)
    rc, err = simulate(capsys, *twin(files))
    assert rc == 1
    assert "serve/llm, serve/embed" in err and SIMULATE_SERVICE.search(err), err
    # the same error under `plan --base --twin-load`: its option is --twin-service
    args = plan_args(
        "--twin-load", str(load_csv), "--twin-service-rate", "1", "--twin-warmup", "0s"
    )
    replay = replay_change(desired(TWO_TARGETS), desired(TWO_TARGETS), args)
    assert "serve/llm, serve/embed" in replay.problem
    assert "--twin-service NS/NAME" in replay.problem, replay.problem
    assert not SIMULATE_SERVICE.search(replay.problem), replay.problem


def test_an_unknown_service_lists_the_targets(files, capsys):
    rc, err = simulate(capsys, *twin(files, "--service", "serve/nope"))
    assert rc == 1
    assert "--service serve/nope" in err and "serve/llm" in err, err


def test_a_load_too_big_for_the_pool_names_the_rate_option_of_the_command(files, capsys):
    d, load_csv, jobs = files
    rc, err = simulate(capsys, *twin(files)[:-4], "--service-rate", "0.01", "--warmup", "10m")
    assert rc == 1 and "raise --service-rate" in err, err
    args = plan_args(
        "--twin-load", str(load_csv), "--twin-service-rate", "0.01", "--twin-training", str(jobs),
        "--twin-warmup", "0s",
    )  # fmt: skip
    replay = replay_change(desired(POLICIES), desired(POLICIES), args)
    assert "raise --twin-service-rate" in replay.problem, replay.problem


@pytest.mark.parametrize(
    "extra, flag",
    [
        (("--period", "0s"), "--period 0s"),
        (("--replica-gpus", "0"), "--replica-gpus"),
        (("--concurrency", "0"), "--concurrency"),
        (("--days", "0"), "--days"),
        (("--days", "-1"), "--days"),
        (("--warmup", "2h"), "--warmup 2h"),
    ],
)
def test_a_bad_twin_setting_names_its_option(files, capsys, extra, flag):
    args = twin(files)
    if extra[0] == "--warmup":
        args = args[:-2]
    rc, err = simulate(capsys, *args, *extra)
    assert rc == 1 and flag in err, err


# ------------------------------------------------------------- where a default was looked for


def test_plain_simulate_without_the_trace_says_where_it_looked_and_how_to_point_elsewhere(
    no_trace, capsys, monkeypatch, tmp_path
):
    rc, err = simulate(capsys)
    assert rc == 1
    assert str(no_trace / "openb_node_list_gpu_node.csv") in err
    assert f"{OPENB_ENV} is not set" in err and "--nodes CSV" in err and "--pods CSV" in err, err
    # told where to look, it says that is where it looked
    empty = tmp_path / "elsewhere"
    empty.mkdir()
    monkeypatch.setenv(OPENB_ENV, str(empty))
    rc, err = simulate(capsys)
    assert rc == 1 and f"{OPENB_ENV}={empty}" in err and "--nodes CSV" in err, err
    # a node file given, the pods still from the default: only --pods is asked for
    nodes = tmp_path / "nodes.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,1,T4\n")
    rc, err = simulate(capsys, "--nodes", str(nodes))
    assert rc == 1 and "openb_pod_list_default.csv" in err, err
    assert "--pods CSV" in err and "--nodes" not in err, err


def test_twin_openb_jobs_without_the_trace_name_the_options_of_the_command(files, no_trace, capsys):
    d, load_csv, _ = files
    rc, err = simulate(
        capsys, "--mode", "twin", "--desired", str(d), "--load", str(load_csv),
        "--service-rate", "1",
    )  # fmt: skip
    assert rc == 1 and str(no_trace / "openb_pod_list_default.csv") in err, err
    assert OPENB_ENV in err and "--pods CSV" in err and "--training CSV" in err, err
    args = plan_args(
        "--twin-load", str(load_csv), "--twin-service-rate", "1", "--twin-training", "openb"
    )
    with pytest.raises(ReplayInputError) as e:
        replay_change(desired(POLICIES), desired(POLICIES), args)
    assert OPENB_ENV in str(e.value) and "--twin-training CSV" in str(e.value), e.value
    assert "--pods" not in str(e.value)  # plan has no --pods


def test_no_policy_files_says_where_it_looked(files, capsys, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    _, load_csv, jobs = files
    rc, err = simulate(
        capsys, "--mode", "twin", "--load", str(load_csv), "--service-rate", "1",
        "--training", str(jobs),
    )  # fmt: skip
    assert rc == 1 and str(empty) in err and "--desired" in err, err


# ------------------------------------------------------------- files and lists


def test_openb_pods_without_training_jobs_name_the_file_and_the_way_out(files, capsys, tmp_path):
    d, load_csv, _ = files
    pods = tmp_path / "pods.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n")
    rc, err = simulate(
        capsys, "--mode", "twin", "--desired", str(d), "--load", str(load_csv),
        "--service-rate", "1", "--pods", str(pods),
    )  # fmt: skip
    assert rc == 1 and str(pods) in err and "--training CSV" in err, err


@pytest.mark.parametrize(
    "option, content, expect",
    [
        ("--load", "Time,TIMESTAMP\n2024-05-10 00:00:00,1\n", "1 row"),
        ("--training", "arrival,gpus,duration\n", "one row per job"),
    ],
)
def test_a_file_too_short_says_what_it_has_and_needs(
    files, capsys, tmp_path, option, content, expect
):
    f = tmp_path / "short.csv"
    f.write_text(content)
    args = twin(files)
    args[args.index(option) + 1] = str(f)
    rc, err = simulate(capsys, *args)
    assert rc == 1 and str(f) in err and expect in err, err


@pytest.mark.parametrize(
    "argv, expect",
    [
        (("--policy", ","), "--policy is empty: give one or more of random, bestfit"),
        (("--policy", "best"), "--policy: unknown policy 'best'"),
        (("--seed", ","), "--seed is empty: give comma-separated integers"),
    ],
)
def test_list_options_say_what_to_give(capsys, tmp_path, argv, expect):
    nodes, pods = tmp_path / "n.csv", tmp_path / "p.csv"
    nodes.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1024,1,T4\n")
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,1,1000\n")
    rc, err = simulate(capsys, "--nodes", str(nodes), "--pods", str(pods), *argv)
    assert rc == 1 and expect in err, err


# ------------------------------------------------------------- simulate --help


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _shown(default) -> str:
    return f"{default:g}" if isinstance(default, float | int) else str(default)


def test_every_simulate_option_has_help_that_shows_its_default():
    """Walk `gpupool simulate`'s parser: each option says what it does and, unless it is a
    switch, its default (or that it is needed, for one without)."""
    p = _subparser("simulate")
    missing = []
    for a in p._actions:
        if a.help == argparse.SUPPRESS or "-h" in a.option_strings:
            continue
        name = a.option_strings[0]
        text = (a.help or "") % {"default": a.default, "prog": p.prog}
        if not text:
            missing.append(f"{name}: no help")
        elif isinstance(a, argparse._StoreTrueAction):
            continue
        elif a.default is None:
            if "default" not in text and "needed" not in text:
                missing.append(f"{name}: says neither its default nor that it is needed")
        elif f"default {_shown(a.default)}" not in text.replace(":", ""):
            missing.append(f"{name}: does not show its default {_shown(a.default)}")
    assert not missing, missing


def test_plans_twin_options_have_help_that_shows_their_defaults():
    p = _subparser("plan")
    for a in p._actions:
        if not any(o.startswith("--twin") for o in a.option_strings):
            continue
        assert a.help, a.option_strings
        if a.default is not None:
            assert f"default {_shown(a.default)}" in a.help.replace(":", ""), a.option_strings
    service = next(a for a in p._actions if "--twin-service" in a.option_strings)
    assert "default" in service.help
