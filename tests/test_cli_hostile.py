"""Hostile input on the command line: random subcommands, options drawn from each parser's own
option list, random values (empty, huge, unicode, lone surrogates, negative, a path that does
not exist, a directory, /dev/null, a garbage file, a closed loopback port).

Whatever the arguments, `gpupool` answers with a documented exit code (0, 1; 2 only from
`plan --detailed-exitcode`), never a traceback, never an "internal error" (a bug `main` caught),
never a hang.

Seeded (`derandomize=True`) and bounded: 200 examples, each in-process through
`reconciler.cli.main(argv)` under a watchdog. Nothing can run for long or leave the machine:
`reconcile` and `agent` always get `--once`, every cluster is a kubeconfig pointing at a closed
port on 127.0.0.1 (unless the draw replaces it with garbage), GitHub is a closed port too, the
simulator's trace folder is an empty one, and the working directory is a temporary copy of the
policy tree.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from reconciler.cli import build_parser, main, subparsers
from tests.support.hostile import watchdog
from tests.support.loopback import closed_port, write_kubeconfig

ROOT = Path(__file__).resolve().parents[1]
WATCHDOG_S = 30
PARSERS = subparsers(build_parser())
COMMANDS = sorted(PARSERS)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if a.option_strings and not isinstance(a, argparse._HelpAction | argparse._VersionAction)
    ]


def positionals(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if not a.option_strings]


class World:
    """The files and addresses the draws point at, in one temporary directory."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        for d in ("pools", "policies"):
            shutil.copytree(ROOT / d, tmp / d)
        (tmp / "openb").mkdir()  # the simulator's trace folder: empty
        self.port = closed_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.kubeconfig = str(write_kubeconfig(tmp / "closed.yaml", self.url))
        self.garbage = tmp / "garbage.bin"
        self.garbage.write_bytes(bytes(range(256)) * 4 + b"\n: [ {{ \xff\xfe")
        self.empty = tmp / "empty.yaml"
        self.empty.write_text("")
        self.body = tmp / "plan.md"
        self.body.write_text("plan\n")
        (tmp / "examples").mkdir()  # plan's default snapshot: a plan is made when nothing fails
        self.snapshot = tmp / "examples" / "observed.yaml"
        shutil.copy(ROOT / "examples" / "observed.yaml", self.snapshot)
        self.saved = tmp / "saved.json"
        with contextlib.redirect_stdout(io.StringIO()):
            inputs = [str(tmp / "pools"), str(tmp / "policies"), "--observed", str(self.snapshot)]
            assert main(["plan", *inputs, "--out", str(self.saved)]) == 0

    def values(self) -> list[str]:
        return [
            "",
            " ",
            "-",
            "--",
            "0",
            "-1",
            "-0.5",
            "1e309",
            "-1e309",
            "nan",
            "inf",
            "99999999999999999999999",
            "0s",
            "-5m",
            "1h",
            "x" * 5000,  # longer than any file name
            "y" * 300_000,  # longer than one exec argument may be
            "ünïcødé ☃ 🚀",
            "\u202egnp.\u202c",  # right-to-left override
            "a\nb",
            "\udcff",  # a byte that is not UTF-8, as argv decodes it
            "\ud800",  # a lone surrogate no file name can hold
            "o/r",
            "text",
            "json",
            "markdown",
            str(self.tmp / "does" / "not" / "exist.yaml"),
            str(self.tmp),
            "/dev/null",
            str(self.garbage),
            str(self.empty),
            str(self.snapshot),
            str(self.saved),
            self.kubeconfig,
            self.url,
            "http://",
            "https://[::1",
            "2026-12-02T06:00:00",
            "2026-12-02T06:00:00Z",
        ]


def base_args(command: str, world: World) -> list[str]:
    """What keeps a command bounded: one cycle, a closed port, a body file."""
    return {
        "reconcile": ["--once", "--kubeconfig", world.kubeconfig],
        "agent": ["--once", "--node", "n", "--kubeconfig", world.kubeconfig],
        "observe": ["--kubeconfig", world.kubeconfig],
        "pr-comment": [
            *("--repo", "o/r", "--pr", "1", "--body-file", str(world.body)),
            *("--api-url", world.url),
        ],
    }.get(command, [])


def draw_argv(data, world: World) -> list[str]:
    command = data.draw(st.sampled_from(COMMANDS), label="command")
    parser = PARSERS[command]
    value = st.sampled_from(world.values())
    argv = [command, *base_args(command, world)]
    for action in data.draw(st.lists(st.sampled_from(options(parser)), max_size=4), label="opts"):
        argv.append(data.draw(st.sampled_from(action.option_strings)))
        if action.nargs != 0:
            argv.append(data.draw(value))
    for action in positionals(parser):
        if action.nargs is None:  # exactly one (apply's PLAN.json): usually given
            argv += data.draw(st.lists(value, min_size=1, max_size=1) | st.just([]))
        else:
            argv += data.draw(st.lists(value, max_size=2), label="paths")
    if command in ("reconcile", "agent") and "--once" not in argv:  # never serve forever
        argv.append("--once")
    return argv


def run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with watchdog(WATCHDOG_S), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 1
    return rc, err.getvalue()


@pytest.fixture
def world(tmp_path, monkeypatch) -> World:
    w = World(tmp_path)
    monkeypatch.chdir(tmp_path)
    for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "KUBECONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_TOKEN", "t0ken")  # pr-comment gets as far as the closed port
    monkeypatch.setenv("GITHUB_API_URL", w.url)
    monkeypatch.setenv("GPUPOOL_OPENB_DIR", str(tmp_path / "openb"))
    monkeypatch.delenv("GPUPOOL_TRACEBACK", raising=False)
    return w


@settings(
    derandomize=True,
    database=None,
    max_examples=200,
    deadline=None,  # the watchdog bounds each example
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate),  # no shrinking: bounded time, failing or not
)
@given(data=st.data())
def test_any_command_line_gets_an_exit_code_and_no_traceback(world, data):
    argv = draw_argv(data, world)
    rc, err = run(argv)
    event(f"{argv[0]} exit {rc}{' (usage)' if err.startswith('usage:') else ''}")
    shown = [a if len(a) < 100 else a[:20] + f"...({len(a)})" for a in argv]
    assert "Traceback (most recent call last)" not in err, (shown, err[-3000:])
    assert "internal error" not in err, (shown, err[-3000:])
    allowed = {0, 1} | ({2} if argv[0] == "plan" and "--detailed-exitcode" in argv else set())
    assert rc in allowed, (shown, rc, err[-2000:])
