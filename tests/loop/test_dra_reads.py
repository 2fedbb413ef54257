"""The controller tells observation whether to read resource.k8s.io (`Controller._reads_dra`):
always on its first cycle, then while a pool of the desired state is on DRA or the last read
found objects gpupool made there (to prune them); otherwise never."""

from __future__ import annotations

import pytest
from kubernetes import client

from reconciler.loop.controller import Controller
from reconciler.loop.sources import DirectorySource
from reconciler.observe.model_dra import DeviceClassObject, DraState
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.support import desired

DRA = ("  gpuModel: A100-SXM4-80GB\n", "  gpuModel: A100-SXM4-80GB\n  backend: dra\n")
NO_SHARED = ("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")


@pytest.fixture
def ctl(tmp_path):
    (tmp_path / "pools").mkdir()
    return Controller(
        DirectorySource(tmp_path),
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")),
        namespace="gpupool-system",
        identity="t",
    )


def test_dra_is_read_first_then_only_with_a_dra_pool_or_objects_left(ctl) -> None:
    plugin = load([SourceFile("desired.yaml", desired())])
    text = desired()
    assert DRA[0] in text
    on_dra = load([SourceFile("desired.yaml", text.replace(*DRA, 1).replace(*NO_SHARED))])
    assert ctl._reads_dra(plugin)  # the first cycle: gpupool's objects may be there
    ctl._dra_left = False  # the last read found none of gpupool's
    assert not ctl._reads_dra(plugin)
    assert ctl._reads_dra(on_dra)
    left = DraState(device_classes=[DeviceClassObject(name="gpupool-x-gpu", managed_by="gpupool")])
    assert left.gpupool_objects() and not DraState().gpupool_objects()
    theirs = DraState(device_classes=[DeviceClassObject(name="c", managed_by="helm")])
    assert not theirs.gpupool_objects()
