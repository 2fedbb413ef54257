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


def test_a_derived_quota_change_says_what_it_derives_from():
    """maxGPUs 8 -> 12 and borrowingLimit 4 -> 6: the ResourceQuota goes 8 -> 10, not to the
    cap; the report says it is guaranteed + borrowingLimit of the pool, within maxGPUs."""
    base_text = desired_text()
    head_text = team_a(
        base_text,
        TEAM_A_QUOTA.replace("maxGPUs: 8", "maxGPUs: 12").replace(
            "borrowingLimit: 4}", "borrowingLimit: 6}"
        ),
    )
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    report, _, _ = compare(
        desired(base_text, "b" * 40),
        desired(head_text, "c" * 40),
        snapshot(NOW, nodes, [], **_objects(base_text)),
    )
    key, gpu = "team-a/gpupool-team-a", "requests.nvidia.com/gpu"
    assert report.quota_changes == {key: {gpu: ["8", "10"]}}
    why = report.quota_reasons[key][gpu]
    assert why == (
        "Quota/team-a spec.pools[pool=a100].whole: guaranteed 4 + borrowingLimit 6 = 10 "
        "(within maxGPUs 12)"
    )
    assert why in change_to_text(report)
    row = next(line for line in change_to_markdown(report).splitlines() if f"`{gpu}`" in line)
    assert row == f"| `{key}` | `{gpu}` | 8 | 10 | {why} |"


def test_a_quota_in_a_gated_namespace_is_kept_empty_and_says_so():
    """team-b's namespace is gated: gpupool's admission enforces its limits and its
    ResourceQuota is kept empty, so raising them changes no ResourceQuota; the report says
    so instead of showing a quota change that will not happen."""
    base_text = desired_text()
    head_text = base_text.replace(
        "  maxGPUs: 16\n  pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 12}",
        "  maxGPUs: 20\n  pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 16}",
    )
    assert head_text != base_text
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    observed = snapshot(NOW, nodes, [], **_objects(base_text)).model_copy(
        update={"gated_namespaces": ["team-b"]}
    )
    report, _, _ = compare(desired(base_text, "b" * 40), desired(head_text, "c" * 40), observed)
    key = "team-b/gpupool-team-b"
    assert key not in report.quota_changes  # the object stays empty on both sides
    note = report.quota_notes[key]
    assert "gated namespace" in note and "kept empty" in note and "admission" in note
    assert "requests.nvidia.com/gpu 16 -> 20" in note  # the limit admission now enforces
    assert f"{key}: {note}" in change_to_text(report)
    assert f"`{key}`: {note}" in change_to_markdown(report)


def test_the_derivation_the_report_words_is_the_quota_gpupool_keeps():
    """`derivation` repeats `desired_resource_quotas`' sums to name the fields; on the golden
    scenarios and the repository's own policy (several pools, MIG, shared memory, no
    borrowingLimit) it gives the very values gpupool keeps."""
    from pathlib import Path

    from reconciler.plan.change import derivation
    from reconciler.plan.quotas import QUOTA_PREFIX, desired_resource_quotas
    from reconciler.policy.files import files_from_paths
    from tests.plan.scenarios import SCENARIOS

    root = Path(__file__).resolve().parents[2]
    states = [desired(build()[0], None) for build in SCENARIOS.values()]
    states.append(load(files_from_paths([root / "pools", root / "policies"])))
    checked = set()
    for state in states:
        owners = {
            (ns, QUOTA_PREFIX + q.team): q
            for q in state.quotas.values()
            for ns in q.spec.namespaces
        }
        for key, hard in desired_resource_quotas(state).items():
            q = owners[key]
            for resource in {*hard, "requests.nvidia.com/gpu", "requests.nvidia.com/gpu.shared"}:
                value, words = derivation(state, q, resource)
                assert (str(value) if value is not None else None) == hard.get(resource), words
                assert words.startswith(f"Quota/{q.metadata.name}") or "no pool" in words
                checked.add(words.split(" ", 2)[-1].split(":")[0])
    assert len(checked) > 5
