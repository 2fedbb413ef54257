"""Bounds on what a YAML text may make the loaders build (reconciler/policy/limits.py): an
alias bomb, deep nesting and a huge value are refused, located, in well under a second, for
policy files and snapshots alike; ordinary anchors and the bundled files still load."""

from __future__ import annotations

import time

import pytest

from reconciler.observe.snapshot import InvalidSnapshot, parse_snapshot
from reconciler.policy import limits
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState
from reconciler.policy.reference import EXAMPLES

HEAD = "apiVersion: gpupool.io/v1alpha1\nkind: Pool\nmetadata: {name: x}\nspec:\n"


def bomb(levels: int, fan: int = 10) -> str:
    """`levels` anchors, each a list of `fan` aliases of the one before: fan**levels values
    from a file of a few hundred bytes."""
    lines = [HEAD + "  a0: &a0 [" + ", ".join(["x"] * fan) + "]"]
    for i in range(1, levels):
        lines.append(f"  a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


def deep(depth: int) -> str:
    return HEAD + "  a: " + "[" * depth + "]" * depth + "\n"


def deep_block(depth: int) -> str:
    return (
        HEAD
        + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(depth))
        + "  " * (depth + 1)
        + "v\n"
    )


def refused_policy(text: str) -> str:
    t = time.monotonic()
    with pytest.raises(InvalidDesiredState) as exc:
        load([SourceFile("policies/x.yaml", text)])
    assert time.monotonic() - t < 5, "the bound must be checked before anything is built"
    (problem,) = exc.value.problems
    assert problem.file == "policies/x.yaml" and problem.line >= 1
    return problem.message


@pytest.mark.parametrize("levels", [5, 9, 30])
def test_an_alias_bomb_is_refused_at_the_alias_that_crosses_the_bound(levels):
    msg = refused_policy(bomb(levels))
    assert msg.startswith("refused: aliases expand to more than 10,000 values"), msg


def test_a_few_aliases_are_fine():
    text = HEAD + "  a: &a [1, 2, 3]\n  b: *a\n  c: *a\n"
    assert limits.check(text) is None
    assert limits.check(bomb(3)) is None  # 1,110 values: within the bound


@pytest.mark.parametrize("text", [deep(65), deep(100_000), deep_block(70)])
def test_deep_nesting_is_refused(text):
    assert "refused: nested more than 64 collections deep" in refused_policy(text)


def test_a_huge_value_is_refused():
    msg = refused_policy(HEAD + "  n: " + "9" * 70_000 + "\n")
    assert "refused: a value of 70,000 characters (at most 65,536)" in msg


def test_the_bundled_examples_are_within_the_bounds():
    for kind, text in EXAMPLES.items():
        assert limits.check(text) is None, kind


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kind: ObservedState\nnodes: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested more"),
        ('{"kind": "ObservedState", "nodes": ' + "[" * 5_000 + "]" * 5_000 + "}", "nested more"),
        ("kind: ObservedState\n" + bomb(8).split("spec:\n", 1)[1].replace("  ", ""), "aliases"),
        ("kind: ObservedState\nnodes: []\nx: " + "1" * 5_000 + "\n", "cannot parse"),
    ],
    ids=["deep-yaml", "deep-json", "alias-bomb", "5000-digit-number"],
)
def test_a_hostile_snapshot_is_a_located_error_not_a_crash(text, fragment):
    t = time.monotonic()
    name = "observed.json" if text.startswith("{") else "observed.yaml"
    with pytest.raises(InvalidSnapshot) as exc:
        parse_snapshot(text, name)
    assert time.monotonic() - t < 5
    assert fragment in str(exc.value), str(exc.value)
