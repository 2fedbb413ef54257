"""Every command that talks to a cluster (plan, apply, observe, reconcile --once, agent --once),
and pr-comment to GitHub, says what went wrong outside gpupool in one located line and exits 1:
a kubeconfig that is missing, not YAML or has no cluster; a server nobody listens on; no
in-cluster config; a 403; a server that never answers. Never a traceback, never 2 (which
`plan --detailed-exitcode` keeps for "changes").

Every server is on 127.0.0.1 (tests/support/loopback.py); waits are bounded by the clients' own
request timeouts, shortened here, so each case ends in seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.github import comment
from reconciler.observe import kube
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml
from tests.support.loopback import (
    FORBIDDEN_MESSAGE,
    closed_port,
    forbidding_server,
    silent_server,
    write_kubeconfig,
)

ROOT = Path(__file__).resolve().parents[1]
POOLS, POLICIES = str(ROOT / "pools"), str(ROOT / "policies")
SNAPSHOT = str(ROOT / "examples" / "observed.yaml")
SHORT = (0.5, 0.5)  # (connect, read) seconds instead of kube.REQUEST_TIMEOUT's (5, 60)
CLUSTER_COMMANDS = ("plan", "apply", "observe", "reconcile", "agent")
IN_CLUSTER_COMMANDS = ("observe", "reconcile", "agent")  # no --kubeconfig: the in-cluster config


@pytest.fixture(autouse=True)
def outside_a_cluster(monkeypatch):
    """No in-cluster config, and a fake NVML with one card (so the agent gets as far as the
    API server on a machine without GPUs)."""
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(
        "reconciler.observe.nvml._real_pynvml", lambda: FakeNvml([FakeGpu("A100-SXM4-80GB")])
    )


@pytest.fixture
def short_timeouts(monkeypatch):
    """The clients' own request timeouts, shortened: a server that never answers is given up
    on in about 2 s (urllib3's 3 retries included), not 4 minutes."""
    monkeypatch.setattr(kube.bound_requests, "__defaults__", (SHORT,))
    monkeypatch.setattr(comment, "TIMEOUT_S", SHORT[1])


@pytest.fixture(scope="module")
def saved_plan(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("plan") / "plan.json"
    assert main(["plan", POOLS, POLICIES, "--observed", SNAPSHOT, "--out", str(out)]) == 0
    return str(out)


def argv(command: str, kubeconfig: str | None, tmp: Path, saved_plan: str) -> list[str]:
    k = ["--kubeconfig", kubeconfig] if kubeconfig is not None else []
    return {
        "plan": ["plan", POOLS, POLICIES, *k],
        "apply": ["apply", saved_plan, POOLS, POLICIES, *k],
        "observe": ["observe", "--out", str(tmp / "snap.yaml"), *k],
        "reconcile": ["reconcile", "--once", "--path", str(ROOT), *k],
        "agent": ["agent", "--once", "--node", "gpu-1", "--pod-resources-socket", "", *k],
    }[command]


def one_line_error(command: str, capsys) -> str:
    """The single line the command wrote to stderr, checked for its prefix."""
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert "Traceback" not in captured.err, captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"gpupool {command}: error: "), lines[0]
    return lines[0]


def _lines(err: str) -> list[str]:
    assert "Traceback" not in err, err
    return [line for line in err.splitlines() if line.strip()]


def run(args: list[str]) -> int:
    try:
        return main(args)
    except SystemExit as exc:  # a usage error: not what these tests are about
        pytest.fail(f"usage error (exit {exc.code}) for {args}")


# --------------------------------------------------------------------------- the kubeconfig


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_missing_kubeconfig(command, tmp_path, saved_plan, capsys):
    missing = str(tmp_path / "nowhere.yaml")
    assert run(argv(command, missing, tmp_path, saved_plan)) == 1
    line = one_line_error(command, capsys)
    assert f"--kubeconfig {missing}: no such file" in line
    assert "~/.kube/config" in line  # what to give instead


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_kubeconfig_that_is_not_yaml(command, tmp_path, saved_plan, capsys):
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("clusters: [\n  {name: c, cluster: {server: 'x'}\n: ::\n")
    assert run(argv(command, str(garbage), tmp_path, saved_plan)) == 1
    line = one_line_error(command, capsys)
    assert f"--kubeconfig {garbage}: not YAML (line " in line


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_kubeconfig_without_clusters(command, tmp_path, saved_plan, capsys):
    empty = tmp_path / "empty.yaml"
    empty.write_text("apiVersion: v1\nkind: Config\n")
    assert run(argv(command, str(empty), tmp_path, saved_plan)) == 1
    line = one_line_error(command, capsys)
    assert f"--kubeconfig {empty}: not a usable kubeconfig" in line


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_kubeconfig_that_is_a_directory(command, tmp_path, saved_plan, capsys):
    assert run(argv(command, str(tmp_path), tmp_path, saved_plan)) == 1
    assert f"--kubeconfig {tmp_path}: a directory" in one_line_error(command, capsys)


@pytest.mark.parametrize("command", IN_CLUSTER_COMMANDS)
def test_no_in_cluster_config(command, tmp_path, saved_plan, capsys):
    assert run(argv(command, None, tmp_path, saved_plan)) == 1
    line = one_line_error(command, capsys)
    assert "not running in a cluster (KUBERNETES_SERVICE_HOST is not set)" in line
    assert "give --kubeconfig FILE" in line


# --------------------------------------------------------------------------- the API server


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_an_unreachable_server(command, tmp_path, saved_plan, capsys):
    server = f"https://127.0.0.1:{closed_port()}"
    k = str(write_kubeconfig(tmp_path / "k.yaml", server))
    assert run(argv(command, k, tmp_path, saved_plan)) == 1
    line = one_line_error(command, capsys)
    assert line == (
        f"gpupool {command}: error: cannot reach the API server at {server} "
        f"(from --kubeconfig {k}): connection refused"
    )


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_forbidding_server(command, tmp_path, saved_plan, capsys):
    with forbidding_server() as server:
        k = str(write_kubeconfig(tmp_path / "k.yaml", server))
        assert run(argv(command, k, tmp_path, saved_plan)) == 1
    line = one_line_error(command, capsys)
    assert line == (
        f"gpupool {command}: error: the API server at {server} (from --kubeconfig {k}) "
        f"forbids it (403 Forbidden): {FORBIDDEN_MESSAGE}"
    )


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_a_server_that_never_answers(command, tmp_path, saved_plan, capsys, short_timeouts):
    with silent_server() as server:
        k = str(write_kubeconfig(tmp_path / "k.yaml", server))
        assert run(argv(command, k, tmp_path, saved_plan)) == 1
    line = one_line_error(command, capsys)
    assert line.startswith(
        f"gpupool {command}: error: no answer from the API server at {server} "
        f"(from --kubeconfig {k}): read timed out"
    )


def test_the_agent_says_when_nvml_cannot_be_read(tmp_path, saved_plan, capsys, monkeypatch):
    driver_not_loaded = 9  # NVML_ERROR_DRIVER_NOT_LOADED
    monkeypatch.setattr(
        "reconciler.observe.nvml._real_pynvml",
        lambda: FakeNvml([], failures={"nvmlInit": driver_not_loaded}),
    )
    with forbidding_server() as server:  # the last publication is not readable: no matter
        k = str(write_kubeconfig(tmp_path / "k.yaml", server))
        assert run(argv("agent", k, tmp_path, saved_plan)) == 1
    line = one_line_error("agent", capsys)
    assert "cannot read this node's GPUs: NVML nvmlInit failed" in line


def test_an_empty_kubeconfig_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["observe", "--kubeconfig", ""])
    assert exit_.value.code == 1
    assert "argument --kubeconfig: empty" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "says"),
    [("2m", "must be a duration from 0 to 1m"), ("soon", "is not a duration like 30s")],
)
def test_a_wake_gap_out_of_range_is_a_usage_error(text, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["reconcile", "--path", ".", "--wake-gap", text])
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "argument --wake-gap" in err and says in err


# --------------------------------------------------------------------------- files, and bugs


def test_plan_out_into_a_directory_names_the_option(tmp_path, capsys):
    argv = ["plan", POOLS, POLICIES, "--observed", SNAPSHOT]
    assert main([*argv, "--out", str(tmp_path)]) == 1
    assert _lines(capsys.readouterr().err) == [
        f"gpupool plan: error: --out {tmp_path}: cannot write: is a directory"
    ]


def test_a_bug_is_one_line_and_the_traceback_is_there_when_asked(capsys, monkeypatch):
    def broken(args):
        raise RuntimeError("a bug\nsecond line")

    monkeypatch.setattr("reconciler.commands.policy.cmd_schema", broken)
    monkeypatch.delenv("GPUPOOL_TRACEBACK", raising=False)
    assert main(["schema"]) == 1
    (line,) = _lines(capsys.readouterr().err)
    assert line.startswith("gpupool schema: internal error: RuntimeError: a bug (a bug in gpupool;")
    assert "GPUPOOL_TRACEBACK=1" in line
    monkeypatch.setenv("GPUPOOL_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="a bug"):
        main(["schema"])


def test_a_closed_pipe_ends_quietly(capsys, monkeypatch):
    def reader_left(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("reconciler.commands.policy.cmd_validate", reader_left)
    assert main(["validate"]) == 1
    assert capsys.readouterr().err == ""


# --------------------------------------------------------------------------- from a shell


def _shell(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "reconciler.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_reconcile_once_outside_a_cluster_from_a_shell(tmp_path):
    """The console path, its logging configured: still exactly one line."""
    done = _shell(["reconcile", "--once", "--path", str(ROOT)], tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "gpupool reconcile: error: not running in a cluster (KUBERNETES_SERVICE_HOST is not "
        "set) and no --kubeconfig given: give --kubeconfig FILE to reach a cluster from "
        "outside it"
    ]


def test_plan_against_a_closed_port_from_a_shell(tmp_path):
    server = f"http://127.0.0.1:{closed_port()}"
    write_kubeconfig(tmp_path / "k.yaml", server)
    done = _shell(["plan", POOLS, POLICIES, "--kubeconfig", "k.yaml"], tmp_path)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"gpupool plan: error: cannot reach the API server at {server} "
        "(from --kubeconfig k.yaml): connection refused"
    ]


# --------------------------------------------------------------------------- GitHub


@pytest.fixture
def body(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")
    f = tmp_path / "plan.md"
    f.write_text("plan")
    return str(f)


def pr_comment(body: str, api: str) -> list[str]:
    return ["pr-comment", "--repo", "o/r", "--pr", "7", "--body-file", body, "--api-url", api]


def test_pr_comment_to_a_closed_port(body, capsys):
    api = f"http://127.0.0.1:{closed_port()}"
    assert run(pr_comment(body, api)) == 1
    line = one_line_error("pr-comment", capsys)
    assert line.endswith(f"cannot reach GitHub at {api} (--api-url): connection refused")


def test_pr_comment_to_a_server_that_never_answers(body, capsys, short_timeouts):
    with silent_server() as api:
        assert run(pr_comment(body, api)) == 1
    line = one_line_error("pr-comment", capsys)
    assert f"cannot reach GitHub at {api} (--api-url): timed out" in line


def test_pr_comment_refused(body, capsys):
    with forbidding_server() as api:
        assert run(pr_comment(body, api)) == 1
    line = one_line_error("pr-comment", capsys)
    assert f"GitHub at {api} (--api-url): GET {api}/repos/o/r/issues/7/comments" in line
    assert f"HTTP 403: {FORBIDDEN_MESSAGE}" in line


def test_pr_comment_without_its_body_file(tmp_path, body, capsys):
    missing = str(tmp_path / "none.md")
    assert run(pr_comment(missing, "http://127.0.0.1:9")) == 1
    line = one_line_error("pr-comment", capsys)
    assert line.endswith(f"--body-file {missing}: cannot read: no such file or directory")


def test_an_answer_that_is_not_json(monkeypatch):
    gh = comment.GitHub("t", "http://x", transport=lambda *a: (200, {}, b"<html>proxy</html>"))
    with pytest.raises(comment.GitHubError, match="not JSON"):
        gh.comments("o/r", 7)
    gh = comment.GitHub("t", "http://x", transport=lambda *a: (200, {}, b'{"a": 1}'))
    with pytest.raises(comment.GitHubError, match="not a list of comments"):
        gh.comments("o/r", 7)
