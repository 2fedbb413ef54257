"""The DRA partition backend (reconciler/plan/partition/dra.py) serves pools with
`spec.backend: dra` from `DEFAULT_BACKENDS`: static MIG layouts still change through
mig-manager (`MigReconfigure`), never a shared slice; a device-plugin pool in the same plan is
the device plugin backend's. No stage names it."""

from __future__ import annotations

from reconciler.plan.partition import DEFAULT_BACKENDS, DevicePluginBackend, DraBackend
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import inference_burst_mig

NO_SHARED = ("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")


def _plan(backend: str):
    text, observed = inference_burst_mig()
    text = text.replace(*NO_SHARED).replace(
        "  gpuModel: A100-SXM4-80GB\n", f"  gpuModel: A100-SXM4-80GB\n  backend: {backend}\n", 1
    )
    desired = load([SourceFile("desired.yaml", text)])
    plan, _ = plan_with_facts(desired, observed)
    return desired, observed, plan


def test_dra_pools_are_served_by_the_dra_backend_first() -> None:
    assert isinstance(DEFAULT_BACKENDS[0], DraBackend)
    assert isinstance(DEFAULT_BACKENDS[-1], DevicePluginBackend)
    desired, observed, _ = _plan("dra")
    assert desired.pools["a100"].spec.backend == "dra"


def test_static_mig_on_dra_repartitions_through_mig_manager_as_the_device_plugin_does() -> None:
    _, _, dra = _plan("dra")
    _, _, plugin = _plan("devicePlugin")
    kinds = sorted(a.kind for a in dra.actions)
    assert "mig-reconfigure" in kinds, kinds
    assert "set-sharing" not in kinds

    def partitions(p):
        return [(a.kind, a.id) for a in p.actions if a.kind not in ("quota", "admit", "hold")]

    assert partitions(dra) == partitions(plugin)
    # the device plugin admits the rankers onto the instances being made; on DRA they wait
    # until the driver publishes them (exact admission names devices: plan/dra_admit.py)
    assert len([a for a in plugin.actions if a.kind == "admit"]) == 3
    assert [a for a in dra.actions if a.kind == "admit"] == []
    held = [a for a in dra.actions if a.kind == "hold"]
    assert len(held) == 3 and {a.code for a in held} == {"dra-devices-unpublished"}


def test_the_dra_backend_never_shares() -> None:
    backend = DraBackend()
    assert backend.share(None, None, "n", 4, "why") is False  # type: ignore[arg-type]
    assert backend.reshape(None, None, None, "shared", why="x") == []  # type: ignore[arg-type]
    assert backend.shares_beside_mig(None) is False  # type: ignore[arg-type]
