"""Exit codes a CI gate can trust: a usage error (an unknown option, a bad value, a missing
argument) exits 1 with argparse's usual message, for every command and for `gpupool` itself;
2 only ever means "the plan has changes" under `plan --detailed-exitcode` (and "steps still
waiting" from `apply`, its documented code), never a typo.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import build_parser, main, subparsers

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"

EXPECTED = {
    "validate",
    "schema",
    "plan",
    "apply",
    "reconcile",
    "agent",
    "observe",
    "pr-comment",
    "simulate",
}
COMMANDS = sorted(subparsers(build_parser()))

# what each command needs for argparse to get as far as the option under test
REQUIRED = {
    "apply": ["plan.json"],
    "pr-comment": ["--repo", "o/r", "--pr", "7", "--body-file", "plan.md"],
}

# bad values, per command: a choice not offered, a value of the wrong type, an option missing
# its value, a missing required argument
BAD_VALUES: dict[str, list[list[str]]] = {
    "validate": [["--format", "yaml"], ["--rev"]],
    "schema": [["--out"]],
    "plan": [
        ["--format", "html"],
        ["--now", "2026-12-02T06:00:00"],
        ["--now", "tomorrow"],
        ["--prometheus-timeout", "0"],
        ["--prometheus-url", "prom:9090"],
        ["--kubeconfig", ""],
        ["--confirm", "everything"],
        ["--twin-days", "many"],
        ["--observed", "a.yaml", "--kubeconfig", "k.yaml"],  # one or the other
    ],
    "apply": [[], ["plan.json", "--prometheus-url", "ftp://x"], ["plan.json", "--kubeconfig", ""]],
    "reconcile": [
        ["--health-port", "http"],
        ["--health-port", "70000"],
        ["--git-url", "u", "--path", "pools"],  # one or the other
        ["--interval"],
    ],
    "agent": [["--interval"], ["--kubeconfig", ""]],
    "observe": [["--prometheus-timeout", "11m"], ["--kubeconfig"]],
    "pr-comment": [
        [],
        ["--repo", "o/r", "--pr", "one", "--body-file", "b.md"],
        ["--repo", "o/r", "--pr", "0", "--body-file", "b.md"],
        ["--repo", "not a repo", "--pr", "7", "--body-file", "b.md"],
        ["--repo", "o/r", "--pr", "7", "--body-file", "b.md", "--api-url", "api.github.com"],
    ],
    "simulate": [["--inflation", "lots"], ["--mode", "bogus"], ["--format", "csv"]],
}


def usage_error(argv: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exit_.value.code, err


def test_every_command_is_covered():
    assert set(COMMANDS) >= EXPECTED
    assert set(BAD_VALUES) == set(COMMANDS), "a new command needs its bad values here"


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_option_exits_1(command, capsys):
    code, err = usage_error([command, *REQUIRED.get(command, []), "--no-such-option"], capsys)
    assert code == 1
    assert f"gpupool {command}: error: unrecognized arguments: --no-such-option" in err
    assert err.startswith(f"usage: gpupool {command}")


@pytest.mark.parametrize(
    "args", [["--no-such-option"], ["--now", "2026-12-02"], ["--format", "yaml"]]
)
def test_a_usage_error_exits_1_with_detailed_exitcode_too(args, capsys):
    code, _ = usage_error(["plan", "--detailed-exitcode", *args], capsys)
    assert code == 1


@pytest.mark.parametrize(
    ("command", "args"), [(c, a) for c in COMMANDS for a in BAD_VALUES.get(c, [])]
)
def test_a_bad_value_exits_1(command, args, capsys):
    code, err = usage_error([command, *args], capsys)
    assert code == 1, err
    assert f"gpupool {command}: error: " in err


@pytest.mark.parametrize("argv", [["--no-such-option"], ["no-such-command"], ["-x"]])
def test_gpupool_itself_exits_1_on_a_usage_error(argv, capsys):
    code, err = usage_error(argv, capsys)
    assert code == 1
    assert "gpupool: error: " in err


def test_a_lone_surrogate_in_an_argument_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["validate", "\ud800"])
    assert exit_.value.code == 1
    assert "is not text any file name can hold" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--help"], ["plan", "--help"], ["reconcile", "-h"]])
def test_help_exits_0(argv, capsys):
    code, out = usage_error(argv, capsys)
    assert code == 0


def test_agent_with_a_bad_interval_exits_1_in_one_line(capsys):
    assert main(["agent", "--once", "--node", "n", "--interval", "soon"]) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: --interval: 'soon' is not a duration like 30s, 10m, 1h or 1h30m"
    ]


def test_a_zero_interval_is_refused(capsys):
    assert main(["agent", "--once", "--node", "n", "--interval", "0s"]) == 1
    assert "--interval: '0s' is not positive" in capsys.readouterr().err


@pytest.mark.parametrize(("case", "expected"), [("converged", 0), ("defragment", 2)])
def test_detailed_exitcode_is_0_without_changes_and_2_with(case, expected, capsys):
    d = GOLDEN / case
    argv = ["plan", str(d / "desired.yaml"), "--observed", str(d / "observed.yaml")]
    assert main([*argv, "--detailed-exitcode"]) == expected
    assert main(argv) == 0  # without the flag: 0 either way
    assert "Traceback" not in capsys.readouterr().err


def test_detailed_exitcode_error_is_1(tmp_path, capsys):
    d = GOLDEN / "converged"
    missing = str(tmp_path / "none.yaml")
    argv = ["plan", str(d / "desired.yaml"), "--observed", missing, "--detailed-exitcode"]
    assert main(argv) == 1
    assert "Traceback" not in capsys.readouterr().err
