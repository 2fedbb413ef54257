"""CSV reader errors, the simulate CLI, and small end-to-end runs on the real trace."""

from __future__ import annotations

import csv
import json
import random

import pytest

from reconciler.cli import main
from reconciler.sim.replay import replay, tune_workload
from reconciler.sim.trace import Pod, TraceError, read_nodes, read_pods

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,G2\nn1,32000,131072,1,T4\n"
PODS = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"
    "p0,4000,1024,1,500,,LS\n"
    "p1,4000,1024,1,1000,G2|T4,BE\n"
    "p2,8000,1024,0,0,,BE\n"
)


@pytest.fixture
def files(tmp_path):
    n, p = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    n.write_text(NODES)
    p.write_text(PODS)
    return n, p


def test_reads_small_trace(files):
    nodes, pods = read_nodes(files[0]), read_pods(files[1])
    assert [n.gpus for n in nodes] == [2, 1]
    assert pods[1].req.gpu_models == frozenset({"G2", "T4"})
    assert pods[0].req.sharing and pods[0].qos == "LS"
    assert pods[2].req.num_gpu == 0


@pytest.mark.parametrize(
    "content, message",
    [
        ("sn,cpu_milli,memory_mib,gpu\nn0,1,1,1\n", "missing column(s) model"),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nn0,abc,1,1,G2\n",
            ":2: column cpu_milli: 'abc' is not a number",
        ),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,1,G2\nn0,1,1,1,G2\n", ":3: duplicate node n0"),
        ("sn,cpu_milli,memory_mib,gpu,model\nn0,-5,1,1,G2\n", "out of range"),
        ("", "empty file"),
    ],
)
def test_node_errors_name_file_and_line(tmp_path, content, message):
    f = tmp_path / "bad.csv"
    f.write_text(content)
    with pytest.raises(TraceError) as e:
        read_nodes(f)
    assert str(f) in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(
    "row, message",
    [
        ("p,1,1,1,1500", "gpu_milli: 1500 out of range"),
        ("p,1,1,2,500", "must take whole GPUs"),
        ("p,1,1,1,0", "gpu_milli is 0"),
        ("p,1,1,x,0", "num_gpu: 'x' is not a number"),
    ],
)
def test_pod_errors(tmp_path, row, message):
    f = tmp_path / "pods.csv"
    f.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + row + "\n")
    with pytest.raises(TraceError, match=message):
        read_pods(f)


def test_missing_file_is_one_line_error(capsys, tmp_path):
    rc = main(
        ["simulate", "--nodes", str(tmp_path / "none.csv"), "--pods", str(tmp_path / "none.csv")]
    )
    err = capsys.readouterr().err
    assert rc == 1 and "none.csv: file not found" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_bad_column_names_file(capsys, files, tmp_path):
    bad = tmp_path / "pods2.csv"
    bad.write_text("name,cpu,memory_mib,num_gpu,gpu_milli\np,1,1,1,100\n")
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(bad)])
    err = capsys.readouterr().err
    assert rc == 1 and "pods2.csv:1: missing column(s) cpu_milli" in err


def test_unknown_policy_and_bad_seed(capsys, files):
    assert (
        main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--policy", "x"]) == 1
    )
    assert main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--seed", "a"]) == 1


def test_cli_json_shape(capsys, files):
    rc = main(
        [
            "simulate",
            "--nodes",
            str(files[0]),
            "--pods",
            str(files[1]),
            "--policy",
            "bestfit,fgd",
            "--seed",
            "1,2",
            "--format",
            "json",
        ]
    )
    assert rc == 0
    records = json.loads(capsys.readouterr().out)
    assert [(r["policy"], r["seed"]) for r in records] == [
        ("bestfit", 1),
        ("bestfit", 2),
        ("fgd", 1),
        ("fgd", 2),
    ]
    for r in records:
        assert r["total_gpus"] == 3
        assert 0 <= r["gpu_allocation_ratio"] <= 1
        assert 0 <= r["fragmentation_rate"] <= 1
        assert isinstance(r["unscheduled_pods"], int)
        assert len(r["allocation_curve"]) == 131


def test_cli_text_and_plot(capsys, files, tmp_path):
    png = tmp_path / "out.png"
    rc = main(["simulate", "--nodes", str(files[0]), "--pods", str(files[1]), "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0 and "alloc %" in out and "ours" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_tuning_hits_target_and_keeps_originals(files):
    pods = read_pods(files[1])
    out = tune_workload(pods, 3000, 1.3, random.Random(1))
    demand = sum(p.req.total_gpu_milli for p in out)
    assert demand <= 3900 and {p.name for p in pods} <= {p.name for p in out}
    down = tune_workload(pods, 3000, 0.2, random.Random(1))
    assert sum(p.req.total_gpu_milli for p in down) <= 600


def test_replay_counts(files):
    nodes, pods = read_nodes(files[0]), read_pods(files[1])
    r = replay(nodes, pods, "bestfit", 1, inflation=0)
    assert r.gpu_allocation_ratio == pytest.approx(1500 / 3000)
    assert r.unscheduled_pods == 0 and r.pods == 3


# ------------------------------------------------------------------ real trace


def slice_trace(openb, tmp_path, every=8):
    """Every `every`-th node and pod of the default trace."""
    out = []
    for name in ("openb_node_list_gpu_node.csv", "openb_pod_list_default.csv"):
        with open(openb / name, newline="") as f:
            rows = list(csv.reader(f))
        dst = tmp_path / name
        with open(dst, "w", newline="") as f:
            csv.writer(f).writerows([rows[0], *rows[1::every]])
        out.append(dst)
    return out


@pytest.mark.trace
def test_end_to_end_slice(openb, tmp_path):
    nodes, pods = (
        read_nodes(p) if i == 0 else read_pods(p)
        for i, p in enumerate(slice_trace(openb, tmp_path))
    )
    res = {p: replay(nodes, pods, p, 42) for p in ("random", "bestfit", "fgd", "ours")}
    for r in res.values():
        assert 0.5 < r.gpu_allocation_ratio <= 1
        assert 1.2 < r.arrived_gpu_ratio <= 1.3
    assert res["fgd"].gpu_allocation_ratio > res["random"].gpu_allocation_ratio
    assert res["ours"].gpu_allocation_ratio >= res["fgd"].gpu_allocation_ratio - 0.01


@pytest.mark.trace
def test_timeline_slice(openb):
    from reconciler.sim.timeline import timeline

    nodes = read_nodes(openb / "openb_node_list_gpu_node.csv")
    pods: list[Pod] = read_pods(openb / "openb_pod_list_default.csv")[::4]
    static, unified = timeline(nodes, pods, seed=42)
    assert static["policy"] == "static-bestfit" and unified["policy"].startswith("unified-")
    assert unified["gpu_allocation_ratio"] >= static["gpu_allocation_ratio"]
    assert static["preemptions"] == 0
