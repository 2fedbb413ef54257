"""Bounds on what a YAML text may make a loader build, checked before it is loaded.

A policy file comes from a pull request and a snapshot from whoever runs `plan --observed`; both
are read every cycle or in CI, so neither may hang, exhaust memory or crash the process:

- aliases: a 1 KB file whose anchors refer to anchors ten times over ("billion laughs")
  expands to millions of values when loaded (ruamel's loaders, and our conversion to plain
  Python, copy what every alias refers to). What aliases add is bounded;
- nesting: a deeply nested collection makes the composer recurse past Python's limit and
  libyaml's C constructor crash the process; depth is bounded;
- one scalar's size is bounded (a 5,000-digit number is refused by Python's int conversion).

The check streams libyaml's parse events (fast, and it stops at the first bound crossed, before
the deep or expanded structure is ever built) and computes what each anchor would expand to.
Syntax errors are left to the loader, which reports them with their own position.
"""

from __future__ import annotations

from dataclasses import dataclass

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

MAX_DEPTH = 64
"""Collections inside collections. Policies nest under ten deep, snapshots under eight."""
MAX_ALIAS_VALUES = 10_000
"""Values that aliases may add beyond those written out."""
MAX_SCALAR_CHARS = 65_536


@dataclass(frozen=True)
class Exceeded:
    line: int  # 1-based
    column: int  # 1-based
    message: str


def check(text: str, *, max_scalar: int = MAX_SCALAR_CHARS) -> Exceeded | None:
    """The first bound `text` crosses, where; None when it stays within them (or does not
    parse: the loader then says where and why)."""
    sizes: dict[str, int] = {}
    stack: list[list] = []  # [values so far, anchor] per open collection
    added = 0
    try:
        for ev in YAML(typ="safe", pure=False).parse(text):
            name = type(ev).__name__
            mark = ev.start_mark
            where = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
            if name in ("SequenceStartEvent", "MappingStartEvent"):
                stack.append([1, ev.anchor])
                if len(stack) > MAX_DEPTH:
                    return Exceeded(*where, f"nested more than {MAX_DEPTH} collections deep")
                continue
            if name in ("SequenceEndEvent", "MappingEndEvent"):
                size, anchor = stack.pop()
            elif name == "ScalarEvent":
                size, anchor = 1, ev.anchor
                if len(ev.value) > max_scalar:
                    return Exceeded(
                        *where, f"a value of {len(ev.value):,} characters (at most {max_scalar:,})"
                    )
            elif name == "AliasEvent":
                size, anchor = sizes.get(ev.anchor, 1), None
                added += size
                if added > MAX_ALIAS_VALUES:
                    return Exceeded(
                        *where,
                        f"aliases expand to more than {MAX_ALIAS_VALUES:,} values "
                        f"(*{ev.anchor} alone to {size:,}); write the values out instead",
                    )
            else:
                continue
            if anchor:
                sizes[anchor] = size
            if stack:
                stack[-1][0] += size
    except (YAMLError, ValueError):
        return None
    return None
