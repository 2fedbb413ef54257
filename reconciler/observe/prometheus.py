"""The Prometheus adapter: runs PromQL instant queries through the HTTP API and turns each
answer into a `SignalReading` (samples, or an error saying what went wrong). It decides
nothing: what a reading means is the planner's (`reconciler/plan/signals.py`).

The API, as documented (https://prometheus.io/docs/prometheus/latest/querying/api/):
`GET /api/v1/query?query=<PromQL>&timeout=<duration>` evaluates at the server's current time;
the answer is a JSON envelope `{"status": "success" | "error", "data": ..., "errorType": ...,
"error": ...}`, with 400 for a bad query (errorType bad_data), 422 when the expression cannot
be executed, 503 when it timed out or was aborted; other non-2xx codes come from whatever stands
before the API. `data` is `{"resultType": "vector" | "scalar" | "matrix" | "string",
"result": ...}`: a vector is a list of `{"metric": {labels}, "value": [<unix time>, "<value>"]}`,
a scalar one `[<unix time>, "<value>"]`; values are strings so that NaN, +Inf and -Inf
survive JSON ("Expression query result formats" on that page).

Every request has a timeout on connecting and on each read (`urlopen`'s socket timeout), and
the answer is read up to `MAX_BODY` bytes. The transport is a parameter: tests pass a stub.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable

from reconciler.observe.model import SignalReading, SignalSample

MAX_BODY = 8 * 2**20
"""An answer larger than this is refused: one query per target or card never needs it."""
MAX_SAMPLES = 100_000

Transport = Callable[[str, float], tuple[int, bytes]]
"""(url, timeout seconds) -> (HTTP status, body). Raises TimeoutError (or socket.timeout) when
no answer came in time, OSError when there is no connection."""

NO_URL = "no Prometheus URL configured (--prometheus-url)"


def urllib_transport(url: str, timeout: float) -> tuple[int, bytes]:
    """GET `url` with `timeout` on the connect and on every read; an HTTP error status is
    returned with its body, not raised."""
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - URL is config
            return resp.status, resp.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        body = exc.read(MAX_BODY + 1) if exc.fp is not None else b""
        return exc.code, body
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError | socket.timeout):
            raise TimeoutError(str(exc.reason)) from exc
        raise OSError(str(exc.reason)) from exc
    except http.client.HTTPException as exc:  # not HTTP at all (BadStatusLine, ...)
        raise OSError(f"not an HTTP answer: {type(exc).__name__}: {exc}") from exc


def query_url(base: str, query: str, timeout: float) -> str:
    """The instant-query URL; Prometheus' own `timeout` parameter asks the server to give up
    as soon as the client does."""
    params = urllib.parse.urlencode({"query": query, "timeout": f"{max(timeout, 0.001):g}s"})
    return f"{base.rstrip('/')}/api/v1/query?{params}"


def _number(text: object) -> float:
    if not isinstance(text, str):
        raise ValueError(f"a sample value must be a string, got {text!r}")
    return float(text)  # Prometheus writes NaN, +Inf, -Inf: float() reads all three


def _fmt_labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def parse_answer(status: int, body: bytes) -> tuple[list[SignalSample], str]:
    """An answer of the HTTP API -> (samples, error). The error says which kind of failure it
    is: `HTTP error`, `Prometheus error`, `bad response`, `wrong result type`, `empty result`,
    `non-finite value`."""
    if len(body) > MAX_BODY:
        return [], f"bad response: larger than {MAX_BODY} bytes"
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        doc = None
    if isinstance(doc, dict) and doc.get("status") == "error":
        kind = doc.get("errorType") or "error"
        return [], f"Prometheus error ({kind}, HTTP {status}): {doc.get('error') or ''}".rstrip()
    if not 200 <= status < 300:
        snippet = body[:200].decode("utf-8", "replace").strip()
        return [], f"HTTP error {status}: {snippet}" if snippet else f"HTTP error {status}"
    if not isinstance(doc, dict) or doc.get("status") != "success":
        return [], "bad response: not a Prometheus API answer"
    data = doc.get("data")
    if not isinstance(data, dict):
        return [], "bad response: no data"
    kind, result = data.get("resultType"), data.get("result")
    try:
        if kind == "scalar":
            pairs = [({}, result[1])]  # type: ignore[index]
        elif kind == "vector":
            if not isinstance(result, list):
                raise ValueError("result is not a list")
            if len(result) > MAX_SAMPLES:
                return [], f"bad response: more than {MAX_SAMPLES} series"
            pairs = [(item.get("metric") or {}, item["value"][1]) for item in result]
        else:
            return [], (
                f"wrong result type: {kind} (an instant vector or a scalar is expected; "
                "a range selector needs a function such as max_over_time around it)"
            )
        samples = []
        for labels, raw in pairs:
            if not isinstance(labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
            ):
                raise ValueError("labels are not a string map")
            value = _number(raw)
            if not math.isfinite(value):
                return [], f"non-finite value: {raw} for {_fmt_labels(labels)}"
            samples.append(SignalSample(labels=labels, value=value))
    except (TypeError, KeyError, IndexError, ValueError, AttributeError) as exc:
        return [], f"bad response: {exc}"
    if not samples:
        return [], "empty result: no series matched"
    return samples, ""


def read(
    base_url: str,
    id: str,
    query: str,
    *,
    timeout: float,
    transport: Transport = urllib_transport,
) -> SignalReading:
    """One instant query; never raises for anything the network or the server does."""
    url = query_url(base_url, query, timeout)
    try:
        status, body = transport(url, timeout)
    except TimeoutError:
        return SignalReading(
            id=id, query=query, error=f"timeout: no answer from Prometheus within {timeout:g}s"
        )
    except OSError as exc:
        return SignalReading(id=id, query=query, error=f"unreachable: {exc}")
    except ValueError as exc:  # urllib's "unknown url type" and the like
        return SignalReading(id=id, query=query, error=f"bad URL {base_url!r}: {exc}")
    samples, error = parse_answer(status, body)
    return SignalReading(id=id, query=query, samples=samples, error=error)


def read_all(
    base_url: str | None,
    queries: Iterable[tuple[str, str]],
    *,
    timeout: float,
    transport: Transport = urllib_transport,
) -> list[SignalReading]:
    """A reading per (id, query); without a URL each is an error saying so (the planner then
    reports it, and neither scales down nor reclaims on it)."""
    out = []
    for qid, text in queries:
        if not base_url:
            out.append(SignalReading(id=qid, query=text, error=NO_URL))
        else:
            out.append(read(base_url, qid, text, timeout=timeout, transport=transport))
    return out
