"""The DRA half of a simulated kubelet: NVIDIA's DRA kubelet plugin publishing a node's
ResourceSlices on the real API server, the way dra-driver-nvidia-gpu v0.4.1 does without
`DynamicMIG` (one pool named after the node, one slice, whole cards and the static MIG devices
that exist; a new layout republished under the next pool generation: cmd/gpu-kubelet-plugin/
driver.go `publishResources`; the slice shapes: tests/cluster/dra_slices.py).

Beside tests/cluster/kubelets.py rather than in it: the kubelet there admits pods and marks them
Running whatever their claims; the real kube-scheduler's DynamicResources plugin allocates the
claims from these slices (Kubernetes' own allocator), and the resourceclaim controller of
kube-controller-manager makes a pod's claims from its templates.

`dynamic=True`: the driver with its alpha `DynamicMIG` gate: every possible partition of every
card, counted by shared counters (tests/cluster/dra_slices.py `dynamic_slices`), published once
(the allocator's counters, not a republish, keep the cards consistent); `prepare` creates the
MIG instances of an allocated claim and `unprepare` destroys them (cmd/gpu-kubelet-plugin/
device_state.go `Prepare`/`Unprepare`, nvlib.go `createMigDevice`/`deleteMigDevice`, v0.4.1).
The instances made are `made` (card -> [(profile, start)]); the test shows them to gpupool's
node agent through the node's fake NVML."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.dra_slices import (
    DRIVER,
    dynamic_name,
    dynamic_slices,
    gpu_device,
    mig_device,
    node_slice,
)

G, V, PLURAL = "resource.k8s.io", "v1", "resourceslices"
MIG_SLICES = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4, "7g.80gb": 8}
"""Memory slices each A100/H100 80GB profile occupies (the catalog's, for the capacities)."""


@dataclass
class DraPlugin:
    """One node's plugin: `cards` GPUs, `mig` card -> [(profile, placement start)]."""

    api: Any  # a CustomObjectsApi with rights to write ResourceSlices
    node: str
    cards: int = 8
    mig: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    generation: int = 0
    dynamic: Any = None
    """DynamicMIG: the cards' catalog model (reconciler.policy.catalog.GpuModel); None: static."""
    made: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    prepared: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)
    """Claim uid -> the instances its prepare made (card, profile, start)."""

    def devices(self) -> list[dict]:
        out: list[dict] = []
        for minor in range(self.cards):
            if minor in self.mig:  # MIG mode: its instances, not the card
                out += [
                    mig_device(self.node, minor, prof, start, MIG_SLICES[prof])
                    for prof, start in self.mig[minor]
                ]
            else:
                out.append(gpu_device(self.node, minor))
        return out

    def publish(self) -> dict:
        """Create or replace the node's slice(s) under the next generation."""
        self.generation += 1
        if self.dynamic is not None:
            bodies = dynamic_slices(self.node, self.cards, self.dynamic, self.generation)
            return [self._put(b) for b in bodies][-1]
        return self._put(node_slice(self.node, self.devices(), self.generation))

    def _put(self, body: dict) -> dict:
        name = body["metadata"]["name"]
        try:
            cur = self.api.get_cluster_custom_object(G, V, PLURAL, name)
        except Exception:  # noqa: BLE001 - not there yet
            cur = None
        if cur is None:
            return self.api.create_cluster_custom_object(G, V, PLURAL, body)
        body["metadata"]["resourceVersion"] = cur["metadata"]["resourceVersion"]
        return self.api.replace_cluster_custom_object(G, V, PLURAL, name, body)

    def relayout(self, mig: dict[int, list[tuple[str, int]]]) -> dict:
        """mig-manager changed the layout: the driver republishes (its pool's generation rises)."""
        self.mig = dict(mig)
        return self.publish()

    def remove(self) -> None:
        names = [node_slice(self.node, [])["metadata"]["name"]]
        if self.dynamic is not None:
            names = [f"{self.node}-{DRIVER}-counters"]
            names += [f"{self.node}-{DRIVER}-gpu{m}" for m in range(self.cards)]
        for name in names:
            with contextlib.suppress(Exception):  # gone already
                self.api.delete_cluster_custom_object(G, V, PLURAL, name)

    def prepare(self, claim: dict) -> list[tuple[int, str, int]]:
        """The kubelet prepares an allocated claim on this node: under DynamicMIG the driver
        creates each allocated partition's instance (once per claim); returns those made."""
        uid = claim["metadata"]["uid"]
        if self.dynamic is None or uid in self.prepared:
            return []
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        made = []
        for r in results.get("results") or []:
            parts = r["device"].split("-")
            if r["driver"] != DRIVER or r["pool"] != self.node or "mig" not in parts:
                continue
            minor, start = int(parts[1]), int(parts[-1])
            profile = next(
                p
                for p, prof in self.dynamic.profiles.items()
                if r["device"] == dynamic_name(minor, p, start) and start in prof.starts
            )
            self.made.setdefault(minor, []).append((profile, start))
            made.append((minor, profile, start))
        self.prepared[uid] = made
        return made

    def unprepare(self, uid: str) -> list[tuple[int, str, int]]:
        """The claim is gone from the node: the driver destroys the instances it made."""
        gone = self.prepared.pop(uid, [])
        for minor, profile, start in gone:
            self.made[minor].remove((profile, start))
            if not self.made[minor]:
                del self.made[minor]
        return gone
