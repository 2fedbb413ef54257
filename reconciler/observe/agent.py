"""The node agent's observation: this host's GPUs as one `Node`, and which pod holds which of
them (what `gpupool agent` publishes).

Pure glue over the NVML adapter and the kubelet's PodResources answer; the publishing loop and
CLI live elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from reconciler.observe.model import Allocation, Gpu, Node, PodGpus
from reconciler.observe.nvml import NvmlApi, read_gpus
from reconciler.observe.podresources import PodResources
from reconciler.policy.catalog import Catalog


def _idle(gpu: Gpu) -> bool:
    """Nothing runs on the card. An observation, not a policy threshold."""
    return not gpu.processes and gpu.utilization == 0


def collect_node(
    node_name: str,
    nvml: NvmlApi | None = None,
    labels: dict[str, str] | None = None,
    now: datetime | None = None,
    previous: Node | None = None,
    catalog: Catalog | None = None,
) -> Node:
    """Read every GPU through NVML and return this node as the observed-state model.

    `idle_since` is set on a GPU with no running compute process and 0% utilization: carried
    over from `previous` (the agent's last publication) for the same GPU UUID, else `now`.
    """
    now = now or datetime.now(UTC)
    before = {g.uuid: g.idle_since for g in previous.gpus if g.uuid} if previous else {}
    gpus = []
    for g in read_gpus(nvml, catalog):
        since = (before.get(g.uuid) or now) if _idle(g) else None
        gpus.append(g.model_copy(update={"idle_since": since}))
    return Node(name=node_name, labels=dict(labels or {}), gpus=gpus)


REPLICA_SEPARATOR = "::"
"""A time-sliced replica's device ID is `<GPU UUID>::<n>` (the NVIDIA device plugin's
AnnotatedID, k8s-device-plugin internal/rm: ../shared/notes/nvidia-stack.md)."""


def pod_gpus(pods: Iterable[PodResources], gpus: list[Gpu]) -> list[PodGpus]:
    """Which cards each pod holds, from the device IDs the kubelet reports (PodResources) and
    the UUIDs NVML reports for the same cards:

    - a GPU UUID is that whole card;
    - a MIG device UUID is that instance (`mig_start`, `mig_profile`);
    - `<GPU UUID>::<n>` replicas count as shared slices of that card, one per replica;
      replicas of a MIG device (time-sliced MIG) hold that instance.

    IDs NVML does not know (another plugin's devices, a card that has gone) are left out, and
    so are pods that hold no GPU. Allocations keep the order the kubelet listed the devices in.
    """
    cards = {g.uuid: g.index for g in gpus if g.uuid}
    migs = {m.uuid: (g.index, m) for g in gpus for m in g.mig_instances if m.uuid}
    out: list[PodGpus] = []
    for pod in pods:
        held: dict[tuple[str, int, int], Allocation] = {}
        seen: set[str] = set()
        for dev in pod.device_ids:
            if dev in seen:
                continue
            seen.add(dev)
            uuid, sep, _ = dev.partition(REPLICA_SEPARATOR)
            if uuid in cards:
                gpu = cards[uuid]
                if sep:
                    old = held.get(("shared", gpu, 0))
                    held[("shared", gpu, 0)] = Allocation(
                        gpu=gpu, slices=(old.slices if old else 0) + 1
                    )
                else:
                    held.setdefault(("whole", gpu, 0), Allocation(gpu=gpu))
            elif uuid in migs:
                gpu, inst = migs[uuid]
                held.setdefault(
                    ("mig", gpu, inst.start),
                    Allocation(gpu=gpu, mig_start=inst.start, mig_profile=inst.profile),
                )
        if held:
            out.append(
                PodGpus(namespace=pod.namespace, name=pod.name, allocations=[*held.values()])
            )
    return out
