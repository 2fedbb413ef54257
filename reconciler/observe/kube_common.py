"""What the modules of the Kubernetes adapter (`reconciler/observe/kube*.py`) share: reporting
an object that does not parse (`_unreadable`, `_each`), and reading what the cluster publishes
(times, numbers, card lists) without raising on it. Private to those modules.

The per-object guard (`_each`) holds whatever shape an object has: a custom object is a dict of
whatever a looser CRD, or a buggy writer, let through (a `status` that is a string, a list that
is a number). A reader checks the JSON type of what it reads with `_shape`, which raises
`Shape` naming the field; `_each` reports the object with the field and the rest of the cycle
goes on. Its report names the object whatever its `metadata` is (`_who`), and a pydantic error
by its first field (`_why`); `_identified` leaves out an object with no name to report it by."""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

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
            try:
                who = _who(kind, named(o))
            except _BAD_OBJECT:  # `named` expects another shape
                who = (kind, None, None)
            _unreadable(*who, f"left out: {_why(exc)}")
    return out


Who = tuple[str, str | None, str | None]
"""(kind, namespace, name) of a Kubernetes object, for a report."""


def _who(kind: str, obj: Any) -> Who:
    """The (kind, namespace, name) of a Kubernetes object (a model object, or a dict), for a
    report; never raises: a `metadata`, namespace or name that is not what it should be (not
    an object, not a string) counts as absent."""
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        ns, name = (meta.get("namespace"), meta.get("name")) if isinstance(meta, dict) else ("", "")
    else:
        meta = getattr(obj, "metadata", None)
        ns, name = getattr(meta, "namespace", None), getattr(meta, "name", None)
    return (
        kind,
        ns if isinstance(ns, str) else None,
        name if isinstance(name, str) else None,
    )


def _why(exc: BaseException) -> str:
    """One line on what is wrong with an object, for a report: a `Shape` as it is said, a
    pydantic error by its first field (where and what), anything else by its type and first
    line."""
    if isinstance(exc, Shape):
        return str(exc)
    if isinstance(exc, ValidationError) and exc.errors():
        first = exc.errors()[0]
        loc = first.get("loc", ())
        where = "".join(f"[{x}]" if isinstance(x, int) else f".{x}" for x in loc).lstrip(".")
        more = len(exc.errors()) - 1
        said = f"{where or exc.title}: {first.get('msg', '')}"
        return said + (f" (and {more} more)" if more else "")
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


class Shape(ValueError):
    """A field whose JSON type is not the one its reader needs (a looser CRD, a buggy writer):
    raised by `_shape`, caught by `_each` as any malformed object is; says which field."""


def _json_type(value: Any) -> str:
    """What JSON calls the type of `value` (with a short quote of a scalar), for a report."""
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, int | float):
        return f"a number ({str(value)[:32]})"
    if isinstance(value, str):
        return f"a string ({value[:32]!r})"
    return type(value).__name__


_JSON_NAMES = {dict: "an object", list: "a list", str: "a string", int: "a number"}


def _shape(value: Any, want: type, field: str, *, required: bool = False) -> Any:
    """`value` when it is a `want` (dict, list, str, int: not a bool), or None when it is absent
    and not `required`; else raises `Shape` naming `field`."""
    if value is None and not required:
        return None
    if isinstance(value, want) and not (want is int and isinstance(value, bool)):
        return value
    said = "missing" if value is None else f"{_json_type(value)}, not {_JSON_NAMES[want]}"
    raise Shape(f"{field} is {said}")


def _objects(kind: str, objs: Any, *fields: str) -> list[dict]:
    """The custom objects (dicts) of `objs` whose `fields` (top-level keys: "metadata",
    "spec") are objects or absent, for a reader that takes that for granted; each other one
    is left out, reported with the field (`_each`)."""

    def check(o: Any) -> dict:
        _shape(o, dict, "the object", required=True)
        for f in fields:
            _shape(o.get(f), dict, f)
        return o

    return _each(kind, objs, check)


def _identified(kind: str, objs: Any, *, namespaced: bool) -> list[Any]:
    """The objects of `objs` (model objects) that have a name (and a namespace, when
    `namespaced`) to be known by: the readers key, sort and report by them. Each other one is
    left out and reported, with what is missing."""

    def check(o: Any) -> Any:
        _, ns, name = _who(kind, o)
        if not name:
            raise Shape("metadata.name is missing")
        if namespaced and not ns:
            raise Shape("metadata.namespace is missing")
        return o

    return _each(kind, objs, check)


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
