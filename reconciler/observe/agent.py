"""The node agent's observation: this host's GPUs as one `Node`, and which pod holds which of
them (what `gpupool agent` publishes).

Pure glue over the NVML adapter and the kubelet's PodResources answer; the publishing loop and
CLI live elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from reconciler.observe.model import Allocation, Gpu, Node, PodGpus, known_below
from reconciler.observe.nvml import NvmlApi, read_gpus
from reconciler.observe.podresources import PodResources
from reconciler.policy.catalog import Catalog


def collect_node(
    node_name: str,
    nvml: NvmlApi | None = None,
    labels: dict[str, str] | None = None,
    now: datetime | None = None,
    previous: Node | None = None,
    catalog: Catalog | None = None,
) -> Node:
    """Read every GPU through NVML and return this node as the observed-state model.

    Idleness is an observation, not a policy threshold: for each of `UTILIZATION_LEVELS` the
    card's utilization is under now, `below_since` says since when it has stayed under it,
    whether or not a process holds the card (a notebook that keeps a CUDA context open and
    computes nothing is idle). The start is carried over from `previous` (the agent's last
    publication) for the same GPU UUID, else it is `now`; a card whose UUID changed starts
    afresh. `idle_since` is the lowest level's entry. The planner picks the level for each
    policy's `utilizationBelow` (`Gpu.idle_since_below`).

    The window is the run of published samples: one sample at or above a level ends that
    level's stretch. Each sample is NVML's utilization, the percent of time over the driver's
    last sample period (between 1/6 s and 1 s, depending on the product) during which a
    kernel ran (NVML API reference, nvmlUtilization_t:
    https://docs.nvidia.com/deploy/nvml-api/structnvmlUtilization__t.html). The agent reads
    one such sample per publication (every `--interval`, 30 s by default), so a burst that
    falls between two publications is not seen: a card busy in short bursts can look idle.
    The driver keeps a buffer of recent utilization samples, readable with
    `nvmlDeviceGetSamples` (NVIDIA cuda-python NVML bindings, device_get_samples:
    https://nvidia.github.io/cuda-python/pr-preview/pr-2903/cuda-bindings/latest/module/generated/cuda.bindings.nvml.device_get_samples.html),
    which could close this gap; the adapter does not read it yet.
    """
    now = now or datetime.now(UTC)
    before = {g.uuid: known_below(g) for g in previous.gpus if g.uuid} if previous else {}
    gpus = [
        g.with_sample(g.utilization, now, before.get(g.uuid, {})) for g in read_gpus(nvml, catalog)
    ]
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
