"""What a YAML text may contain, checked before it is loaded: bounds on what it may make a
loader build, and mapping keys that are strings and unique.

A policy file comes from a pull request and a snapshot from whoever runs `plan --observed`; both
are read every cycle or in CI, so neither may hang, exhaust memory or crash the process:

- aliases: a 1 KB file whose anchors refer to anchors ten times over ("billion laughs")
  expands to millions of values when loaded (ruamel's loaders, and our conversion to plain
  Python, copy what every alias refers to). What aliases add is bounded;
- nesting: a deeply nested collection makes the composer recurse past Python's limit and
  libyaml's C constructor crash the process; depth is bounded;
- one scalar's size is bounded, and a number's digits (Python's int conversion refuses 5,000).

Nor may a file mean something other than what it says:

- a mapping key is a string: `1`, `true`, `~`, `1.5`, `2026-01-01` or a list as a key would
  be turned into a string later, and `1` and `"1"` would then collapse into one key, silently
  dropping a value (a node-selector term); such a key is refused, and quoting it is the fix;
- a key appears once per mapping (`<<` merges may still override).

The check streams libyaml's parse events (fast, and it stops at the first problem, before the
deep or expanded structure is ever built) and computes what each anchor would expand to.
Syntax errors are left to the loader, which reports them with their own position.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError
from ruamel.yaml.resolver import implicit_resolvers

MAX_DEPTH = 64
"""Collections inside collections. Policies nest under ten deep, snapshots under eight."""
MAX_ALIAS_VALUES = 10_000
"""Values that aliases may add beyond those written out."""
MAX_SCALAR_CHARS = 65_536
MAX_NUMBER_CHARS = 1_000
"""A number's digits (Python refuses to convert past 4,300; JSON is read by Python's own
parser, which would then fail without saying where)."""

_TAG = "tag:yaml.org,2002:"
_STRING_TAGS = {f"{_TAG}str", f"{_TAG}value", f"{_TAG}yaml"}  # `=` loads as the string "="
_MERGE = f"{_TAG}merge"
_NUMBERS = {f"{_TAG}int", f"{_TAG}float"}
_WHAT = {
    f"{_TAG}int": "a number",
    f"{_TAG}float": "a number",
    f"{_TAG}bool": "a boolean",
    f"{_TAG}null": "null",
    f"{_TAG}timestamp": "a date",
}


@dataclass(frozen=True)
class Refused:
    line: int  # 1-based
    column: int  # 1-based
    message: str
    path: tuple = ()  # the field path, as the loaders' format_path takes it


@dataclass
class _Open:
    """A collection being read."""

    anchor: str | None
    path: tuple
    keys: dict[str, int] | None  # mapping: key -> its line; None for a sequence
    size: int = 1
    index: int = 0  # sequence: next item; mapping: 0 = a key comes next, 1 = its value
    key: Any = None  # mapping: the key of the value that comes next


@functools.lru_cache(maxsize=4096)  # keys repeat: a snapshot has a few dozen field names
def _implicit_tag(value: str, version: tuple[int, int]) -> str:
    """The tag YAML `version` resolves a plain scalar to (as ruamel's resolver does)."""
    first = value[:1]
    for versions, tag, regexp, chars in implicit_resolvers:
        if version in versions and first in chars and regexp.match(value):
            return tag
    return f"{_TAG}str"


def _tags(ev: Any, versions: tuple[tuple[int, int], ...]) -> set[str]:
    """Every tag a scalar key may be read as (a plain one under each YAML version in play)."""
    if ev.tag not in (None, "!"):
        return {str(ev.tag)}
    if ev.tag == "!" or not ev.implicit[0]:  # quoted, or `! x`: a string
        return {f"{_TAG}str"}
    return {_implicit_tag(ev.value, v) for v in versions}


def _shown(value: str) -> str:
    return value if len(value) <= 40 else value[:37] + "..."


def check(
    text: str, *, max_scalar: int = MAX_SCALAR_CHARS, pure: bool | None = False
) -> Refused | None:
    """The first thing `text` may not contain, where; None when it has none (or does not
    parse: the loader then says where and why).

    Read with the parser the loader will use, so that they agree on what the text is: libyaml
    (`pure=False`, for the C loaders) or ruamel's own (`pure=True`, for the round-trip loader:
    libyaml refuses some texts it reads, such as an empty key, and a check that stopped there
    would let the rest through unchecked). `pure=None`: libyaml, then ruamel's parser when
    libyaml cannot read the text (for JSON, which neither loader reads).
    """
    for p in (True,) if pure else (False, True) if pure is None else (False,):
        try:
            return _check(text, max_scalar, p)
        except (YAMLError, ValueError):
            continue
    return None


def _check(text: str, max_scalar: int, pure: bool) -> Refused | None:
    sizes: dict[str, int] = {}
    strings: dict[str, str | None] = {}  # anchor -> the string it names (None: not a string)
    stack: list[_Open] = []
    added = 0
    # ruamel's round-trip loader resolves `%YAML 1.1` documents by 1.1 rules (`yes` is a
    # boolean) and the C loader by 1.2: a key is a string only if it is one under both
    versions: tuple[tuple[int, int], ...] = ((1, 2),)
    for ev in YAML(typ="safe", pure=pure).parse(text):
        name = type(ev).__name__
        mark = ev.start_mark
        where = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        if name == "DocumentStartEvent":
            v = getattr(ev, "version", None)
            versions = ((1, 2),) if v is None else ((1, 2), tuple(v))
            continue
        if name in ("SequenceEndEvent", "MappingEndEvent"):
            done = stack.pop()
            size, anchor = done.size, done.anchor
        elif name in ("SequenceStartEvent", "MappingStartEvent", "ScalarEvent", "AliasEvent"):
            parent = stack[-1] if stack else None
            path: tuple = ()
            if parent is not None:
                if parent.keys is None:
                    path = (*parent.path, parent.index)
                elif parent.index == 0:  # this node is a key
                    bad = _check_key(ev, name, parent, versions, strings, where)
                    if bad is not None:
                        return bad
                else:
                    path = (*parent.path, parent.key)
            if name in ("SequenceStartEvent", "MappingStartEvent"):
                keys = {} if name == "MappingStartEvent" else None
                stack.append(_Open(ev.anchor, path, keys))
                if len(stack) > MAX_DEPTH:
                    return Refused(
                        *where, f"refused: nested more than {MAX_DEPTH} collections deep"
                    )
                continue
            if name == "ScalarEvent":
                size, anchor = 1, ev.anchor
                bad = _check_scalar(ev, max_scalar, versions, strings, where, path)
                if bad is not None:
                    return bad
            else:
                size, anchor = sizes.get(ev.anchor, 1), None
                added += size
                if added > MAX_ALIAS_VALUES:
                    return Refused(
                        *where,
                        f"refused: aliases expand to more than {MAX_ALIAS_VALUES:,} values "
                        f"(*{ev.anchor} alone to {size:,}); write the values out instead",
                        path,
                    )
        else:
            continue
        if anchor:
            sizes[anchor] = size
            if name != "ScalarEvent":
                strings[anchor] = None
        if stack:
            top = stack[-1]
            top.size += size
            if top.keys is None:
                top.index += 1
            else:
                top.index ^= 1
    return None


def _check_scalar(
    ev: Any,
    max_scalar: int,
    versions: tuple[tuple[int, int], ...],
    strings: dict[str, str | None],
    where: tuple[int, int],
    path: tuple,
) -> Refused | None:
    """A scalar's size, and a number's digits, are bounded; records the string an anchored
    scalar names (None: it is not a string)."""
    anchor = ev.anchor
    if len(ev.value) > max_scalar:
        return Refused(
            *where,
            f"refused: a value of {len(ev.value):,} characters (at most {max_scalar:,})",
            path,
        )
    if len(ev.value) > MAX_NUMBER_CHARS and _tags(ev, versions) & _NUMBERS:
        return Refused(
            *where,
            f"refused: a number of {len(ev.value):,} characters "
            f"(at most {MAX_NUMBER_CHARS:,}); quote it if it is text",
            path,
        )
    if anchor:
        tags = _tags(ev, versions)
        strings[anchor] = ev.value if tags <= _STRING_TAGS else None
    return None


def _check_key(
    ev: Any,
    name: str,
    mapping: _Open,
    versions: tuple[tuple[int, int], ...],
    strings: dict[str, str | None],
    where: tuple[int, int],
) -> Refused | None:
    """A key must be a string, once per mapping; records it as the mapping's next key."""
    if name == "ScalarEvent":
        tags = _tags(ev, versions)
        if tags == {_MERGE}:
            key = "<<"
        elif tags <= _STRING_TAGS:
            key = ev.value
        elif ev.tag not in (None, "!"):
            return Refused(
                *where,
                f"mapping keys must be strings: this one is tagged {_shown(str(ev.tag))}",
                mapping.path,
            )
        else:
            what = next(_WHAT[t] for t in sorted(tags) if t in _WHAT)
            quoted = "'" + ev.value.replace("'", "''") + "'"
            return Refused(
                *where,
                f"mapping keys must be strings: {_shown(ev.value) or 'an empty key'} is read as "
                f"{what}; quote it ({_shown(quoted)}) if it is a name",
                mapping.path,
            )
    elif name == "AliasEvent" and strings.get(ev.anchor) is not None:
        key = strings[ev.anchor]
    elif name == "AliasEvent" and ev.anchor not in strings:
        key = f"*{ev.anchor}"  # an undefined alias: the loader says so, located
    else:
        what = {
            "SequenceStartEvent": "a list",
            "MappingStartEvent": "a mapping",
            "AliasEvent": f"*{ev.anchor}, an alias of a list or mapping",
        }[name]
        return Refused(*where, f"mapping keys must be strings, not {what}", mapping.path)
    assert mapping.keys is not None
    first = mapping.keys.get(key)
    if first is not None:
        return Refused(
            *where,
            f"duplicate key {json.dumps(_shown(key))} (first at line {first}): "
            "the value of one of them would be lost",
            (*mapping.path, key),
        )
    mapping.keys[key] = where[0]
    mapping.key = key
    return None


def locate_bad_utf8(data: bytes) -> Refused | None:
    """Where `data` stops being UTF-8 text: the 1-based line and column (in characters) of its
    first invalid byte; None when it is valid. For files read as bytes, so that an invalid
    byte is reported where it is, not only that there is one."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        start = exc.start
        line_start = data.rfind(b"\n", 0, start) + 1
        line = data.count(b"\n", 0, start) + 1
        column = len(data[line_start:start].decode("utf-8", errors="replace")) + 1
        bad = data[start : max(exc.end, start + 1)]
        return Refused(
            line,
            column,
            f"not UTF-8 text: invalid byte{'s' if len(bad) > 1 else ''} "
            f"{' '.join(f'0x{b:02X}' for b in bad)} ({exc.reason})",
        )
    return None
