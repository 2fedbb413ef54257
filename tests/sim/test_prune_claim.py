"""The simulator's effect of a PruneDraObject of a ResourceClaim (the planner's sweep of a claim
exact admission replaced and left, plan/objects/dra_objects.py `sweep_replaced_claims`) is what
the executor does (apply/handlers/dra.py `sweep_claim`): the claim goes while nothing holds it."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from reconciler.observe.model_dra import DeviceResult, DraState, ResourceClaimObject
from reconciler.plan.actions import PruneDraObject
from reconciler.sim.actions import _prune_dra_object

NOW = datetime(2026, 12, 6, tzinfo=UTC)


def _sweep(name: str) -> PruneDraObject:
    return PruneDraObject(
        id=f"prune-dra:ResourceClaim:ns/{name}",
        target=f"ns/{name}",
        reason="left by exact admission",
        object_kind="ResourceClaim",
        namespace="ns",
        name=name,
    )


def test_a_left_claim_goes_a_held_one_stays():
    held = ResourceClaimObject(
        namespace="ns",
        name="held",
        allocated=[DeviceResult(request="gpu", driver="gpu.nvidia.com", pool="n", device="gpu-0")],
    )
    world = SimpleNamespace(
        dra=DraState(
            claims=[
                ResourceClaimObject(namespace="ns", name="left"),
                held,
                ResourceClaimObject(namespace="other", name="left"),
            ]
        )
    )
    _prune_dra_object(world, _sweep("left"), NOW)  # type: ignore[arg-type]
    _prune_dra_object(world, _sweep("held"), NOW)  # type: ignore[arg-type]
    assert [(c.namespace, c.name) for c in world.dra.claims] == [("ns", "held"), ("other", "left")]
