"""Load-time checks of snapshot files, the Kubernetes adapter's normalisation, and `--now`.

A snapshot file that breaks a load-time check is bad input: every problem is named with file,
line and field (the line of the offending item, not of its parent), `gpupool plan` exits 1 and
changes nothing. What a live cluster can publish never breaks them: the adapter normalises it
or leaves the broken card out, so a snapshot dumped from it always loads again.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from reconciler import conventions as C
from reconciler.cli import main
from reconciler.observe import kube
from reconciler.observe.builders import gpu, node, snapshot
from reconciler.observe.model import (
    Allocation,
    Gpu,
    MigInstance,
    Node,
    ObservedState,
    card_problems,
    snapshot_problems,
)
from reconciler.observe.snapshot import InvalidSnapshot, dump_snapshot, parse_snapshot
from reconciler.policy.catalog import default_catalog

HEAD = "kind: ObservedState\nobservedAt: 2026-12-02T00:00:00Z\n"  # lines 1-2
A100 = "labels: {nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB}"
NOW = datetime(2026, 12, 2, tzinfo=UTC)


def problems(text: str) -> list:
    with pytest.raises(InvalidSnapshot) as err:
        parse_snapshot(text, "snap.yaml")
    assert all(p.file == "snap.yaml" for p in err.value.problems)
    return err.value.problems


def at(text: str, path: str):
    """The one problem reported for `path`."""
    found = [p for p in problems(text) if p.path == path]
    assert len(found) == 1, [str(p) for p in problems(text)]
    return found[0]


# --------------------------------------------------------------------------- times


WORKLOAD = """\
workloads:
  - namespace: a
    name: job
    request: {gpus: 1}
    node: n1
    createdAt: 2026-12-01T00:00:00Z
    startedAt: 2026-12-01T00:00:00Z
    lastCheckpointAt: 2026-12-01T00:00:00Z
"""  # lines 3-10


@pytest.mark.parametrize(
    ("text", "line", "path"),
    [
        ("kind: ObservedState\nobservedAt: 2026-12-02T00:00:00\n", 2, "observedAt"),
        (
            HEAD + "nodes:\n  - name: n1\n    gpus:\n      - index: 0\n"
            "        idleSince: 2026-12-01T23:00:00\n",
            7,
            "nodes[0].gpus[0].idleSince",
        ),
        (
            HEAD + WORKLOAD.replace("createdAt: 2026-12-01T00:00:00Z", "createdAt: 2026-12-01"),
            8,
            "workloads[0].createdAt",
        ),
        (
            HEAD
            + WORKLOAD.replace("startedAt: 2026-12-01T00:00:00Z", "startedAt: 2026-12-01 10:00"),
            9,
            "workloads[0].startedAt",
        ),
        (
            HEAD
            + WORKLOAD.replace(
                "lastCheckpointAt: 2026-12-01T00:00:00Z", "lastCheckpointAt: 2026-12-01T00:00:00"
            ),
            10,
            "workloads[0].lastCheckpointAt",
        ),
        (
            HEAD + "services:\n  - namespace: a\n    name: s\n    replicas: 1\n"
            "    replicaRequest: {gpus: 1}\n    lastScaleAt: 2026-12-01T00:00:00\n",
            8,
            "services[0].lastScaleAt",
        ),
        (
            HEAD + "recentPreemptions:\n  - 2026-12-01T23:00:00Z\n  - 2026-12-01T23:30:00\n",
            5,
            "recentPreemptions[1]",
        ),
    ],
)
def test_a_time_without_timezone_is_named_by_line_and_field(text, line, path):
    p = at(text, path)
    assert p.line == line
    assert "no timezone" in p.message


def test_times_with_an_offset_load():
    obs = parse_snapshot(
        "kind: ObservedState\nobservedAt: 2026-12-02T02:00:00+02:00\n"
        "recentPreemptions:\n  - 2026-12-01T23:00:00Z\n"
    )
    assert obs.observed_at == NOW


# --------------------------------------------------------------------------- signals

SERVICE = HEAD + (
    "services:\n  - namespace: a\n    name: s\n    replicas: 1\n    replicaRequest: {gpus: 1}\n"
)  # the service's last line is 7


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("queueLength", "-4", "greater than or equal to 0"),
        ("pendingSecondsP99", "-0.5", "greater than or equal to 0"),
        ("queueLength", ".nan", "finite"),
        ("queueLength", ".inf", "finite"),
    ],
)
def test_demand_signals_are_finite_and_not_negative(field, value, fragment):
    p = at(SERVICE + f"    {field}: {value}\n", f"services[0].{field}")
    assert p.line == 8 and fragment in p.message


def test_allocations_are_within_a_card():
    text = (
        HEAD
        + WORKLOAD
        + "    allocations:\n      - {gpu: 0, slices: -1}\n      - {gpu: 1, migStart: 8}\n"
    )
    found = {p.path: p.line for p in problems(text)}
    assert found == {
        "workloads[0].allocations[0].slices": 12,
        "workloads[0].allocations[1].migStart": 13,
    }


# --------------------------------------------------------------------------- items that collide


def test_duplicate_gpu_index_points_at_the_second_card():
    text = HEAD + (
        "nodes:\n"
        "  - name: n1\n"
        "    gpus:\n"
        "      - index: 0\n"
        "      - index: 1\n"
        "      - index: 0\n"  # line 8
    )
    p = at(text, "nodes[0].gpus[2].index")
    assert p.line == 8 and "GPU index 0 is listed twice" in p.message and "gpus[0]" in p.message


def test_duplicate_node_and_workload_names_point_at_the_repeat():
    text = HEAD + (
        "nodes:\n"
        "  - name: n1\n"
        "  - name: n2\n"
        "  - name: n1\n"  # line 6
        "workloads:\n"
        "  - {namespace: a, name: job, request: {gpus: 1}}\n"
        "  - {namespace: b, name: job, request: {gpus: 1}}\n"
        "  - namespace: a\n"  # line 10
        "    name: job\n"  # line 11
        "    request: {gpus: 2}\n"
    )
    found = {(p.path, p.line) for p in problems(text)}
    assert found == {("nodes[2].name", 6), ("workloads[2].name", 11)}


def mig_card(enabled: str, second: str, start: int) -> str:
    return HEAD + (
        "nodes:\n"
        "  - name: n1\n"
        f"    {A100}\n"
        "    gpus:\n"
        "      - index: 0\n"
        f"        migEnabled: {enabled}\n"
        "        migInstances:\n"  # line 9
        "          - {profile: 3g.40gb, start: 0}\n"  # line 10
        f"          - {{profile: {second}, start: {start}}}\n"  # line 11
    )


def test_two_mig_instances_at_one_start():
    p = at(
        mig_card(enabled="true", second="1g.10gb", start=0),
        "nodes[0].gpus[0].migInstances[1].start",
    )
    assert p.line == 11 and "two MIG instances start at slice 0" in p.message


def test_overlapping_mig_placements_by_the_catalogs_sizes():
    # 3g.40gb takes memory slices 0-3 on an A100-80GB, so 2g.20gb cannot start at 2
    p = at(
        mig_card(enabled="true", second="2g.20gb", start=2),
        "nodes[0].gpus[0].migInstances[1].start",
    )
    assert p.line == 11
    assert "2g.20gb at slice 2 overlaps 3g.40gb at slice 0" in p.message


def test_placements_that_fit_load():
    obs = parse_snapshot(mig_card(enabled="true", second="2g.20gb", start=4))
    assert [i.start for i in obs.nodes[0].gpus[0].mig_instances] == [0, 4]


def test_mig_instances_on_a_card_without_mig():
    p = at(mig_card(enabled="false", second="2g.20gb", start=4), "nodes[0].gpus[0].migInstances")
    assert p.line == 9 and "migEnabled is false" in p.message


def test_every_problem_is_reported_not_only_the_first():
    text = mig_card(enabled="true", second="2g.20gb", start=2) + "      - index: 0\n"
    paths = {p.path for p in problems(text)}
    assert paths == {"nodes[0].gpus[0].migInstances[1].start", "nodes[0].gpus[1].index"}


def test_the_cards_own_model_decides_the_sizes():
    """Without a product label, the card's model names the sizes; an unknown model leaves only
    the start comparable (no size is guessed)."""
    unknown = Gpu(
        index=0,
        model="Mystery-GPU",
        mig_enabled=True,
        mig_instances=[
            MigInstance(profile="3g.40gb", start=0),
            MigInstance(profile="2g.20gb", start=2),
        ],
    )
    assert card_problems(unknown, None) == []
    known = unknown.model_copy(update={"model": "A100-SXM4-80GB"})
    with pytest.raises(ValueError, match="overlaps"):
        ObservedState(observed_at=NOW, nodes=[Node(name="n", gpus=[known])])


@pytest.mark.parametrize("model", sorted(default_catalog().models))
def test_no_layout_the_catalog_places_is_refused(model):
    """Every single-profile fill and every policy-style mix the catalog can place loads."""
    cat = default_catalog()
    m = cat.model(model)
    layouts = [[p] * m.profiles[p].max_count for p in m.profiles]
    layouts += [[a, b] for a in m.profiles for b in m.profiles]
    checked = 0
    for profiles in layouts:
        placed = cat.place(m, profiles)
        if placed is None:
            continue
        g = Gpu(
            index=0,
            model=model,
            mig_enabled=True,
            mig_instances=[MigInstance(profile=p, start=s) for p, s in placed],
        )
        assert card_problems(g, m) == [], (profiles, placed)
        checked += 1
    assert checked or not m.profiles


def test_examples_and_builders_pass_every_check():
    from reconciler.observe.snapshot import load_snapshot

    obs = load_snapshot("examples/observed.yaml")
    assert snapshot_problems(obs) == []
    built = snapshot(NOW, [node("n1", "a100", "A100-SXM4-80GB", [gpu(0, mig=["3g.40gb"] * 2)])])
    assert snapshot_problems(built) == []


def test_plan_with_a_colliding_snapshot_exits_1_without_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text(mig_card(enabled="true", second="2g.20gb", start=2))
    assert main(["plan", "pools", "policies", "--observed", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:11:" in err and "overlaps" in err and "Traceback" not in err
    assert "nothing was changed" in err


# --------------------------------------------------------------------------- --now


def test_now_without_timezone_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "pools", "policies", "--now", "2026-12-02T06:00:00"])
    assert exit_.value.code == 1  # a usage error: 2 is plan --detailed-exitcode's
    err = capsys.readouterr().err
    assert "--now" in err and "has no timezone" in err and "Traceback" not in err


def test_now_that_is_not_a_time_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", "pools", "policies", "--now", "tomorrow"])
    assert exit_.value.code == 1  # a usage error: 2 is plan --detailed-exitcode's
    assert "not an ISO 8601 time" in capsys.readouterr().err


def test_now_with_timezone_plans(capsys):
    assert main(["plan", "pools", "policies", "--now", "2026-12-02T08:00:00+02:00"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_now_without_timezone_exits_1_from_the_command_line():
    done = subprocess.run(
        [sys.executable, "-m", "reconciler.cli", "plan", "--now", "2026-12-02"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert "has no timezone" in done.stderr and "Traceback" not in done.stderr


# --------------------------------------------------------------------------- the adapter


def _k8s_node(name: str, labels: dict | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        metadata=SimpleNamespace(name=name, labels=labels or {}, annotations={}),
        status=SimpleNamespace(
            conditions=[SimpleNamespace(type="Ready", status="True")],
            capacity={},
            allocatable={},
        ),
        spec=SimpleNamespace(unschedulable=False, taints=[]),
    )


def test_adapter_leaves_out_what_a_snapshot_would_refuse():
    """A GpuNodeState written by anything (an old agent, a person) cannot crash observation:
    a naive idle time is read as UTC, an entry that does not validate, every copy of a
    repeated index and a card with colliding MIG instances are left out."""
    published = {
        "status": {
            "gpus": [
                {"index": 0, "idleSince": "2026-12-01T23:00:00"},
                {"index": 1, "utilization": 140},
                "not a card",
                {"index": 2},
                {"index": 2, "uuid": "GPU-other"},
                {
                    "index": 3,
                    "migEnabled": True,
                    "migInstances": [
                        {"profile": "3g.40gb", "start": 0},
                        {"profile": "2g.20gb", "start": 2},
                    ],
                },
                {"index": 4, "migInstances": [{"profile": "1g.10gb", "start": 0}]},
                {
                    "index": 5,
                    "migEnabled": True,
                    "migInstances": [{"profile": "3g.40gb", "start": 4}],
                },
            ]
        }
    }
    n = kube._node(_k8s_node("n1", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}), published)
    assert [g.index for g in n.gpus] == [0, 5]
    assert n.gpus[0].idle_since == datetime(2026, 12, 1, 23, tzinfo=UTC)
    state = ObservedState(observed_at=NOW, nodes=[n])
    assert parse_snapshot(dump_snapshot(state)) == state


def test_adapter_reads_bad_signals_as_absent():
    assert kube._float("-3") is None
    assert kube._float("nan") is None
    assert kube._float("inf") is None
    assert kube._float("lots") is None
    assert kube._float("0") == 0.0
    assert kube._float("12.5") == 12.5


def _published(*gpus: dict) -> dict:
    return {"status": {"gpus": list(gpus)}}


MIG0 = {"index": 0, "migEnabled": True, "migInstances": [{"profile": "7g.80gb", "start": 0}]}


@pytest.mark.parametrize(
    ("allocatable", "published", "slices"),
    [
        # every card out of MIG mode shares the node's slices: 12 over cards 1..3
        ({"nvidia.com/gpu.shared": "12"}, (MIG0, {"index": 1}, {"index": 2}, {"index": 3}),
         [None, 4, 4, 4]),
        ({"nvidia.com/gpu": "2"}, ({"index": 0}, {"index": 1}), [None, None]),  # not shared
        ({"nvidia.com/gpu.shared": "0", "nvidia.com/gpu": "2"}, ({"index": 0}, {"index": 1}),
         [None, None]),
        # a remainder (a card's slices not yet advertised): floored, logged
        ({"nvidia.com/gpu.shared": "7"}, ({"index": 0}, {"index": 1}), [3, 3]),
        # fewer slices than cards: floor 0, not shared
        ({"nvidia.com/gpu.shared": "1"}, ({"index": 0}, {"index": 1}), [None, None]),
        # slices but every card in MIG mode: left unshared, logged
        ({"nvidia.com/gpu.shared": "4"}, (MIG0,), [None]),
        ({"nvidia.com/gpu.shared": "lots"}, ({"index": 0},), [None]),  # unreadable
    ],
)  # fmt: skip
def test_adapter_reads_shared_slices_from_allocatable(allocatable, published, slices):
    """The device plugin shares every card of the node not in MIG mode the same way and
    advertises them as `nvidia.com/gpu.shared`: the node's allocatable is the truth."""
    k8s = _k8s_node("n1")
    k8s.status.allocatable = allocatable
    n = kube._node(k8s, _published(*published))
    assert [g.shared_slices for g in n.gpus] == slices
    assert [g.mode for g in n.gpus] == [
        "mig" if g.get("migEnabled") else ("shared" if k else "whole")
        for g, k in zip(published, slices, strict=True)
    ]


def test_adapter_ignores_the_old_shared_slices_annotation():
    """gpupool wrote `gpupool.io/shared-slices` before the device plugin's allocatable was read;
    a node that still carries it is judged by its allocatable alone."""
    k8s = _k8s_node("n1")
    k8s.metadata.annotations = {"gpupool.io/shared-slices": '{"0": 4}'}
    k8s.status.allocatable = {"nvidia.com/gpu": "2"}
    n = kube._node(k8s, _published({"index": 0}, {"index": 1}))
    assert [g.shared_slices for g in n.gpus] == [None, None]


@pytest.mark.parametrize("annotation", ["a,b", "0:9", "1/-2", "0:x"])
def test_adapter_ignores_an_unreadable_gpus_annotation(annotation):
    agent = {
        "manager": C.AGENT_FIELD_MANAGER,
        "fieldsV1": {"f:metadata": {"f:annotations": {"f:gpupool.io/gpus": {}}}},
    }
    pod = SimpleNamespace(
        metadata=SimpleNamespace(
            namespace="a",
            name="p",
            annotations={"gpupool.io/gpus": annotation},
            managed_fields=[agent],
        ),
        spec=SimpleNamespace(node_name="n1"),
    )
    assert kube._known_allocations(pod, None) is None
    good = SimpleNamespace(
        metadata=SimpleNamespace(
            namespace="a",
            name="p",
            annotations={"gpupool.io/gpus": "0,2:4"},
            managed_fields=[agent],  # the node agent wrote it: believed
        ),
        spec=SimpleNamespace(node_name="n1"),
    )
    assert kube._known_allocations(good, None) == [
        Allocation(gpu=0),
        Allocation(gpu=2, mig_start=4),
    ]


def test_adapter_times_without_timezone_are_utc():
    assert kube._ts("2026-12-01T23:00:00") == datetime(2026, 12, 1, 23, tzinfo=UTC)
    assert kube._ts(datetime(2026, 12, 1, 23)) == datetime(2026, 12, 1, 23, tzinfo=UTC)
    assert kube._ts("2026-12-01T23:00:00Z") == datetime(2026, 12, 1, 23, tzinfo=UTC)


def _k8s_pod(annotations: dict) -> SimpleNamespace:
    res = SimpleNamespace(limits={"nvidia.com/gpu.shared": "2"}, requests=None)
    return SimpleNamespace(
        metadata=SimpleNamespace(annotations=annotations, namespace="ns", name="p"),
        spec=SimpleNamespace(containers=[SimpleNamespace(resources=res)]),
    )


@pytest.mark.parametrize(
    ("annotations", "mib"),
    [({}, 0), ({"gpupool.io/gpu-memory": "20Gi"}, 20480), ({"gpupool.io/gpu-memory": "x"}, 0)],
)
def test_a_pod_declares_its_gpu_memory_by_annotation(annotations, mib):
    r = kube.pod_request(_k8s_pod(annotations))
    assert (r.shared_slices, r.gpu_memory_mib) == (2, mib)
