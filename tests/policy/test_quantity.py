"""Durations (Go/Kubernetes notation) and quantities (Kubernetes notation)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reconciler.policy.quantity import (
    format_bytes,
    format_duration,
    parse_duration,
    parse_quantity,
    quantity_bytes,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0s", 0),
        ("30s", 30),
        ("10m", 600),
        ("1h", 3600),
        ("1h30m", 5400),
        ("1.5h", 5400),
        ("250ms", 0.25),
        ("2d", 172800),
        ("1h0m10s", 3610),
        ("90s", 90),
    ],
)
def test_valid_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "10",
        "10 minutes",
        "m",
        "-5m",
        "1h 30m",
        "1.h",
        ".5h",
        "5M",
        "1w",
        "10m\n",
        " 10m",
        "1e3s",
        10,
        None,
    ],
)
def test_invalid_durations(text):
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4Gi", 4 * 2**30),
        ("512Mi", 512 * 2**20),
        ("1Ki", 1024),
        ("2", 2),
        ("1k", 1000),
        ("1.5Gi", 3 * 2**29),
        ("500m", Decimal("0.5")),
        ("3G", 3 * 10**9),
        ("1Ti", 2**40),
        (7, 7),
        ("0", 0),
    ],
)
def test_valid_quantities(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "20GB", "4gi", "-1Gi", "1 Gi", "Gi", "4Gi\n", "1e3", "0x10", True, None, 1.5, "4.Gi"],
)
def test_invalid_quantities(text):
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


def test_quantity_bytes_truncates_fractions():
    assert quantity_bytes("500m") == 0
    assert quantity_bytes("20Gi") == 20 * 2**30


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (20 * 2**30, "20Gi"),
        (2**40, "1Ti"),
        (3 * 2**20, "3Mi"),
        (1000, "1000"),
        (0, "0"),
        (1536, "1536"),
        (3072, "3Ki"),
    ],
)
def test_format_bytes(n, text):
    assert format_bytes(n) == text


@given(st.integers(min_value=0, max_value=2**50))
def test_format_bytes_round_trips(n):
    assert quantity_bytes(format_bytes(n)) == n


@given(st.integers(min_value=0, max_value=10**7))
def test_format_duration_round_trips(s):
    assert parse_duration(format_duration(s)) == s
