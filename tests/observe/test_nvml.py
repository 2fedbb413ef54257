"""The NVML adapter against the pynvml fake, and the fake against the MIG rules."""

from __future__ import annotations

import ctypes
from datetime import UTC, datetime, timedelta

import pynvml
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.observe.agent import collect_node
from reconciler.observe.model import MigInstance
from reconciler.observe.nvml import READ_CALLS, NvmlReader, NvmlReadError, read_gpus
from reconciler.policy.catalog import default_catalog
from tests.fakes.fake_pynvml import (
    MUTATING_CALLS,
    PROFILE_IDS,
    FakeGpu,
    FakeInstance,
    FakeNvml,
    FakeProcess,
)

CAT = default_catalog()
MIG_MODELS = ["A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "H200-SXM5-141GB"]
ALL_MODELS = [*MIG_MODELS, "L40S-48GB"]

# Layouts by NVML profile index (0: 1g, 1: 2g, 2: 3g, 3: 4g, 4: 7g, 7: 1g+me, 9: 1g 2-slice),
# so one table serves every model whatever its profile names.
LAYOUTS = {
    "full": [4],
    "balanced": [2, 1, 0, 0],
    "seven-1g": [0] * 7,
    "4g+3g": [3, 2],
    "two-3g": [2, 2],
    "four-1g-2slice": [9, 9, 9, 9],
    "me+mixed": [7, 0, 1, 2],
    "3-2-1-1": [2, 1, 0, 0],
}


def names(model: str, indices: list[int]) -> list[str]:
    by_index = {p.nvml_index: p.name for p in CAT.models[model].profiles.values()}
    return [by_index[i] for i in indices]


def profile(model: str, index: int):
    return next(p for p in CAT.models[model].profiles.values() if p.nvml_index == index)


def code_of(excinfo: pytest.ExceptionInfo) -> int:
    return excinfo.value.value


@pytest.fixture
def a100() -> FakeNvml:
    fake = FakeNvml([FakeGpu("A100-SXM4-80GB", mig=True)])
    fake.nvmlInit()
    return fake


def create(fake: FakeNvml, model: str, index: int, start: int, size: int | None = None):
    h = fake.nvmlDeviceGetHandleByIndex(0)
    p = profile(model, index)
    pl = pynvml.c_nvmlGpuInstancePlacement_t(start, p.memory_slices if size is None else size)
    return fake.nvmlDeviceCreateGpuInstanceWithPlacement(h, PROFILE_IDS[index], ctypes.byref(pl))


# --- the adapter ---------------------------------------------------------------------------


@pytest.mark.parametrize("model", ALL_MODELS)
def test_whole_card(model: str) -> None:
    fake = FakeNvml(
        [FakeGpu(model, utilization=37, processes=[(101, 2048), (102, 512)], numa_node=1)]
    )
    [gpu] = read_gpus(fake)
    m = CAT.models[model]
    assert gpu.model == model
    assert gpu.index == 0 and gpu.uuid.startswith("GPU-")
    assert gpu.memory_mib == m.memory_gib * 1024
    assert gpu.memory_used_mib == 2560
    assert gpu.utilization == 37
    assert gpu.numa_node == 1
    assert not gpu.mig_enabled and gpu.mig_instances == [] and gpu.mode == "whole"
    assert [(p.pid, p.used_memory_mib) for p in gpu.processes] == [(101, 2048), (102, 512)]


@pytest.mark.parametrize("model", MIG_MODELS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_mig_layouts(model: str, layout: str) -> None:
    placed = CAT.place(CAT.models[model], names(model, LAYOUTS[layout]))
    assert placed is not None
    fake = FakeNvml([FakeGpu(model, mig=True, instances=placed)])
    [gpu] = read_gpus(fake)
    assert gpu.mig_enabled and gpu.mode == "mig"
    assert [(m.profile, m.start) for m in gpu.mig_instances] == sorted(
        placed, key=lambda x: (x[1], x[0])
    )
    uuids = [m.uuid for m in gpu.mig_instances]
    assert all(u.startswith("MIG-") for u in uuids) and len(set(uuids)) == len(uuids)
    assert gpu.utilization == 0  # NOT_SUPPORTED on a MIG parent: the model default


def test_mig_enabled_without_instances_and_gi_without_compute_instance() -> None:
    fake = FakeNvml(
        [
            FakeGpu("H100-SXM5-80GB", mig=True),
            FakeGpu(
                "H100-SXM5-80GB",
                mig=True,
                instances=[FakeInstance("3g.40gb", 4, compute_instance=False)],
            ),
        ]
    )
    empty, bare = read_gpus(fake)
    assert empty.mig_enabled and empty.mig_instances == []
    assert bare.mig_instances == [MigInstance(profile="3g.40gb", start=4, uuid="")]


def test_mig_capable_but_disabled_reads_as_whole() -> None:
    [gpu] = read_gpus(FakeNvml([FakeGpu("A100-SXM4-40GB", utilization=90)]))
    assert not gpu.mig_enabled and gpu.utilization == 90


def test_processes_in_mig_instances_and_unavailable_memory() -> None:
    fake = FakeNvml(
        [
            FakeGpu(
                "A100-SXM4-40GB",
                mig=True,
                instances=[("3g.20gb", 0), ("3g.20gb", 4)],
                processes=[
                    FakeProcess(7, 4096, instance_start=4),
                    FakeProcess(8, None, instance_start=0),
                ],
                memory_used_mib=5000,
            )
        ]
    )
    [gpu] = read_gpus(fake)
    assert [(p.pid, p.used_memory_mib) for p in gpu.processes] == [(7, 4096), (8, 0)]
    assert gpu.memory_used_mib == 5000


def test_unknown_gpu_keeps_nvml_name_and_profile_names_from_nvml() -> None:
    fake = FakeNvml(
        [FakeGpu("H100-SXM5-80GB", name="NVIDIA H100 Future", mig=True, instances=[("4g.40gb", 0)])]
    )
    [gpu] = read_gpus(fake)
    assert gpu.model == "NVIDIA H100 Future"
    assert [(m.profile, m.start) for m in gpu.mig_instances] == [("4g.40gb", 0)]


def test_numa_not_supported_is_default() -> None:
    [gpu] = read_gpus(FakeNvml([FakeGpu("L40S-48GB", numa_node=None)]))
    assert gpu.numa_node == 0


def test_several_gpus_keep_their_index() -> None:
    fake = FakeNvml(
        [FakeGpu("L40S-48GB"), FakeGpu("H200-SXM5-141GB", mig=True, instances=[("7g.141gb", 0)])]
    )
    gpus = read_gpus(fake)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[1].mig_instances[0].profile == "7g.141gb"
    assert len({g.uuid for g in gpus}) == 2


@pytest.mark.parametrize(
    ("call", "code"),
    [
        ("nvmlDeviceGetMemoryInfo", pynvml.NVML_ERROR_GPU_IS_LOST),
        ("nvmlDeviceGetGpuInstances", pynvml.NVML_ERROR_NO_PERMISSION),
        ("nvmlDeviceGetMigMode", pynvml.NVML_ERROR_UNKNOWN),
        ("nvmlDeviceGetComputeRunningProcesses", pynvml.NVML_ERROR_NO_PERMISSION),
    ],
)
def test_other_nvml_errors_name_the_gpu_and_call(call: str, code: int) -> None:
    fake = FakeNvml(
        [
            FakeGpu("L40S-48GB"),
            FakeGpu("A100-SXM4-40GB", mig=True, instances=[("7g.40gb", 0)], failures={call: code}),
        ]
    )
    with pytest.raises(NvmlReadError) as err:
        read_gpus(fake)
    assert err.value.call == call and err.value.gpu == 1 and err.value.code == code
    assert f"NVML {call} on GPU 1 failed" in str(err.value)
    assert fake.called()[-1] == "nvmlShutdown" and fake._refcount == 0


def test_init_failure_is_an_adapter_error() -> None:
    fake = FakeNvml(
        [FakeGpu("L40S-48GB")], failures={"nvmlInit": pynvml.NVML_ERROR_DRIVER_NOT_LOADED}
    )
    with pytest.raises(NvmlReadError, match="nvmlInit failed") as err:
        read_gpus(fake)
    assert err.value.gpu is None and err.value.code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert "nvmlShutdown" not in fake.called()


def test_reader_is_reusable_within_one_init() -> None:
    fake = FakeNvml([FakeGpu("L40S-48GB")])
    with NvmlReader(fake) as r:
        assert r.gpu(0) == r.gpus()[0]
    assert fake.called().count("nvmlInit") == 1 == fake.called().count("nvmlShutdown")


def test_adapter_is_read_only() -> None:
    fake = FakeNvml(
        [
            FakeGpu(
                m,
                mig=m in MIG_MODELS,
                instances=CAT.place(CAT.models[m], names(m, [2, 1, 0])) if m in MIG_MODELS else (),
            )
            for m in ALL_MODELS
        ]
    )
    read_gpus(fake)
    called = set(fake.called())
    assert called <= READ_CALLS
    assert not called & MUTATING_CALLS
    assert not [
        c for c in called if any(w in c for w in ("Set", "Create", "Destroy", "Reset", "Clear"))
    ]
    # ...and the fake would have seen a mutation: it records those calls too.
    other = FakeNvml([FakeGpu("A100-SXM4-40GB", mig=True)])
    other.nvmlInit()
    create(other, "A100-SXM4-40GB", 0, 6)
    assert "nvmlDeviceCreateGpuInstanceWithPlacement" in other.called()


def test_adapter_defaults_to_real_pynvml_lazily() -> None:
    reader = NvmlReader()
    assert reader.nvml is pynvml


# --- the fake: MIG placement rules and NVML error codes ----------------------------------------


@pytest.mark.parametrize("model", MIG_MODELS)
def test_seven_1g_then_2slice_1g_fails(model: str) -> None:
    fake = FakeNvml([FakeGpu(model, mig=True)])
    fake.nvmlInit()
    for s in range(7):
        create(fake, model, 0, s)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create(fake, model, 9, 6)  # e.g. 1g.20gb on the 80 GB cards: slices 6-7, 6 taken
    with pytest.raises(pynvml.NVMLError_InsufficientResources) as exc:
        fake.nvmlDeviceCreateGpuInstance(fake.nvmlDeviceGetHandleByIndex(0), PROFILE_IDS[9])
    assert code_of(exc) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES


def test_4g_then_3g_at_4(a100: FakeNvml) -> None:
    create(a100, "A100-SXM4-80GB", 3, 0)
    create(a100, "A100-SXM4-80GB", 2, 4)
    assert a100.instances(0) == [("3g.40gb", 4), ("4g.40gb", 0)]


def test_3g_at_2_is_an_illegal_start(a100: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        create(a100, "A100-SXM4-80GB", 2, 2)
    assert a100.instances(0) == []


def test_wrong_placement_size_is_invalid(a100: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        create(a100, "A100-SXM4-80GB", 2, 0, size=2)


def test_second_me_instance_fails(a100: FakeNvml) -> None:
    create(a100, "A100-SXM4-80GB", 7, 0)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        create(a100, "A100-SXM4-80GB", 7, 3)


@pytest.mark.parametrize(
    ("steps", "legal"),
    [
        ([(4, 0), (0, 0)], False),  # 7g takes everything
        ([(1, 0), (0, 1)], False),  # 2g at 0-1, 1g at 1 overlaps
        ([(2, 0), (2, 4), (0, 6)], False),  # two 3g fill all 8 slices
        ([(3, 0), (3, 0)], False),  # 4g: max one
        ([(1, 0), (1, 2), (1, 4), (0, 6)], True),  # 3 x 2g + 1g
        ([(9, 0), (9, 2), (9, 4), (9, 6)], True),  # 4 x 2-slice 1g reach slice 7
        ([(2, 4), (1, 0), (0, 2), (0, 3)], True),  # 3-2-1-1, 3g first
    ],
)
def test_placement_rules_table(a100: FakeNvml, steps: list[tuple[int, int]], legal: bool) -> None:
    *head, last = steps
    for index, start in head:
        create(a100, "A100-SXM4-80GB", index, start)
    if legal:
        create(a100, "A100-SXM4-80GB", *last)
    else:
        with pytest.raises(pynvml.NVMLError_InsufficientResources):
            create(a100, "A100-SXM4-80GB", *last)


def test_declared_illegal_layout_is_rejected_like_the_api() -> None:
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        FakeNvml([FakeGpu("A100-SXM4-40GB", mig=True, instances=[("4g.20gb", 0), ("3g.20gb", 0)])])
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        FakeNvml([FakeGpu("A100-SXM4-40GB", mig=True, instances=[("3g.20gb", 2)])])
    with pytest.raises(pynvml.NVMLError_NotSupported):
        FakeNvml([FakeGpu("L40S-48GB", mig=True)])


def test_mig_calls_on_non_mig_gpu_are_not_supported() -> None:
    fake = FakeNvml([FakeGpu("L40S-48GB")])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    for call in (
        lambda: fake.nvmlDeviceGetMigMode(h),
        lambda: fake.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE),
        lambda: fake.nvmlDeviceGetGpuInstanceProfileInfo(h, 0),
        lambda: fake.nvmlDeviceCreateGpuInstance(h, 19),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    assert fake.nvmlDeviceGetMaxMigDeviceCount(h) == 0


def test_gpu_instance_calls_with_mig_disabled_are_not_supported() -> None:
    fake = FakeNvml([FakeGpu("H100-SXM5-80GB")])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    assert fake.nvmlDeviceGetMigMode(h) == [pynvml.NVML_DEVICE_MIG_DISABLE] * 2
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetGpuInstanceProfileInfo(h, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        create(fake, "H100-SXM5-80GB", 0, 0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    fake.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
    create(fake, "H100-SXM5-80GB", 0, 0)
    with pytest.raises(pynvml.NVMLError_InUse):
        fake.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_DISABLE)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        fake.nvmlDeviceSetMigMode(h, 7)


def test_bad_arguments_and_handles_are_invalid(a100: FakeNvml) -> None:
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlDeviceGetHandleByIndex(-1)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlDeviceGetName(None)
    h = a100.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT)
    with pytest.raises(pynvml.NVMLError_NotSupported):  # 8-slice profile: not on this card
        a100.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_8_SLICE)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlDeviceCreateGpuInstance(h, 12345)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlDeviceGetMigDeviceHandleByIndex(h, 7)
    with pytest.raises(pynvml.NVMLError_NotFound):
        a100.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlDeviceGetGpuInstanceId(h)  # a parent, not a MIG device


def test_destroy_rules(a100: FakeNvml) -> None:
    gi = create(a100, "A100-SXM4-80GB", 2, 0)
    a100.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # the handle is now stale
        a100.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        a100.nvmlGpuInstanceGetInfo(gi)
    busy = FakeNvml([FakeGpu("A100-SXM4-80GB", mig=True, instances=[("3g.40gb", 0)])])
    busy.nvmlInit()
    h = busy.nvmlDeviceGetHandleByIndex(0)
    handles = (pynvml.c_nvmlGpuInstance_t * 2)()
    count = ctypes.c_uint()
    busy.nvmlDeviceGetGpuInstances(h, PROFILE_IDS[2], handles, ctypes.byref(count))
    assert count.value == 1
    with pytest.raises(pynvml.NVMLError_InUse):  # it still has a compute instance
        busy.nvmlGpuInstanceDestroy(handles[0])


def test_calls_before_init_and_after_shutdown_are_uninitialized() -> None:
    fake = FakeNvml([FakeGpu("L40S-48GB")])
    with pytest.raises(pynvml.NVMLError_Uninitialized) as exc:
        fake.nvmlDeviceGetCount()
    assert code_of(exc) == pynvml.NVML_ERROR_UNINITIALIZED
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlShutdown()
    fake.nvmlInit()
    fake.nvmlInit()
    fake.nvmlShutdown()
    assert fake.nvmlDeviceGetCount() == 1  # still one init outstanding
    fake.nvmlShutdown()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


@pytest.mark.parametrize("model", MIG_MODELS)
def test_possible_placements_are_the_catalog_starts(model: str) -> None:
    fake = FakeNvml([FakeGpu(model, mig=True)])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    for p in CAT.models[model].profiles.values():
        info = fake.nvmlDeviceGetGpuInstanceProfileInfo(h, p.nvml_index)
        assert (info.id, info.instanceCount, info.name) == (
            PROFILE_IDS[p.nvml_index],
            p.max_count,
            f"MIG {p.name}",
        )
        count = ctypes.c_uint()
        fake.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, None, ctypes.byref(count))
        arr = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
        fake.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, arr, ctypes.byref(count))
        assert [(x.start, x.size) for x in arr] == [(s, p.memory_slices) for s in p.starts]
        with pytest.raises(pynvml.NVMLError_InsufficientSize):
            short = (pynvml.c_nvmlGpuInstancePlacement_t * (count.value - 1))()
            fake.nvmlDeviceGetGpuInstancePossiblePlacements(h, info.id, short, ctypes.byref(count))


def test_create_without_placement_takes_the_first_free_start(a100: FakeNvml) -> None:
    h = a100.nvmlDeviceGetHandleByIndex(0)
    create(a100, "A100-SXM4-80GB", 1, 0)
    gi = a100.nvmlDeviceCreateGpuInstance(h, PROFILE_IDS[2])
    assert a100.nvmlGpuInstanceGetInfo(gi).placement.start == 4


# --- random create/destroy sequences ---------------------------------------------------------


def oracle(m, existing: list[tuple[str, int]], name: str, start: int) -> int | None:
    """The NVML code a create-with-placement should give, from the rules stated plainly."""
    p = m.profiles[name]
    if start not in p.starts:
        return pynvml.NVML_ERROR_INVALID_ARGUMENT
    used = 0
    for n, s in existing:
        used |= ((1 << m.profiles[n].memory_slices) - 1) << s
    blocked = (
        used & (((1 << p.memory_slices) - 1) << start)
        or len(existing) >= 7
        or [n for n, _ in existing].count(name) >= p.max_count
        or (name.endswith("+me") and any(n.endswith("+me") for n, _ in existing))
    )
    return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES if blocked else None


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.sampled_from([0, 1, 2, 3, 4, 7, 9]), st.integers(0, 7)),
        st.tuples(st.just("first"), st.sampled_from([0, 1, 2, 3, 4, 7, 9]), st.just(0)),
        st.tuples(st.just("destroy"), st.integers(0, 6), st.just(0)),
    ),
    max_size=14,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=st.sampled_from(MIG_MODELS), ops=OPS)
def test_random_sequences_never_overlap_and_read_back_exactly(model: str, ops: list) -> None:
    m = CAT.models[model]
    fake = FakeNvml([FakeGpu(model, mig=True)])
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    live: list = []
    for op, index, start in ops:
        before = fake.instances(0)
        if op == "destroy":
            if live:
                fake.nvmlGpuInstanceDestroy(live.pop(index % len(live)))
            continue
        p = profile(model, index)
        if op == "first":
            expect = CAT.fits_after(m, before, p.name)  # the catalog's own rule implementation
            try:
                live.append(fake.nvmlDeviceCreateGpuInstance(h, PROFILE_IDS[index]))
            except pynvml.NVMLError_InsufficientResources:
                assert expect is None
            else:
                assert expect is not None and fake.instances(0) == sorted(
                    [*before, (p.name, expect)]
                )
        else:
            expect_code = oracle(m, before, p.name, start)
            try:
                live.append(create(fake, model, index, start))
            except pynvml.NVMLError as exc:
                assert exc.value == expect_code
            else:
                assert expect_code is None
        now = fake.instances(0)
        slices = [s for n, s0 in now for s in range(s0, s0 + m.profiles[n].memory_slices)]
        assert len(slices) == len(set(slices)) and max(slices, default=0) < CAT.memory_slices
        assert len(now) <= CAT.max_instances
        assert sum(n.endswith("+me") for n, _ in now) <= 1
        assert all(sum(n == q for n, _ in now) <= m.profiles[q].max_count for q, _ in now)
    fake.nvmlShutdown()
    [gpu] = read_gpus(fake)
    assert sorted((i.profile, i.start) for i in gpu.mig_instances) == fake.instances(0)
    assert all(i.uuid == "" for i in gpu.mig_instances)  # API-made GIs have no compute instance


# --- the node agent ------------------------------------------------------------------------------


def test_collect_node() -> None:
    t0 = datetime(2025, 1, 1, tzinfo=UTC)
    fake = FakeNvml(
        [FakeGpu("L40S-48GB"), FakeGpu("L40S-48GB", utilization=80, processes=[(9, 100)])]
    )
    node = collect_node("gpu-node-1", nvml=fake, labels={"gpupool.io/pool": "p"}, now=t0)
    assert node.name == "gpu-node-1" and node.labels == {"gpupool.io/pool": "p"}
    assert [g.idle_since for g in node.gpus] == [t0, None]
    later = collect_node("gpu-node-1", nvml=fake, now=t0 + timedelta(minutes=5), previous=node)
    assert [g.idle_since for g in later.gpus] == [t0, None]


# --- the device check script -------------------------------------------------------------------


def _script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "device_nvml_check.py"
    spec = importlib.util.spec_from_file_location("device_nvml_check", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_device_check_script_on_the_fake(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    script = _script()
    assert script.main(["--fake"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mismatches"] == []
    assert set(report["calls"]) <= READ_CALLS | {"nvmlDeviceGetGpuInstancePossiblePlacements"}
    mig = report["node"]["gpus"][0]["migInstances"]
    assert [(m["profile"], m["start"]) for m in mig] == [("2g.35gb", 0), ("3g.71gb", 4)]
    guard = script.ReadOnly(FakeNvml([FakeGpu("H200-SXM5-141GB", mig=True)]))
    for name in sorted(MUTATING_CALLS):
        with pytest.raises(PermissionError):
            getattr(guard, name)
