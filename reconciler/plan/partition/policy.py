"""What a pool's policy offers for partitions, whatever backend carries them out."""

from __future__ import annotations

from reconciler.plan.cluster import GpuSlot, PoolView


def policy_shape(pv: PoolView, g: GpuSlot) -> str:
    """Why `g`'s partition is not one its pool's policy offers ('' when it is)."""
    inf = pv.pool.spec.inference
    if g.mode == "shared":
        if inf.shared is None:
            return f"is shared x{g.slices}; Pool/{pv.name} offers no shared slices"
        if g.slices != inf.shared.slices_per_gpu:
            return f"is shared x{g.slices}; Pool/{pv.name} says x{inf.shared.slices_per_gpu}"
    if g.mode == "mig":
        if inf.mig is None or pv.model is None or not pv.model.mig_capable:
            return f"is MIG; Pool/{pv.name} offers no MIG"
        if g.layout not in {tuple(sorted(lay.profiles)) for lay in inf.mig.layouts}:
            return f"has MIG layout [{', '.join(g.layout)}], which Pool/{pv.name} does not offer"
    return ""


def inference_shape(pv: PoolView, prefer: str = "") -> tuple[str, tuple[str, ...]]:
    """The partition a new inference card of `pv` gets: the policy's preferred kind (or
    `prefer` when the policy offers it), MIG as its first layout; whole if none is offered."""
    inf = pv.pool.spec.inference
    mig_ok = inf.mig is not None and pv.model is not None and pv.model.mig_capable
    order = [prefer, inf.prefer, "mig", "shared"]
    for mode in order:
        if mode == "mig" and mig_ok:
            return "mig", tuple(sorted(inf.mig.layouts[0].profiles))
        if mode == "shared" and inf.shared is not None:
            return "shared", ()
    return "whole", ()


def policy_strategy(pv: PoolView) -> str:
    sh = pv.pool.spec.inference.shared
    return sh.strategy if sh is not None else "time-slicing"


def policy_slices(pv: PoolView) -> int:
    sh = pv.pool.spec.inference.shared
    return sh.slices_per_gpu if sh is not None else 0
