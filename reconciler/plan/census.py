"""What a run sums over every workload of its view, counted once: per (namespace, pool,
placed, request shape) the number of workloads (`ClusterView.census`). Team usage, each
namespace's ResourceQuota use and FGD's target workloads are read from the counts, not from
one pass over the workloads each (run.py). Each node's count is kept in the view memo with
the node's part of the view (`cluster.NodePart`, `reconciler.plan.kept`), so a plan counts
again only the nodes whose objects changed, and the workloads on no node."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from reconciler.observe.model import Workload

CensusKey = tuple[str, str | None, bool, int, tuple[tuple[str, int], ...], int]
"""A workload's namespace, pool (`ClusterView.pool_of`), whether it is placed, and its
request's whole GPUs, MIG devices per profile (in the request's order) and shared slices."""


def count_workloads(
    out: dict[CensusKey, int], ws: Iterable[Workload], pool_of: Callable[[Workload], str | None]
) -> None:
    """Add each of `ws` to `out`, the count of workloads per `CensusKey`."""
    for w in ws:
        r = w.request
        k = (w.namespace, pool_of(w), w.placed, r.gpus, tuple(r.mig.items()), r.shared_slices)
        out[k] = out.get(k, 0) + 1


def count_the_rest(
    out: dict[CensusKey, int],
    groups: Mapping[str, tuple[Workload, ...]],
    rest: Iterable[Workload],
    listed: set[str],
    pool_of: Callable[[Workload], str | None],
) -> None:
    """Add what the nodes' counts leave out: the workloads of `groups` (node -> workloads
    holding something there, `consistency.holding_groups`) on no node of the snapshot
    (`listed`) or on none at all, and `rest`, those holding nothing."""
    for name, ws in groups.items():
        if name not in listed:
            count_workloads(out, ws, pool_of)
    count_workloads(out, rest, pool_of)
