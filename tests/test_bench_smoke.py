"""Every benchmark under bench/ runs here in its smoke mode (`--smoke`: tiny sizes, the same code
path, its table in seconds), as a subprocess with a timeout, so that none can rot unnoticed
(bench/README.md). A smoke asserts exit 0 and the table's header and rows; never a time or a
figure: speed and memory targets are the full benchmarks' business.

Those that read ../shared/data (the openb trace, the inference load) are marked `trace` and skip
with the missing path when it is absent; admission_openb.py also runs the real control plane
(tests/cluster), so it is marked `kube` and skips, as the `control_plane` fixture does, when
the kcp binary is not built and no Go toolchain can build it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reconciler.sim.trace import DEFAULT_NODES, DEFAULT_PODS, openb_dir

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SHARED = ROOT.parent / "shared" / "data"  # where bench/twin.py reads it ($GPUPOOL_OPENB_DIR aside)
QUICK = 120  # s; each of these takes seconds on the 2-core machine when it is quiet


def need(*paths: Path) -> None:
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        pytest.skip(f"shared data absent (../shared/data, or $GPUPOOL_OPENB_DIR): {missing}")


def need_openb() -> None:
    need(openb_dir() / DEFAULT_NODES, openb_dir() / DEFAULT_PODS)


def smoke(script: str, *args: str, timeout: float = QUICK, env: dict | None = None) -> str:
    """Run `bench/<script> --smoke *args`; its stdout, once it exited 0."""
    cmd = [sys.executable, str(BENCH / script), "--smoke", *args]
    try:
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(
            f"{script} --smoke did not finish in {timeout:g} s\n"
            f"--- stdout (tail)\n{out[-3000:]}\n--- stderr (tail)\n{err[-3000:]}"
        )
    assert proc.returncode == 0, (
        f"{' '.join(cmd[1:])} exited {proc.returncode}\n"
        f"--- stdout (tail)\n{proc.stdout[-3000:]}\n--- stderr (tail)\n{proc.stderr[-5000:]}"
    )
    assert not proc.stdout.startswith("skipped:"), (
        f"{script} skipped though this test found its inputs: {proc.stdout[:500]}"
    )
    return proc.stdout


def lines_after(out: str, header: str) -> list[str]:
    """The lines after the first line matching the regex `header` (which must be there)."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if re.search(header, line):
            return lines[i + 1 :]
    pytest.fail(f"no table header matching {header!r} in the output:\n{out[-3000:]}")


def test_plan_scale_smoke():
    out = smoke("plan_scale.py")
    rows = lines_after(
        out,
        r"^\| nodes \| GPUs \| pods \| snapshot MiB \| load s \| plan s \| plan/load "
        r"\| peak RSS MiB \| actions \|$",
    )
    assert rows[0].startswith("|---:|")
    assert re.match(r"^\| 16 \| 128 \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \|", rows[1]), rows[1]
    events = lines_after(
        out,
        r"^\| nodes \| full plan s \| one pod added s \| one signal changed s "
        r"\| nothing changed s \| pod added, clock moved s \|$",
    )
    assert re.match(
        r"^\| 16 \| [\d.]+ \| [\d.]+ \(full\) \| [\d.]+ \(full\) \| [\d.]+ \(reused\) "
        r"\| [\d.]+ \(full\) \|$",
        events[1],
    ), events[1]
    assert re.search(r"16: pod \d+/\d+, clock moved \d+/\d+, equal True", out), out


def test_dra_cycle_smoke():
    out = smoke("dra_cycle.py")
    rows = lines_after(
        out,
        r"^\| nodes \| claims \| pods \| observe s \| consistency s \| plan s \| cycle s "
        r"\| unreleased claims \| actions \|$",
    )
    assert rows[0].startswith("|---:|")
    # 3 nodes of 5 running claims and 6 queued: one pod gone, its claim still allocated
    assert re.match(
        r"^\| 3 \| 21 \| 20 \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| 1 \|", rows[1]
    ), rows[1]
    live = lines_after(
        out,
        r"^\| nodes \| claims \| live cycles \| observe CPU ms / cycle \| plan CPU ms / cycle \|$",
    )
    assert re.match(r"^\| 3 \| 21 \| 3 \| [\d.]+ \| [\d.]+ \|$", live[1]), live[1]


def test_cycles_smoke():
    out = smoke("cycles.py")
    rows = lines_after(
        out,
        r"^\s*clusters\s+cycles\s+crashes\s+over-commits\s+oscillations\s+non-converged"
        r"\s+eviction-rules\s+preempt-prio\s+order\s+seconds$",
    )
    assert rows[0].split()[:2] == ["10", "10"], rows[0]  # 10 clusters of 10 cycles


@pytest.mark.trace
def test_sim_openb_smoke(tmp_path):
    need_openb()
    from reconciler.plan.placement import POLICIES

    out = smoke("sim_openb.py", "--out", str(tmp_path))
    rows = lines_after(out, r"^GPU allocation \(%\) at 130% arrived load")
    assert rows[0].split() == ["policy", "default", "gpushare100", "multigpu50"], rows[0]
    assert [r.split()[0] for r in rows[2 : 2 + len(POLICIES)]] == list(POLICIES)
    timeline = lines_after(out, r"^setup\s+seed\s+GPUs\s+time-wtd alloc %")
    assert [r.split()[0] for r in timeline[1:3]] == ["static-bestfit", "unified-ours"]
    assert {p.name for p in tmp_path.iterdir()} == {"sim_openb.json", "sim_timeline.json"}


@pytest.mark.trace
def test_twin_smoke():
    need(
        SHARED / "inference-load" / "azure_llm_2024_coding_10s.csv", SHARED / "openb" / DEFAULT_PODS
    )
    out = smoke("twin.py")
    rows = lines_after(out, r"^run\s+infer cards\s+useful\s+alloc")
    assert [r.split()[0] for r in rows[1:5]] == [
        "unified",
        "unified-forecast",
        "static-24",
        "static-40",
    ], rows[:5]
    summary = lines_after(out, r"^## summary")
    assert summary[0].split()[:3] == ["f", "load", "rate_x"], summary[0]


@pytest.mark.trace
def test_twin_proportional_smoke():
    """The proportional scale modes' flags reach the ScalingPolicy (a bad one would not load)."""
    need(
        SHARED / "inference-load" / "azure_llm_2024_coding_10s.csv", SHARED / "openb" / DEFAULT_PODS
    )
    out = smoke(
        "twin.py",
        "--sizes",
        "none",
        "--forecast",
        "off",
        "--up-mode",
        "proportional",
        "--max-step",
        "8",
        "--down-mode",
        "proportional",
        "--down-max-step",
        "4",
        "--max-migrations",
        "2",
        "--idle",
    )
    rows = lines_after(out, r"^run\s+infer cards\s+useful\s+alloc")
    assert rows[1].split()[0] == "unified", rows[:3]
    idle = lines_after(out, r"^run\s+day\s+finished\s+dry\s+fits\s+fragmented\s+short")
    assert idle[1].split()[0] == "unified" and idle[2].split()[:2] == ["unified", "all"], idle


@pytest.mark.trace
def test_twin_frontier_smoke():
    need(SHARED / "inference-load" / "azure_llm_2024_coding_10s.csv")
    out = smoke("twin.py", "--frontier")
    rows = lines_after(out, r"^model\s+headroom\s+SLO\s+held beyond need")
    assert [r.split()[0] for r in rows[1:11]] == ["oracle"] * 5 + ["trailing"] * 5, rows


def kcp_binary() -> Path:
    from tests.cluster.controlplane import BuildUnavailable, build_binary

    try:
        return build_binary()
    except BuildUnavailable as e:
        pytest.skip(f"no kcp control-plane binary and no Go toolchain to build it: {e}")


@pytest.mark.kube
@pytest.mark.trace
@pytest.mark.parametrize(
    ("args", "runs"),
    [
        pytest.param(
            (),
            ["default", "binpack", "gpupool", "dra-scheduler", "dra-gpupool"],
            id="in-process",
        ),
        # the controller in a process of its own, as in the 200-node target run; gpupool's run
        # alone (the default run is the same code as above)
        pytest.param(
            ("--controller-process", "--runs", "gpupool"), ["gpupool"], id="controller-process"
        ),
    ],
)
def test_admission_openb_smoke(args, runs):
    need_openb()
    binary = kcp_binary()
    out = smoke("admission_openb.py", *args, timeout=420, env={"KCP_BINARY": str(binary)})
    head = r"^\| \| " + " ".join(rf"{re.escape(r)} \|" for r in [*runs, "sim ours", "sim random"])
    rows = lines_after(out, head + "$")
    assert rows[1].startswith("| GPU allocation, time-weighted mean | "), rows[1]
    # the replayed runs' allocation from the watch's times too (the simulator's: none)
    watched = (
        r"^\|   the same from the watch's times \(no sampling\) \|( \d+\.\d{3}% \|)+ – \| – \|$"
    )
    assert re.match(watched, rows[2]), rows[2]
    assert re.search(r"^gpupool: \d+ cycles, p50 ", out, re.M), "no cycle statistics"
    share = r"^\| admitted pods whose allocated devices are the planned ones \|.* (\d+) of \1 "
    if "dra-gpupool" in runs:  # exact admission: every allocated claim is the plan's
        assert re.search(share, out, re.M), "DRA: allocations not the plan's"
        # the dynamic-MIG runs (all runs by default), in a table of their own: the fractional
        # pods as MIG partitions, each admitted one on exactly its planned partition (placement)
        rows = lines_after(out, r"^\| \| dra-dynmig-scheduler \| dra-dynmig-gpupool \|$")
        assert any(r.startswith("|   MIG-partition pods never started") for r in rows), rows
        (exact,) = [r for r in rows if r.startswith("| admitted pods whose allocated")]
        assert re.search(share, exact), f"dynamic MIG: allocations not the plan's: {exact}"


@pytest.mark.kube
def test_reaction_smoke():
    """The reaction benchmark (issue 28): 4 nodes, the free and preempt cases, 2 trials each,
    on the real control plane with the controller's real loop."""
    binary = kcp_binary()
    out = smoke("reaction.py", timeout=300, env={"KCP_BINARY": str(binary)})
    rows = lines_after(out, r"^\| nodes \| case \| trials \| bound \| decision p50 / p99 s \|")
    assert [r.split("|")[2].strip() for r in rows[1:3]] == ["free", "preempt"], rows[:3]


def test_hostile_object_smoke():
    out = smoke("hostile_object.py")
    rows = lines_after(
        out,
        r"^\| nodes \| hostile object \| plan s without \| plan s with \| ratio \| read s "
        r"\| unreadable \|$",
    )
    assert rows[0].startswith("|---:|")
    kinds = [
        "job-parallelism",
        "shared-slices",
        "gpu-capacity",
        "agent-gpu-list",
        "time-year-1",
        "signal-nan",
    ]
    for row, kind in zip(rows[1 : 1 + len(kinds)], kinds, strict=True):
        # every kind planned (no "stopped", no "failed") and left one unreadable entry
        assert re.match(
            rf"^\| 16 \| `{kind}`: .* \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| 1 \|$", row
        ), row


def test_policy_load_smoke():
    out = smoke("policy_load.py")
    rows = lines_after(out, r"^\| policies \| files \| KB \| load ms .* \| memo ms .* \|$")
    assert re.match(r"^\| example \+ 10 teams \| \d+ \| [\d,]+ \| [\d,.]+ \| [\d.]+ \|$", rows[1])


def test_observe_lists_smoke():
    out = smoke("observe_lists.py")
    rows = lines_after(out, r"^\| RTT ms \| lists \| one at a time, ms \| at once, ms \|$")
    for row, rtt in zip(rows[1:3], ("0", "2"), strict=True):
        assert re.match(rf"^\| {rtt} \| \d+ \| [\d.]+ \| [\d.]+ \|$", row), row


def test_observe_nodes_smoke():
    out = smoke("observe_nodes.py")
    rows = lines_after(out, r"^\| nodes \| step \| ms per cycle \|$")
    steps = [
        "list, decode",
        "cache, read",
        "convert, every node",
        "convert, memo, none changed",
        "convert, memo, 1% changed",
    ]
    for row, step in zip(rows[1 : 1 + len(steps)], steps, strict=True):
        assert re.match(rf"^\| 16 \| {re.escape(step)} \| [\d.]+ \|$", row), row
    assert re.search(r"^16 nodes: before [\d.]+ ms, after [\d.]+ ms per cycle$", out, re.M), out


@pytest.mark.kube
def test_soak_smoke():
    """bench/soak.py --smoke: two `gpupool reconcile` processes through the fault proxy under a
    node failure, two failovers, an API server restart and proxy faults. The safety invariants
    are asserted (no card over-committed, no action done twice); lost actions and gangs stopped
    whole are figures of the run (gang-aware recovery is issue 29's items 1-4)."""
    binary = kcp_binary()
    out = smoke("soak.py", timeout=300, env={"KCP_BINARY": str(binary)})
    rows = dict(
        (cells[1].strip(), cells[2].strip())
        for cells in (r.split("|") for r in lines_after(out, r"^\| soak \| \|$")[1:])
        if len(cells) == 4
    )
    assert rows["over-committed cards (polls)"] == "0", out[-3000:]
    assert rows["kubelet refused (devices busy)"] == "0", out[-3000:]
    assert rows["actions done twice"] == "0 admissions, 0 evictions", out[-3000:]
    for row in ("actions lost", "cycles", "cycle time p50 / p95 / p99", "RSS, replica a"):
        assert row in rows, (row, out[-3000:])
    assert re.search(r"^\| gangs stopped whole on a loss \| \d+ of \d+ \|$", out, re.M), out


def test_observe_pods_smoke():
    out = smoke("observe_pods.py")
    rows = lines_after(out, r"^\| nodes \| pods \| step \| CPU ms per cycle \|$")
    steps = [
        "convert, every pod",
        "convert, memo, none changed",
        "convert, memo, 1 pod changed",
    ]
    for row, step in zip(rows[1 : 1 + len(steps)], steps, strict=True):
        assert re.match(rf"^\| 16 \| \d+ \| {re.escape(step)} \| [\d.]+ \|$", row), row
    assert re.search(r"16 nodes: .* (\d+) workloads the same objects", out), out
    assert re.search(r"^CPU [\d.]+ s .*load average", out, re.M), out
