"""Label and field selectors, parsed the way kube-apiserver parses them.

Label selector syntax (``labelSelector=`` query parameter): comma-separated requirements of
``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists), ``!k``
(does not exist), ``k>n``, ``k<n``.  Field selectors: ``path=v``, ``path==v``, ``path!=v``.
``LabelSelector`` objects (``matchLabels`` / ``matchExpressions``, as in PDBs) are handled by
``match_label_selector_object``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

Requirement = tuple[str, str, tuple[str, ...]]  # (key, op, values)

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"


class SelectorError(ValueError):
    pass


def _split_top_level(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[Requirement]:
    if not text:
        return []
    reqs: list[Requirement] = []
    for part in _split_top_level(text):
        m = re.fullmatch(rf"({_KEY})\s+(in|notin)\s+\(([^)]*)\)", part)
        if m:
            values = tuple(v.strip() for v in m.group(3).split(",") if v.strip())
            reqs.append((m.group(1), m.group(2), values))
            continue
        m = re.fullmatch(rf"!\s*({_KEY})", part)
        if m:
            reqs.append((m.group(1), "!", ()))
            continue
        m = re.fullmatch(rf"({_KEY})\s*(==|!=|=|>|<)\s*([A-Za-z0-9_.-]*)", part)
        if m:
            op = "=" if m.group(2) == "==" else m.group(2)
            if op in (">", "<") and not re.fullmatch(r"-?\d+", m.group(3)):
                raise SelectorError(f"unable to parse requirement: {part!r}")
            reqs.append((m.group(1), op, (m.group(3),)))
            continue
        m = re.fullmatch(rf"({_KEY})", part)
        if m:
            reqs.append((m.group(1), "exists", ()))
            continue
        raise SelectorError(f"unable to parse requirement: {part!r}")
    return reqs


def match_labels(reqs: list[Requirement], labels: dict[str, str] | None) -> bool:
    labels = labels or {}
    for key, op, values in reqs:
        present = key in labels
        val = labels.get(key)
        if op == "=" and val != values[0]:
            return False
        if op == "!=" and present and val == values[0]:
            return False
        if op == "in" and (not present or val not in values):
            return False
        if op == "notin" and present and val in values:
            return False
        if op == "exists" and not present:
            return False
        if op == "!" and present:
            return False
        if op in (">", "<"):
            if not present or not re.fullmatch(r"-?\d+", val or ""):
                return False
            if op == ">" and not int(val) > int(values[0]):
                return False
            if op == "<" and not int(val) < int(values[0]):
                return False
    return True


def match_label_selector_object(selector: dict[str, Any] | None, labels: dict | None) -> bool:
    """metav1.LabelSelector semantics: a null selector matches nothing, ``{}`` matches all."""
    if selector is None:
        return False
    reqs: list[Requirement] = [(k, "=", (v,)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append((expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
    return match_labels(reqs, labels)


def label_selector_to_string(selector: dict[str, Any] | None) -> str:
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, vals = expr["operator"], expr["key"], ",".join(expr.get("values") or [])
        parts.append(
            {"In": f"{key} in ({vals})", "NotIn": f"{key} notin ({vals})", "Exists": key,
             "DoesNotExist": f"!{key}"}[op]
        )
    return ",".join(parts)


FieldRequirement = tuple[str, str, str]


def parse_field_selector(text: str | None) -> list[FieldRequirement]:
    if not text:
        return []
    reqs = []
    for part in _split_top_level(text):
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(==|!=|=)\s*(.*)", part)
        if not m:
            raise SelectorError(f"invalid selector: {part!r}; can't understand {part!r}")
        op = "!=" if m.group(2) == "!=" else "="
        reqs.append((m.group(1), op, m.group(3)))
    return reqs


def match_fields(reqs: list[FieldRequirement], getter: Callable[[str], str]) -> bool:
    for path, op, value in reqs:
        actual = getter(path)
        if op == "=" and actual != value:
            return False
        if op == "!=" and actual == value:
            return False
    return True
