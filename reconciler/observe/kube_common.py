"""What the modules of the Kubernetes adapter (`reconciler/observe/kube*.py`) share: reporting
an object that does not parse (`_unreadable`, `_each`), and reading what the cluster publishes
(times, numbers, card lists) without raising on it. Private to those modules.

A field read out of bounds (a time outside `conventions.MIN_TIME_YEAR`..`MAX_TIME_YEAR`, a
demand signal that is not a finite number >= 0, a gang size over `conventions.MAX_GANG_SIZE`)
reads as absent and is reported against the object it is on: the one named by the caller, else
the object `_each` is converting (`_report`), with the field, the value and the bound.

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
from typing import Any, TypeVar

from pydantic import ValidationError

from reconciler import conventions as C
from reconciler.observe.model import UnreadableObject, count_problem, time_problem

log = logging.getLogger("reconciler.observe.kube")
"""One logger for the whole adapter, under the name it had before it was split in modules."""


_UNREADABLE: contextvars.ContextVar[list[UnreadableObject] | None] = contextvars.ContextVar(
    "gpupool_unreadable", default=None
)
"""The list `observe_cluster` collects unreadable objects into (per call and thread); outside
it (the agent, admission events) `_unreadable` only logs."""

T = TypeVar("T")

_CACHED_LISTS: contextvars.ContextVar[Callable[[str], list[Any] | None] | None] = (
    contextvars.ContextVar("gpupool_cached_lists", default=None)
)
"""Where `listed` looks first (per `observe_cluster` call): the watch cache's answer for a
resource (`ClusterCache.listed`), None to list it."""


def listed(resource: str, call: Callable[[], Any]) -> list[Any]:
    """The objects of `resource` (a `resource.group` name of conventions: C.JOBS, ...): from
    the watch cache the observation reads through, where it keeps them and has seen gpupool's
    own writes of them; else from `call()`, the list request (a typed list's `.items`, a custom
    objects' list's "items"). Either may raise the API's error: a cache that knows the resource
    is not served raises the 404 its list would, so readers handle one answer, not two."""
    lookup = _CACHED_LISTS.get()
    cached = lookup(resource) if lookup is not None else None
    if cached is not None:
        return cached
    answer = call()
    if isinstance(answer, dict):
        items = answer.get("items")
        return items if isinstance(items, list) else []
    return list(answer.items or [])


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


def reported_again(reported: list[UnreadableObject]) -> None:
    """Report again what reading an object reported before (a memo hands back its result)."""
    found = _UNREADABLE.get()
    if found is not None:
        found.extend(reported)


def read_reporting(make: Callable[[], T]) -> tuple[T, list[UnreadableObject]]:
    """`make()`, and what it reported unreadable (reported as usual too), for a memo to keep
    beside the result and `reported_again` on a hit."""
    reported: list[UnreadableObject] = []
    token = _UNREADABLE.set(reported)
    try:
        value = make()
    finally:
        _UNREADABLE.reset(token)
        reported_again(reported)
    return value, reported


class VersionMemo:
    """Values read from cluster objects, kept from one observation to the next: per step, an
    object's name -> (the version key it was read under, the value, what reading it reported
    unreadable). `get` hands back the kept value while the key is equal (a resourceVersion
    names one state of one object) and reports again what it reported, so an observation
    equals one made without the memo. Only what the last observation asked is kept (`begin`
    / `end`): memory follows the live objects. The controller keeps one across cycles
    (`CardMemo`, `WorkloadMemo`)."""

    def __init__(self, steps: tuple[str, ...]) -> None:
        self._steps = steps
        self._kept: dict[str, dict[Any, tuple]] = {s: {} for s in steps}
        self._next: dict[str, dict[Any, tuple]] = {s: {} for s in steps}
        self.hits = dict.fromkeys(steps, 0)
        self.misses = dict.fromkeys(steps, 0)

    def begin(self) -> None:
        self._next = {s: {} for s in self._steps}

    def end(self) -> None:
        self._kept, self._next = self._next, {s: {} for s in self._steps}

    def size(self, step: str) -> int:
        """How many objects' values of `step` are kept (those of the last observation)."""
        return len(self._kept[step])

    def get(self, step: str, name: Any, key: Any, make: Callable[[], T]) -> T:
        """`make()`, or the value kept for `name` under the same `key` (none: made every
        time, not kept)."""
        if not key:
            self.misses[step] += 1
            return make()
        kept = self._kept[step].get(name)
        if kept is not None and kept[0] == key:
            self.hits[step] += 1
            reported_again(kept[2])
        else:
            self.misses[step] += 1
            kept = (key, *read_reporting(make))
        self._next[step][name] = kept
        return kept[1]

    def carry(self, step: str, name: Any) -> None:
        """Keep `name`'s value of `step` for the next observation although this one did not
        ask it (a value asked only when another changes)."""
        kept = self._kept[step].get(name)
        if kept is not None:
            self._next[step][name] = kept


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
            try:
                who = _who(kind, named(o))
            except _BAD_OBJECT:  # `named` expects another shape
                who = (kind, None, None)
            _unreadable(*who, f"left out: {_why(exc)}")
        finally:
            _READING.reset(token)
    return out


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
