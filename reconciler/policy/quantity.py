"""Kubernetes notation for durations (`90s`, `10m`, `1h30m`) and quantities (`20Gi`, `500M`).

Models keep the text the user wrote (so a round trip and a JSON Schema stay faithful);
these functions turn it into numbers where the planner needs them.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$"

_DURATION_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h|d)")
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?$")
_QUANTITY_UNITS = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}

GI = 2**30
MI = 2**20


def _quoted(text: object, limit: int = 40) -> str:
    """The value as the user gave it, quoted, and cut short when it is long."""
    shown = repr(text)
    return (
        shown
        if len(shown) <= limit
        else shown[: limit - 5] + "...'" + f" ({len(str(text))} characters)"
    )


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration such as `1h30m`; raises ValueError when malformed."""
    if not isinstance(text, str) or not re.fullmatch(DURATION_PATTERN, text):
        raise ValueError(f"{_quoted(text)} is not a duration like 30s, 10m, 1h or 1h30m")
    return float(sum(float(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text)))


def parse_quantity(text: str | int) -> Decimal:
    """The value of a Kubernetes quantity such as `20Gi` (bytes) or `500m` (0.5)."""
    if isinstance(text, bool):
        raise ValueError(f"{_quoted(text)} is not a quantity")
    if isinstance(text, int):
        return Decimal(text)
    m = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"{_quoted(text)} is not a quantity like 4Gi, 512Mi or 2")
    try:
        return Decimal(m.group(1)) * _QUANTITY_UNITS[m.group(2)]
    except InvalidOperation as exc:  # pragma: no cover - the pattern already excludes this
        raise ValueError(f"{_quoted(text)} is not a quantity") from exc


def quantity_bytes(text: str | int) -> int:
    return int(parse_quantity(text))


def format_bytes(n: int) -> str:
    """Shortest exact binary-suffixed form: 21474836480 -> 20Gi."""
    for suffix, factor in (("Ti", 2**40), ("Gi", GI), ("Mi", MI), ("Ki", 2**10)):
        if n and n % factor == 0:
            return f"{n // factor}{suffix}"
    return str(n)


def format_duration(seconds: float) -> str:
    s = int(round(seconds))
    if s == 0:
        return "0s"
    out = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            out.append(f"{s // size}{unit}")
            s %= size
    return "".join(out)
