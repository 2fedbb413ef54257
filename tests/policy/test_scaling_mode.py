"""ScalingPolicy `scaleUp.mode` / `scaleDown.mode` (step or proportional) and `maxStep`: a good
policy loads, each bad one is one located problem (file, line, field path)."""

from __future__ import annotations

import pytest

from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState

POLICY = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {name: gpu}
spec:
  gpuModel: A100-SXM4-80GB
  capacity: {nodes: 1, gpusPerNode: 8}
  inference: {shared: {slicesPerGPU: 2, memoryPerSlice: 40Gi}}
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: llm}
spec:
  pool: gpu
  targets: [{namespace: serve, name: llm, maxReplicas: 8}]
  scaleUp: {UP}
  scaleDown: {DOWN}
"""
UP_LINE, DOWN_LINE = 15, 16


def text(up: str = "{queueLengthPerReplica: 8}", down: str = "{queueLengthPerReplica: 6}") -> str:
    return POLICY.replace("{UP}", up).replace("{DOWN}", down)


def test_mode_step_is_the_default_and_proportional_loads_with_its_max_step():
    spec = load([SourceFile("s.yaml", text())]).scaling["llm"].spec
    assert (spec.scale_up.mode, spec.scale_up.max_step, spec.scale_up.step) == ("step", None, 1)
    assert (spec.scale_down.mode, spec.scale_down.max_step) == ("step", None)
    given = text(
        "{queueLengthPerReplica: 8, mode: proportional, maxStep: 6}",
        "{queueLengthPerReplica: 6, mode: proportional}",
    )
    spec = load([SourceFile("s.yaml", given)]).scaling["llm"].spec
    assert (spec.scale_up.mode, spec.scale_up.max_step) == ("proportional", 6)
    assert (spec.scale_down.mode, spec.scale_down.max_step) == ("proportional", None)


# (name, scaleUp, scaleDown, line, field path, fragment)
BAD = [
    (
        "max step in mode step",
        "{queueLengthPerReplica: 8, maxStep: 4}",
        "{queueLengthPerReplica: 6}",
        UP_LINE,
        "spec.scaleUp",
        "maxStep is read only with mode: proportional",
    ),
    (
        "step in mode proportional",
        "{queueLengthPerReplica: 8}",
        "{queueLengthPerReplica: 6, mode: proportional, step: 2}",
        DOWN_LINE,
        "spec.scaleDown",
        "step is read only with mode: step",
    ),
    (
        "unknown mode",
        "{queueLengthPerReplica: 8, mode: linear}",
        "{queueLengthPerReplica: 6}",
        UP_LINE,
        "spec.scaleUp.mode",
        "'step' or 'proportional'",
    ),
    (
        "max step zero",
        "{queueLengthPerReplica: 8, mode: proportional, maxStep: 0}",
        "{queueLengthPerReplica: 6}",
        UP_LINE,
        "spec.scaleUp.maxStep",
        "greater than or equal to 1",
    ),
    (
        "proportional up without a queue threshold",
        "{pendingTime: 20s, mode: proportional}",
        "{queueLengthPerReplica: 6}",
        UP_LINE,
        "spec.scaleUp.mode",
        "sizes the replicas by queueLengthPerReplica: give one",
    ),
    (
        "proportional down at 0",
        "{queueLengthPerReplica: 8}",
        "{queueLengthPerReplica: 0, mode: proportional}",
        DOWN_LINE,
        "spec.scaleDown.mode",
        "which is 0 here",
    ),
]


@pytest.mark.parametrize(
    ("name", "up", "down", "line", "path", "fragment"), BAD, ids=[c[0] for c in BAD]
)
def test_a_bad_mode_is_one_located_problem(name, up, down, line, path, fragment):
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("s.yaml", text(up, down))])
    problems = info.value.problems
    assert len(problems) == 1, "\n".join(map(str, problems))
    p = problems[0]
    assert (p.file, p.line, p.path) == ("s.yaml", line, path), str(p)
    assert fragment in p.message, str(p)
