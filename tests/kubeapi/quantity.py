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


def format_quantity(value: Fraction, binary: bool = False) -> str:
    """Canonical string for a computed quantity (``binary``: prefer Ki/Mi/Gi suffixes)."""
    if value.denominator == 1:
        return _binary_text(value.numerator) if binary else canonical_quantity(str(value.numerator))
    nano = -((-value * 10**9).numerator // (value * 10**9).denominator)
    return canonical_quantity(f"{nano}n")


def _binary_text(n: int) -> str:
    return canonical_quantity(f"{n // 1024}Ki") if n and n % 1024 == 0 else canonical_quantity(str(n))


_DECIMAL_SUFFIXES = [(18, "E"), (15, "P"), (12, "T"), (9, "G"), (6, "M"), (3, "k"), (0, ""),
                     (-3, "m"), (-6, "u"), (-9, "n")]
_BINARY_SUFFIXES = [(60, "Ei"), (50, "Pi"), (40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")]


def canonical_quantity(text: str | int | float) -> str:
    """The string kube-apiserver stores for a quantity ("0.5" -> "500m", "1024Mi" -> "1Gi").

    Follows resource.Quantity's canonical form for the DecimalSI and BinarySI formats (the
    format is taken from the input's suffix); exponent inputs ("1e3") keep the exponent format.
    Values finer than a nano-unit are rounded up, as the real server does.
    """
    raw = str(text).strip()
    value = parse_quantity(raw)
    m = _RE.match(raw)
    suffix = m.group(2) if m else ""
    if value.denominator > 1 and (value * 10**9).denominator > 1:
        value = Fraction(-((-value * 10**9).numerator // (value * 10**9).denominator), 10**9)
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value == 0:
        return "0"
    if suffix.endswith("i") and value.denominator == 1:
        for power, name in _BINARY_SUFFIXES:
            if value.numerator % (2**power) == 0 and value >= 2**power:
                return f"{sign}{value.numerator // 2**power}{name}"
        return f"{sign}{value.numerator}"
    if suffix[:1] in ("e", "E"):
        exp = 0
        v = value
        while v.denominator == 1 and v.numerator % 1000 == 0:
            v /= 1000
            exp += 3
        if v.denominator == 1:
            return f"{sign}{v.numerator}" + (f"e{exp}" if exp else "")
    for power, name in _DECIMAL_SUFFIXES:
        scaled = value / Fraction(10) ** power
        if scaled.denominator == 1:
            return f"{sign}{scaled.numerator}{name}"
    return f"{sign}{value}"
