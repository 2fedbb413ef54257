"""One handler per action type: look at the cluster, do nothing if the effect is there, else
take one idempotent step. Each returns an `Outcome`; they talk to the cluster only through
the `ClusterOps` port, so they are table-tested against an in-memory cluster.

The handlers live in one module per concept, each registering its action types with
`handles(...)` in `HANDLERS` (base.py), which the executor dispatches by type:

* base.py: ApplyConfig, Outcome, Context, the registry, and helpers the modules share;
* nodes.py: cordon, uncordon, node labels;
* partition.py: the device-plugin + mig-manager partition backend (sharing and MIG);
* backends.py: `PartitionChange` of any other partition backend, by its registered handler;
* workloads.py: checkpoint, eviction (preempt, reclaim, move), Job resume, scaling;
* admission.py: admitting gated gangs and holding gated pods;
* dra_admit.py: on DRA pools, the admitted pods' claims written for the plan's devices;
* objects.py: ResourceQuotas, PriorityClasses and Kueue objects, applied and pruned;
* dra.py: DRA pools' DeviceClasses and ResourceClaimTemplates, applied and pruned.

Importing this package imports every handler module, so `HANDLERS` is complete.
"""

from __future__ import annotations

# every handler module, imported for its registrations (and its public names)
from reconciler.apply.handlers.admission import admit, condition_reason, hold
from reconciler.apply.handlers.backends import (
    PARTITION_HANDLERS,
    handles_partition,
    partition_change,
)
from reconciler.apply.handlers.base import (
    HANDLERS,
    ApplyConfig,
    Context,
    Handler,
    Outcome,
    handles,
    parse_time,
)
from reconciler.apply.handlers.dra import dra_object, prune_dra_object
from reconciler.apply.handlers.nodes import cordon, label_node, uncordon
from reconciler.apply.handlers.objects import (
    kueue_object,
    priority_class,
    prune_kueue_object,
    prune_priority_class,
    prune_quota,
    quota,
)
from reconciler.apply.handlers.partition import mig_reconfigure, set_sharing
from reconciler.apply.handlers.workloads import (
    STALE_CHECKPOINT_SECONDS,
    checkpoint,
    evict,
    resume,
    scale,
    scale_envelope,
)

__all__ = [
    "HANDLERS",
    "PARTITION_HANDLERS",
    "STALE_CHECKPOINT_SECONDS",
    "ApplyConfig",
    "Context",
    "Handler",
    "Outcome",
    "admit",
    "checkpoint",
    "condition_reason",
    "cordon",
    "dra_object",
    "evict",
    "handles",
    "handles_partition",
    "hold",
    "kueue_object",
    "label_node",
    "mig_reconfigure",
    "parse_time",
    "partition_change",
    "priority_class",
    "prune_dra_object",
    "prune_kueue_object",
    "prune_priority_class",
    "prune_quota",
    "quota",
    "resume",
    "scale",
    "scale_envelope",
    "set_sharing",
    "uncordon",
]
