"""Upper bounds on the numbers that size the planner's work: over a bound is a validation
error named by file, line and field (exit 1, nothing changed), at the bound still loads."""

from __future__ import annotations

import pytest

from reconciler.cli import main
from reconciler.policy import models
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState
from reconciler.policy.reference import EXAMPLES

POOL = SourceFile("pool.yaml", EXAMPLES["Pool"])

SCALING = """\
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata:
  name: ranker
spec:
  pool: a100
  targets:
    - namespace: search
      name: ranker
      minReplicas: {min}
      maxReplicas: {max}
  scaleUp:
    queueLengthPerReplica: {up}
    step: {up_step}
  scaleDown:
    queueLengthPerReplica: 2
    step: {down_step}
    cooldown: {cooldown}
"""
SCALING_OK = dict(min=2, max=16, up=16, up_step=2, down_step=1, cooldown="10m")

MAINTENANCE = """\
apiVersion: gpupool.io/v1alpha1
kind: MaintenancePolicy
metadata:
  name: default
spec:
  defragmentation:
    when: always
    maxMigrationsPerCycle: {moves}
  idleReclaim:
    idleFor: {idle}
"""

PRIORITY_TEXT = """\
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata:
  name: cluster
spec:
  classes:
    - {{name: serving, value: 100000, workload: inference}}
  preemption:
    budgetPerHour: {budget}
    minRuntime: {runtime}
    checkpointGracePeriod: 5m
"""

POOL_TEXT = EXAMPLES["Pool"].replace("capacity: {nodes: 8,", "capacity: {nodes: NODES,")


def scaling(**kw) -> str:
    return SCALING.format(**{**SCALING_OK, **kw})


# (what, the files, file with the problem, line, field path, message fragment)
OVER = [
    (
        "maxMigrationsPerCycle",
        [POOL, SourceFile("m.yaml", MAINTENANCE.format(moves=1_000_000_000, idle="1h"))],
        8,
        "spec.defragmentation.maxMigrationsPerCycle",
        "less than or equal to 64",
    ),
    (
        "minReplicas",
        [POOL, SourceFile("m.yaml", scaling(min=20_000_000, max=20_000_000))],
        10,
        "spec.targets[0].minReplicas",
        "less than or equal to 10000",
    ),
    (
        "maxReplicas",
        [POOL, SourceFile("m.yaml", scaling(max=10_001))],
        11,
        "spec.targets[0].maxReplicas",
        "less than or equal to 10000",
    ),
    (
        "scaleUp.step",
        [POOL, SourceFile("m.yaml", scaling(up_step=10_001))],
        14,
        "spec.scaleUp.step",
        "less than or equal to 10000",
    ),
    (
        "scaleDown.step",
        [POOL, SourceFile("m.yaml", scaling(down_step=10**12))],
        17,
        "spec.scaleDown.step",
        "less than or equal to 10000",
    ),
    (
        "queueLengthPerReplica",
        [POOL, SourceFile("m.yaml", scaling(up=".nan"))],
        13,
        "spec.scaleUp.queueLengthPerReplica",
        "finite",
    ),
    (
        "cooldown",
        [POOL, SourceFile("m.yaml", scaling(cooldown="366d"))],
        18,
        "spec.scaleDown.cooldown",
        "at most 365d",
    ),
    (
        "a duration too long for a timedelta",
        [POOL, SourceFile("m.yaml", MAINTENANCE.format(moves=2, idle="99999999999999999h"))],
        10,
        "spec.idleReclaim.idleFor",
        "at most 365d",
    ),
    (
        "a duration too long for a float",
        [POOL, SourceFile("m.yaml", MAINTENANCE.format(moves=2, idle="9" * 400 + "s"))],
        10,
        "spec.idleReclaim.idleFor",
        "at most 365d",
    ),
    (
        "budgetPerHour",
        [SourceFile("m.yaml", PRIORITY_TEXT.format(budget=10**9, runtime="10m"))],
        9,
        "spec.preemption.budgetPerHour",
        "less than or equal to 10000",
    ),
    (
        "capacity.nodes",
        [SourceFile("m.yaml", POOL_TEXT.replace("NODES", "10001"))],
        9,
        "spec.capacity.nodes",
        "less than or equal to 10000",
    ),
]


@pytest.mark.parametrize(
    ("files", "line", "path", "fragment"),
    [pytest.param(*case[1:], id=case[0]) for case in OVER],
)
def test_over_a_bound_is_a_located_error(files, line, path, fragment):
    with pytest.raises(InvalidDesiredState) as err:
        load(files)
    found = [p for p in err.value.problems if p.path == path]
    assert len(found) == 1, [str(p) for p in err.value.problems]
    assert (found[0].file, found[0].line) == ("m.yaml", line)
    assert fragment in found[0].message


AT = [
    (
        "maxMigrationsPerCycle",
        [POOL, SourceFile("m.yaml", MAINTENANCE.format(moves=64, idle="365d"))],
    ),
    ("replicas", [POOL, SourceFile("m.yaml", scaling(min=10_000, max=10_000))]),
    ("steps", [POOL, SourceFile("m.yaml", scaling(up_step=10_000, down_step=10_000))]),
    ("budget", [SourceFile("m.yaml", PRIORITY_TEXT.format(budget=10_000, runtime="365d"))]),
    ("nodes", [SourceFile("m.yaml", POOL_TEXT.replace("NODES", "10000"))]),
]


@pytest.mark.parametrize("files", [pytest.param(f, id=name) for name, f in AT])
def test_at_the_bound_loads(files):
    load(files)


def test_the_bounds_are_the_documented_ones():
    assert models.MAX_MIGRATIONS_PER_CYCLE == 64
    assert models.MAX_REPLICAS == models.MAX_NODES == models.MAX_PREEMPTIONS_PER_HOUR == 10_000
    assert models.MAX_DURATION.days == 365


def test_validate_reports_an_absurd_duration_without_traceback(tmp_path, capsys):
    f = tmp_path / "m.yaml"
    f.write_text(MAINTENANCE.format(moves=2, idle="99999999999999999h"))
    (tmp_path / "pool.yaml").write_text(EXAMPLES["Pool"])
    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:10:" in err and "idleFor" in err and "at most 365d" in err
    assert "Traceback" not in err and "nothing was changed" in err


def test_plan_refuses_an_unbounded_policy(tmp_path, capsys):
    f = tmp_path / "m.yaml"
    f.write_text(MAINTENANCE.format(moves=1_000_000_000, idle="1h"))
    (tmp_path / "pool.yaml").write_text(EXAMPLES["Pool"])
    assert main(["plan", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert f"{f}:8:" in err and "maxMigrationsPerCycle" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ['"0"', "1m", "512Ki", "1023Ki"])
def test_memory_per_slice_below_a_mebibyte_is_a_located_error(value):
    """The planner divides memory by memoryPerSlice: `1m` (a thousandth of a byte) once
    validated and then divided by zero in every plan."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "pools" / "h100.yaml").read_text()
    assert "memoryPerSlice: 10Gi" in text
    bad = SourceFile(
        "pools/h100.yaml", text.replace("memoryPerSlice: 10Gi", f"memoryPerSlice: {value}")
    )
    with pytest.raises(InvalidDesiredState) as exc:
        load([bad])
    (p,) = exc.value.problems
    assert p.path == "spec.inference.shared.memoryPerSlice" and p.line > 1
    assert p.message.startswith("must be at least 1Mi")
