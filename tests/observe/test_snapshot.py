"""Snapshot files: round trip, and bad files rejected with file:line, exit 1, no traceback."""

from __future__ import annotations

import pytest

from reconciler.cli import main
from reconciler.observe.snapshot import (
    InvalidSnapshot,
    dump_snapshot,
    load_snapshot,
    parse_snapshot,
)

EXAMPLE = "examples/observed.yaml"


def test_example_round_trips_through_yaml_and_json(tmp_path):
    obs = load_snapshot(EXAMPLE)
    assert len(obs.nodes) == 16 and sum(len(n.gpus) for n in obs.nodes) == 128
    for fmt, name in (("yaml", "s.yaml"), ("json", "s.json")):
        p = tmp_path / name
        p.write_text(dump_snapshot(obs, fmt))
        assert load_snapshot(p) == obs


HEAD = "kind: ObservedState\nobservedAt: 2026-12-02T00:00:00Z\n"


@pytest.mark.parametrize(
    ("text", "line", "path", "fragment"),
    [
        (
            HEAD + "nodes:\n  - name: n1\n    gpus:\n      - index: 0\n        colour: red\n",
            7,
            "nodes[0].gpus[0].colour",
            "unknown field 'colour'",
        ),
        (
            HEAD + "workloads:\n  - namespace: a\n    name: b\n",
            4,
            "workloads[0].request",
            "Field required",
        ),
        ("kind: ObservedState\nobservedAt: yesterday\n", 2, "observedAt", "datetime"),
        (
            HEAD + "nodes:\n  - name: n1\n    gpus:\n      - index: 0\n        utilization: 140\n",
            7,
            "nodes[0].gpus[0].utilization",
            "less than or equal to 100",
        ),
    ],
)
def test_bad_snapshot_names_line_and_field(text, line, path, fragment):
    with pytest.raises(InvalidSnapshot) as err:
        parse_snapshot(text, "snap.yaml")
    p = next(p for p in err.value.problems if p.path == path)
    assert (p.file, p.line) == ("snap.yaml", line)
    assert fragment in p.message


def test_unparseable_and_non_mapping_files():
    with pytest.raises(InvalidSnapshot, match="cannot parse"):
        parse_snapshot("nodes: [\n", "s.yaml")
    with pytest.raises(InvalidSnapshot, match="mapping"):
        parse_snapshot("- 1\n- 2\n", "s.yaml")
    with pytest.raises(InvalidSnapshot, match="cannot parse"):
        parse_snapshot("{", "s.json")


def test_plan_with_a_bad_snapshot_exits_1_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ObservedState\nobservedAt: 2026-12-02T00:00:00Z\nnodes: 7\n")
    assert main(["plan", "pools", "policies", "--observed", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:3:" in err and "nodes" in err and "Traceback" not in err
    assert main(["plan", "pools", "policies", "--observed", str(tmp_path / "missing.yaml")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_an_invalid_utf8_byte_is_reported_at_its_line_and_column(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(HEAD.encode() + "nodes:\n  - name: n\u00e9".encode() + b"\xff1\n")
    with pytest.raises(InvalidSnapshot) as err:
        load_snapshot(bad)
    (p,) = err.value.problems
    assert (p.line, p.column) == (4, 13) and "not UTF-8 text: invalid byte 0xFF" in p.message
    assert main(["plan", "pools", "policies", "--observed", str(bad)]) == 1
    assert f"{bad}:4:13: not UTF-8 text" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        (HEAD + "nodes: []\nnodes: []\n", 4, 'duplicate key "nodes" (first at line 3)'),
        (HEAD + "nodes:\n  - name: n\n    name: m\n", 5, 'duplicate key "name"'),
        (HEAD + "nodes:\n  - name: n\n    labels: {1: a, '1': b}\n", 5, "keys must be strings"),
        (HEAD + "nodes: [\n", 4, "cannot parse: while parsing a flow node"),
        (HEAD + "x: \x01\n", 3, "control characters are not allowed"),
        (HEAD + "x: !!bool maybe\n", 3, "cannot read this !!bool value"),
        (HEAD + "---\nkind: ObservedState\n", 3, "expected a single document"),
    ],
)
def test_a_malformed_snapshot_is_one_located_line(text, line, fragment):
    with pytest.raises(InvalidSnapshot) as err:
        parse_snapshot(text, "snap.yaml")
    (p,) = err.value.problems
    assert (p.file, p.line) == ("snap.yaml", line) and p.column >= 1, p
    assert fragment in p.message and "\n" not in str(p), p


def test_a_json_snapshot_with_a_repeated_key_is_refused():
    text = (
        '{"kind": "ObservedState",\n "observedAt": "2026-12-02T00:00:00Z",\n'
        ' "nodes": [],\n "nodes": []}'
    )
    with pytest.raises(InvalidSnapshot) as err:
        parse_snapshot(text, "snap.json")
    (p,) = err.value.problems
    assert (p.line, p.path) == (4, "nodes") and "duplicate key" in p.message, p


def test_a_repeated_key_in_json_that_no_yaml_parser_reads_is_refused_too():
    """A raw DEL (allowed in JSON strings, not in YAML) stops the YAML event pass; json's own
    parser must still refuse the repeated key rather than keep the last value."""
    text = '{"kind": "ObservedState", "x": "\x7f", "nodes": [], "nodes": []}'
    with pytest.raises(InvalidSnapshot, match='duplicate key "nodes"'):
        parse_snapshot(text, "snap.json")
