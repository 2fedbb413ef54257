"""Validation refuses what can never work, each at its file:line (reconciler/policy/validate.py,
the models' validators and the loader's directive check):

- `%YAML` directives that ruamel reports without a line (or not at all);
- `idleFor: 0s` and `pendingTime: 0s` (the durations where 0 means nothing sensible; the
  cooldowns, minRuntime and checkpointGracePeriod may be 0s);
- a maintenance window that starts where it ends;
- a Pool's node selector that no node can match: terms on one label that contradict each
  other, or a GPU product label of another model than the Pool's gpuModel;
- two MaintenancePolicies setting one rule (defragmentation, idle reclaim) differently for one
  pool: the planner would ignore one of them.

Each case adds a file (or swaps text in one) to the repository's own pools/ and policies/,
which must still load, and expects exactly one problem, written out in full.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = {
    p.relative_to(ROOT).as_posix(): p.read_text()
    for p in sorted([*ROOT.glob("pools/*.yaml"), *ROOT.glob("policies/*.yaml")])
}


def maintenance(name: str, spec: str) -> str:
    """A MaintenancePolicy; `spec` starts on line 6."""
    return f"""\
apiVersion: gpupool.io/v1alpha1
kind: MaintenancePolicy
metadata:
  name: {name}
spec:
{spec}"""


def problems(extra: dict[str, str] | None = None, swap: tuple[str, str, str] = ()) -> list[str]:
    """Every problem, as `gpupool validate` prints it, of the examples plus `extra` files, with
    `swap` = (file, old, new) applied to one of them; [] when it loads."""
    files = dict(EXAMPLES)
    if swap:
        name, old, new = swap
        assert old in files[name], f"{old!r} is not in {name}"
        files[name] = files[name].replace(old, new, 1)
    files.update(extra or {})
    try:
        load([SourceFile(n, t) for n, t in files.items()])
    except InvalidDesiredState as exc:
        return [str(p) for p in exc.problems]
    return []


def test_the_examples_load():
    assert problems() == []


# -- YAML directives --------------------------------------------------------------------------

CHANGE = "apiVersion: gpupool.io/v1alpha1\nkind: ChangePolicy\nmetadata: {name: c}\nspec: {}\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "%YAML 2.0\n---\n" + CHANGE,
            "policies/d.yaml:1:1: invalid YAML: %YAML 2.0 is not a YAML version gpupool reads; "
            "policy files are YAML 1.2 (a %YAML 1.1 directive is accepted): remove the line",
            id="yaml-2.0",
        ),
        pytest.param(
            "# a second document\n" + CHANGE.replace("name: c", "name: b") + "---\n%YAML 2.0\n"
            "---\n" + CHANGE,
            "policies/d.yaml:7:1: invalid YAML: %YAML 2.0 is not a YAML version gpupool reads; "
            "policy files are YAML 1.2 (a %YAML 1.1 directive is accepted): remove the line",
            id="yaml-2.0-in-a-later-document",
        ),
        pytest.param(
            "%YAML 1.3\n---\n" + CHANGE,
            "policies/d.yaml:1:1: invalid YAML: %YAML 1.3 is not a YAML version gpupool reads; "
            "policy files are YAML 1.2 (a %YAML 1.1 directive is accepted): remove the line",
            id="yaml-1.3",
        ),
        pytest.param(
            "%YAML 1.2\n" + CHANGE,
            "policies/d.yaml:1:1: invalid YAML: a %YAML directive must be followed by a line "
            "`---` that starts the document",
            id="no-document-start",
        ),
    ],
)
def test_a_bad_directive_is_located(text, expected):
    try:
        got = problems({"policies/d.yaml": text})
    except Exception as exc:  # noqa: BLE001 - before: a traceback (AssertionError) for 1.3
        got = [f"raised {type(exc).__name__}: {exc}"]
    assert got == [expected]


@pytest.mark.parametrize(
    "head",
    ["%YAML 1.2\n---\n", "%YAML 1.1\n---\n", "%YAML 1.2\n%TAG !e! tag:example.com,2026:\n---\n"],
)
def test_good_directives_are_accepted(head):
    assert problems({"policies/d.yaml": head + maintenance("d", "  pools: [a100]\n")}) == []


# -- zero durations, empty windows ------------------------------------------------------------

MAINT = "policies/maintenance.yaml"
SCALING = "policies/scaling.yaml"


def test_idle_for_zero_is_refused():
    assert problems(swap=(MAINT, "idleFor: 1h", "idleFor: 0s")) == [
        f"{MAINT}:13:5: MaintenancePolicy/default spec.idleReclaim.idleFor: must be more than "
        "0s: a card would count as idle at its first reading under utilizationBelow (a job "
        "loading data, or between two steps) and its workload would be reclaimed (got '0s')"
    ]


def test_pending_time_zero_is_refused():
    assert problems(swap=(SCALING, "pendingTime: 30s", "pendingTime: 0m")) == [
        f"{SCALING}:13:5: ScalingPolicy/assistant-chat spec.scaleUp.pendingTime: must be more "
        "than 0s: a p99 wait above 0s is any request waiting at all, so the service would grow "
        "with any traffic and never shrink; to keep replicas up, raise the targets' "
        "minReplicas (got '0m')"
    ]


@pytest.mark.parametrize(
    ("file", "old", "new"),
    [
        (SCALING, "cooldown: 2m", "cooldown: 0s"),  # scale up every cycle while hot
        (SCALING, "cooldown: 15m", "cooldown: 0s"),  # scale down every cycle while calm
        ("policies/priority.yaml", "minRuntime: 15m", "minRuntime: 0s"),
        ("policies/priority.yaml", "checkpointGracePeriod: 5m", "checkpointGracePeriod: 0s"),
        (MAINT, "when: pendingDemand", 'when: window\n    window: {start: "22:00", end: "04:00"}'),
        (MAINT, "when: pendingDemand", 'when: window\n    window: {start: "00:00", end: "23:59"}'),
    ],
    ids=["scale-up-cooldown", "scale-down-cooldown", "min-runtime", "grace", "night", "day"],
)
def test_zero_where_it_means_something_is_accepted(file, old, new):
    assert problems(swap=(file, old, new)) == []


def test_a_window_that_starts_where_it_ends_is_refused():
    window = 'when: window\n    window: {start: "02:00", end: "02:00"}'
    assert problems(swap=(MAINT, "when: pendingDemand", window)) == [
        f"{MAINT}:9:30: MaintenancePolicy/default spec.defragmentation.window.end: the window "
        "02:00-02:00 is empty (it starts where it ends) and would never open; for all day, use "
        "when: always (got '02:00')"
    ]


# -- node selectors ---------------------------------------------------------------------------


def pool(*terms: str, model: str = "A100-SXM4-80GB", labels: str = "") -> str:
    """Pool `x` on its own label (so it overlaps neither example pool), with `terms` as its
    matchExpressions and `labels` as more matchLabels lines. Line 10 is `matchLabels:`'s first
    entry, line 11 the next; matchExpressions follow the labels."""
    text = f"""\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: x
spec:
  gpuModel: {model}
  capacity: {{nodes: 1, gpusPerNode: 8}}
  nodeSelector:
    matchLabels:
      gpupool.io/pool: x
"""
    text += "".join(f"      {line}\n" for line in labels.splitlines())
    if terms:
        text += "    matchExpressions:\n" + "".join(f"      - {t}\n" for t in terms)
    return text


IN = "{key: tier, operator: In, values: [gold]}"
NOT_IN = "{key: tier, operator: NotIn, values: [gold, silver]}"
EXISTS = "{key: tier, operator: Exists}"
ABSENT = "{key: tier, operator: DoesNotExist}"
PRODUCT = "nvidia.com/gpu.product"
NEVER = "Pool/x spec.nodeSelector"

SELECTORS = [
    pytest.param(
        pool(IN, NOT_IN),
        f"pools/x.yaml:13:9: {NEVER}.matchExpressions[1]: no node can match this selector: no "
        "value of the label 'tier' satisfies matchExpressions[0] (tier In [gold]) and "
        "matchExpressions[1] (tier NotIn [gold, silver])",
        id="in-and-not-in",
    ),
    pytest.param(
        pool(NOT_IN, labels="tier: gold"),
        f"pools/x.yaml:13:9: {NEVER}.matchExpressions[0]: no node can match this selector: no "
        "value of the label 'tier' satisfies matchLabels tier: gold and matchExpressions[0] "
        "(tier NotIn [gold, silver])",
        id="label-and-not-in",
    ),
    pytest.param(
        pool(IN, "{key: tier, operator: In, values: [silver]}"),
        f"pools/x.yaml:13:9: {NEVER}.matchExpressions[1]: no node can match this selector: no "
        "value of the label 'tier' satisfies matchExpressions[0] (tier In [gold]) and "
        "matchExpressions[1] (tier In [silver])",
        id="disjoint-ins",
    ),
    pytest.param(
        pool(EXISTS, ABSENT),
        f"pools/x.yaml:13:9: {NEVER}.matchExpressions[1]: no node can match this selector: "
        "matchExpressions[0] (tier Exists) needs the label 'tier' and matchExpressions[1] "
        "(tier DoesNotExist) needs it absent",
        id="exists-and-does-not-exist",
    ),
    pytest.param(
        pool(ABSENT, labels="tier: gold"),
        f"pools/x.yaml:13:9: {NEVER}.matchExpressions[0]: no node can match this selector: "
        "matchLabels tier: gold needs the label 'tier' and matchExpressions[0] "
        "(tier DoesNotExist) needs it absent",
        id="label-and-does-not-exist",
    ),
    pytest.param(
        pool(labels=f"{PRODUCT}: NVIDIA-H100-80GB-HBM3"),
        f"pools/x.yaml:11:7: {NEVER}.matchLabels.{PRODUCT}: no node can match this pool: "
        f"{PRODUCT} NVIDIA-H100-80GB-HBM3 is not a product of its gpuModel A100-SXM4-80GB "
        "(whose nodes are labelled NVIDIA-A100-SXM4-80GB, A100-SXM4-80GB), and gpupool puts "
        "a node only in a pool of its own model",
        id="product-of-another-model",
    ),
    pytest.param(
        pool(f"{{key: {PRODUCT}, operator: In, values: [NVIDIA-H100-80GB-HBM3, NVIDIA-L40S]}}"),
        f"pools/x.yaml:12:9: {NEVER}.matchExpressions[0]: no node can match this pool: "
        f"{PRODUCT} NVIDIA-H100-80GB-HBM3 or NVIDIA-L40S are not products of its gpuModel "
        "A100-SXM4-80GB (whose nodes are labelled NVIDIA-A100-SXM4-80GB, A100-SXM4-80GB), and "
        "gpupool puts a node only in a pool of its own model",
        id="products-of-other-models",
    ),
    pytest.param(
        pool(
            f"{{key: {PRODUCT}, operator: In, values: [NVIDIA-A100-SXM4-80GB, NVIDIA-L40S]}}",
            f"{{key: {PRODUCT}, operator: NotIn, values: [NVIDIA-A100-SXM4-80GB]}}",
        ),
        f"pools/x.yaml:13:9: {NEVER}.matchExpressions[1]: no node can match this pool: "
        f"{PRODUCT} NVIDIA-L40S is not a product of its gpuModel A100-SXM4-80GB (whose nodes "
        "are labelled NVIDIA-A100-SXM4-80GB, A100-SXM4-80GB), and gpupool puts a node only in "
        "a pool of its own model",
        id="own-product-excluded",
    ),
]


@pytest.mark.parametrize(("text", "expected"), SELECTORS)
def test_a_selector_no_node_can_match_is_refused(text, expected):
    assert problems({"pools/x.yaml": text}) == [expected]


@pytest.mark.parametrize(
    "text",
    [
        pool(IN, "{key: tier, operator: NotIn, values: [silver]}"),
        pool("{key: tier, operator: In, values: [gold, silver]}", NOT_IN.replace("gold, ", "")),
        pool(EXISTS, NOT_IN),
        pool(ABSENT, "{key: zone, operator: Exists}"),
        pool(labels=f"{PRODUCT}: NVIDIA-A100-SXM4-80GB"),
        pool(labels=f"{PRODUCT}: NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"),  # mig.strategy=single
        pool(f"{{key: {PRODUCT}, operator: In, values: [NVIDIA-L40S, A100-SXM4-80GB]}}"),
        pool(f"{{key: {PRODUCT}, operator: NotIn, values: [NVIDIA-A100-SXM4-80GB]}}"),
        pool(f"{{key: {PRODUCT}, operator: DoesNotExist}}"),  # gpupool allows unlabelled nodes
        pool(labels=f"{PRODUCT}: NVIDIA-L40S", model="L40S-48GB"),
    ],
    ids=[
        "in-and-other-not-in",
        "in-two-not-in-one",
        "exists-and-not-in",
        "absent-and-other-exists",
        "own-product",
        "own-product-mig-single",
        "one-own-product",
        "not-in-own-product",
        "no-product-label",
        "l40s",
    ],
)
def test_a_selector_some_node_can_match_is_accepted(text):
    assert problems({"pools/x.yaml": text}) == []


# -- two MaintenancePolicies, one pool --------------------------------------------------------

DEFAULT_DEFRAG = (
    "  defragmentation:\n    when: pendingDemand\n    maxMigrationsPerCycle: 2\n"
    "    onlyMigratable: true\n"
)
DEFRAG_A100 = "  pools: [a100]\n  defragmentation: {when: always, maxMigrationsPerCycle: 4}\n"
IDLE_H100 = "  pools: [h100, a100]\n  idleReclaim: {utilizationBelow: 10, idleFor: 1h}\n"


def test_two_defragmentation_rules_for_one_pool_are_refused():
    got = problems({"policies/night.yaml": maintenance("night", DEFRAG_A100)})
    assert got == [
        "policies/night.yaml:7:3: MaintenancePolicy/night spec.defragmentation: "
        f"MaintenancePolicy/default ({MAINT}:7) also sets defragmentation for Pool/a100, with "
        "other settings; the planner merges none and would ignore one of them: give each pool "
        "one defragmentation rule (narrow spec.pools, or make the rules the same)"
    ]


def test_two_idle_reclaim_rules_for_one_pool_are_refused():
    got = problems({"policies/z.yaml": maintenance("z", IDLE_H100)})
    assert got == [
        "policies/z.yaml:7:3: MaintenancePolicy/z spec.idleReclaim: "
        f"MaintenancePolicy/default ({MAINT}:11) also sets idleReclaim for Pool/a100, "
        "Pool/h100, with other settings; the planner merges none and would ignore one of them: "
        "give each pool one idleReclaim rule (narrow spec.pools, or make the rules the same)"
    ]


def test_two_policies_for_every_pool_are_refused():
    rule = "  defragmentation: {when: pendingDemand, maxMigrationsPerCycle: 1}\n"
    got = problems({"policies/z.yaml": maintenance("z", rule)})
    assert len(got) == 1 and got[0].startswith(
        "policies/z.yaml:6:3: MaintenancePolicy/z spec.defragmentation: MaintenancePolicy/"
        f"default ({MAINT}:7) also sets defragmentation for every pool, with other settings"
    ), got


@pytest.mark.parametrize(
    "spec",
    [
        "  pools: [a100]\n" + DEFAULT_DEFRAG,  # the same rule twice
        # different rules (the example sets both; this one sets neither)
        "  pools: [a100]\n",
    ],
    ids=["same-rule", "no-rule"],
)
def test_maintenance_policies_that_agree_are_accepted(spec):
    assert problems({"policies/z.yaml": maintenance("z", spec)}) == []


def test_maintenance_policies_on_different_pools_are_accepted():
    narrowed = problems(
        {
            "policies/z.yaml": maintenance("z", DEFRAG_A100),
            "policies/y.yaml": maintenance("y", DEFRAG_A100.replace("a100", "h100", 1)),
        },
        swap=(MAINT, DEFAULT_DEFRAG, ""),
    )
    assert narrowed == [], narrowed
