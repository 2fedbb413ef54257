"""The digital twin's benchmark (issue 15): unified pool against the best static split.

    .venv/bin/python bench/twin.py                       # headline cell: f=0.5, load 1.2
    .venv/bin/python bench/twin.py --grid                # f x training load table
    .venv/bin/python bench/twin.py --rates               # service-rate sensitivity (x0.5, x1, x2)
    .venv/bin/python bench/twin.py --days 2 --warmup 0.5 # a shorter span
    .venv/bin/python bench/twin.py --plot twin.png       # and a plot of both pools
    .venv/bin/python bench/twin.py --up 6 --down 4 --sizes 40,48,56  # more serving headroom
    .venv/bin/python bench/twin.py --period 60           # a slower cycle (default 30 s)
    .venv/bin/python bench/twin.py --smoke               # 72 minutes, 2 static splits: seconds
    .venv/bin/python bench/twin.py --frontier            # burst-cover frontier of the load, no twin

A 64-card pool (8 nodes x 8 A100) under a generated desired state (written to a temporary
directory: one Pool, a PriorityPolicy where serving may preempt training-low, a
ScalingPolicy on queue length per replica and p99 wait, a MaintenancePolicy that moves up to
4 one-card jobs per cycle when a multi-card job fits on no node), the Azure LLM 2024 Coding week
(`../shared/data/inference-load`) as inference load and the openb trace's whole-card
training pods (`../shared/data/openb`) as training, arrivals scaled to the training load.
`f` is the inference share at peak: the service rate is set so that the load's highest
10-minute mean needs f x 64 replicas of one card. Each cell runs the unified pool and the
static splits (8 to 56 inference cards, whole nodes), all through the same twin, and prints
the table, the best static split (the smallest meeting the unified pool's SLO attainment)
and the wall time. Skips (exit 0) with a message when ../shared is absent.

`--smoke` runs the headline cell over 0.05 day (72 minutes, the first 0.01 left out) against
two static splits (24 and 40 inference cards), with node failures (4 per node-day, 15 minutes
down: `--failures`, `--repair`, `--seed` add them to any run, and the table gains lost GPU-hours
and recovery times): the same twin, tables and summary in seconds;
tests/test_bench_smoke.py runs it so that the benchmark cannot rot.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from reconciler.conventions import RECONCILE_INTERVAL_SECONDS  # noqa: E402
from reconciler.policy.files import files_from_paths  # noqa: E402
from reconciler.policy.loader import load as load_desired  # noqa: E402
from reconciler.sim.load import openb_jobs, read_load  # noqa: E402
from reconciler.sim.report import plot_twin, text_table, twin_columns  # noqa: E402
from reconciler.sim.trace import DEFAULT_PODS, read_pods  # noqa: E402
from reconciler.sim.twin import TwinConfig, compare, run_twin, training_jobs  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
LOAD = SHARED / "inference-load" / "azure_llm_2024_coding_10s.csv"
OPENB = SHARED / "openb"
NODES, GPUS_PER_NODE = 8, 8
SMOKE = {"days": 0.05, "warmup": 0.01, "sizes": [24, 40], "failures": 4.0, "repair": 0.25}
"""What --smoke changes (flags win): with 4 failures per node-day, a couple in 72 minutes."""

DESIRED = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: gpu
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector:
    matchLabels:
      gpupool.io/pool: gpu
  capacity:
    nodes: {nodes}
    gpusPerNode: {gpn}
  inference:
    prefer: shared
    shared:
      slicesPerGPU: 2
      memoryPerSlice: 40Gi
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata:
  name: cluster
spec:
  defaultClass: training-low
  classes:
    - name: serving
      value: 100000
      workload: inference
      preemptible: false
    - name: training-low
      value: 10000
      workload: training
  preemption:
    checkpointGracePeriod: 2m
    minRuntime: 5m
    budgetPerHour: 60
    rules:
      - preemptor: serving
        victims: [training-low]
        when: always
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata:
  name: llm
spec:
  pool: gpu
  targets:
    - {{namespace: serve, name: llm, kind: Deployment, minReplicas: 2, maxReplicas: {max}}}
  scaleUp:
    queueLengthPerReplica: {up}
    pendingTime: 20s
    {up_step}
    cooldown: 1m
  scaleDown:
    queueLengthPerReplica: {down}
    {down_step}
    cooldown: {down_cooldown}
  borrowFrom: [training-low]{forecast}
---
apiVersion: gpupool.io/v1alpha1
kind: MaintenancePolicy
metadata:
  name: defragment
spec:
  defragmentation:
    when: pendingDemand
    maxMigrationsPerCycle: {migrations}
    onlyMigratable: false
"""


FORECAST = """
  forecast:
    days: {days}
    lookahead: {lookahead}
    statistic: {statistic}
    aggregate: {aggregate}
    headroom: {headroom}{down}{model}"""


def desired_state(args, *, forecast: bool):
    """The benchmark's desired state; with `forecast`, the ScalingPolicy pre-warms (and its
    reactive thresholds are --forecast-up / --forecast-down)."""
    up, down = args.up, args.down
    block = ""
    if forecast:
        up, down = args.forecast_up or up, args.forecast_down or down
        block = FORECAST.format(
            days=args.forecast_days,
            lookahead=args.forecast_lookahead,
            statistic=args.forecast_statistic,
            aggregate=args.forecast_aggregate,
            headroom=args.forecast_headroom,
            down=f"\n    scaleDownLookahead: {args.forecast_down_lookahead}"
            if args.forecast_down_lookahead not in (None, "none")
            else "",
            model=f"\n    model: scaled\n    levelWindow: {args.forecast_level_window}"
            f"\n    maxLevelRatio: {args.forecast_max_level_ratio:g}"
            if args.forecast_model == "scaled"
            else "",
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "desired.yaml"
        path.write_text(
            DESIRED.format(
                nodes=NODES,
                gpn=GPUS_PER_NODE,
                max=NODES * GPUS_PER_NODE,
                up=up,
                down=down,
                up_step=_step_lines(args.up_mode, args.step, args.max_step),
                down_step=_step_lines(args.down_mode, 2, args.down_max_step),
                down_cooldown=args.down_cooldown,
                forecast=block,
                migrations=args.max_migrations,
            ),
            encoding="utf-8",
        )
        return load_desired(files_from_paths([tmp]))


def _step_lines(mode: str, step: int, max_step: int | None) -> str:
    """A scale section's `step: n`, or `mode: proportional` and its `maxStep`."""
    if mode == "step":
        return f"step: {step}"
    return "mode: proportional" + (f"\n    maxStep: {max_step}" if max_step else "")


def cell(desired, curve, base_jobs, f: float, load: float, rate_x: float, args) -> list[dict]:
    gpus = NODES * GPUS_PER_NODE
    rate = curve.peak_rate(600) / (f * gpus) * rate_x
    cfg = TwinConfig(
        service_rate=rate,
        period=args.period,
        horizon=args.days * 86400,
        warmup=args.warmup * 86400,
        failure_rate=args.failures,
        repair_time=args.repair * 3600,
        failure_seed=args.seed,
    )
    started = time.perf_counter()
    jobs, train_gpus = training_jobs(desired, curve, base_jobs, cfg, training_load=load)
    result, rows, ahead, idle = None, [], None, []
    if args.forecast != "only":  # the unified pool (reactive only) and the static splits
        result = compare(desired, curve, base_jobs, cfg, training_load=load, sizes=args.sizes)
        rows = result.records()
        idle += result.unified.idle_rows()
        if args.idle:
            _idle_details(result.unified)
    if args.forecast != "off":  # the unified pool again, pre-warming from the forecast
        with_fc = desired_state(args, forecast=True)
        run = run_twin(with_fc, curve, jobs, cfg, label="unified-forecast")
        ahead = run.record()
        idle += run.idle_rows()
        if args.idle:
            _idle_details(run)
        rows.insert(1 if rows else 0, {**ahead, "inference_cards": "elastic", "best": ""})
    seconds = time.perf_counter() - started
    if result and args.plot and (f, load, rate_x) == (args.f, args.load, 1.0):
        plot_twin(result, args.plot, title=f"{LOAD.name}: f={f:g}, training load {load:g}")
    best = next((r for r in rows if r["best"]), None)
    print(
        f"\n## f={f:g} training load={load:g} service rate={rate:.3f} req/s (x{rate_x:g}): "
        f"{len(jobs)} jobs on {train_gpus:.1f} training cards; "
        f"{len(rows)} runs in {seconds:.0f} s"
    )
    print(text_table(rows, twin_columns(args.failures > 0)))
    if args.idle:  # why the idle cards idle, % of the pool, per day (1 = the first day)
        print("\nidle cards (% of the pool's card-time), by why, unified runs:")
        print(text_table(idle, [(k, k, "") for k in idle[0]]))
    u = rows[0] if result else {}
    summary = {
        "f": f,
        "load": load,
        "rate_x": rate_x,
        "unified_useful": u.get("useful_utilisation"),
        "unified_slo": u.get("slo_attainment"),
        "lost_share": u.get("lost_share"),
        "forecast_useful": ahead["useful_utilisation"] if ahead else None,
        "forecast_slo": ahead["slo_attainment"] if ahead else None,
        "best_static": best["inference_cards"] if best else None,
        "static_useful": best["useful_utilisation"] if best else None,
        "static_slo": best["slo_attainment"] if best else None,
        "seconds": round(seconds, 1),
    }
    if args.failures > 0:  # node failures: what they cost each side
        summary["unified_fail_lost_gpu_h"] = u["failure_gpu_h_lost"]
        summary["unified_recover_p50_s"] = u["recovery_p50_s"]
        summary["static_fail_lost_gpu_h"] = best["failure_gpu_h_lost"] if best else None
        summary["static_recover_p50_s"] = best["recovery_p50_s"] if best else None
    return [summary]


def _idle_details(run) -> None:
    """The idle while training waited, by detail (`TwinResult.idle_detail`), % of the pool."""
    print(f"{run.label}: idle while training waited, by detail (% of the pool's card-time)")
    for msg, v in sorted(run.idle_detail.items(), key=lambda kv: -kv[1])[:12]:
        print(f"  {v / (run.pool_gpus * run.window_seconds):6.2%}  {msg or '(no message)'}")


FRONTIER_HEADROOMS = (1.3, 1.4, 1.5, 1.6, 1.7)
FRONTIER_DELAY = 255.0
"""Seconds from a scale-up decision to a serving replica in the twin's cell: the victim's
checkpoint grace (2m), the model load (2m) and half a 30 s cycle."""


def frontier_row(curve, rate: float, args, model: str, headroom: float) -> dict:
    """One provisioner outside the planner over the cell's load (64 cards, one card a
    replica, at least 2): every cycle it wants ceil(headroom x level / rate) replicas, the
    level being the mean request rate of the coming 10 minutes known exactly (`oracle`, ready
    at once: what no forecast beats) or of the last 5 minutes (`trailing`, a scale-up serving
    FRONTIER_DELAY later). SLO and over-provisioning counted as the twin counts them."""
    P, b, counts = args.period, curve.bin_seconds, curve.counts
    sums = [0.0]
    for c in counts:
        sums.append(sums[-1] + c)

    def level(t0: float, t1: float) -> float:
        i0, i1 = max(0, int(t0 // b)), min(len(counts), max(int(t0 // b) + 1, int(t1 // b)))
        return (sums[i1] - sums[i0]) / ((i1 - i0) * b) if i1 > i0 else 0.0

    horizon, warmup = min(args.days * 86400, curve.seconds), args.warmup * 86400
    backlog, ready, coming, cur = 0.0, 2, [], 2
    bins = met = ups = 0
    over = 0.0
    for k in range(math.ceil(horizon / P)):
        t = k * P
        lvl = level(t, t + 600) if model == "oracle" else level(t - 300, t)
        want = max(2, math.ceil(round(headroom * lvl / rate, 9)))
        if want > cur:
            ups += t >= warmup
            coming.append([t + (0.0 if model == "oracle" else FRONTIER_DELAY), want - cur])
        for c in reversed(coming):  # a scale-down drops the replicas not serving yet first
            cut = min(c[1], max(0, cur - want))
            c[1], cur = c[1] - cut, cur - cut
        ready, cur = min(ready, want), want
        for lo, width, req in curve.window(t, min(t + P, horizon)):
            ready += sum(c[1] for c in coming if c[0] <= lo)
            coming = [c for c in coming if c[0] > lo and c[1] > 0]
            served = min(backlog + req, ready * rate * width)
            backlog += req - served
            if lo >= warmup:
                bins += 1
                met += backlog <= 1e-9
                over += (cur - served / (rate * width)) * width
    window = max(1.0, horizon - warmup)
    return {
        "model": model,
        "headroom": headroom,
        "SLO": f"{met / max(1, bins):.2%}",
        "held beyond need": f"{over / (window * NODES * GPUS_PER_NODE):.1%}",
        "scale-ups/h": round(ups / (window / 3600), 1),
    }


def frontier(curve, args) -> None:
    """How much of the pool any provisioner must hold beyond need for a given SLO on this
    load (the burst cover), with the level known exactly and with the reactive delay."""
    rate = curve.peak_rate(600) / (args.f * NODES * GPUS_PER_NODE)
    rows = [
        frontier_row(curve, rate, args, model, h)
        for model in ("oracle", "trailing")
        for h in FRONTIER_HEADROOMS
    ]
    print(f"\n## frontier: f={args.f:g}, service rate {rate:.3f} req/s, {args.period:g} s cycle")
    print(text_table(rows, [(k, k, "") for k in rows[0]]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grid", action="store_true", help="f x training load table")
    ap.add_argument(
        "--frontier",
        action="store_true",
        help="only the burst-cover frontier of the load (no twin run): SLO against inference "
        "held beyond need, for a provisioner knowing the coming 10 minutes and a trailing one",
    )
    ap.add_argument("--rates", action="store_true", help="service rate x0.5, x1, x2")
    ap.add_argument("--f", type=float, default=0.5)
    ap.add_argument("--load", type=float, default=1.2)
    ap.add_argument(
        "--rate", type=float, default=1.0, help="service rate multiplier of the cell (default 1)"
    )
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--warmup", type=float, default=1.0, help="days left out (default 1)")
    ap.add_argument(
        "--period",
        type=float,
        default=float(RECONCILE_INTERVAL_SECONDS),
        help=f"cycle seconds (default {RECONCILE_INTERVAL_SECONDS}, reconcile's interval)",
    )
    ap.add_argument("--plot", metavar="PNG", help="plot the headline cell (matplotlib)")
    ap.add_argument(
        "--up", type=int, default=8, help="scale up above this queue per replica (default 8)"
    )
    ap.add_argument(
        "--down", type=int, default=6, help="scale down below this queue per replica (default 6)"
    )
    ap.add_argument("--step", type=int, default=4, help="replicas added per scale-up (default 4)")
    ap.add_argument(
        "--up-mode",
        choices=("step", "proportional"),
        default="step",
        help="scaleUp.mode (default step: --step replicas; proportional: ceil(queue / --up))",
    )
    ap.add_argument("--max-step", type=int, help="scaleUp.maxStep with --up-mode proportional")
    ap.add_argument(
        "--down-mode",
        choices=("step", "proportional"),
        default="step",
        help="scaleDown.mode (default step: 2 replicas; proportional: ceil(queue / --down))",
    )
    ap.add_argument(
        "--down-max-step", type=int, help="scaleDown.maxStep with --down-mode proportional"
    )
    ap.add_argument("--down-cooldown", default="10m", help="scaleDown.cooldown (default 10m)")
    ap.add_argument(
        "--max-migrations",
        type=int,
        default=4,
        help="the MaintenancePolicy's defragmentation.maxMigrationsPerCycle (default 4)",
    )
    ap.add_argument(
        "--forecast",
        choices=("on", "off", "only"),
        default="on",
        help="also run the unified pool with forecast pre-warming (default on; only: that run"
        " alone, no reactive-only or static rows)",
    )
    ap.add_argument("--forecast-days", type=int, default=3, help="previous days read (3)")
    ap.add_argument("--forecast-lookahead", default="10m", help="window ahead (10m)")
    ap.add_argument(
        "--forecast-down-lookahead",
        default="30m",
        help="scale-down window (forecast.scaleDownLookahead, 30m; none: the lookahead)",
    )
    ap.add_argument(
        "--forecast-statistic", choices=("max", "avg"), default="max", help="of a day's window"
    )
    ap.add_argument(
        "--forecast-aggregate", choices=("max", "median"), default="median", help="across days"
    )
    ap.add_argument("--forecast-headroom", type=float, default=0.5, help="multiplier (0.5)")
    ap.add_argument(
        "--forecast-model",
        choices=("seasonal", "scaled"),
        default="seasonal",
        help="forecast.model (seasonal: the days' readings as they were; scaled: each times "
        "today's level over that day's, the mean queue over --forecast-level-window)",
    )
    ap.add_argument(
        "--forecast-level-window", default="1h", help="forecast.levelWindow with scaled (1h)"
    )
    ap.add_argument(
        "--forecast-max-level-ratio",
        type=float,
        default=4.0,
        help="forecast.maxLevelRatio with scaled (4)",
    )
    ap.add_argument(
        "--forecast-up", type=int, help="scale-up queue per replica with forecast (--up)"
    )
    ap.add_argument(
        "--forecast-down", type=int, help="scale-down queue per replica with forecast (--down)"
    )
    ap.add_argument(
        "--sizes",
        type=lambda v: [] if v == "none" else [int(x) for x in v.split(",")],
        help="static splits to run, inference cards, comma-separated (default: every whole node;"
        " none: no static split)",
    )
    ap.add_argument(
        "--failures",
        type=float,
        default=0.0,
        help="node failures per node-day (default 0); adds lost GPU-hours and recovery times",
    )
    ap.add_argument(
        "--repair", type=float, default=4.0, help="hours a failed node is down (default 4)"
    )
    ap.add_argument("--seed", type=int, default=0, help="failure schedule seed (default 0)")
    ap.add_argument(
        "--idle",
        action="store_true",
        help="also print why the unified runs' idle cards idle, per day "
        "(reconciler.sim.twin.IDLE_WHY)",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="--days 0.05 --warmup 0.01 --sizes 24,40 --failures 4 --repair 0.25: seconds (the "
        "test suite runs it)",
    )
    args = ap.parse_args(argv)
    if args.smoke:  # the smoke sizes become the defaults; flags given explicitly still win
        ap.set_defaults(**SMOKE)
        args = ap.parse_args(argv)
    if not LOAD.exists() or not (OPENB / DEFAULT_PODS).exists():
        print(f"skipped: {LOAD} or {OPENB / DEFAULT_PODS} is absent (../shared/data)")
        return 0
    curve = read_load(LOAD)
    if args.frontier:
        frontier(curve, args)
        return 0
    desired = desired_state(args, forecast=False)
    base_jobs = openb_jobs(read_pods(OPENB / DEFAULT_PODS))
    cells = [(args.f, args.load, args.rate)]
    if args.grid:
        cells = [(f, x, 1.0) for f in (0.25, 0.5, 0.75) for x in (0.8, 1.0, 1.2, 1.5)]
    if args.rates:
        cells += [(args.f, args.load, r) for r in (0.5, 2.0)]
    started = time.perf_counter()
    summary = []
    for f, x, r in cells:
        summary += cell(desired, curve, base_jobs, f, x, r, args)
    print(f"\n## summary ({args.days:g} days, first {args.warmup:g} left out)")
    cols = [(k, k, "") for k in summary[0]]
    print(text_table(summary, cols))
    print(f"\nwall time: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
