"""Who gpupool believes about a pod's cards: the one place observation (`kube_pods`) and apply
(the repartition busy check, `apply/handlers/partition.py`) decide whether a pod's
`gpupool.io/gpus` annotation is believed.

Anyone who may update a pod may write any annotation on it, so the value alone says nothing:
a tenant could claim cards it does not hold (and have them fenced) or hide the ones it holds
(and have another gang admitted onto them, or a card repartitioned under it). The API server
records who set each field last in `metadata.managedFields` (the field manager; ownership moves
to whoever changes a value, through updates and patches too), and deploy/state-admission.yaml
lets only gpupool's node agent (on pods bound to its own node) and the controller write the
annotation, and nobody else make the agent's field manager its owner. So the annotation is
believed only where `conventions.AGENT_FIELD_MANAGER` owns it (`GPUS_WRITERS`); anything else
(another manager, none on record) makes the pod's cards unknown, which both sides treat
conservatively (the pod may hold any card of its node).

Pure: plain data in (the client's `V1ManagedFieldsEntry` objects or the API's JSON dicts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler import conventions as C

GPUS_WRITERS = frozenset({C.AGENT_FIELD_MANAGER})
"""The field managers whose `gpupool.io/gpus` is believed. gpupool itself writes it nowhere
today (the agent publishes `status.pods` instead); a node agent (or a site's stand-in for one,
running as the agent's ServiceAccount) that annotates pods must name this manager."""


def annotation_path(key: str) -> tuple[str, str, str]:
    """The `fieldsV1` keys of annotation `key`."""
    return ("f:metadata", "f:annotations", f"f:{key}")


def owners(managed_fields: Iterable[Any] | None, *path: str) -> frozenset[str]:
    """The field managers that own the field at `path` (`fieldsV1` keys: "f:spec",
    "f:suspend") in `managed_fields`: who set its value last. Entries may be the official
    client's models (`manager`, `fields_v1`) or the API's JSON (`manager`, `fieldsV1`);
    anything else owns nothing."""
    out = set()
    for entry in managed_fields or []:
        if isinstance(entry, Mapping):
            manager, node = entry.get("manager"), entry.get("fieldsV1")
        else:
            manager, node = getattr(entry, "manager", None), getattr(entry, "fields_v1", None)
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is not None and manager is not None:
            out.add(str(manager))
    return frozenset(out)


def annotation_writers(managed_fields: Iterable[Any] | None, keys: Iterable[str]) -> dict:
    """Annotation key -> the field managers that own it, for each of `keys`."""
    entries = list(managed_fields or [])
    return {k: owners(entries, *annotation_path(k)) for k in keys}


def gpus_believed(writers: Iterable[str]) -> bool:
    """A pod's `gpupool.io/gpus` owned by `writers` is believed: a trusted manager set it."""
    return not GPUS_WRITERS.isdisjoint(writers)
