"""The PR comment (`gpupool plan --base`'s change report) read by a reviewer: each disrupted
workload's reason is true on its own, whatever is listed before it; policy changes are YAML
paths with YAML values; a ResourceQuota change says which policy fields it derives from, or
why the object is kept empty.

Each test plans a base and a head desired state against one snapshot (`compare`, pure) and
reads the text and Markdown reports.
"""

from __future__ import annotations

import re

from reconciler.observe.builders import node, snapshot, training
from reconciler.plan.change import compare
from reconciler.plan.render import change_to_markdown, change_to_text
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import A100, NOW, _objects, ago, desired_text

TEAM_A_QUOTA = """\
  namespaces: [team-a]
  maxGPUs: 8
  pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4}}]"""


def desired(text: str, revision: str):
    return load([SourceFile("desired.yaml", text)], revision=revision)


def team_a(text: str, quota: str) -> str:
    assert TEAM_A_QUOTA in text
    return text.replace(TEAM_A_QUOTA, quota)


def over_cap_cluster(text: str):
    """team-a runs 10 cards: 8 on a100-1 (not preemptible) and two one-card jobs."""
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-a", "big", "a100-1", 8, cls="training-high", started=ago(5)),
        training(
            "team-a", "extra-1", "a100-2", [0], cls="training-low", started=ago(2),
            checkpoint=ago(0.3),
        ),
        training(
            "team-a", "extra-2", "a100-2", [1], cls="training-low", started=ago(4),
            checkpoint=ago(0.1),
        ),
    ]  # fmt: skip
    return snapshot(NOW, nodes, w, **_objects(text))


def test_each_cap_preemption_quotes_the_teams_use_not_a_running_count():
    """The planner stops team-a's work one job at a time and its reasons count down (10, then
    9 GPUs); the report lists the jobs by name, so the running count read out of order. Each
    line quotes the team's use as observed and the cap, the same for every job it stops."""
    head_text = desired_text()  # maxGPUs 8
    base_text = team_a(head_text, TEAM_A_QUOTA.replace("maxGPUs: 8", "maxGPUs: 12"))
    base_text = base_text.replace("borrowingLimit: 4}", "borrowingLimit: 8}", 1)
    report, _, head_plan = compare(
        desired(base_text, "b" * 40), desired(head_text, "c" * 40), over_cap_cluster(head_text)
    )
    planned = [a.reason for a in head_plan.actions if a.kind == "preempt"]
    assert any("uses 9 GPUs" in r for r in planned)  # the planner's running count
    by_name = {d.workload: d.reason for d in report.disruptions}
    assert sorted(by_name) == ["team-a/extra-1", "team-a/extra-2"]
    for reason in by_name.values():
        assert reason.startswith("team team-a uses 10 GPUs, over its cap of 8 (12 at base)")
        assert "one of the 2 workloads the plan stops" in reason
    # the same facts for every job it stops, in any order
    assert by_name["team-a/extra-1"] == by_name["team-a/extra-2"]
    text = change_to_text(report)
    assert "uses 9 GPUs" not in text and "uses 10 GPUs" in text
    assert "uses 9 GPUs" not in change_to_markdown(report)


def test_policy_changes_are_yaml_paths_with_yaml_values():
    base_text = desired_text()
    head_text = (
        team_a(
            base_text,
            TEAM_A_QUOTA.replace("maxGPUs: 8", "maxGPUs: 12").replace(
                "borrowingLimit: 4}", "borrowingLimit: 6}"
            ),
        )
        .replace("shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}",
                 "shared: {slicesPerGPU: 2, memoryPerSlice: 40Gi}")
        .replace("{name: training-low, value: 10000,", "{name: training-low, value: 20000,")
        .replace("checkpointGracePeriod: 5m", "checkpointGracePeriod: 10m")
        .replace("  training: {minGPUs: 4, topology: node}",
                 "  training: {minGPUs: 4, maxGPUs: 12, topology: node}")
    )  # fmt: skip
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    report, _, _ = compare(
        desired(base_text, "b" * 40),
        desired(head_text, "c" * 40),
        snapshot(NOW, nodes, [], **_objects(base_text)),
    )
    assert report.policy_changes == [
        "Pool/a100 spec.inference.shared.memoryPerSlice: 20Gi -> 40Gi",
        "Pool/a100 spec.inference.shared.slicesPerGPU: 4 -> 2",
        "Pool/a100 spec.training.maxGPUs: null -> 12",
        "PriorityPolicy/cluster spec.classes[name=training-low].value: 10000 -> 20000",
        "PriorityPolicy/cluster spec.preemption.checkpointGracePeriod: 5m -> 10m",
        "Quota/team-a spec.maxGPUs: 8 -> 12",
        "Quota/team-a spec.pools[pool=a100].whole.borrowingLimit: 4 -> 6",
    ]
    md = change_to_markdown(report)
    section = md.split("Policy fields changed", 1)[1].split("</details>", 1)[0]
    assert "`Quota/team-a spec.maxGPUs: 8 -> 12`" in section
    assert not re.search(r"'|\{'|\[\{|None|True|False", section), section  # no Python reprs
    assert "  Pool/a100 spec.inference.shared.memoryPerSlice: 20Gi -> 40Gi" in change_to_text(
        report
    )
