"""The MIG catalog: GPU models, their GPU-instance profiles and the placement rules.

Placement is modelled the way NVML does it: a GPU has 8 memory slices; a profile may start
only at its listed slots and occupies `memory_slices` consecutive slices; instances never
overlap; at most 7 instances and at most one `+me` instance per GPU; each profile has a
maximum count. `place()` answers whether a whole layout fits (and where), which a slice sum
alone cannot: 7 x 1g leaves slice 7 stranded, 4g + 4g never fits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Literal, get_args

from ruamel.yaml import YAML

from reconciler.conventions import mig_resource


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str
    compute_slices: int
    memory_slices: int
    max_count: int
    starts: tuple[int, ...]
    nvml_index: int

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")

    @property
    def resource_name(self) -> str:
        """The device plugin's resource under the `mixed` strategy (`+` becomes `.`)."""
        return mig_resource(self.name)


MigModeChange = Literal["node", "card"]
"""What a MIG mode change (whole card <-> MIG) on one card of a node costs:

* `node` (Ampere: A100, A30): the driver leaves the new mode pending until a GPU reset, and
  mig-parted then resets EVERY GPU of the node (`nvidia-smi -r` over all of them), which fails
  while any GPU of the node runs work: the whole node must be idle. NVIDIA MIG User Guide,
  "Deployment Considerations": "Setting MIG mode on the A100/A30 requires a GPU reset";
  NVIDIA/mig-parted cmd/nvidia-mig-parted/apply/mode.go (`ApplyMigMode`: any pending mode change
  -> `util.ResetAllGPUs()`), cmd/nvidia-mig-parted/util/device.go (`nvmlResetAllGPUs`).
* `card` (Hopper and later: H100, H200): the mode change takes effect on the card at once, with
  no pending state and no reset, so only that card must be idle. NVIDIA/mig-parted
  deployments/systemd/hooks-minimal.yaml, chosen for compute capability >= 9.0 by
  deployments/systemd/utils.sh (`select_hooks_file`), drops the `pre-apply-mode` hook that stops
  every GPU client for the reset (CHANGELOG v0.5.0: "Add hooks-minimal.yaml that gets linked if
  on Hopper or above").

Either way mig-parted clears (destroys the instances of) every MIG-enabled card the applied
config lists when any listed card changes mode (apply/mode.go), and a layout change of a card
already in MIG mode touches only that card (apply/config.go skips cards already as wanted)."""


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    memory_gib: int
    product_labels: tuple[str, ...]
    nvml_names: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    profiles: dict[str, MigProfile] = field(hash=False)
    mig_mode_change: MigModeChange = "node"
    """What a MIG mode change on one card costs (see `MigModeChange`); "node" for models
    without MIG (never asked) and as the safe assumption."""

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)


@dataclass(frozen=True, slots=True)
class Catalog:
    memory_slices: int
    compute_slices: int
    max_instances: int
    models: dict[str, GpuModel] = field(hash=False)

    def model(self, name: str) -> GpuModel | None:
        return self.models.get(name)

    def model_for_product(self, product: str) -> GpuModel | None:
        """The model whose product label (GFD `nvidia.com/gpu.product`) or NVML name matches."""
        for m in self.models.values():
            if product == m.name or product in m.product_labels or product in m.nvml_names:
                return m
        base = product.split("-MIG-")[0]  # single strategy: <product>-MIG-<profile>
        if base != product:
            return self.model_for_product(base)
        return None

    def place(self, model: GpuModel, profiles: Sequence[str]) -> list[tuple[str, int]] | None:
        """Start slots for every profile of a layout, or None when it cannot be placed."""
        return place(self, model, profiles)

    def fits_after(
        self, model: GpuModel, existing: Iterable[tuple[str, int]], profile: str
    ) -> int | None:
        """The first start slot where `profile` can be created beside existing instances."""
        existing = list(existing)
        p = model.profiles.get(profile)
        if p is None:
            return None
        if len(existing) >= self.max_instances:
            return None
        counts = Counter(name for name, _ in existing)
        if counts[profile] >= p.max_count:
            return None
        if p.media_extensions and any(n.endswith("+me") for n in counts):
            return None
        used = _occupied(model, existing)
        for s in p.starts:
            if not used & _span(s, p.memory_slices):
                return s
        return None


def _span(start: int, size: int) -> int:
    return ((1 << size) - 1) << start


def _occupied(model: GpuModel, placed: Iterable[tuple[str, int]]) -> int:
    mask = 0
    for name, start in placed:
        mask |= _span(start, model.profiles[name].memory_slices)
    return mask


def place(
    catalog: Catalog, model: GpuModel, profiles: Sequence[str]
) -> list[tuple[str, int]] | None:
    """Backtracking search, largest instances first (the order NVIDIA recommends creating them)."""
    if any(p not in model.profiles for p in profiles):
        return None
    if len(profiles) > catalog.max_instances:
        return None
    counts = Counter(profiles)
    if any(counts[n] > model.profiles[n].max_count for n in counts):
        return None
    if sum(c for n, c in counts.items() if n.endswith("+me")) > 1:
        return None
    order = sorted(
        profiles,
        key=lambda n: (-model.profiles[n].memory_slices, -model.profiles[n].compute_slices, n),
    )
    result: list[tuple[str, int]] = []

    def go(i: int, used: int) -> bool:
        if i == len(order):
            return True
        p = model.profiles[order[i]]
        for s in p.starts:
            span = _span(s, p.memory_slices)
            if used & span:
                continue
            result.append((p.name, s))
            if go(i + 1, used | span):
                return True
            result.pop()
        return False

    if not go(0, 0):
        return None
    return sorted(result, key=lambda x: (x[1], x[0]))


def _profile(row: list) -> MigProfile:
    name, compute, memory, max_count, starts, nvml_index = row
    return MigProfile(
        str(name), int(compute), int(memory), int(max_count), tuple(starts), int(nvml_index)
    )


def _mode_change(name: str, m: dict, mig_capable: bool) -> MigModeChange:
    value = m.get("mig_mode_change")
    if value is None and not mig_capable:
        return "node"
    if value not in get_args(MigModeChange):
        raise ValueError(
            f"catalog model {name}: mig_mode_change must be one of "
            f"{', '.join(get_args(MigModeChange))} (got {value!r})"
        )
    return value


def catalog_from_data(data: dict) -> Catalog:
    models = {}
    for name, m in data["models"].items():
        profiles = {p.name: p for p in map(_profile, m.get("profiles", []))}
        models[name] = GpuModel(
            name=name,
            memory_gib=int(m["memory_gib"]),
            product_labels=tuple(m.get("product_labels", [])),
            nvml_names=tuple(m.get("nvml_names", [])),
            pci_device_ids=tuple(m.get("pci_device_ids", [])),
            profiles=profiles,
            mig_mode_change=_mode_change(name, m, bool(profiles)),
        )
    return Catalog(
        memory_slices=int(data["memory_slices"]),
        compute_slices=int(data["compute_slices"]),
        max_instances=int(data["max_instances"]),
        models=models,
    )


@cache
def default_catalog() -> Catalog:
    """The catalog shipped in the package (mig_catalog.yaml, with its sources)."""
    text = resources.files("reconciler.policy").joinpath("mig_catalog.yaml").read_text()
    return catalog_from_data(YAML(typ="safe").load(text))
