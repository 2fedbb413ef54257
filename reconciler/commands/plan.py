"""`gpupool plan`: a dry run anywhere."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime

from reconciler.commands.errors import CommandError, kubeconfig_arg, write_text
from reconciler.commands.policy import (
    add_source_args,
    load_from_args,
    problem_dict,
    report_load_error,
)
from reconciler.conventions import MAX_TIME_YEAR, MIN_TIME_YEAR
from reconciler.loop.signals import add_prometheus_args
from reconciler.observe.snapshot import InvalidSnapshot, load_snapshot
from reconciler.plan.fingerprint import fingerprint
from reconciler.plan.planner import plan
from reconciler.plan.render import RENDERERS, to_json
from reconciler.policy.files import SourceError
from reconciler.policy.problems import InvalidDesiredState, InvalidInput

DEFAULT_OBSERVED = "examples/observed.yaml"


def observe_from_args(args: argparse.Namespace):
    """The observed state: the live cluster of --kubeconfig, else the --observed snapshot, else
    the default one (a CommandError naming what was tried when it is not there)."""
    if getattr(args, "kubeconfig", None):
        from reconciler.commands.errors import api_client, talking_to
        from reconciler.observe.kube import observe_cluster  # the Kubernetes adapter

        api = api_client(args.kubeconfig)
        with talking_to(api, args.kubeconfig):
            return observe_cluster(api)
    path = args.observed
    if path is None:
        if not os.path.exists(DEFAULT_OBSERVED):
            raise CommandError(
                f"no observed state: neither --observed nor --kubeconfig was given and the "
                f"default snapshot {DEFAULT_OBSERVED} does not exist in {os.getcwd()}; give "
                "--observed FILE (a snapshot from `gpupool observe`) or --kubeconfig FILE "
                "(a live cluster)"
            )
        path = DEFAULT_OBSERVED
    return load_snapshot(path)


def signals_from_args(args: argparse.Namespace, desired, observed):
    """Prometheus readings: always for a live cluster (an error reading each when no URL is
    given); for a snapshot only with --prometheus-url (else the snapshot's own are replayed)."""
    from reconciler.loop.signals import with_signals

    url = getattr(args, "prometheus_url", None)
    if not url and not getattr(args, "kubeconfig", None):
        return observed
    return with_signals(desired, observed, url, timeout=args.prometheus_timeout)


def cmd_plan(args: argparse.Namespace) -> int:
    if args.base:
        return cmd_plan_change(args)
    if getattr(args, "twin_load", None):
        print("error: --twin-load compares two revisions: give --base REF", file=sys.stderr)
        return 1
    try:
        desired = load_from_args(args)
        observed = signals_from_args(args, desired, observe_from_args(args))
    except (SourceError, InvalidInput) as exc:
        return report_load_error(exc)
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    result = plan(desired, observed, now=args.now)
    text = RENDERERS[args.format](result)
    if args.out:
        saved = result.model_copy(
            update={"fingerprint": fingerprint(desired, observed, result.actions)}
        )
        write_text(args.out, to_json(saved))
    sys.stdout.write(text)
    if args.detailed_exitcode:
        return 2 if result.actions else 0
    return 0


def aware_time(text: str) -> datetime:
    """`--now`: an ISO 8601 time with a timezone. A bad one is a usage error (exit 1, like any
    bad argument): the planner compares it with the snapshot's times, which all have one."""
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{_quote(text)} is not an ISO 8601 time: give a date and time with a timezone, "
            "e.g. 2026-12-02T06:00:00Z (UTC) or 2026-12-02T08:00:00+02:00"
        ) from None
    if t.tzinfo is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no timezone: if it is UTC, give {_utc(t)}; "
            f"else give its offset, e.g. {_with_offset(t)}"
        )
    if not MIN_TIME_YEAR <= t.year <= MAX_TIME_YEAR:  # checked as written: nothing overflows
        raise argparse.ArgumentTypeError(
            f"{_quote(text)} is outside the years {MIN_TIME_YEAR}-{MAX_TIME_YEAR} gpupool plans "
            "in (an older or later time is a typo or a broken clock)"
        )
    return t


def _quote(text: str, limit: int = 60) -> str:
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"


def _utc(t: datetime) -> str:
    """The user's own time, read as UTC, written with Z."""
    return t.replace(tzinfo=UTC).isoformat().replace("+00:00", "Z")


def _with_offset(t: datetime) -> str:
    return t.isoformat() + "+02:00"


def _invalid_head(args: argparse.Namespace, exc: InvalidDesiredState) -> int:
    """A PR whose head does not validate: say so in the requested format, exit 1."""
    if args.format == "markdown":
        lines = [
            "### gpupool plan for this change",
            "",
            ":x: **The head revision is invalid; nothing was planned.**",
            "",
        ]
        lines += [
            f"- `{p.file}:{p.line}:{p.column}` {p.document} `{p.path}`: {p.message}"
            for p in exc.problems
        ]
        sys.stdout.write("\n".join(lines) + "\n")
    elif args.format == "json":
        import json

        problems = [problem_dict(p) for p in exc.problems]
        sys.stdout.write(json.dumps({"valid": False, "problems": problems}, indent=2) + "\n")
    return report_load_error(exc)


def cmd_plan_change(args: argparse.Namespace) -> int:
    from reconciler.plan.change import compare
    from reconciler.plan.render import CHANGE_RENDERERS
    from reconciler.policy.files import files_from_git
    from reconciler.policy.loader import load

    repo = args.repo or "."
    try:
        files, sha = files_from_git(repo, args.base)
        base = load(files, revision=sha)
    except InvalidDesiredState as exc:
        print(f"error: the base revision {args.base} does not validate either:", file=sys.stderr)
        return report_load_error(exc)
    except SourceError as exc:
        return report_load_error(exc)
    try:
        head = load_from_args(args)
    except InvalidDesiredState as exc:
        return _invalid_head(args, exc)
    except SourceError as exc:
        return report_load_error(exc)
    try:
        observed = signals_from_args(args, head, observe_from_args(args))
    except InvalidSnapshot as exc:
        return report_load_error(exc)
    report, _, head_plan = compare(base, head, observed, confirm=tuple(args.confirm or ()))
    if getattr(args, "twin_load", None):
        from reconciler.sim.twin_cli import ReplayInputError, replay_change

        try:
            replay = replay_change(base, head, args)
        except ReplayInputError as exc:
            print(f"error: twin replay: {exc}", file=sys.stderr)
            return 1
        report = report.model_copy(update={"replay": replay})
    sys.stdout.write(CHANGE_RENDERERS[args.format](report))
    if args.out:
        saved = head_plan.model_copy(
            update={"fingerprint": fingerprint(head, observed, head_plan.actions)}
        )
        write_text(args.out, to_json(saved))
    if report.gates:
        for g in report.gates:
            print(f"error: safety gate: {g}", file=sys.stderr)
        return 1
    if args.detailed_exitcode:
        return (
            2
            if (
                report.repartitions
                or report.disruptions
                or report.quota_changes
                or report.policy_changes
            )
            else 0
        )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="show what would change: an ordered, explained plan (dry run)",
        description=(
            "Plan the changes that bring the observed cluster to the desired state. "
            "Nothing is changed. Exit codes: 0 ok, 1 error (a usage error too); "
            "with --detailed-exitcode 0 no changes, 1 error, 2 changes."
        ),
    )
    add_source_args(p)
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--observed",
        metavar="FILE",
        help="observed-state snapshot, YAML or JSON, from `gpupool observe` "
        f"(default: {DEFAULT_OBSERVED} when it exists)",
    )
    src.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=kubeconfig_arg,
        help="observe a live cluster instead of a snapshot (default: none, the snapshot)",
    )
    add_prometheus_args(p)
    p.add_argument(
        "--format",
        choices=sorted(RENDERERS),
        default="text",
        help="text for a terminal, markdown for a pull-request comment, json for tools",
    )
    p.add_argument(
        "--now",
        metavar="TIME",
        type=aware_time,
        help="plan as of this ISO 8601 time with a timezone, e.g. 2026-12-02T06:00:00Z "
        "(default: the snapshot's time)",
    )
    p.add_argument("--out", metavar="FILE", help="also write the plan as JSON to FILE")
    p.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 2 when the plan has changes, 0 when none (1 is always an error)",
    )
    p.add_argument(
        "--base",
        metavar="REF",
        help="plan a change: compare the desired state at REF (in --repo, default .) with the head "
        "(--rev, or the working tree) against the same observed state; safety gates apply",
    )
    p.add_argument(
        "--confirm",
        action="append",
        choices=("empty-pool", "delete-all-quotas"),
        help="with --base: confirm a deliberate destructive change (repeatable)",
    )
    from reconciler.sim.twin_cli import add_replay_args

    add_replay_args(p)
    p.set_defaults(func=cmd_plan)
