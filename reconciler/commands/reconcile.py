"""`gpupool reconcile` (the in-cluster controller) and `gpupool agent` (the node agent)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from reconciler.commands.errors import CommandError, api_client, kubeconfig_arg, talking_to
from reconciler.conventions import RECONCILE_INTERVAL_SECONDS
from reconciler.loop.signals import add_prometheus_args
from reconciler.observe.kube import make_api_client  # the seam tests replace
from reconciler.observe.podresources import DEFAULT_SOCKET as DEFAULT_POD_RESOURCES_SOCKET
from reconciler.plan.incremental import FULL_PLAN_EVERY
from reconciler.policy.quantity import parse_duration


def port(text: str) -> int:
    """argparse type of a TCP port: 0 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a port number (0 to 65535)")
    return value


def positive_int(text: str) -> int:
    """argparse type of a count of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number (1 or more)") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not 1 or more")
    return value


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _interval(text: str) -> float | None:
    """`--interval` in seconds; None (the error printed) when it is not a positive duration."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        print(f"error: --interval: {exc}", file=sys.stderr)
        return None
    if seconds <= 0:
        print(f"error: --interval: {text!r} is not positive: give e.g. 30s", file=sys.stderr)
        return None
    return seconds


def cmd_reconcile(args: argparse.Namespace) -> int:
    from reconciler.loop.controller import Controller
    from reconciler.loop.status import StatusStore

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    interval = _interval(args.interval)
    if interval is None:
        return 1
    source = _source(args, poll_seconds=interval)
    if source is None:
        return 1
    try:
        mig_timeout = parse_duration(args.mig_timeout)
    except ValueError as exc:
        print(f"error: --mig-timeout: {exc}", file=sys.stderr)
        return 1
    from reconciler.apply.handlers import ApplyConfig

    apply_config = ApplyConfig(
        mig_config_namespace=args.mig_config_namespace,
        mig_timeout_seconds=mig_timeout,
    )
    api = api_client(args.kubeconfig, make_api_client)
    if args.once:  # a user at a terminal: no cluster, no answer or no right is one line
        with talking_to(api, args.kubeconfig):
            StatusStore(api, namespace=args.namespace).read()  # what the cycle reads first
    identity = args.identity or os.environ.get("POD_NAME") or socket.gethostname()
    ctl = Controller(
        source,
        api,
        namespace=args.namespace,
        identity=identity,
        dry_run=args.dry_run,
        apply_config=apply_config,
        prometheus_url=args.prometheus_url,
        prometheus_timeout=args.prometheus_timeout,
        signal_poll_seconds=args.signal_poll_interval,
        full_plan_every=args.full_plan_every,
        wake_gap_seconds=args.wake_gap,
    )
    if args.once:
        return _once(ctl)
    if not _serve(args, ctl):
        return 1
    ctl.run(_stop_on_signals(), interval)
    return 0


def _source(args: argparse.Namespace, poll_seconds: float) -> Any:
    """Where the desired state is read: --git-url's branch (fetched at most once per
    `poll_seconds`, the loop's interval, however often events start cycles), else the --path
    directory; None (the error printed) when that cannot be made."""
    from reconciler.loop.sources import DirectorySource, GitSource
    from reconciler.policy.files import SourceError

    # an explicitly given --git-url, even empty, means git: never fall back to the directory
    try:
        git_timeout = parse_duration(args.git_timeout)
        if args.git_url is not None:
            source = GitSource(
                args.git_url,
                args.branch,
                args.cache,
                timeout=git_timeout,
                poll_seconds=poll_seconds,
            )
        else:
            source = DirectorySource(args.path)
    except ValueError as exc:
        print(f"error: --git-timeout: {exc}", file=sys.stderr)
        return None
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    return source


def _once(ctl: Any) -> int:
    """`reconcile --once`: one cycle, what it did printed; 1 when it failed."""
    result = ctl.cycle()
    print(
        f"{'leader' if result.leader else 'follower'} revision={result.revision}: "
        f"{result.summary or result.error}"
    )
    if result.applied:
        for o in result.applied.outcomes:
            print(f"  {o.status:<8} {o.action}: {o.message}")
    return 1 if result.error else 0


def _serve(args: argparse.Namespace, ctl: Any) -> bool:
    """Start the probes, /metrics and the push webhook the flags ask for; False (the error
    printed) when the flags do not hold together."""
    from reconciler.loop.health import parse_bind_address, serve

    try:
        metrics_at = parse_bind_address(args.metrics_bind_address)
    except ValueError as exc:
        print(f"error: --metrics-bind-address: {exc}", file=sys.stderr)
        return False
    if args.health_port:  # the kubelet's probes: every address, no /metrics
        serve(args.health_port, ctl.ready, metrics=False, alive=ctl.alive)
    if metrics_at:
        if metrics_at[1] == args.health_port:
            print("error: --metrics-bind-address: the port of --health-port", file=sys.stderr)
            return False
        serve(metrics_at[1], ctl.ready, metrics_at[0], probes=False)
    try:
        hook_at = parse_bind_address(args.webhook_bind_address)
    except ValueError as exc:
        print(f"error: --webhook-bind-address: {exc}", file=sys.stderr)
        return False
    if hook_at:
        from reconciler.loop.webhook import read_secret, serve_webhook

        if args.git_url is None:
            print("error: --webhook-bind-address needs --git-url", file=sys.stderr)
            return False
        if not args.webhook_secret_file:
            print("error: --webhook-bind-address needs --webhook-secret-file", file=sys.stderr)
            return False
        if hook_at[1] in (args.health_port, metrics_at[1] if metrics_at else None):
            print("error: --webhook-bind-address: a port already in use", file=sys.stderr)
            return False
        try:
            secret = read_secret(args.webhook_secret_file)
        except (OSError, ValueError) as exc:
            print(f"error: --webhook-secret-file: {exc}", file=sys.stderr)
            return False

        def on_push() -> None:  # the branch moved: the next cycle fetches, and starts now
            ctl.source.expire()
            ctl.wake()

        serve_webhook(hook_at[1], secret, args.branch, on_push, hook_at[0])
    return True


def cmd_agent(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    node = args.node or os.environ.get("NODE_NAME")
    if not node:
        print("error: give --node or set NODE_NAME", file=sys.stderr)
        return 1
    interval = _interval(args.interval)
    if interval is None:
        return 1
    api = api_client(args.kubeconfig, make_api_client)
    stop = _stop_on_signals() if not args.once else threading.Event()
    while True:
        error = _publish(api, node, args)
        if error is not None:
            if args.once:  # one line from main, exit 1
                raise CommandError(error)
            logging.getLogger("gpupool.agent").error("publish failed: %s", error)
        if args.once or stop.wait(interval):
            return 0
        time.sleep(0)


def _publish(api: Any, node: str, args: argparse.Namespace) -> str | None:
    """One publication of this node's GPUs; why it failed, in one line, or None."""
    from reconciler.loop.agent import run_once
    from reconciler.observe.nvml import NvmlReadError

    try:
        with talking_to(api, args.kubeconfig):
            published = run_once(api, node, pod_resources_socket=args.pod_resources_socket)
    except CommandError as exc:  # the API server: its address, where it came from, what it said
        return str(exc)
    except NvmlReadError as exc:
        return f"cannot read this node's GPUs: {exc}; the agent runs on a node with the driver"
    except Exception as exc:  # noqa: BLE001 - report and retry next interval
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    logging.getLogger("gpupool.agent").info("published %d GPUs for %s", len(published.gpus), node)
    return None


def register(sub: argparse._SubParsersAction) -> None:
    _register_reconcile(sub)
    _register_agent(sub)


def _register_reconcile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "reconcile",
        help="run the controller: keep the cluster in the shape git says",
        description=(
            "The in-cluster controller: poll a git branch (or watch a directory), observe the "
            "cluster, plan and apply as the Lease leader; status in a ReconcilerStatus object."
        ),
    )
    _add_source_args(p)
    _add_cycle_args(p)
    _add_endpoint_args(p)
    p.add_argument(
        "--once", action="store_true", help="run one cycle and exit: 0 done, 1 it failed"
    )
    add_prometheus_args(p)
    p.add_argument(
        "--signal-poll-interval",
        metavar="DURATION",
        default="5s",
        type=_poll_interval,
        help="how often the ScalingPolicies' Prometheus queries are read between cycles, to "
        "wake the loop when one crosses a threshold; 0 for off (default 5s)",
    )
    p.add_argument(
        "--wake-gap",
        metavar="DURATION",
        default="50ms",
        type=_wake_gap,
        help="least time between two cycle starts when a pod event, a signal or a source "
        "change wakes the loop: a burst is admitted in one cycle (default 50ms)",
    )
    _add_mig_args(p)
    p.set_defaults(func=cmd_reconcile)


def _duration_up_to(most: float, words: str) -> Callable[[str], float]:
    """An argparse type: a duration from 0 ("0" allowed) to `most` seconds (`words` says it)."""

    def parse(text: str) -> float:
        try:
            seconds = 0.0 if text.strip() == "0" else parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if not 0 <= seconds <= most:
            raise argparse.ArgumentTypeError(f"must be {words}")
        return seconds

    return parse


_poll_interval = _duration_up_to(600, "0 (off) or a duration up to 10m")
"""argparse type of `--signal-poll-interval`."""
_wake_gap = _duration_up_to(60, "a duration from 0 to 1m")
"""argparse type of `--wake-gap`."""


def _add_source_args(p: argparse.ArgumentParser) -> None:
    """Where the desired state comes from: a git branch or a directory."""
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--git-url",
        help="git remote holding pools/ and policies/: https://, http://, ssh://, git://, "
        "file://, user@host:path or an absolute path (empty or malformed is an error)",
    )
    src.add_argument(
        "--path",
        default=".",
        help="local directory holding pools/ and policies/ (watched; one of them must exist, "
        "nothing else is read; symbolic links are refused)",
    )
    p.add_argument(
        "--branch", default="main", help="branch to follow with --git-url (default main)"
    )
    p.add_argument(
        "--cache",
        default="/tmp/gpupool-git",
        help="directory for gpupool's own clone of --git-url (DIR/origin.git; re-cloned when "
        "it was not made by gpupool for this URL)",
    )
    p.add_argument(
        "--git-timeout",
        default="120s",
        help="wall-clock limit on each git clone, fetch and read (default 120s)",
    )


def _add_cycle_args(p: argparse.ArgumentParser) -> None:
    """How each cycle runs: its interval, the Lease and status namespace, the identity,
    the cluster, dry-run."""
    p.add_argument(
        "--interval",
        default=f"{RECONCILE_INTERVAL_SECONDS}s",
        help=f"time between cycles when no event starts one, and the least time between two "
        f"fetches of --git-url (default {RECONCILE_INTERVAL_SECONDS}s)",
    )
    p.add_argument(
        "--namespace",
        default=os.environ.get("POD_NAMESPACE", "gpupool-system"),
        help="for the Lease, status and events (default: $POD_NAMESPACE, else gpupool-system)",
    )
    p.add_argument(
        "--identity", help="this replica's name in the Lease (default: POD_NAME or hostname)"
    )
    p.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=kubeconfig_arg,
        help="kubeconfig to use (default: the in-cluster config)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="observe and report drift; change nothing"
    )
    p.add_argument(
        "--full-plan-every",
        metavar="N",
        type=positive_int,
        default=1,
        help="plan afresh at least every N cycles; between them a cycle whose inputs did not "
        "change reuses the last plan (1: always afresh; the default, since a live clock moves "
        "every cycle and time alone makes a plan afresh; "
        f"{FULL_PLAN_EVERY} is the planner's own default). Either way the last cycle's memo is "
        "kept (the last snapshot and its working view's per-object answers), from which a "
        "plan made afresh builds its view",
    )


def _add_endpoint_args(p: argparse.ArgumentParser) -> None:
    """What the controller serves: probes, /metrics, the push webhook."""
    p.add_argument(
        "--health-port",
        type=port,
        default=8080,
        help="port for /healthz and /readyz on every address, 0 for off (default 8080)",
    )
    p.add_argument(
        "--metrics-bind-address",
        default="127.0.0.1:8081",
        help=(
            "where /metrics listens: host:port, :port for every address, 0 for off "
            "(default 127.0.0.1:8081; it has no authentication)"
        ),
    )
    p.add_argument(
        "--webhook-bind-address",
        default="0",
        help=(
            "where the GitHub push webhook (POST /hooks/git) listens: host:port, :port, or 0 "
            "for off (default 0); needs --git-url and --webhook-secret-file"
        ),
    )
    p.add_argument(
        "--webhook-secret-file",
        help="file holding the webhook's shared secret (a mounted Secret; never a flag value)",
    )


def _add_mig_args(p: argparse.ArgumentParser) -> None:
    """How MIG changes are made through the GPU operator."""
    p.add_argument(
        "--mig-config-namespace",
        default="gpu-operator",
        help=(
            "namespace of the GPU operator: the mig-parted and device-plugin ConfigMaps "
            "(default gpu-operator)"
        ),
    )
    p.add_argument(
        "--mig-timeout",
        default="15m",
        help="how long mig-manager may stay pending before the change is failed (default 15m)",
    )


def _register_agent(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser(
        "agent",
        help="run the node agent: publish this node's GPUs (NVML) and who holds them",
        description=(
            "Read this node's GPUs through NVML (read-only) and which pod holds which of them "
            "through the kubelet's PodResources API, and publish both as a GpuNodeState."
        ),
    )
    a.add_argument("--node", help="node name (default: $NODE_NAME)")
    a.add_argument(
        "--kubeconfig",
        metavar="FILE",
        type=kubeconfig_arg,
        help="kubeconfig to use (default: the in-cluster config)",
    )
    a.add_argument(
        "--interval",
        default="30s",
        metavar="DURATION",
        help="time between publications (default 30s)",
    )
    a.add_argument(
        "--once", action="store_true", help="publish once and exit: 0 published, 1 failed"
    )
    a.add_argument(
        "--pod-resources-socket",
        default=os.environ.get("POD_RESOURCES_SOCKET", DEFAULT_POD_RESOURCES_SOCKET),
        help=(
            "the kubelet's PodResources socket, asked which pod holds which GPU "
            f"(default: POD_RESOURCES_SOCKET or {DEFAULT_POD_RESOURCES_SOCKET}; '' skips it)"
        ),
    )
    a.set_defaults(func=cmd_agent)
