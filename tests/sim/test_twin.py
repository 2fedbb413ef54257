"""The digital twin (issue 15): the real planner over a load curve, on a tiny pool.

Each test runs a few simulated hours of a 2-node x 4-card pool with synthetic files in tmp.
`plan` and `step` are wrapped (not replaced) to watch what the real planner and the shared
effect model did, cycle by cycle.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import reconciler.sim.twin as twin_mod
from reconciler.cli import main
from reconciler.policy.files import files_from_paths
from reconciler.policy.loader import load
from reconciler.sim.load import JobSpec, offered, read_jobs, read_load, scaled
from reconciler.sim.trace import TraceError
from reconciler.sim.twin import IDLE_WHY, TwinConfig, compare, run_twin, static_split
from tests.sim.twin_inputs import DOWN_COOLDOWN, POLICIES, POOL, START, UP_COOLDOWN


@pytest.fixture
def desired(tmp_path):
    d = tmp_path / "desired"
    d.mkdir()
    (d / "pool.yaml").write_text(POOL)
    (d / "policies.yaml").write_text(POLICIES)
    return load(files_from_paths([d]))


def write_load(path, phases: list[tuple[float, float]]):
    """phases: (seconds, requests per second), in 10 s bins."""
    lines = ["Time,TIMESTAMP"]
    t = START
    for seconds, rate in phases:
        for _ in range(int(seconds // 10)):
            lines.append(f"{t:%Y-%m-%d %H:%M:%S},{rate * 10:g}")
            t += timedelta(seconds=10)
    path.write_text("\n".join(lines) + "\n")
    return read_load(path)


@pytest.fixture
def watch(monkeypatch):
    """Record every plan and every snapshot the twin produces (the real functions run)."""
    seen = {"plans": [], "states": []}
    real_plan, real_step = twin_mod.plan, twin_mod.step

    def plan(desired, observed, now):
        p = real_plan(desired, observed, now)
        seen["plans"].append(((now - START).total_seconds(), p))
        return p

    def step(desired, observed, p, *, now, period):
        after = real_step(desired, observed, p, now=now, period=period)
        seen["states"].append(((now - START).total_seconds(), after))
        return after

    monkeypatch.setattr(twin_mod, "plan", plan)
    monkeypatch.setattr(twin_mod, "step", step)
    return seen


def cfg(**kw) -> TwinConfig:
    base = dict(service_rate=1.0, period=60.0, warmup=0.0, concurrency=10.0, load_time=120.0)
    return TwinConfig(**{**base, **kw})


def serving(state):
    return [w for w in state.workloads if w.phase == "Running" and w.owner_name.startswith("llm")]


def scales(seen):
    return [
        (t, a)
        for t, p in seen["plans"]
        for a in p.actions
        if a.kind == "scale" and a.target == "serve/llm"
    ]


# ----------------------------------------------------------------------------- the planner
def test_scales_up_with_the_load_and_back_down_honouring_cooldowns(tmp_path, desired, watch):
    curve = write_load(tmp_path / "load.csv", [(3600, 1), (3600, 6), (5400, 1)])
    res = run_twin(desired, curve, [], cfg())
    # every cycle called the real planner
    assert len(watch["plans"]) == res.cycles == 210
    ups = [(t, a) for t, a in scales(watch) if a.to_replicas > a.from_replicas]
    downs = [(t, a) for t, a in scales(watch) if a.to_replicas < a.from_replicas]
    # load rises at 1 h: the planner scales up to serve 6 req/s
    assert any(3600 <= t < 7200 for t, _ in ups)
    peak = max(len(serving(s)) for t, s in watch["states"] if 3600 <= t < 7200)
    assert peak >= 6
    # and back down once it falls (at 2 h), to the one replica 1 req/s needs (x2 headroom)
    assert any(t >= 7200 for t, _ in downs)
    assert len(serving(watch["states"][-1][1])) <= 2
    # cooldowns: no scale-up within 2 m of the last scale, no scale-down within 10 m
    events = sorted(scales(watch), key=lambda x: x[0])
    for (t0, _), (t1, a1) in zip(events, events[1:], strict=False):
        gap = t1 - t0
        assert gap >= (UP_COOLDOWN if a1.to_replicas > a1.from_replicas else DOWN_COOLDOWN), (
            t0,
            t1,
        )
    # a new replica serves only after its load time: the first minutes of the rise are short
    rec = res.record()
    assert rec["shortfall_gpu_s"] > 0
    assert 0.8 < rec["slo_attainment"] < 1.0


def test_load_time_delays_service(tmp_path, desired):
    curve = write_load(tmp_path / "load.csv", [(1800, 1), (3600, 6)])
    fast = run_twin(desired, curve, [], cfg(load_time=0.0)).record()
    slow = run_twin(desired, curve, [], cfg(load_time=900.0)).record()
    assert slow["shortfall_gpu_s"] > fast["shortfall_gpu_s"]
    assert slow["slo_attainment"] < fast["slo_attainment"]


def test_training_fills_idle_cards_and_is_preempted_with_checkpoint_loss(tmp_path, desired, watch):
    curve = write_load(tmp_path / "load.csv", [(7200, 1), (5400, 6)])
    jobs = [JobSpec(f"job-{i}", 60.0 * i, 1, 4 * 3600.0, 1200.0) for i in range(8)]
    res = run_twin(desired, curve, jobs, cfg(restart_cost=300.0))
    # at night (load 1 req/s; after the start-up burst has scaled back) training holds
    # every card inference does not
    # (a card a scale-down frees is bound at the next cycle: allow that one cycle)
    night = [s for t, s in watch["states"] if 3600 <= t < 7200]
    held = [sum(w.request.gpus for w in s.workloads if w.phase == "Running") for s in night]
    assert min(held) >= 7 and held.count(8) >= 0.9 * len(held)
    assert min(len(serving(s)) for s in night) >= 1
    assert min(h - len(serving(s)) for h, s in zip(held, night, strict=True)) >= 5
    # in the day the planner preempts training for serving replicas
    preempts = [a for t, p in watch["plans"] if t >= 7200 for a in p.actions if a.kind == "preempt"]
    assert preempts
    rec = res.record()
    assert rec["preemptions_per_hour"] > 0
    # each preempted job lost the work since its last checkpoint: at most 1200 s of one card,
    # plus its restart cost once it runs again
    assert 0 < res.training_lost <= len(preempts) * 1200
    assert res.restart_overhead > 0
    assert rec["gpu_h_lost"] == pytest.approx(
        (res.training_lost + res.restart_overhead) / 3600, abs=0.01
    )
    # and the serving replicas got the cards
    day = [len(serving(s)) for t, s in watch["states"] if t >= 10800]
    assert max(day) >= 6


def test_a_checkpointable_job_saves_its_work_when_asked(tmp_path, desired):
    curve = write_load(tmp_path / "load.csv", [(7200, 1), (3600, 6)])

    def jobs(checkpointable: bool) -> list[JobSpec]:
        return [
            JobSpec(f"job-{i}", 60.0 * i, 1, 4 * 3600.0, 3000.0, checkpointable) for i in range(8)
        ]

    periodic = run_twin(desired, curve, jobs(False), cfg(warmup=3600.0))
    on_demand = run_twin(desired, curve, jobs(True), cfg(warmup=3600.0))
    assert periodic.training_evictions > 0 and on_demand.training_evictions > 0
    assert periodic.training_lost > 0
    assert on_demand.training_lost == 0
    # the restart still costs time
    assert on_demand.restart_overhead > 0


def test_metrics_add_up(tmp_path, desired, watch):
    curve = write_load(tmp_path / "load.csv", [(3600, 1), (3600, 5), (3600, 2)])
    jobs = [JobSpec(f"job-{i}", 300.0 * i, 1 + i % 2, 1800.0 + 600 * i, 600.0) for i in range(12)]
    res = run_twin(desired, curve, jobs, cfg(warmup=1800.0))
    rec = res.record()
    # the split adds up to what was allocated
    assert rec["inference_needed"] + rec["inference_overprovisioned"] + rec["training"] == (
        pytest.approx(rec["allocation"], abs=2e-4)
    )
    assert 0 < rec["useful_utilisation"] <= rec["allocation"] <= 1
    # inference allocation: running replicas x the cycle, from the snapshots themselves
    inf = sum(len(serving(s)) * 60 for t, s in watch["states"] if t >= 1800)
    assert res.inference_allocated == pytest.approx(inf)
    # training allocation: running training pods x the cycle, less what finished mid-cycle
    held = sum(
        w.request.gpus * 60
        for t, s in watch["states"]
        if t >= 1800
        for w in s.workloads
        if w.phase == "Running" and w.owner_kind == "Job"
    )
    assert held - res.jobs_done * 2 * 60 <= res.training_allocated <= held
    # work done never exceeds the jobs' durations
    assert res.training_progress <= sum(j.gpus * j.duration for j in jobs)
    assert rec["jobs_done"] >= 1
    # the idle breakdown covers exactly the cards no running pod held
    idle = sum(res.idle.values()) / (res.pool_gpus * res.window_seconds)
    assert idle == pytest.approx(1 - rec["allocation"], abs=2e-4)
    assert {why for _, why in res.idle} <= set(IDLE_WHY)
    (total,) = [r for r in res.idle_rows() if r["day"] == "all"]
    assert total["idle"] == f"{idle:.1%}"
    waited = sum(v for (_, why), v in res.idle.items() if why not in ("dry", "finished", "down"))
    assert sum(res.idle_detail.values()) == pytest.approx(waited)


# ----------------------------------------------------------------------------- static baseline
def test_static_split_never_lends(tmp_path, desired, watch):
    curve = write_load(tmp_path / "load.csv", [(1800, 1), (3600, 6)])
    jobs = [JobSpec(f"job-{i}", 60.0 * i, 1, 4 * 3600.0, 1200.0) for i in range(10)]
    static, train_pool = static_split(desired, "p", 4)
    assert train_pool == "p-train"
    res = run_twin(static, curve, jobs, cfg(training_pool=train_pool), label="static-4")
    for _, s in watch["states"]:
        nodes = {n.name: n for n in s.nodes}
        for w in s.workloads:
            if w.phase != "Running":
                continue
            pool = nodes[w.node].labels["gpupool.io/pool"]
            assert pool == ("p" if w.owner_name.startswith("llm") else "p-train"), w.key
        assert len(serving(s)) <= 4
    rec = res.record()
    assert rec["preemptions_per_hour"] == 0
    # demand for 6 cards on 4: the static split falls short
    assert rec["slo_attainment"] < 0.9


def test_compare_picks_the_smallest_static_split_meeting_the_unified_slo(tmp_path, desired, watch):
    curve = write_load(tmp_path / "load.csv", [(1800, 1), (1800, 3)])
    jobs = [JobSpec(f"job-{i}", 60.0 * i, 1, 3600.0, 600.0) for i in range(6)]
    out = compare(desired, curve, jobs, cfg(), training_load=1.0)
    # the static run trains only in its training pool, serves only in the other
    static = [s for _, s in watch["states"] if any(n.name == "p-train-000" for n in s.nodes)]
    assert len(static) == out.static[0][1].cycles
    placed = {(w.owner_kind, w.node) for s in static for w in s.workloads if w.phase == "Running"}
    assert ("Job", "p-train-000") in placed
    assert {n for k, n in placed if k == "Job"} == {"p-train-000"}
    assert {n for k, n in placed if k == "ReplicaSet"} == {"p-000"}
    rows = out.records()
    assert [r["run"] for r in rows] == ["unified", "static-4"]
    target = rows[0]["slo_attainment"]
    if rows[1]["slo_attainment"] >= target:
        assert out.best == 4
    else:
        assert out.best is None


# ----------------------------------------------------------------------------- inputs
def test_scaled_keeps_durations_and_offers_the_load():
    jobs = [JobSpec(f"j{i}", 100.0 * i, 1 + i % 3, 500.0 + 50 * i) for i in range(20)]
    out = scaled(jobs, load=1.5, gpus=10, horizon=20000)
    assert {(j.gpus, j.duration) for j in out} <= {(j.gpus, j.duration) for j in jobs}
    assert offered(out, 20000) == pytest.approx(1.5 * 10 * 20000, rel=0.05)
    assert all(a.arrival <= b.arrival for a, b in zip(out, out[1:], strict=False))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("Time,count\n2024-05-10 00:00:00,1\n", ":1: missing column TIMESTAMP"),
        ("Time,TIMESTAMP\n2024-05-10 00:00:00,1\n2024-05-10 00:00:10,-3\n", ":3: TIMESTAMP"),
        (
            "Time,TIMESTAMP\n2024-05-10 00:00:10,1\n2024-05-10 00:00:00,2\n",
            ":3: Time 2024-05-10 00:00:00 is not after",
        ),
        ("Time,TIMESTAMP\n2024-05-10 00:00:00,1\nyesterday,2\n", ":3: Time 'yesterday'"),
    ],
)
def test_bad_load_file(tmp_path, content, message):
    path = tmp_path / "load.csv"
    path.write_text(content)
    with pytest.raises(TraceError, match=message) as err:
        read_load(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("arrival,gpus\n0,1\n", ":1: missing column duration"),
        ("arrival,gpus,duration\n0,-1,60\n", ":2: gpus -1 must be positive"),
        ("arrival,gpus,duration\n10,1,60\n5,1,60\n", ":3: arrival 5 is before"),
        ("arrival,gpus,duration\n0,1,0\n", ":2: duration 0 must be positive"),
    ],
)
def test_bad_jobs_file(tmp_path, content, message):
    path = tmp_path / "jobs.csv"
    path.write_text(content)
    with pytest.raises(TraceError, match=message):
        read_jobs(path)


def _cli(tmp_path, *extra):
    d = tmp_path / "desired"
    d.mkdir(exist_ok=True)
    (d / "pool.yaml").write_text(POOL)
    (d / "policies.yaml").write_text(POLICIES)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("arrival,gpus,duration\n0,1,3600\n60,2,3600\n")
    return [
        "simulate",
        "--mode",
        "twin",
        "--desired",
        str(d),
        "--training",
        str(jobs),
        "--warmup",
        "30m",
        *extra,
    ]


def test_cli_bad_input_is_one_line_exit_1(tmp_path, capsys):
    load_path = tmp_path / "load.csv"
    write_load(load_path, [(3600, 1)])
    rc = main(_cli(tmp_path, "--load", str(load_path), "--service-rate", "0"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "service-rate" in err[0]
    bad = tmp_path / "bad.csv"
    bad.write_text("Time,TIMESTAMP\n2024-05-10 00:00:00,1\n2024-05-10 00:00:10,-1\n")
    rc = main(_cli(tmp_path, "--load", str(bad), "--service-rate", "1"))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and f"{bad}:3:" in err[0]


def test_cli_table_and_json(tmp_path, capsys):
    import json

    load_path = tmp_path / "load.csv"
    write_load(load_path, [(3600, 1), (1800, 3)])
    rc = main(_cli(tmp_path, "--load", str(load_path), "--service-rate", "1"))
    out = capsys.readouterr().out
    assert rc == 0
    assert "unified" in out and "static-4" in out and "useful" in out
    rc = main(_cli(tmp_path, "--load", str(load_path), "--service-rate", "1", "--format", "json"))
    data = json.loads(capsys.readouterr().out)[0]
    assert rc == 0
    assert [r["run"] for r in data["runs"]] == ["unified", "static-4"]
    assert data["runs"][0]["cycles"] == 180  # 1.5 h at the default cycle, reconcile's 30 s


def test_cli_plot_and_static_option(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    load_path = tmp_path / "load.csv"
    write_load(load_path, [(3600, 1), (1800, 3)])
    png = tmp_path / "twin.png"
    args = _cli(tmp_path, "--load", str(load_path), "--service-rate", "1", "--static", "none")
    assert main([*args, "--plot", str(png)]) == 0
    assert "static" not in capsys.readouterr().out.split("\n", 1)[1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a split that is not whole nodes is refused in one line
    assert main([*args[:-2], "--static", "3"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "whole nodes" in err[0]
