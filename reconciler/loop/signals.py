"""Read the Prometheus signals the desired state asks for and put them into the observed
state (the shell around `plan/signals.py`, which says which queries, and
`observe/prometheus.py`, which runs them). Used by the controller's cycle, `gpupool plan` and
`gpupool observe`."""

from __future__ import annotations

import argparse
import logging

from reconciler.observe.model import ObservedState
from reconciler.observe.prometheus import Transport, read_all, urllib_transport
from reconciler.plan.signals import signal_queries
from reconciler.policy.quantity import parse_duration
from reconciler.policy.state import DesiredState

log = logging.getLogger("gpupool.signals")
DEFAULT_TIMEOUT = "5s"


def with_signals(
    desired: DesiredState,
    observed: ObservedState,
    url: str | None,
    *,
    timeout: float,
    transport: Transport = urllib_transport,
) -> ObservedState:
    """`observed` with a reading of every query the policies need this cycle (replacing any
    it had). Without `url` each reading says that none is configured: the plan reports it and
    neither scales down nor reclaims on it. With no query needed, `observed` as it is."""
    queries = signal_queries(desired, observed)
    if not queries:
        return observed
    pairs = [(q.id, q.query) for q in queries]
    readings = read_all(url, pairs, timeout=timeout, transport=transport)
    for r in readings:
        if r.error:
            log.warning("signal %s: %s (%s)", r.id, r.error, r.query)
    return observed.model_copy(update={"signals": readings})


def add_prometheus_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prometheus-url",
        metavar="URL",
        type=_url,
        help="Prometheus server for policies whose signals come from it (signals.source / "
        "idleReclaim.utilization.source: prometheus), e.g. http://prometheus.monitoring:9090",
    )
    p.add_argument(
        "--prometheus-timeout",
        metavar="DURATION",
        default=DEFAULT_TIMEOUT,
        type=_duration,
        help=f"limit on connecting and on each read of every query (default {DEFAULT_TIMEOUT})",
    )


def _url(text: str) -> str:
    if not text.startswith(("http://", "https://")) or len(text) <= len("https://"):
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL")
    return text


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 0 < seconds <= 600:
        raise argparse.ArgumentTypeError("must be more than 0s and at most 10m")
    return seconds
