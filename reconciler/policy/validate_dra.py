"""What a DRA pool (`spec.backend: dra`) cannot have: what NVIDIA's DRA driver
(kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1) does not provide, said with file and line.

- Shared slices: the driver shares a card only by letting several pods reference one
  ResourceClaim, configured by the claim's opaque `GpuConfig.sharing` (api/nvidia.com/resource/
  v1beta1/sharing.go: TimeSlicing, MPS behind the alpha `MPSSupport` gate); it publishes no
  per-slice capacity (consumable capacity came after v0.4.1), so gpupool could neither count nor
  place `slicesPerGPU` slices on a DRA card.
- `devicePlugin`: the device plugin does not run on a DRA pool's nodes.
- Kueue mode: gpupool renders Kueue quotas in `nvidia.com/gpu` and MIG resources only.
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
