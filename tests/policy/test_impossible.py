"""Validation refuses what can never work, each at its file:line (reconciler/policy/validate.py,
the models' validators and the loader's directive check):

- `%YAML` directives that ruamel reports without a line (or not at all);
- `idleFor: 0s` and `pendingTime: 0s` (the durations where 0 means nothing sensible; the
  cooldowns, minRuntime and checkpointGracePeriod may be 0s);
- a maintenance window that starts where it ends.

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
