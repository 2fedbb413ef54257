"""Snapshot files: the observed state as YAML or JSON (`gpupool plan --observed FILE`)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from json.decoder import scanstring
from pathlib import Path

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.constructor import SafeConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from reconciler.conventions import MAX_SNAPSHOT_BYTES
from reconciler.observe.model import Inconsistent, ObservedState
from reconciler.policy import limits
from reconciler.policy.loader import locating
from reconciler.policy.positions import format_path, locate
from reconciler.policy.problems import InvalidInput, Problem

SNAPSHOT_MAX_SCALAR_CHARS = 1 << 20
"""A snapshot's longest value (a policy file's: `limits.MAX_SCALAR_CHARS`)."""

PLACED_YAML_MAX_CHARS = 256 << 10
"""The largest YAML snapshot whose problems get a line and column: they come from ruamel's
round-trip parse, pure Python, about half a minute per MiB. A larger one's problems are named by
file and field only, at once. JSON is placed at any size (`_JsonPositions`)."""


class InvalidSnapshot(InvalidInput):
    """An observed-state file that cannot be used; carries every problem found."""


def parse_snapshot(text: str, name: str = "<snapshot>") -> ObservedState:
    # JSON is YAML: the same bounds hold for both (nesting, aliases, value size)
    over = limits.check(
        text, max_scalar=SNAPSHOT_MAX_SCALAR_CHARS, pure=None if name.endswith(".json") else False
    )
    if over is not None:
        raise InvalidSnapshot(
            [Problem(name, over.line, over.column, format_path(over.path), over.message)]
        )
    try:
        if name.endswith(".json"):
            data = json.loads(text, object_pairs_hook=unique_keys)
        else:
            yaml = YAML(typ="safe", pure=False)
            yaml.Constructor = _SafeConstructor
            data = yaml.load(text)
    except json.JSONDecodeError as exc:
        raise InvalidSnapshot(
            [Problem(name, exc.lineno, exc.colno, "", f"cannot parse: {exc.msg}")]
        ) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        msg = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise InvalidSnapshot([Problem(name, line, col, "", f"cannot parse: {msg}")]) from None
    except ReaderError as exc:  # a character YAML does not allow: an offset, not a mark
        line, col = _line_col(text, exc.position)
        raise InvalidSnapshot(
            [Problem(name, line, col, "", f"cannot parse: {exc.reason}")]
        ) from None
    except (YAMLError, ValueError, RecursionError) as exc:  # e.g. a JSON number past Python's
        # digit limit, a repeated JSON key
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidSnapshot([Problem(name, 0, 0, "", f"cannot parse: {detail}")]) from None
    if not isinstance(data, dict):
        raise InvalidSnapshot(
            [
                Problem(
                    name, 1, 1, "", "an observed-state file is a mapping with kind: ObservedState"
                )
            ]
        )
    try:
        return ObservedState.model_validate(data)
    except ValidationError as exc:
        raise InvalidSnapshot(_problems(exc, text, name)) from None


_SafeConstructor = locating(SafeConstructor)


def _line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset in `text`."""
    offset = max(0, min(offset, len(text)))
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """A JSON object, refusing a repeated key (json keeps the last one silently). The event
    pass of limits.check finds and places duplicates first; this is for JSON that no YAML
    parser reads."""
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(
                f"duplicate key {json.dumps(k)}: the value of one of them would be lost"
            )
        out[k] = v
    return out


def _problems(exc: ValidationError, text: str, name: str) -> list[Problem]:
    """One located Problem per error; an `Inconsistent` error (items that contradict each
    other) becomes one per offending item, placed at that item's line."""
    place = _positions(text, name)
    found: list[tuple[tuple, str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        cause = (err.get("ctx") or {}).get("error")
        if isinstance(cause, Inconsistent):
            found += [((*loc, *path), msg) for path, msg in cause.problems]
        else:
            found.append((loc, _message(err)))
    problems = []
    for loc, msg in found:
        line, col = place(loc)
        problems.append(Problem(name, line, col, format_path(loc), msg, "ObservedState"))
    return problems


def _positions(text: str, name: str) -> Callable[[tuple], tuple[int, int]]:
    """Where a path of the document is: (line, column), (0, 0) when not known."""
    if name.endswith(".json"):
        return _JsonPositions(text).locate
    if len(text) > PLACED_YAML_MAX_CHARS:
        return lambda loc: (0, 0)
    try:
        node = YAML(typ="rt").load(text)  # again, with positions, only to place the messages
    except (YAMLError, ValueError):
        return lambda loc: (0, 0)
    return lambda loc: locate(node, loc)


_WS = re.compile(r"[ \t\n\r]*")


class _JsonPositions:
    """Where a path is in a JSON text that `json.loads` read, without a parse that records
    positions (ruamel's would take minutes for a large snapshot): each container on the path
    is scanned once for where its members start, every member skipped by the C decoder."""

    def __init__(self, text: str):
        self.text = text
        self.decoder = json.JSONDecoder()
        self.members: dict[int, dict[str, tuple[int, int]] | list[int]] = {}

    def _ws(self, i: int) -> int:
        m = _WS.match(self.text, i)
        return m.end() if m else i

    def _scan(self, start: int) -> dict[str, tuple[int, int]] | list[int]:
        """The members of the object or array at `start`: key -> (where the key is, where its
        value is), or where each item is."""
        found = self.members.get(start)
        if found is not None:
            return found
        t, obj = self.text, self.text[start] == "{"
        keys: dict[str, tuple[int, int]] = {}
        items: list[int] = []
        i = self._ws(start + 1)
        while i < len(t) and t[i] not in "]}":
            if obj:
                key, after = scanstring(t, i + 1)
                value = self._ws(self._ws(after) + 1)  # past the colon
                keys[key] = (i, value)
            else:
                value = i
                items.append(value)
            _, end = self.decoder.raw_decode(t, value)
            i = self._ws(end)
            if i < len(t) and t[i] == ",":
                i = self._ws(i + 1)
        self.members[start] = found = keys if obj else items
        return found

    def locate(self, path: tuple) -> tuple[int, int]:
        at = self._ws(0)
        if at >= len(self.text):
            return 0, 0
        where = at
        try:
            for part in path:
                members = self._scan(at) if self.text[at] in "{[" else None
                if isinstance(members, dict) and str(part) in members:
                    where, at = members[str(part)]
                elif isinstance(members, list) and isinstance(part, int):
                    if not 0 <= part < len(members):
                        break
                    where = at = members[part]
                else:
                    break
        except (ValueError, IndexError):  # not the JSON json.loads read: the deepest found
            pass
        return _line_col(self.text, where)


def _message(err: dict) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return f"unknown field {err['loc'][-1]!r}"
    if kind == "timezone_aware":
        given = err.get("input")
        given = given.isoformat() if hasattr(given, "isoformat") else str(given)
        return (
            f"time {given} has no timezone: if it is UTC, write {given}Z; "
            f"else add its offset, e.g. {given}+02:00"
        )
    if kind == "finite_number":
        return f"must be a finite number (got {err.get('input')!r})"
    cause = (err.get("ctx") or {}).get("error")
    if kind == "value_error" and isinstance(cause, ValueError):
        return str(cause)  # the model's own words: a time or a count out of bounds
    value = err.get("input")
    if "input" in err and isinstance(value, int | float | str) and not isinstance(value, bool):
        return f"{err['msg']} (got {value!r})"
    return err["msg"]


def load_snapshot(path: str | Path) -> ObservedState:
    p = Path(path)
    try:
        too_big = p.stat().st_size > MAX_SNAPSHOT_BYTES  # before reading it (a FIFO says 0)
        data = b"" if too_big else p.read_bytes()
    except OSError as exc:
        raise InvalidSnapshot([Problem(str(p), 0, 0, "", f"cannot read: {exc}")]) from None
    if too_big or len(data) > MAX_SNAPSHOT_BYTES:
        raise InvalidSnapshot(
            [
                Problem(
                    str(p),
                    0,
                    0,
                    "",
                    f"the file is over the limit of {MAX_SNAPSHOT_BYTES:,} bytes "
                    f"({MAX_SNAPSHOT_BYTES // 2**20} MiB) for a snapshot; it is not read",
                )
            ]
        )
    bad = limits.locate_bad_utf8(data)
    if bad is not None:
        raise InvalidSnapshot([Problem(str(p), bad.line, bad.column, "", bad.message)])
    return parse_snapshot(data.decode("utf-8"), str(p))


def dump_snapshot(state: ObservedState, fmt: str = "yaml") -> str:
    data = state.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    data = {"apiVersion": state.api_version, "kind": state.kind, **data}
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=False) + "\n"
    import io

    buf = io.StringIO()
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.sort_base_mapping_type_on_output = False
    y.dump(data, buf)
    return buf.getvalue()
