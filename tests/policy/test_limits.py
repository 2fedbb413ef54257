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
        ("kind: ObservedState\nnodes: []\nx: " + "1" * 5_000 + "\n", "a number of 5,000"),
        ('{"kind": "ObservedState", "x": ' + "1" * 5_000 + "}", "a number of 5,000"),
        ("kind: ObservedState\nnodes: []\nnodes: []\n", 'duplicate key "nodes"'),
        ('{"kind": "ObservedState", "nodes": [],\n "nodes": []}', 'duplicate key "nodes"'),
        ("kind: ObservedState\nnodes:\n- name: n\n  labels: {1: a, '1': b}\n", "keys must be"),
        ("kind: ObservedState\nx: !!bool maybe\n", "cannot read this !!bool value"),
        ("kind: ObservedState\nx: !!omap [a: 1, a: 2]\n", "cannot read this !!omap value"),
        ("kind: ObservedState\nx: 2026-01-01T00:00:00+99:00\n", "!!timestamp"),
        ("kind: ObservedState\nx: [\n", "cannot parse: while parsing a flow node"),
    ],
    ids=[
        "deep-yaml",
        "deep-json",
        "alias-bomb",
        "5000-digit-number",
        "5000-digit-json-number",
        "duplicate-key",
        "duplicate-json-key",
        "non-string-key",
        "bad-bool",
        "bad-omap",
        "bad-timestamp",
        "syntax",
    ],
)
def test_a_hostile_snapshot_is_a_located_error_not_a_crash(text, fragment):
    t = time.monotonic()
    name = "observed.json" if text.startswith("{") else "observed.yaml"
    with pytest.raises(InvalidSnapshot) as exc:
        parse_snapshot(text, name)
    assert time.monotonic() - t < 5
    assert fragment in str(exc.value), str(exc.value)
    (problem,) = exc.value.problems
    assert problem.line >= 1 and problem.column >= 1, problem
    assert "\n" not in str(problem), "one line per problem"


# --------------------------------------------------------------------------- keys

NODE_SELECTOR = HEAD.replace("spec:\n", "spec:\n  nodeSelector:\n")


@pytest.mark.parametrize(
    ("keys", "line", "fragment"),
    [
        ("    1: a\n    '1': b\n", 6, "1 is read as a number; quote it ('1')"),
        ("    true: a\n    'true': b\n", 6, "true is read as a boolean"),
        ("    ~: a\n", 6, "~ is read as null"),
        ("    : a\n", 6, "an empty key is read as null"),  # libyaml cannot parse it; ruamel can
        ("    1.5: a\n", 6, "read as a number"),
        ("    0x1F: a\n", 6, "read as a number"),
        ("    2026-01-01: a\n", 6, "read as a date"),
        ("    ? [a, b]\n    : c\n", 6, "not a list"),
        ("    {a: 1}: c\n", 6, "not a mapping"),
        ("    !!int 7: c\n", 6, "tagged tag:yaml.org,2002:int"),
        ("    !custom x: c\n", 6, "tagged !custom"),
        ("    &l [a]: c\n", 6, "not a list"),
        ("    x: &l [a]\n    *l : c\n", 7, "not *l, an alias of a list"),
    ],
)
def test_a_key_that_is_not_a_string_is_refused_where_it_is(keys, line, fragment):
    with pytest.raises(InvalidDesiredState) as exc:
        load([SourceFile("policies/x.yaml", NODE_SELECTOR + keys)])
    (problem,) = exc.value.problems
    assert (problem.line, problem.path) == (line, "spec.nodeSelector"), problem
    assert problem.message.startswith("mapping keys must be strings"), problem
    assert fragment in problem.message, problem


def test_yaml_1_1_booleans_are_refused_as_keys_under_a_1_1_directive():
    """ruamel's round-trip loader reads `yes` and `on` as True in a `%YAML 1.1` document: two
    such keys would collapse into one."""
    with pytest.raises(InvalidDesiredState) as exc:
        load([SourceFile("p.yaml", "%YAML 1.1\n---\n" + NODE_SELECTOR + "    yes: a\n")])
    assert "yes is read as a boolean" in str(exc.value)
    # under YAML 1.2 (the default) `yes` is a string
    assert limits.check(NODE_SELECTOR + "    yes: a\n    on: b\n") is None


@pytest.mark.parametrize(
    "keys",
    [
        "    '1': a\n    \"true\": b\n    '~': c\n",
        "    !!str 1: a\n",
        "    ! 2: a\n",
        "    &k gpu: a\n    other: *k\n",
        "    x: &k gpu\n    *k : a\n",
        "    =: a\n",
    ],
)
def test_string_keys_are_fine_quoted_tagged_or_aliased(keys):
    assert limits.check(NODE_SELECTOR + keys, pure=True) is None
    assert limits.check(NODE_SELECTOR + keys) is None


@pytest.mark.parametrize(
    ("keys", "line", "path", "first"),
    [
        ("    gpu: a\n    gpu: b\n", 7, "spec.nodeSelector.gpu", 6),
        ("    gpu: a\n    'gpu': b\n", 7, "spec.nodeSelector.gpu", 6),
        ("    '1': a\n    !!str 1: b\n", 7, "spec.nodeSelector.1", 6),
        ("    x: &k gpu\n    gpu: a\n    *k : b\n", 8, "spec.nodeSelector.gpu", 7),
        ("    <<: {a: 1}\n    <<: {b: 2}\n", 7, 'spec.nodeSelector["<<"]', 6),
    ],
)
def test_a_duplicate_key_is_refused_where_it_repeats(keys, line, path, first):
    with pytest.raises(InvalidDesiredState) as exc:
        load([SourceFile("p.yaml", NODE_SELECTOR + keys)])
    (problem,) = exc.value.problems
    assert (problem.line, problem.path) == (line, path), problem
    assert f"(first at line {first})" in problem.message, problem


def test_a_merge_may_still_override():
    text = NODE_SELECTOR + "    <<: {gpu: a, zone: b}\n    gpu: c\n"
    assert limits.check(text, pure=True) is None


def test_the_check_reads_what_the_round_trip_loader_reads():
    """libyaml cannot parse an empty key, ruamel's parser can: a check that stopped at the
    parse error would let an alias bomb in the next document through to the loader."""
    hidden = "kind: Pool\n: x\n---\n" + bomb(7)
    assert limits.check(hidden) is None  # libyaml stops at the empty key
    assert "an empty key is read as null" in refused_policy(hidden)


# --------------------------------------------------------------------------- UTF-8


@pytest.mark.parametrize(
    ("data", "line", "column", "fragment"),
    [
        (b"a: 1\nb: x\xff\n", 2, 5, "0xFF"),
        (b"\xc3", 1, 1, "0xC3"),
        ("a: \u00e9\u00e9\nb: \u00e9".encode() + b"\x80", 2, 5, "0x80"),  # columns count characters
        (b"a: \xed\xa0\x80\n", 1, 4, "0xED"),  # an encoded surrogate
    ],
)
def test_the_first_invalid_utf8_byte_is_located(data, line, column, fragment):
    bad = limits.locate_bad_utf8(data)
    assert bad is not None and (bad.line, bad.column) == (line, column), bad
    assert bad.message.startswith("not UTF-8 text") and fragment in bad.message


def test_valid_utf8_has_no_location():
    assert limits.locate_bad_utf8("a: \u00e9\n".encode()) is None
