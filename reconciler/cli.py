"""The `gpupool` command line.

Each subcommand lives in `reconciler/commands/` (the simulator's in `reconciler/sim/cli.py`)
and exposes `register(subparsers)`; this file only wires them together, importing lazily so
`gpupool --help` stays fast and a broken optional piece cannot break the others.
"""

from __future__ import annotations

import argparse
import importlib
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
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpupool",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
