"""The DRA half of a simulated kubelet: NVIDIA's DRA kubelet plugin publishing a node's
ResourceSlices on the real API server, the way dra-driver-nvidia-gpu v0.4.1 does without
`DynamicMIG` (one pool named after the node, one slice, whole cards and the static MIG devices
that exist; a new layout republished under the next pool generation: cmd/gpu-kubelet-plugin/
driver.go `publishResources`; the slice shapes: tests/cluster/dra_slices.py).

Beside tests/cluster/kubelets.py rather than in it: the kubelet there admits pods and marks them
Running whatever their claims; the real kube-scheduler's DynamicResources plugin allocates the
claims from these slices (Kubernetes' own allocator), and the resourceclaim controller of
kube-controller-manager makes a pod's claims from its templates."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.dra_slices import gpu_device, mig_device, node_slice

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
        """Create or replace the node's slice under the next generation."""
        self.generation += 1
        body = node_slice(self.node, self.devices(), self.generation)
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
        name = node_slice(self.node, [])["metadata"]["name"]
        with contextlib.suppress(Exception):  # gone already
            self.api.delete_cluster_custom_object(G, V, PLURAL, name)
