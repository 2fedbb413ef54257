"""Renderers: the text summary, JSON versioning, and Markdown that fits a PR comment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.plan.actions import (
    KIND_ORDER,
    ApplyQuota,
    CardChange,
    Checkpoint,
    PartitionChange,
    Preempt,
)
from reconciler.plan.model import Finding, Plan
from reconciler.plan.render import GITHUB_COMMENT_LIMIT, to_json, to_markdown, to_text

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.fixture
def golden_plans() -> list[str]:
    return [p.read_text() for p in sorted(GOLDEN.glob("*/plan.json"))]


def big_plan(n: int) -> Plan:
    acts = []
    for i in range(n):
        acts.append(
            Checkpoint(
                id=f"checkpoint:team/job-{i:05d}",
                target=f"team/job-{i:05d}",
                reason="ask it to checkpoint " + "x" * 60,
                grace_period_seconds=60,
                checkpointable=True,
            )
        )
        acts.append(
            Preempt(
                id=f"preempt:team/job-{i:05d}",
                target=f"team/job-{i:05d}",
                reason="preempted for inference " + "y" * 60,
                depends_on=(f"checkpoint:team/job-{i:05d}",),
                node="n1",
                gpus=(0,),
            )
        )
    return Plan(
        observed_at="2026-12-02T00:00:00+00:00",
        actions=tuple(acts),
        findings=(Finding(severity="info", code="held-cap", subject="a/b", message="held"),),
    )


def test_summary_counts_kinds():
    p = big_plan(3)
    assert p.summary == "Plan: 3 preemptions; 1 workload(s) still wait or are held"
    assert to_text(p).splitlines()[0] == p.summary
    assert Plan(observed_at="t").summary.startswith("No changes")
    # held demand is never reported as "no changes"
    held = Plan(observed_at="t", findings=p.findings)
    assert held.summary.startswith("No actions this cycle, but the cluster does not match")


def test_json_is_versioned_and_machine_readable():
    data = json.loads(to_json(big_plan(2)))
    assert data["format_version"] == 2
    assert data["counts"] == {"checkpoint": 2, "preempt": 2}
    assert [a["disruptive"] for a in data["actions"]] == [True] * 4
    assert data["actions"][1]["depends_on"] == ["checkpoint:team/job-00000"]


def test_json_round_trips_byte_for_byte():
    text = to_json(big_plan(2))
    assert to_json(Plan.model_validate_json(text)) == text


def _partition_change_plan() -> str:
    """A change of a partition backend other than the device plugin's: the goldens plan with
    the default backend only (tests/plan/test_partition_seam.py plans with another)."""
    change = PartitionChange(
        id="partition-change:n1",
        target="n1",
        reason="gpu0: whole -> shared x4 (pending inference)",
        depends_on=("cordon:n1",),
        cards=(CardChange(gpu=0, before="whole", after="shared x4"),),
        backend="example",
        settings={"gpu0": "shared x4"},
    )
    return to_json(Plan(observed_at="2026-12-02T03:00:00+00:00", actions=(change,)))


def test_every_action_kind_round_trips_through_json(golden_plans):
    kinds = set()
    for text in [*golden_plans, _partition_change_plan()]:
        assert to_json(Plan.model_validate_json(text)) == text
        kinds |= {a["kind"] for a in json.loads(text)["actions"]}
    assert kinds == set(KIND_ORDER), "every action kind appears in some golden plan"


def test_markdown_of_a_huge_plan_stays_under_githubs_limit():
    md = to_markdown(big_plan(3000))
    assert len(md) < GITHUB_COMMENT_LIMIT
    assert "Truncated:" in md and "gpupool plan --format text" in md
    assert md.startswith("### gpupool plan\n\n**Plan: 3000 preemptions;")
    assert md.count("<details") == md.count("</details>")


def test_markdown_escapes_table_cells():
    p = Plan(
        observed_at="t",
        actions=(
            ApplyQuota(id="quota:a/b", target="a/b", reason="x | y\nz", verb="create", hard={}),
        ),
    )
    assert "x \\| y z" in to_markdown(p)
