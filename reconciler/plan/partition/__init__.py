"""The partition seam (`base.PartitionBackend`), the policy it serves (`policy`), and the
backends a plan uses unless told otherwise (`DEFAULT_BACKENDS`)."""

from __future__ import annotations

from reconciler.plan.partition.base import PartitionBackend, convert, partition_for
from reconciler.plan.partition.device_plugin import DevicePluginBackend

DEFAULT_BACKENDS: tuple[PartitionBackend, ...] = (DevicePluginBackend(),)
"""The device plugin + mig-manager backend, which serves every pool."""

__all__ = [
    "DEFAULT_BACKENDS",
    "DevicePluginBackend",
    "PartitionBackend",
    "convert",
    "partition_for",
]
