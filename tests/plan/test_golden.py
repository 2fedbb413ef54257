"""Golden plans: desired.yaml + observed.yaml -> plan.json + plan.md, byte for byte.

Set GPUPOOL_UPDATE_GOLDEN=1 to rewrite the files from tests/plan/scenarios.py; the
expectations below still have to hold, so a wrong regenerated plan fails anyway.
"""

from __future__ import annotations

import json
import os

import pytest

from reconciler.observe.snapshot import load_snapshot
from reconciler.plan.planner import plan
from reconciler.plan.render import GITHUB_COMMENT_LIMIT, to_json, to_markdown
from reconciler.policy.files import files_from_paths
from reconciler.policy.loader import load
from tests.plan.scenarios import GOLDEN, SCENARIOS, write_all

if os.environ.get("GPUPOOL_UPDATE_GOLDEN"):
    write_all()

# scenario -> (action ids that must be present, kinds that must be absent,
#              finding codes that must be present)
EXPECT = {
    "converged": (set(), None, set()),
    # A100: a MIG mode change resets every GPU of the node; a100-1 runs non-preemptible
    # training, so a100-2 is drained (its low-priority job preempted) and repartitioned
    "inference-burst-mig": (
        {"mig-reconfigure:a100-2", "cordon:a100-2", "uncordon:a100-2", "preempt:team-b/bert"},
        {"reclaim", "mig-reconfigure:a100-1"},
        set(),
    ),
    "inference-preempts-low-training": (
        {"checkpoint:team-b/bert-new", "preempt:team-b/bert-new", "mig-reconfigure:a100-2"},
        {"reclaim"},
        set(),
    ),
    "training-reclaims-inference-cards": ({"mig-reconfigure:a100-1"}, {"preempt"}, set()),
    "always-rule-preempts-before-giving-back": (
        {"preempt:team-b/spot-sweep"},
        {"mig-reconfigure", "checkpoint"},
        set(),
    ),
    "team-over-cap": (
        {"preempt:team-a/extra-1", "preempt:team-a/extra-2"},
        {"mig-reconfigure"},
        set(),
    ),
    "held-by-cap": (set(), {"preempt", "mig-reconfigure"}, {"held-cap"}),
    "defragment": ({"move:team-b/probe-0", "move:team-b/probe-1"}, {"preempt"}, set()),
    "idle-reclaim": ({"reclaim:team-b/forgotten"}, {"preempt"}, set()),
    "model-without-mig": ({"set-sharing:l40s-2"}, {"mig-reconfigure"}, {"no-pool"}),
    "scale-up-and-down": (
        # a100-1's MIG cards cannot leave MIG (on A100 that resets the node, and its shared
        # card serves); a100-2 cannot be shared whole within maxGPUs: the new replicas wait
        {"scale:team-b/chat", "scale:team-b/summarize"},
        {"preempt", "mig-reconfigure:a100-1"},
        {"waits"},
    ),
    "budget-spent": (set(), {"preempt", "mig-reconfigure"}, {"budget-spent"}),
    "min-runtime-protects": (set(), {"preempt"}, {"waits"}),
    "nonpreemptible-protected": (set(), {"preempt"}, {"waits"}),
    "objects-and-labels": (
        {
            "quota:team-a/gpupool-team-a",
            "priority-class:training-low",
            "prune-quota:team-old/gpupool-team-old",
            "prune-priority-class:retired",
            "label-node:a100-1",
            "label-node:a100-old",
            "mig-reconfigure:a100-1",
        },
        {"preempt"},
        set(),
    ),
    # autoscaled workloads: their HPA's / ScaledObject's envelope, never their replicas
    "scale-envelope": (
        {"scale-envelope:team-b/chat", "scale-envelope:team-b/summarize"},
        {"scale", "preempt"},
        set(),
    ),
    # a Job gpupool suspended fits again: resumed, nothing stopped for it
    "suspended-job-resumes": ({"resume:team-b/finetune"}, {"preempt", "checkpoint"}, set()),
    # issue 14: Quotas as Kueue objects; ResourceQuotas and a stale ClusterQueue pruned; the
    # pending training is Kueue's to admit (no admit/hold); a Job without queue-name noticed
    "kueue-mode": (
        {
            "kueue:ResourceFlavor:gpupool-a100",
            "kueue:ClusterQueue:gpupool-team-a",
            "kueue:ClusterQueue:gpupool-team-b",
            "kueue:LocalQueue:team-a/gpupool",
            "kueue:LocalQueue:team-b/gpupool",
            "prune-kueue:ClusterQueue:gpupool-team-old",
            "prune-quota:team-a/gpupool-team-a",
            "prune-quota:team-b/gpupool-team-b",
        },
        {"admit", "hold", "resume", "quota"},
        {"kueue-queue-name-missing", "kueue-unmapped-field"},
    ),
    # issue 32: a DRA pool's classes, templates and device-counting quotas; static MIG still
    # through mig-manager; no sharing; a class of a pool that is gone pruned after its template
    "dra-drain": (
        {
            "taint-device:a100-2/gpu-0",
            "taint-device:a100-2/gpu-1",
            "cordon:a100-2",
            "mig-reconfigure:a100-2",
            "prune-dra:DeviceTaintRule:gpupool-drain-a100-1-gpu-9",
        },
        {"taint-device:a100-1/gpu-0"},
        set(),
    ),
    "dra-dynamic-mig": (
        {"admit:team-b/ranker-1", "admit:team-b/ranker-2", "admit:team-b/ranker-3"},
        {
            "mig-reconfigure",
            "cordon",
            "uncordon",
            "partition-change",
            "set-sharing",
            "taint-device",
        },
        set(),
    ),
    "dra-pool": (
        {
            "dra:DeviceClass:gpupool-a100-gpu",
            "dra:DeviceClass:gpupool-a100-mig-3g-40gb",
            "dra:ResourceClaimTemplate:team-a/gpupool-a100-gpu-8",
            "dra:ResourceClaimTemplate:team-b/gpupool-a100-mig-3g-40gb",
            "prune-dra:ResourceClaimTemplate:team-a/gpupool-old-gpu-1",
            "prune-dra:DeviceClass:gpupool-old-gpu",
            "mig-reconfigure:a100-2",
            "quota:team-b/gpupool-team-b",
        },
        {"set-sharing", "partition-change"},
        set(),
    ),
}


def test_every_scenario_has_expectations():
    assert set(EXPECT) == set(SCENARIOS)
    assert len(SCENARIOS) >= 10


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_golden(name):
    d = GOLDEN / name
    desired = load(files_from_paths([d / "desired.yaml"]))
    observed = load_snapshot(d / "observed.yaml")
    p = plan(desired, observed)
    assert to_json(p) == (d / "plan.json").read_text(), (
        f"{name}: plan.json differs (GPUPOOL_UPDATE_GOLDEN=1 to regenerate, then review)"
    )
    assert to_markdown(p) == (d / "plan.md").read_text()
    assert len(to_markdown(p)) < GITHUB_COMMENT_LIMIT

    must, absent, codes = EXPECT[name]
    ids = {a.id for a in p.actions}
    assert must <= ids, f"missing {must - ids}"
    if absent is None:
        assert p.actions == (), "a converged cluster must get an empty plan"
    else:
        assert not {a.kind for a in p.actions} & absent
    assert codes <= {f.code for f in p.findings}
    # every action explains itself and depends only on actions of the same plan
    for a in p.actions:
        assert a.reason.strip()
        assert set(a.depends_on) <= ids
    # dependencies come first
    pos = {a.id: i for i, a in enumerate(p.actions)}
    assert all(pos[dep] < pos[a.id] for a in p.actions for dep in a.depends_on)


def test_plan_json_is_versioned():
    data = json.loads((GOLDEN / "inference-burst-mig" / "plan.json").read_text())
    assert data["format_version"] == 2
    assert data["summary"].startswith("Plan: ")
