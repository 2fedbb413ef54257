"""`gpupool validate` and `gpupool schema`."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from reconciler.policy.files import DEFAULT_DIRS, SourceError, files_from_git, files_from_paths
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState, InvalidInput
from reconciler.policy.state import DesiredState


def add_source_args(p: argparse.ArgumentParser, *, positional: bool = True) -> None:
    """The desired-state source options shared by validate, plan and reconcile."""
    if positional:
        p.add_argument(
            "paths",
            nargs="*",
            metavar="PATH",
            help=f"files or directories of policy YAML (default: {' '.join(DEFAULT_DIRS)})",
        )
    p.add_argument(
        "--repo",
        metavar="R",
        help="read from this git repository instead of the working tree (default: the working "
        "tree, PATHs)",
    )
    p.add_argument(
        "--rev", metavar="REF", default=None, help="revision to read with --repo (default: HEAD)"
    )


def load_from_args(args: argparse.Namespace) -> DesiredState:
    """Load the desired state the arguments name; raises SourceError or InvalidDesiredState."""
    if args.repo or args.rev:
        files, sha = files_from_git(args.repo or ".", args.rev or "HEAD")
        return load(files, revision=sha)
    paths = getattr(args, "paths", None) or [d for d in DEFAULT_DIRS if Path(d).exists()]
    if not paths:
        raise SourceError(
            f"no policy files: give PATHs or run where {' and '.join(DEFAULT_DIRS)} exist"
        )
    return load(files_from_paths(paths))


def report_load_error(exc: Exception) -> int:
    """Print a load failure without a traceback; the exit code is always 1."""
    if isinstance(exc, InvalidInput):
        for p in exc.problems:
            print(f"error: {p}", file=sys.stderr)
        n = len(exc.problems)
        print(f"{n} problem{'s' if n != 1 else ''} found; nothing was changed.", file=sys.stderr)
    else:
        print(f"error: {exc}", file=sys.stderr)
    return 1


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        state = load_from_args(args)
    except (SourceError, InvalidDesiredState) as exc:
        if args.format == "json" and isinstance(exc, InvalidDesiredState):
            print(
                json.dumps(
                    {"valid": False, "problems": [problem_dict(p) for p in exc.problems]}, indent=2
                )
            )
        return report_load_error(exc)
    kinds = Counter(d.model.kind for d in state.documents)
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    if args.format == "json":
        print(
            json.dumps(
                {
                    "valid": True,
                    "revision": state.revision,
                    "documents": dict(sorted(kinds.items())),
                },
                indent=2,
            )
        )
    else:
        at = f" at {state.revision[:12]}" if state.revision else ""
        print(f"valid: {len(state.documents)} documents{at} ({summary})")
    return 0


def problem_dict(p) -> dict:
    return {f: getattr(p, f) for f in ("file", "line", "column", "path", "message", "document")}


def cmd_schema(args: argparse.Namespace) -> int:
    from reconciler.policy.schema import schema_files

    out = Path(args.out)
    files = schema_files()
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
            print(f"wrote {out / name}")
    except OSError as exc:
        print(f"error: cannot write schemas to {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "validate",
        help="check policy YAML: schema, references, MIG placement, capacity",
        description="Validate desired-state YAML from paths or a git revision. "
        "Every problem is reported with file:line:column and field path; exit 1 if any.",
    )
    add_source_args(p)
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text for a terminal, json for tools ({valid, problems} or {valid, documents})",
    )
    p.set_defaults(func=cmd_validate)

    s = sub.add_parser(
        "schema",
        help="write the JSON Schema of every kind",
        description="Write one JSON Schema per kind, generated from the models.",
    )
    s.add_argument("--out", default="schemas", help="directory to write (default: schemas/)")
    s.set_defaults(func=cmd_schema)
