"""The `gpupool` command line.

Each subcommand lives in `reconciler/commands/` (the simulator's in `reconciler/sim/cli.py`)
and exposes `register(subparsers)`; this file only wires them together, importing lazily so
`gpupool --help` stays fast and a broken optional piece cannot break the others.

Exit codes, for every command: 0 done, 1 an error (a usage error too: an unknown option, a bad
value, a missing argument), 2 only from `plan --detailed-exitcode` (the plan has changes) and
`apply` (steps still waiting). argparse's own usage errors exit 2, which a CI gate would read as
"changes pending"; `Parser` makes them 1. An error from outside gpupool (the cluster, the
network, a file) is one line, `gpupool COMMAND: error: ...` (reconciler/commands/errors.py);
anything else is a bug, reported in one line too (GPUPOOL_TRACEBACK=1 shows the traceback).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys

# (module, help) per subcommand, in the order `--help` lists them.
SUBCOMMANDS: list[tuple[str, str]] = [
    ("reconciler.commands.policy", "validate, schema"),
    ("reconciler.commands.plan", "plan"),
    ("reconciler.commands.observe", "observe"),
    ("reconciler.commands.apply", "apply"),
    ("reconciler.commands.reconcile", "reconcile, agent"),
    ("reconciler.commands.pr_comment", "pr-comment"),
    ("reconciler.sim.cli", "simulate"),
]

DESCRIPTION = """\
gpupool keeps one GPU pool for training and inference in the shape that git says.

Desired state is versioned YAML (pools/, policies/); observed state comes from NVML and
the Kubernetes API (or a snapshot file); a pure planner turns the difference into an
ordered, explained plan.

Exit codes: 0 done; 1 error, usage errors included; 2 only `plan --detailed-exitcode` (the plan
has changes) and `apply` (steps still waiting).
"""

USAGE_ERROR = 1
"""A usage error's exit code: 2 means "changes" under `plan --detailed-exitcode`."""

TRACEBACK_ENV = "GPUPOOL_TRACEBACK"


class HelpFormatter(argparse.HelpFormatter):
    """Every option's default in its help, unless the help already says it ("(default ...)")
    or there is none to say (None, a flag's False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or "default" in text.lower()
            or default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or not (action.option_strings or action.nargs in (argparse.OPTIONAL, "*"))
        ):
            return text
        return f"{text} (default: %(default)s)"


class TopHelpFormatter(HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """gpupool's own help: the description keeps its paragraphs."""


class Parser(argparse.ArgumentParser):
    """argparse with usage errors exiting 1, and every option's default shown in the help.
    Subcommand parsers are made from this class too (`add_subparsers` passes its own)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> Parser:
    parser = Parser(prog="gpupool", description=DESCRIPTION, formatter_class=TopHelpFormatter)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name, _ in SUBCOMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # that piece is not built yet
            raise
        module.register(sub)
    return parser


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Each subcommand's parser, by name."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def parse(parser: Parser, argv: list[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, with an unknown option reported by the subcommand it was given to
    ("gpupool plan: error: unrecognized arguments: --x"), and an argument no file name or
    environment can hold (a lone surrogate) refused before any command sees it."""
    argv = sys.argv[1:] if argv is None else list(argv)
    for arg in argv:
        try:
            os.fsencode(arg)
        except (UnicodeError, TypeError):
            parser.error(f"argument {ascii(arg)[:80]} is not text any file name can hold")
    args, extra = parser.parse_known_args(argv)
    if extra:
        owner = subparsers(parser).get(getattr(args, "command", None) or "", parser)
        owner.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    _tolerant_stdout()
    parser = build_parser()
    args = parse(parser, argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    name = f"{parser.prog} {args.command}"
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gpupool plan | head`: the reader left; say nothing more
        _silence_stdout()
        return 1
    except Exception as exc:  # noqa: BLE001 - one line, never a traceback (unless asked)
        return _report(name, exc)


def _report(name: str, exc: Exception) -> int:
    from reconciler.commands.errors import CommandError, describe

    if isinstance(exc, CommandError):
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 1
    message = describe(exc)
    if message is not None:
        print(f"{name}: error: {message}", file=sys.stderr)
        return 1
    if os.environ.get(TRACEBACK_ENV):
        raise exc
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    print(
        f"{name}: internal error: {type(exc).__name__}: {first} (a bug in gpupool; "
        f"{TRACEBACK_ENV}=1 shows where; please report it with the command line)",
        file=sys.stderr,
    )
    return 1


def _tolerant_stdout() -> None:
    """A file name that is not UTF-8 (argv decodes it with surrogates) is printed escaped,
    not a UnicodeEncodeError after the work is done."""
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):  # detached or closed: nothing to tune
            reconfigure(errors="backslashreplace")


def _silence_stdout() -> None:
    """After EPIPE, point stdout at /dev/null so the interpreter's final flush is quiet."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
