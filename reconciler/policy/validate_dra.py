"""What a DRA pool (`spec.backend: dra`) cannot have: what NVIDIA's DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1) does not provide, said with file and line.

- Shared slices: the driver shares a card only by letting several pods reference one
  ResourceClaim, configured by the claim's opaque `GpuConfig.sharing` (api/nvidia.com/resource/
  v1beta1/sharing.go: TimeSlicing, MPS behind the alpha `MPSSupport` gate); it publishes no
  per-slice capacity (consumable capacity came after v0.4.1), so gpupool could neither count nor
  place `slicesPerGPU` slices on a DRA card.
- `devicePlugin`: the device plugin does not run on a DRA pool's nodes.
- Kueue mode: gpupool renders Kueue quotas in `nvidia.com/gpu` and MIG resources only.
- `dra.mig: dynamic` (the driver's alpha `DynamicMIG`) on a device plugin pool, on a model
  without MIG, or on one whose MIG mode change needs a reset (Ampere): the driver offers a card
  both whole and as partitions only where it can turn MIG mode on and off without a reset,
  Hopper and later (cmd/gpu-kubelet-plugin/nvlib.go v0.4.1 `supportsMIGModeToggle`; on an
  Ampere card in MIG mode it offers the partitions only, out of MIG mode the card only), and a
  dynamic pool with no MIG layout would offer nothing the driver makes.
- `dra.admission: allocate` on a device plugin pool or without the guard: gpupool then writes
  allocations that nothing but its guard keeps other claims off.
"""

from __future__ import annotations

from collections.abc import Iterator

from reconciler.policy.problems import Problem
from reconciler.policy.state import DesiredState

DRA_DRIVER = "kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1"


def dra_problems(state: DesiredState, docs, problem) -> Iterator[Problem]:
    """`docs(state, kind)` and `problem(doc, path, message)` are validate.py's helpers."""
    for d in docs(state, "Pool"):
        spec = d.model.spec
        if spec.dra.mig == "dynamic":
            yield from _dynamic_problems(state, d, problem)
        if spec.dra.admission == "allocate" and (spec.backend != "dra" or not spec.dra.guard):
            yield problem(
                d,
                ("spec", "dra", "admission"),
                "admission: allocate writes the plan's devices as the claim's allocation, which "
                "only the guard keeps every other claim off; use it on a DRA pool with "
                "dra.guard: true, or admission: pin",
            )
        if spec.backend != "dra":
            continue
        if spec.inference.shared is not None:
            yield problem(
                d,
                ("spec", "inference", "shared"),
                f"a DRA pool offers no shared slices: NVIDIA's DRA driver ({DRA_DRIVER}) shares "
                "a card only through one ResourceClaim several pods reference, with no per-slice "
                "capacity to count or place; use MIG, or backend: devicePlugin",
            )
        if "device_plugin" in spec.model_fields_set:
            yield problem(
                d,
                ("spec", "devicePlugin"),
                "a DRA pool's cards are not served by the device plugin; remove devicePlugin, "
                "or use backend: devicePlugin",
            )
        if state.admission_controller == "kueue":
            yield problem(
                d,
                ("spec", "backend"),
                "kueue mode renders quotas in device-plugin resources (nvidia.com/gpu, "
                "nvidia.com/mig-*) only, which a DRA pool's pods do not request; use "
                "admission.controller: gpupool, or backend: devicePlugin",
            )


def _dynamic_problems(state: DesiredState, d, problem) -> Iterator[Problem]:
    spec, at = d.model.spec, ("spec", "dra", "mig")
    model = state.catalog.model(spec.gpu_model)
    if spec.backend != "dra":
        yield problem(
            d,
            at,
            "dynamic MIG is the DRA driver's (DynamicMIG); a device plugin pool's MIG layouts "
            "change through mig-manager; use backend: dra, or remove dra.mig",
        )
    elif model is None or not model.mig_capable:
        yield problem(d, at, f"{spec.gpu_model} has no MIG: dynamic MIG has nothing to partition")
    elif model.mig_mode_change == "node":
        yield problem(
            d,
            at,
            f"{spec.gpu_model} changes MIG mode only with a GPU reset: NVIDIA's DRA driver "
            f"({DRA_DRIVER}) offers such a card either whole or as MIG partitions, never both, "
            "and does not reset it (nvlib.go supportsMIGModeToggle: Hopper and later); use "
            "dra.mig: static (mig-manager), or a Hopper pool",
        )
    elif spec.inference.mig is None:
        yield problem(
            d,
            at,
            "dynamic MIG with no inference.mig layouts offers no partition; add the layouts "
            "the pool offers, or use dra.mig: static",
        )
