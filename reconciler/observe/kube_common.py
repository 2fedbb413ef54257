"""What the modules of the Kubernetes adapter (`reconciler/observe/kube*.py`) share: reporting
an object that does not parse (`_unreadable`, `_each`), and reading what the cluster publishes
(times, numbers, card lists) without raising on it. Private to those modules."""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from reconciler.observe.model import UnreadableObject

log = logging.getLogger("reconciler.observe.kube")
"""One logger for the whole adapter, under the name it had before it was split in modules."""


_UNREADABLE: contextvars.ContextVar[list[UnreadableObject] | None] = contextvars.ContextVar(
    "gpupool_unreadable", default=None
)
"""The list `observe_cluster` collects unreadable objects into (per call and thread); outside
it (the agent, admission events) `_unreadable` only logs."""

_BAD_OBJECT = (ValueError, TypeError, AttributeError, KeyError, IndexError, ArithmeticError)
"""What converting one malformed object may raise (pydantic's ValidationError is a
ValueError): that object is left out, the rest of the cycle goes on."""


def _unreadable(kind: str, namespace: str | None, name: str | None, message: str) -> None:
    log.warning("%s %s%s: %s", kind, f"{namespace}/" if namespace else "", name, message)
    found = _UNREADABLE.get()
    if found is not None:
        found.append(
            UnreadableObject(
                kind=kind, namespace=namespace or "", name=name or "?", message=message[:500]
            )
        )


def _each(
    kind: str,
    objs: Any,
    convert: Callable[[Any], Any],
    named: Callable[[Any], Any] = lambda o: o,
) -> list[Any]:
    """`convert` applied to each object; one that raises is left out and reported under the
    name of the Kubernetes object `named` finds in it (a model object, or a dict)."""
    out = []
    for o in objs:
        try:
            out.append(convert(o))
        except _BAD_OBJECT as exc:
            obj = named(o)
            if isinstance(obj, dict):
                meta = obj.get("metadata") or {}
                ns, name = meta.get("namespace"), meta.get("name")
            else:
                meta = getattr(obj, "metadata", None)
                ns, name = getattr(meta, "namespace", None), getattr(meta, "name", None)
            _unreadable(kind, ns, name, f"left out: {type(exc).__name__}: {exc}".splitlines()[0])
    return out


def _ts(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _stamp(value: str) -> str | None:
    """A published time as ISO text with a timezone (UTC when it had none); None if unreadable."""
    stamp = _ts(value)
    return stamp.isoformat() if stamp else None


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes")


def _float(v: str | None) -> float | None:
    """A demand signal from an annotation: a finite number >= 0, else absent (None). A
    negative queue length would read as calm and scale a service down."""
    try:
        x = float(v) if v not in (None, "") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) and x >= 0 else None


def _int(text: str | None) -> int | None:
    try:
        value = int(str(text))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _gpus(text: str | None) -> list[int] | None:
    """ "0,1,2": card indices; None when unreadable."""
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        return None
    return out if all(i >= 0 for i in out) else None


def _node_cards(text: str) -> tuple[str, list[int]] | None:
    """ "<node>:<gpus>" ("node-a:0,1"); None when unreadable."""
    node, _, cards = text.rpartition(":")
    gpus = _gpus(cards)
    return (node, gpus) if node and gpus else None
