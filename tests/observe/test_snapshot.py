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
