"""The node agent's observation: this host's GPUs as one `Node` (what `gpupool agent` publishes).

Pure glue over the NVML adapter; the publishing loop and CLI live elsewhere.
"""

from __future__ import annotations

from datetime import UTC, datetime

from reconciler.observe.model import Gpu, Node
from reconciler.observe.nvml import NvmlApi, read_gpus
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
