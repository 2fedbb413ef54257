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


class _Holding:
    """A watch cache whose DRA watch saw the pod's claim allocated (or not)."""

    def __init__(self, held: bool) -> None:
        self.held = held

    def claims_held_by(self, pod) -> bool:
        return self.held


def _dra_pod(deleting: bool = False, phase: str = "Running"):
    from datetime import UTC, datetime

    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="p",
            namespace="t",
            deletion_timestamp=datetime(2026, 12, 6, tzinfo=UTC) if deleting else None,
        ),
        spec=client.V1PodSpec(
            node_name="n1",
            containers=[client.V1Container(name="main", image="x")],
            resource_claims=[
                client.V1PodResourceClaim(name="gpus", resource_claim_template_name="t-gpu-1")
            ],
        ),
        status=client.V1PodStatus(phase=phase),
    )


@pytest.mark.parametrize(
    ("held", "kind", "deleting", "phase", "wakes"),
    [
        (False, "DELETED", False, "Running", True),  # its cards are free now
        (True, "DELETED", False, "Running", False),  # the claim's release wakes the loop
        (True, "MODIFIED", False, "Succeeded", False),  # likewise
        (True, "MODIFIED", True, "Running", True),  # terminating: the hand-off is planned
        (True, "MODIFIED", False, "Running", False),  # nothing admission acts on
    ],
)
def test_which_dra_pod_events_wake_the_loop(ctl, held, kind, deleting, phase, wakes) -> None:
    """Issue 32: the benchmark's controller child wakes by the same rule (`wakes_on`); it
    once kept its own copy, which did not wake on a DRA pod turning terminating."""
    ctl.cache = _Holding(held)
    assert ctl.wakes_on(kind, _dra_pod(deleting, phase)) is wakes
