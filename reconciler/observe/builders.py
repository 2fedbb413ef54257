"""Builders for observed-state objects: terse, valid snapshots for tests, examples, benchmarks."""

from __future__ import annotations

from datetime import datetime, timedelta

from reconciler.conventions import POOL_LABEL, PRODUCT_LABEL
from reconciler.observe.model import (
    Allocation,
    Gpu,
    MigInstance,
    Node,
    ObservedState,
    Request,
    Workload,
)
from reconciler.policy.catalog import default_catalog

PRODUCT = {
    "A100-SXM4-80GB": "NVIDIA-A100-SXM4-80GB",
    "A100-SXM4-40GB": "NVIDIA-A100-SXM4-40GB",
    "H100-SXM5-80GB": "NVIDIA-H100-80GB-HBM3",
    "H100-NVL-94GB": "NVIDIA-H100-NVL",
    "H200-SXM5-141GB": "NVIDIA-H200",
    "L40S-48GB": "NVIDIA-L40S",
}


def gpu(
    index: int,
    *,
    mig: list[str] | None = None,
    shared: int | None = None,
    util: float = 50.0,
    idle_since: datetime | None = None,
    model: str = "",
) -> Gpu:
    """A card: whole by default; `mig=[profiles]` places them with the real rules;
    `shared=slices`."""
    instances = []
    if mig is not None:
        cat = default_catalog()
        m = cat.model(model or "A100-SXM4-80GB")
        placed = cat.place(m, mig)
        if placed is None:
            raise ValueError(f"layout {mig} cannot be placed on {m.name}")
        instances = [MigInstance(profile=p, start=s) for p, s in placed]
    return Gpu(
        index=index,
        uuid=f"GPU-{index:08x}",
        utilization=util,
        idle_since=idle_since,
        mig_enabled=mig is not None,
        mig_instances=instances,
        shared_slices=shared,
        numa_node=0 if index < 4 else 1,
        nvlink_island=0 if index < 4 else 1,
    )


def node(
    name: str, pool: str, model: str, gpus: list[Gpu] | None = None, count: int = 8, **labels: str
) -> Node:
    gs = gpus if gpus is not None else [gpu(i) for i in range(count)]
    gs = [g.model_copy(update={"model": model}) if not g.model else g for g in gs]
    return Node(
        name=name,
        labels={POOL_LABEL: pool, PRODUCT_LABEL: PRODUCT.get(model, model), **labels},
        gpus=gs,
    )


def training(
    ns: str,
    name: str,
    node_name: str | None,
    gpus: list[int] | int,
    *,
    cls: str = "training-low",
    started: datetime | None = None,
    checkpoint: datetime | None = None,
    migratable: bool = False,
    pool: str | None = None,
    created: datetime | None = None,
) -> Workload:
    """A whole-card job: running on `node_name` with GPU indices, or pending asking `gpus` cards."""
    if node_name is None:
        n = gpus if isinstance(gpus, int) else len(gpus)
        return Workload(
            namespace=ns,
            name=name,
            priority_class=cls,
            phase="Pending",
            request=Request(gpus=n),
            pool=pool,
            created_at=created,
            owner_kind="Job",
            owner_name=name,
        )
    idx = list(gpus) if not isinstance(gpus, int) else list(range(gpus))
    return Workload(
        namespace=ns,
        name=name,
        priority_class=cls,
        phase="Running",
        request=Request(gpus=len(idx)),
        node=node_name,
        allocations=[Allocation(gpu=i) for i in idx],
        started_at=started,
        created_at=started,
        last_checkpoint_at=checkpoint,
        owner_kind="Job",
        owner_name=name,
        checkpointable=True,
        migratable=migratable,
    )


def mig_pod(
    ns: str,
    name: str,
    node_name: str | None,
    profile: str,
    *,
    gpu_index: int = 0,
    start: int = 0,
    cls: str = "serving",
    started: datetime | None = None,
    pool: str | None = None,
) -> Workload:
    if node_name is None:
        return Workload(
            namespace=ns,
            name=name,
            priority_class=cls,
            phase="Pending",
            request=Request(mig={profile: 1}),
            pool=pool,
        )
    return Workload(
        namespace=ns,
        name=name,
        priority_class=cls,
        phase="Running",
        request=Request(mig={profile: 1}),
        node=node_name,
        allocations=[Allocation(gpu=gpu_index, mig_start=start, mig_profile=profile)],
        started_at=started,
        owner_kind="ReplicaSet",
        owner_name=name.rsplit("-", 1)[0],
    )


def shared_pod(
    ns: str,
    name: str,
    node_name: str | None,
    slices: int = 1,
    *,
    gpu_index: int = 0,
    cls: str = "serving",
    started: datetime | None = None,
    pool: str | None = None,
) -> Workload:
    if node_name is None:
        return Workload(
            namespace=ns,
            name=name,
            priority_class=cls,
            phase="Pending",
            request=Request(shared_slices=slices),
            pool=pool,
        )
    return Workload(
        namespace=ns,
        name=name,
        priority_class=cls,
        phase="Running",
        request=Request(shared_slices=slices),
        node=node_name,
        allocations=[Allocation(gpu=gpu_index, slices=slices)],
        started_at=started,
        owner_kind="ReplicaSet",
        owner_name=name.rsplit("-", 1)[0],
    )


def snapshot(
    at: datetime, nodes: list[Node], workloads: list[Workload] = (), **kw
) -> ObservedState:
    return ObservedState(observed_at=at, nodes=list(nodes), workloads=list(workloads), **kw)


def hours(n: float) -> timedelta:
    return timedelta(hours=n)
