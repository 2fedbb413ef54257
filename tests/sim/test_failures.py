"""Node failures in the digital twin (issue 29, item 5): the seeded schedule, what a failed node
does to the snapshot the planner sees, and what the twin reports (lost GPU-hours, recovery
time per failure) for the unified pool and the static split. A 2-node x 4-card pool
(tests/sim/twin_inputs.py), a few simulated hours each."""

from __future__ import annotations

from datetime import timedelta

import pytest

import reconciler.sim.twin as twin_mod
from reconciler.observe.model import ObservedState, Request, Workload
from reconciler.policy.files import files_from_paths
from reconciler.policy.loader import load
from reconciler.sim.failures import DAY, bring_back, outages, take_down
from reconciler.sim.load import JobSpec, read_load
from reconciler.sim.twin import TwinConfig, compare, pool_nodes, run_twin
from reconciler.sim.twin_setup import OptionError
from tests.sim.twin_inputs import POLICIES, POOL, START

FAILURE_KEYS = (
    "failures",
    "failure_gpu_h_lost",
    "failure_gpu_h_down",
    "recovery_p50_s",
    "recovery_max_s",
    "not_recovered",
)


@pytest.fixture
def desired(tmp_path):
    d = tmp_path / "desired"
    d.mkdir()
    (d / "pool.yaml").write_text(POOL)
    (d / "policies.yaml").write_text(POLICIES)
    return load(files_from_paths([d]))


def flat_load(path, seconds: float, rate: float):
    lines = ["Time,TIMESTAMP"]
    for i in range(int(seconds // 10)):
        lines.append(f"{START + timedelta(seconds=10 * i):%Y-%m-%d %H:%M:%S},{rate * 10:g}")
    path.write_text("\n".join(lines) + "\n")
    return read_load(path)


def cfg(**kw) -> TwinConfig:
    base = dict(service_rate=1.0, period=60.0, warmup=0.0, concurrency=10.0, load_time=120.0)
    return TwinConfig(**{**base, **kw})


# ----------------------------------------------------------------------------- the schedule
def test_outages_are_seeded_per_node_position_and_never_overlap_on_a_node():
    nodes = [f"n{i}" for i in range(8)]
    a = outages(nodes, 30 * DAY, 0.5, 3600.0, seed=7)
    assert a == outages(nodes, 30 * DAY, 0.5, 3600.0, seed=7)
    assert a != outages(nodes, 30 * DAY, 0.5, 3600.0, seed=8)
    # node i's outages depend on its position only: other names, the same times
    renamed = outages([f"other-{i}" for i in range(8)], 30 * DAY, 0.5, 3600.0, seed=7)
    assert [(o.start, o.end) for o in renamed] == [(o.start, o.end) for o in a]
    # about rate x node-days of up time (Poisson: 120 expected, a wide band)
    assert 80 <= len(a) <= 160
    for n in nodes:
        mine = [o for o in a if o.node == n]
        assert all(o.end - o.start == 3600.0 for o in mine)
        assert all(x.end <= y.start for x, y in zip(mine, mine[1:], strict=False))
        assert all(0 <= o.start < 30 * DAY for o in mine)
    assert outages(nodes, 30 * DAY, 0.0, 3600.0, seed=7) == []


# ----------------------------------------------------------------------------- the snapshot
def test_a_failed_node_is_not_ready_and_its_pods_are_lost_or_recreated(desired):
    nodes = pool_nodes(desired)
    down, up = nodes[0].name, nodes[1].name

    def pod(name: str, node: str, owner: str = "") -> Workload:
        return Workload(
            namespace="training",
            name=name,
            request=Request(gpus=1),
            node=node,
            owner_kind="Job" if owner else "",
            owner_name=owner,
            pool="p",
        )

    snap = ObservedState(
        observed_at=START,
        nodes=nodes,
        workloads=[pod("a", down, "job-a"), pod("b", down), pod("c", up, "job-c")],
    )
    after, lost = take_down(desired, snap, {down}, START)
    assert {w.name for w in lost} == {"a", "b"}
    ready = {n.name: n.ready for n in after.nodes}
    assert ready == {down: False, up: True}
    by_name = {w.name: w for w in after.workloads}
    # the Job's pod comes back Pending (its owner creates it again), unplaced; the ownerless
    # pod is gone; the pod on the healthy node is untouched
    assert set(by_name) == {"a", "c"}
    assert by_name["a"].phase == "Pending" and by_name["a"].node is None
    assert by_name["c"].phase == "Running" and by_name["c"].node == up
    back = bring_back(after, {down})
    assert all(n.ready for n in back.nodes)


# ----------------------------------------------------------------------------- the twin
def test_failures_cost_training_work_and_recover(tmp_path, desired, monkeypatch):
    curve = flat_load(tmp_path / "load.csv", 6 * 3600, 1.0)
    jobs = [JobSpec(f"job-{i}", 60.0 * i, 1, 3 * 3600.0, 1200.0) for i in range(10)]
    states = []
    real_step = twin_mod.step

    def step(desired, observed, p, *, now, period):
        after = real_step(desired, observed, p, now=now, period=period)
        states.append(after)
        return after

    monkeypatch.setattr(twin_mod, "step", step)
    res = run_twin(desired, curve, jobs, cfg(failure_rate=8.0, repair_time=1800.0))
    rec = res.record()
    assert set(FAILURE_KEYS) <= set(rec)
    assert rec["failures"] >= 1
    # nothing is ever placed on a node while it is down
    for s in states:
        down = {n.name for n in s.nodes if not n.ready}
        assert not [w.key for w in s.workloads if w.placed and w.node in down]
    assert any(not n.ready for s in states for n in s.nodes)
    # the work since the last checkpoint is lost: at most one period of each lost card
    assert 0 < rec["failure_gpu_h_lost"] <= rec["failures"] * 4 * 1200 / 3600 + 1e-9
    assert rec["failure_gpu_h_lost"] * 3600 <= res.training_lost + 1e-6
    assert rec["failure_gpu_h_down"] > 0
    # a recovered failure took at least the restart cost of a job it hit (300 s default)
    assert rec["recovery_max_s"] >= 300
    assert rec["recovery_p50_s"] <= rec["recovery_max_s"]
    # against the same run without failures: less training done
    calm = run_twin(desired, curve, jobs, cfg()).record()
    assert "failures" not in calm
    assert rec["training_gpu_h_done"] < calm["training_gpu_h_done"]


def test_the_unified_pool_and_the_static_split_lose_the_same_machines(tmp_path, desired):
    curve = flat_load(tmp_path / "load.csv", 4 * 3600, 1.0)
    jobs = [JobSpec(f"job-{i}", 120.0 * i, 1, 2 * 3600.0, 600.0) for i in range(12)]
    c = cfg(failure_rate=6.0, repair_time=1200.0, failure_seed=3)
    result = compare(desired, curve, jobs, c, training_load=1.0, sizes=[4])
    rows = result.records()
    assert [r["run"] for r in rows] == ["unified", "static-4"]
    for r in rows:
        assert set(FAILURE_KEYS) <= set(r), r
    assert rows[0]["failures"] == rows[1]["failures"] >= 1
    assert rows[0]["failure_gpu_h_down"] == rows[1]["failure_gpu_h_down"]


@pytest.mark.parametrize(("rate", "repair"), [(-1.0, 3600.0), (1.0, 0.0)])
def test_bad_failure_settings_are_refused(rate, repair):
    with pytest.raises(OptionError, match="failures need a rate"):
        cfg(failure_rate=rate, repair_time=repair)


# ----------------------------------------------------------------------------- the CLI
def _cli(tmp_path, *extra: str) -> list[str]:
    d = tmp_path / "desired"
    d.mkdir(exist_ok=True)
    (d / "pool.yaml").write_text(POOL)
    (d / "policies.yaml").write_text(POLICIES)
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("arrival,gpus,duration\n0,1,7200\n60,2,7200\n120,1,7200\n")
    load_path = tmp_path / "load.csv"
    flat_load(load_path, 3 * 3600, 1.0)
    return [
        "simulate", "--mode", "twin", "--desired", str(d), "--training", str(jobs),
        "--load", str(load_path), "--service-rate", "1", "--warmup", "0s", *extra,
    ]  # fmt: skip


def test_cli_reports_failures_for_both_sides(tmp_path, capsys):
    import json

    from reconciler.cli import main

    args = _cli(tmp_path, "--failure-rate", "24", "--repair-time", "30m", "--failure-seed", "1")
    assert main(args) == 0
    head = capsys.readouterr().out.splitlines()[1]
    for col in ("failures", "fail lost GPU-h", "down GPU-h", "recover p50 s", "recover max s"):
        assert col in head, head
    assert main([*args, "--format", "json"]) == 0
    runs = json.loads(capsys.readouterr().out)[0]["runs"]
    assert [r["run"] for r in runs] == ["unified", "static-4"]
    assert runs[0]["failures"] == runs[1]["failures"] >= 1
    # without --failure-rate the table is as before
    assert main(_cli(tmp_path)) == 0
    assert "failures" not in capsys.readouterr().out.splitlines()[1]


def test_cli_bad_failure_rate_is_one_line(tmp_path, capsys):
    from reconciler.cli import main

    assert main(_cli(tmp_path, "--failure-rate", "-1")) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: --failure-rate: failures need" in err[0], err
