"""Where a field of a YAML document is: the 1-based line and column ruamel recorded for it,
and its path written out (`spec.pools[0].mig.3g.40gb`). Shared by the loader, the semantic
checks (`validate.py`) and the snapshot reader, which locate their problems the same way."""

from __future__ import annotations

import json
import re
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq


def node_position(node: Any) -> tuple[int, int] | None:
    """1-based (line, column) ruamel recorded for a node, if it recorded one."""
    lc = getattr(node, "lc", None)
    if lc is None or lc.line is None or lc.col is None:
        return None
    return lc.line + 1, lc.col + 1


def locate(node: Any, path: tuple) -> tuple[int, int]:
    """1-based (line, column) of the deepest element of `path` that exists in the YAML node."""
    line, col = node_position(node) or (0, 0)
    for part in path:
        if isinstance(node, CommentedMap) and part in node:
            pos = node.lc.key(part)
            if pos is not None:  # None for a key that came from a `<<` merge
                line, col = pos[0] + 1, pos[1] + 1
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
            pos = node.lc.item(part)
            if pos is not None:
                line, col = pos[0] + 1, pos[1] + 1
            node = node[part]
        else:
            break
    return line, col


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+/-]*")


def format_path(path: tuple) -> str:
    """`spec.pools[0].mig.3g.40gb`; a key with spaces, quotes or control characters is
    written quoted (`metadata["a b"]`) so a message always stays on one line."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += "[" + json.dumps(str(part)) + "]"
    return out
