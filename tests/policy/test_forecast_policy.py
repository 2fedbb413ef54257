"""ScalingPolicy `forecast` (issue 28 item 5): a good one loads, each bad one is one located
problem (file, line, column, field path), the schema's and validate.py's alike."""

from __future__ import annotations

from datetime import timedelta

import pytest

from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.problems import InvalidDesiredState

POOL = """\
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
  scaleDown: {queueLengthPerReplica: 6}
  forecast:
"""
FORECAST_LINE = 18  # the first line under `forecast:`
UP = "{queueLengthPerReplica: 8}"


def text(*lines: str, up: str = UP) -> str:
    return POOL.replace("{UP}", up) + "".join(f"    {x}\n" for x in lines)


def test_a_forecast_loads_with_its_defaults_and_its_own_values():
    state = load([SourceFile("f.yaml", text("days: 5"))])
    fc = state.scaling["llm"].spec.forecast
    assert (fc.days, fc.lookahead, fc.aggregate, fc.headroom, fc.query) == (
        5,
        timedelta(minutes=10),
        "max",
        1.0,
        None,
    )
    assert fc.scale_down_lookahead is None  # a scale-down stops at the lookahead's forecast
    given = text(
        "days: 7",
        "lookahead: 15m",
        "aggregate: median",
        "headroom: 1.2",
        "scaleDownLookahead: 1h",
        "query: 'max_over_time(q{ns=\"$namespace\"}[$window] offset $offset)'",
    )
    fc = load([SourceFile("f.yaml", given)]).scaling["llm"].spec.forecast
    assert (
        fc.days,
        fc.lookahead.total_seconds(),
        fc.aggregate,
        fc.headroom,
        fc.scale_down_lookahead.total_seconds(),
    ) == (7, 900, "median", 1.2, 3600)


def test_the_scaled_model_loads_with_its_defaults_and_its_own_values():
    fc = load([SourceFile("f.yaml", text("days: 3"))]).scaling["llm"].spec.forecast
    assert (fc.model, fc.level_window, fc.max_level_ratio) == ("seasonal", timedelta(hours=1), 4)
    given = text("model: scaled", "levelWindow: 2h", "maxLevelRatio: 3")
    fc = load([SourceFile("f.yaml", given)]).scaling["llm"].spec.forecast
    assert (fc.model, fc.level_window, fc.max_level_ratio) == ("scaled", timedelta(hours=2), 3)


def test_no_forecast_is_reactive_only():
    state = load([SourceFile("f.yaml", text().replace("  forecast:\n", ""))])
    assert state.scaling["llm"].spec.forecast is None


# (name, lines under forecast:, scaleUp, line, column, field path, fragment)
BAD = [
    ("zero days", ["days: 0"], UP, 0, 5, "spec.forecast.days", "greater than or equal to 1"),
    ("too many days", ["days: 29"], UP, 0, 5, "spec.forecast.days", "less than or equal to 28"),
    ("no lookahead", ["lookahead: 0s"], UP, 0, 5, "spec.forecast.lookahead", "more than 0s"),
    ("lookahead a day", ["lookahead: 24h"], UP, 0, 5, "spec.forecast.lookahead", "at most 12h"),
    (
        "scale-down window a day",
        ["scaleDownLookahead: 24h"],
        UP,
        0,
        5,
        "spec.forecast.scaleDownLookahead",
        "at most 12h",
    ),
    (
        "scale-down window shorter than the lookahead",
        ["lookahead: 15m", "scaleDownLookahead: 10m"],
        UP,
        -1,
        3,
        "spec.forecast",
        "scaleDownLookahead (10m) is shorter than lookahead (15m)",
    ),
    ("mean", ["aggregate: mean"], UP, 0, 5, "spec.forecast.aggregate", "'max' or 'median'"),
    ("headroom", ["headroom: 0.1"], UP, 0, 5, "spec.forecast.headroom", "greater than or equal"),
    ("bool days", ["days: true"], UP, 0, 5, "spec.forecast.days", "valid integer"),
    ("unknown field", ["horizon: 1h"], UP, 0, 5, "spec.forecast.horizon", "unknown field"),
    (
        "unknown placeholder",
        ["query: 'max_over_time(q[$range])'"],
        UP,
        0,
        5,
        "spec.forecast.query",
        "unknown placeholder $range",
    ),
    (
        "statistic with a query",
        ["statistic: avg", "query: 'q[$window] offset $offset'"],
        UP,
        -1,
        3,
        "spec.forecast",
        "statistic shapes the default query only",
    ),
    ("model", ["model: holt"], UP, 0, 5, "spec.forecast.model", "'seasonal' or 'scaled'"),
    (
        "level window zero",
        ["model: scaled", "levelWindow: 0s"],
        UP,
        1,
        5,
        "spec.forecast.levelWindow",
        "more than 0s",
    ),
    (
        "level window a day",
        ["model: scaled", "levelWindow: 24h"],
        UP,
        1,
        5,
        "spec.forecast.levelWindow",
        "at most 12h",
    ),
    (
        "level ratio below one",
        ["model: scaled", "maxLevelRatio: 0.5"],
        UP,
        1,
        5,
        "spec.forecast.maxLevelRatio",
        "greater than or equal to 1",
    ),
    (
        "level window without the scaled model",
        ["levelWindow: 2h"],
        UP,
        -1,
        3,
        "spec.forecast",
        "levelWindow is read by model: scaled only",
    ),
    (
        "level fields with the seasonal model",
        ["model: seasonal", "levelWindow: 2h", "maxLevelRatio: 2"],
        UP,
        -1,
        3,
        "spec.forecast",
        "levelWindow and maxLevelRatio are read by model: scaled only",
    ),
    (
        "no queue threshold",
        ["days: 3"],
        "{pendingTime: 20s}",
        -1,
        3,
        "spec.forecast",
        "by scaleUp.queueLengthPerReplica: give one",
    ),
]


@pytest.mark.parametrize(
    ("name", "lines", "up", "line", "col", "path", "fragment"), BAD, ids=[c[0] for c in BAD]
)
def test_a_bad_forecast_is_one_located_problem(name, lines, up, line, col, path, fragment):
    with pytest.raises(InvalidDesiredState) as info:
        load([SourceFile("f.yaml", text(*lines, up=up))])
    problems = info.value.problems
    assert len(problems) == 1, "\n".join(map(str, problems))
    p = problems[0]
    assert (p.file, p.line, p.column, p.path) == ("f.yaml", FORECAST_LINE + line, col, path), str(p)
    assert fragment in p.message, str(p)
