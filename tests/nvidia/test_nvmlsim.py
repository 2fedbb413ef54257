"""The simulated NVML library through NVML's C ABI: its return-code rules (ctypes, as any caller
sees them), and gpupool's node agent reading it through real pynvml (nvidia-ml-py), which finds
it as `libnvidia-ml.so.1` on LD_LIBRARY_PATH exactly as it finds a driver's.

Each case runs in a fresh interpreter: pynvml loads the library once per process."""

from __future__ import annotations

import json
import textwrap
import uuid

import pytest
from kubernetes import client

from tests.nvidia.nvmlsim import device, gpu_uuid, run_python, write_devices

ABI_PROBE = textwrap.dedent(
    """
    import ctypes, json, os
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    out = {}
    u = ctypes.c_uint(0)
    out["count_before_init"] = lib.nvmlDeviceGetCount_v2(ctypes.byref(u))
    path = os.environ.pop("GPUPOOL_NVML_DEVICES")
    out["init_without_devices"] = lib.nvmlInit_v2()
    os.environ["GPUPOOL_NVML_DEVICES"] = path
    out["init"] = lib.nvmlInit_v2()
    lib.nvmlDeviceGetCount_v2(ctypes.byref(u))
    out["count"] = u.value
    h = ctypes.c_void_p()
    out["index_out_of_range"] = lib.nvmlDeviceGetHandleByIndex_v2(5, ctypes.byref(h))
    lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
    short = ctypes.create_string_buffer(4)
    out["short_name"] = lib.nvmlDeviceGetName(h, short, 4)
    name = ctypes.create_string_buffer(96)
    out["name"] = [lib.nvmlDeviceGetName(h, name, 96), name.value.decode()]
    n = ctypes.c_uint(0)
    out["procs_null"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), None),
                         n.value]
    class Info(ctypes.Structure):
        _fields_ = [("pid", ctypes.c_uint), ("used", ctypes.c_ulonglong),
                    ("gi", ctypes.c_uint), ("ci", ctypes.c_uint)]
    one = (Info * 1)()
    n.value = 1
    out["procs_short"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), one),
                          n.value]
    two = (Info * 2)()
    n.value = 2
    rc = lib.nvmlDeviceGetComputeRunningProcesses_v3(h, ctypes.byref(n), two)
    out["procs"] = [rc, n.value, [[p.pid, p.used >> 20, p.gi] for p in two]]
    h1 = ctypes.c_void_p()
    lib.nvmlDeviceGetHandleByIndex_v2(1, ctypes.byref(h1))
    n.value = 0
    out["no_procs"] = [lib.nvmlDeviceGetComputeRunningProcesses_v3(h1, ctypes.byref(n), None),
                       n.value]
    cur, pend = ctypes.c_uint(7), ctypes.c_uint(7)
    out["mig_mode"] = [lib.nvmlDeviceGetMigMode(h, ctypes.byref(cur), ctypes.byref(pend)),
                       cur.value]
    out["mig_mode_l40s"] = lib.nvmlDeviceGetMigMode(h1, ctypes.byref(cur), ctypes.byref(pend))
    out["foreign_handle"] = lib.nvmlDeviceGetName(ctypes.c_void_p(16), name, 96)
    out["by_uuid"] = lib.nvmlDeviceGetHandleByUUID(b"GPU-nope", ctypes.byref(h1))
    out["shutdown"] = [lib.nvmlShutdown(), lib.nvmlShutdown()]
    out["after_shutdown"] = lib.nvmlDeviceGetName(h, name, 96)
    print(json.dumps(out))
    """
)

SUCCESS, UNINITIALIZED, INVALID_ARGUMENT, NOT_SUPPORTED, NOT_FOUND = 0, 1, 2, 3, 6
INSUFFICIENT_SIZE, DRIVER_NOT_LOADED = 7, 9


@pytest.fixture
def node_file(tmp_path):
    procs = [{"pid": 4242, "usedMemoryMiB": 2048}, {"pid": 77, "usedMemoryMiB": 512}]
    return write_devices(
        tmp_path / "gpus.json",
        [
            device("A100-SXM4-80GB", "n1", 0, utilization=63, memoryUsedMiB=2560, numaNode=1,
                   processes=procs),
            device("L40S-48GB", "n1", 1, numaNode=-1),
        ],
    )  # fmt: skip


def test_return_codes_follow_nvml(node_file):
    out = run_python(ABI_PROBE, node_file)
    assert out["count_before_init"] == UNINITIALIZED
    assert out["init_without_devices"] == DRIVER_NOT_LOADED
    assert out["init"] == SUCCESS and out["count"] == 2
    assert out["index_out_of_range"] == INVALID_ARGUMENT
    assert out["short_name"] == INSUFFICIENT_SIZE
    assert out["name"] == [SUCCESS, "NVIDIA A100-SXM4-80GB"]
    # the size query pynvml makes: NULL array -> INSUFFICIENT_SIZE and the count
    assert out["procs_null"] == [INSUFFICIENT_SIZE, 2]
    assert out["procs_short"] == [INSUFFICIENT_SIZE, 2]
    assert out["procs"] == [SUCCESS, 2, [[4242, 2048, 0xFFFFFFFF], [77, 512, 0xFFFFFFFF]]]
    assert out["no_procs"] == [SUCCESS, 0]
    assert out["mig_mode"] == [SUCCESS, 0]  # MIG-capable, MIG off
    assert out["mig_mode_l40s"] == NOT_SUPPORTED
    assert out["foreign_handle"] == INVALID_ARGUMENT
    assert out["by_uuid"] == NOT_FOUND
    assert out["shutdown"] == [SUCCESS, UNINITIALIZED]
    assert out["after_shutdown"] == UNINITIALIZED


def test_a_malformed_file_fails_init_with_its_offset(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"devices": [{"name": "x", "uuid": "GPU-1"} oops]}')
    code = (
        "import pynvml\ntry:\n    pynvml.nvmlInit()\nexcept pynvml.NVMLError as e:\n"
        "    print(e.value)\n"
    )
    assert run_python(code, bad) == 999  # NVML_ERROR_UNKNOWN


READ = textwrap.dedent(
    """
    import json
    from reconciler.observe.nvml import read_gpus
    print(json.dumps([g.model_dump(mode="json") for g in read_gpus()]))
    """
)


def test_the_agents_reader_through_real_pynvml(node_file):
    a100, l40s = run_python(READ, node_file)
    assert a100["uuid"] == gpu_uuid("n1", 0) and a100["model"] == "A100-SXM4-80GB"
    assert a100["memory_mib"] == 81920 and a100["memory_used_mib"] == 2560
    assert a100["utilization"] == 63.0 and a100["numa_node"] == 1
    assert not a100["mig_enabled"] and a100["mig_instances"] == []
    assert [(p["pid"], p["used_memory_mib"]) for p in a100["processes"]] == [
        (4242, 2048),
        (77, 512),
    ]
    assert l40s["model"] == "L40S-48GB" and l40s["memory_mib"] == 48 * 1024
    assert l40s["numa_node"] == 0  # NOT_SUPPORTED -> the model default
    assert l40s["processes"] == [] and not l40s["mig_enabled"]


def test_every_catalog_model_without_mig_mode_reads_back(tmp_path):
    models = ["A100-SXM4-40GB", "H100-SXM5-80GB", "H100-NVL-94GB", "H200-SXM5-141GB",
              "L40S-48GB", "A10-24GB", "T4-16GB"]  # fmt: skip
    f = write_devices(tmp_path / "g.json", [device(m, "n", i) for i, m in enumerate(models)])
    got = run_python(READ, f)
    assert [g["model"] for g in got] == models
    assert [g["index"] for g in got] == list(range(len(models)))


@pytest.mark.kube
def test_gpupool_agent_once_publishes_what_nvml_says(installed, tmp_path):
    """`gpupool agent --once`, its own process, NVML from the simulated library via pynvml."""
    node = f"abi-node-{uuid.uuid4().hex[:6]}"
    f = write_devices(
        tmp_path / "gpus.json",
        [device("H100-SXM5-80GB", node, i, utilization=10 * i,
                processes=[{"pid": 100 + i, "usedMemoryMiB": 1000}] if i else [])
         for i in range(4)],
    )  # fmt: skip
    code = (
        "import sys, json\nfrom reconciler.cli import main\n"
        f"rc = main(['agent', '--once', '--node', {node!r}, '--kubeconfig', "
        f"{str(installed.kubeconfig_path)!r}, '--pod-resources-socket', ''])\n"
        "print(json.dumps(rc))\n"
    )
    try:
        assert run_python(code, f, timeout=120) == 0
        with installed.api_client() as admin:
            obj = client.CustomObjectsApi(admin).get_cluster_custom_object(
                "gpupool.io", "v1alpha1", "gpunodestates", node
            )
        gpus = obj["status"]["gpus"]
        assert [g["uuid"] for g in gpus] == [gpu_uuid(node, i) for i in range(4)]
        assert {g["model"] for g in gpus} == {"H100-SXM5-80GB"}
        published = json.dumps(gpus)
        assert '"pid": 103' in published and '"pid": 100' not in published
    finally:
        with installed.api_client() as admin:
            try:
                client.CustomObjectsApi(admin).delete_cluster_custom_object(
                    "gpupool.io", "v1alpha1", "gpunodestates", node
                )
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
