"""What the modules of the Kubernetes adapter (`reconciler/observe/kube*.py`) share: reporting
an object that does not parse (`_unreadable`, `_each`), and reading what the cluster publishes
(times, numbers, card lists) without raising on it. Private to those modules.

A field read out of bounds (a time outside `conventions.MIN_TIME_YEAR`..`MAX_TIME_YEAR`, a
demand signal that is not a finite number >= 0, a gang size over `conventions.MAX_GANG_SIZE`)
reads as absent and is reported against the object it is on: the one named by the caller, else
the object `_each` is converting (`_report`), with the field, the value and the bound."""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from reconciler import conventions as C
from reconciler.observe.model import UnreadableObject, count_problem, time_problem

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


Who = tuple[str, str | None, str | None]
"""(kind, namespace, name) of a Kubernetes object, for a report."""

_READING: contextvars.ContextVar[tuple[str, Any, Callable[[Any], Any]] | None] = (
    contextvars.ContextVar("gpupool_reading", default=None)
)
"""The object `_each` is converting now: (kind, the item, how to find the Kubernetes object in
it), so that a reader deep in the conversion can report a field against it (`_report`)."""


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
        token = _READING.set((kind, o, named))
        try:
            out.append(convert(o))
        except _BAD_OBJECT as exc:
            _unreadable(
                *_who(kind, named(o)), f"left out: {type(exc).__name__}: {exc}".splitlines()[0]
            )
        finally:
            _READING.reset(token)
    return out


def _who(kind: str, obj: Any) -> Who:
    """The (kind, namespace, name) of a Kubernetes object: a model object, or a dict."""
    if isinstance(obj, dict):
        meta = obj.get("metadata") or {}
        return kind, meta.get("namespace"), meta.get("name")
    meta = getattr(obj, "metadata", None)
    return kind, getattr(meta, "namespace", None), getattr(meta, "name", None)


def _report(message: str, who: Who | None = None) -> None:
    """Report a field of an object that reads as unreadable (`_unreadable`): the object `who`
    names, else the one `_each` is converting; outside both, only logged."""
    if who is None:
        reading = _READING.get()
        if reading is None:
            log.warning("%s", message)
            return
        kind, item, named = reading
        try:
            who = _who(kind, named(item))
        except _BAD_OBJECT:
            who = (kind, None, None)
    _unreadable(*who, message)


def _ts(value: Any, field: str = "", who: Who | None = None) -> datetime | None:
    """A time the cluster publishes, UTC when it has no timezone; None when absent or
    unreadable. One outside the years the cluster can mean (`model.time_problem`) is None too,
    reported (`_report`) with `field`."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        t = value
    else:
        try:
            t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    why = time_problem(t)
    if why:
        _report(f"{field or 'a time'} {str(value)[:64]!r}: {why}; read as absent", who)
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _stamp(value: str, field: str = "", who: Who | None = None) -> str | None:
    """A published time as ISO text with a timezone (UTC when it had none); None if unreadable
    or out of bounds (`_ts`)."""
    stamp = _ts(value, field, who)
    return stamp.isoformat() if stamp else None


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes")


def _float(v: str | None, field: str = "", who: Who | None = None) -> float | None:
    """A demand signal from an annotation: a finite number >= 0, else absent (None), and
    reported (`_report`) with `field`: a negative queue length would read as calm and scale a
    service down, and one that does not parse would hide the service's load."""
    if v in (None, ""):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        x = None
    if x is None or not math.isfinite(x) or x < 0:
        _report(
            f"{field or 'a demand signal'} {str(v)[:64]!r} is not a finite number >= 0; "
            "read as absent",
            who,
        )
        return None
    return x


def _int(text: str | None, field: str = "", who: Who | None = None) -> int | None:
    """A gang size: an integer > 0, else absent (None). One over `conventions.MAX_GANG_SIZE`
    is absent too, reported (`_report`) with `field`."""
    try:
        value = int(str(text))
    except (TypeError, ValueError):
        return None
    if value <= 0:
        return None
    why = count_problem(value, C.MAX_GANG_SIZE, "pods in one gang", "MAX_GANG_SIZE")
    if why:
        _report(f"{field or 'a gang size'}: {why}; read as absent", who)
        return None
    return value


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
