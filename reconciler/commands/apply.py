"""`gpupool apply PLAN.json`: carry out a saved plan, unless it is stale."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime

from pydantic import ValidationError

from reconciler.commands.errors import api_client, kubeconfig_arg, talking_to
from reconciler.commands.plan import signals_from_args
from reconciler.commands.policy import add_source_args, load_from_args, report_load_error
from reconciler.conventions import MAX_SAVED_PLAN_BYTES
from reconciler.loop.signals import add_prometheus_args
from reconciler.observe.snapshot import load_snapshot, unique_keys
from reconciler.plan.fingerprint import actions_fingerprint, fingerprint
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceError
from reconciler.policy.limits import locate_bad_utf8
from reconciler.policy.problems import InvalidInput


def edited_reasons(saved: Plan, desired, observed) -> list[str]:
    """Why the saved plan's actions are not the plan of its own (current) inputs: edited after
    `plan --out`, or made by another version of the planner. The planner is pure, so planning
    again from the same desired and observed state at the plan's time gives the same actions;
    anything else is refused before the first write."""
    out = []
    if saved.fingerprint.get("actions") != actions_fingerprint(saved.actions):
        out.append("its actions were edited after it was saved (their digest differs)")
    try:
        at = datetime.fromisoformat(saved.observed_at)
    except ValueError:
        return [*out, f"its time {saved.observed_at!r} is not an ISO 8601 time"]
    if at.tzinfo is None:
        return [*out, f"its time {saved.observed_at!r} has no timezone"]
    again = plan_with_facts(desired, observed, now=at)[0]
    expected = again.actions
    if observed.signals:
        # Prometheus readings are measurements that move every second: planning again from
        # fresh ones must make the same decisions, but the values a reason quotes may differ
        key = _decision
        saved_findings = [(f.severity, f.code, f.subject) for f in saved.findings]
        expected_findings = [(f.severity, f.code, f.subject) for f in again.findings]
    else:
        key = _whole
        saved_findings, expected_findings = list(saved.findings), list(again.findings)
    if [key(a) for a in expected] != [key(a) for a in saved.actions]:
        diff = _first_difference(saved.actions, expected, key)
        out.append(f"its actions are not what gpupool plans from these inputs ({diff})")
    # what a reviewer read must be what gpupool says too: the findings and the capacity table
    if expected_findings != saved_findings:
        out.append("its findings are not what gpupool finds from these inputs")
    if again.capacity != saved.capacity:
        out.append("its capacity table is not what gpupool plans from these inputs")
    return out


def _decision(a) -> dict:
    """What an action does, without its reason and the readings it quotes."""
    return a.model_dump(exclude={"reason", "signals"})


def _whole(a):
    return a


def _first_difference(saved, expected, key=_whole) -> str:
    mine = {a.id: a for a in expected}
    theirs = {a.id: a for a in saved}
    for a in saved:
        if a.id not in mine:
            return f"{a.id} is not planned"
        if key(mine[a.id]) != key(a):
            return f"{a.id} differs"
    for a in expected:
        if a.id not in theirs:
            return f"{a.id} is missing"
    return "the order differs"


def stale_reasons(saved: Plan, now: dict[str, str]) -> list[str]:
    if not saved.fingerprint:
        return ["the plan has no fingerprint: save it with `gpupool plan --out FILE`"]
    out = []
    if saved.fingerprint.get("desired") != now["desired"]:
        out.append("the desired state changed since the plan was made")
    if saved.fingerprint.get("observed") != now["observed"]:
        out.append("the cluster changed since the plan was made")
    return out


def cmd_apply(args: argparse.Namespace) -> int:
    try:
        with open(args.plan, "rb") as f:
            raw = f.read(MAX_SAVED_PLAN_BYTES + 1)  # never more than the limit into memory
        if len(raw) > MAX_SAVED_PLAN_BYTES:
            raise ValueError(
                f"the file is over the limit of {MAX_SAVED_PLAN_BYTES:,} bytes "
                f"({MAX_SAVED_PLAN_BYTES // 2**20} MiB) for a saved plan; it is not read"
            )
        bad = locate_bad_utf8(raw)
        if bad is not None:
            raise ValueError(f"line {bad.line}, column {bad.column}: {bad.message}")
        # a repeated key would silently keep one of its values
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=unique_keys)
        if not isinstance(data, dict) or not isinstance(data.get("actions"), list):
            raise ValueError("no list of actions")
        saved = Plan.model_validate(data)
    except (OSError, ValueError, ValidationError, RecursionError) as exc:
        print(f"error: {args.plan}: not a saved plan: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    try:
        desired = load_from_args(args)
        if args.kubeconfig:
            from reconciler.observe.kube import observe_cluster

            api = api_client(args.kubeconfig)
            with talking_to(api, args.kubeconfig):
                observed = observe_cluster(api)
        elif args.observed:
            api, observed = None, load_snapshot(args.observed)
        else:
            print(
                "error: give --kubeconfig (to apply) or --observed (to check only)", file=sys.stderr
            )
            return 1
        observed = signals_from_args(args, desired, observed)
    except (SourceError, InvalidInput) as exc:
        return report_load_error(exc)
    reasons = stale_reasons(saved, fingerprint(desired, observed))
    if reasons:
        print(
            f"error: saved plan is stale: {'; '.join(reasons)}. "
            f"Run `gpupool plan --out {args.plan}` again.",
            file=sys.stderr,
        )
        return 1
    edited = edited_reasons(saved, desired, observed)
    if edited:
        print(
            f"error: {args.plan}: refused, nothing applied: {'; '.join(edited)}. "
            f"Run `gpupool plan --out {args.plan}` again.",
            file=sys.stderr,
        )
        return 1
    if api is None:
        print(f"plan is current ({len(saved.actions)} actions); give --kubeconfig to apply it")
        return 0
    with talking_to(api, args.kubeconfig):
        return _apply_as_leader(api, saved, args.namespace)


def _apply_as_leader(api, saved: Plan, namespace: str) -> int:
    """Apply only while holding the controller's Lease and while the status object is not
    suspended: a manual apply never races the controller, and `spec.suspend` stops it too."""
    import socket
    import threading

    from reconciler.apply.executor import Executor
    from reconciler.apply.kube import KubeOps
    from reconciler.loop.controller import LEASE_NAME
    from reconciler.loop.leader import LeaseElector
    from reconciler.loop.status import StatusStore

    if StatusStore(api, namespace=namespace).read().suspend:
        print(
            f"error: reconciliation is suspended (spec.suspend on {namespace}/gpupool): "
            "nothing applied",
            file=sys.stderr,
        )
        return 1
    elector = LeaseElector(
        api, name=LEASE_NAME, namespace=namespace, identity=f"gpupool-apply@{socket.gethostname()}"
    )
    holder = elector.holder()
    if holder is not None and holder != elector.identity:
        print(
            f"error: {holder} holds the lease {namespace}/{LEASE_NAME}: the controller is running; "
            "suspend it or scale it down before applying by hand. Nothing applied.",
            file=sys.stderr,
        )
        return 1
    if not elector.try_acquire_or_renew():
        print(
            f"error: could not acquire the lease {namespace}/{LEASE_NAME}; nothing applied",
            file=sys.stderr,
        )
        return 1
    stop = threading.Event()
    elector.start(stop)
    try:
        result = Executor(KubeOps(api)).apply(saved, may_continue=lambda: elector.is_leader)
    finally:
        stop.set()
        elector.release()
    for o in result.outcomes:
        print(f"{o.status:<8} {o.action}: {o.message}")
    if result.failed:
        return 1
    return 0 if result.converged else 2


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "apply",
        help="carry out a saved plan (refused when stale)",
        description=(
            "Apply a plan saved with `gpupool plan --out FILE`. The plan's fingerprint of the "
            "desired state and the observed cluster must still match, "
            "like Terraform's saved plans, and its actions must be exactly what gpupool plans "
            "from them (an edited plan is refused before anything is written). "
            "Exit codes: 0 done, 1 error or stale (a usage error too), 2 some steps still "
            "waiting (run again)."
        ),
    )
    p.add_argument("plan", metavar="PLAN.json", help="the plan `gpupool plan --out` saved")
    add_source_args(p)
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=kubeconfig_arg,
        help="the cluster to apply to (default: none; give it or --observed)",
    )
    p.add_argument(
        "--observed",
        metavar="FILE",
        help="only check that the plan is current against this snapshot (default: none)",
    )
    add_prometheus_args(p)  # the readings the plan is checked against again
    p.add_argument(
        "--namespace",
        default="gpupool-system",
        help=(
            "the controller's namespace: its Lease and status object are honoured "
            "(default gpupool-system)"
        ),
    )
    p.set_defaults(func=cmd_apply)
