"""Kubernetes resource quantities ("500m", "1Gi", "2", "1e3") as exact Fractions.

Only what the fake API server needs for ResourceQuota admission: parse, add, compare, format.
"""

from __future__ import annotations

import re
from fractions import Fraction

_SUFFIX = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[a-zA-Z]*)$")


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a quantity; raises ValueError on malformed input."""
    if isinstance(value, bool):
        raise ValueError(f"invalid quantity {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(str(value))
    m = _RE.match(str(value).strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression: invalid {value!r}")
    number, suffix = m.groups()
    base = Fraction(number)
    if suffix[:1] in ("e", "E"):
        return base * Fraction(10) ** int(suffix[1:])
    if suffix not in _SUFFIX:
        raise ValueError(f"unknown quantity suffix in {value!r}")
    return base * _SUFFIX[suffix]


def format_quantity(value: Fraction) -> str:
    """Canonical-ish form: integers plain, otherwise milli-units ("1500m")."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(value))
