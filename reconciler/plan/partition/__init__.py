"""The partition seam (`base.PartitionBackend`), the policy it serves (`policy`), and the
backends a plan uses unless told otherwise (`DEFAULT_BACKENDS`)."""

from __future__ import annotations

from reconciler.plan.partition.base import NotYet, PartitionBackend, convert, partition_for
from reconciler.plan.partition.device_plugin import DevicePluginBackend
from reconciler.plan.partition.dra import DraBackend
from reconciler.plan.partition.dra_dynamic import DynamicMigBackend

DEFAULT_BACKENDS: tuple[PartitionBackend, ...] = (
    DynamicMigBackend(),
    DraBackend(),
    DevicePluginBackend(),
)
"""The DRA driver's dynamic MIG for DRA pools with `spec.dra.mig: dynamic`, the DRA backend
(static MIG) for other pools with `spec.backend: dra`, then the device plugin + mig-manager
backend, which serves every other pool."""

__all__ = [
    "DEFAULT_BACKENDS",
    "DevicePluginBackend",
    "DraBackend",
    "DynamicMigBackend",
    "NotYet",
    "PartitionBackend",
    "convert",
    "partition_for",
]
