"""The digital twin's set-up: its settings (`TwinConfig`), the errors that name the setting a
user gave (`OptionError`, worded per command), and the desired state it runs under: which
service it serves, which nodes the pool has, the static splits it is compared against. The
cycle itself is twin.py's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from reconciler.conventions import POOL_LABEL, PRODUCT_LABEL, RECONCILE_INTERVAL_SECONDS
from reconciler.observe.builders import PRODUCT, gpu
from reconciler.observe.model import (
    Node,
)
from reconciler.policy.models import ScaleTarget, ScalingPolicy
from reconciler.policy.state import DesiredState

DAY = 86400.0
Progress = Callable[[int, int], None]
FLAG = "{flag}"
"""Where an `OptionError`'s message names the option the user gives the input with."""


class OptionError(ValueError):
    """A setting of the twin is wrong and the user gives it by a command-line option. The
    twin knows the setting (`option`: a `TwinConfig` field, or "static", "days"), not the
    command: `gpupool simulate --mode twin` calls it `--service`, `gpupool plan --base
    --twin-load` `--twin-service`. The command words the message with its own flag
    (`worded`); `str()` names the setting in words, for callers without flags."""

    def __init__(self, template: str, option: str) -> None:
        self.template, self.option = template, option
        super().__init__(template.replace(FLAG, f"the {option.replace('_', ' ')} setting"))

    def worded(self, flags: Mapping[str, str]) -> str:
        """The message with `flags[option]` (e.g. `--twin-service`) for the setting."""
        flag = flags.get(self.option)
        return self.template.replace(FLAG, flag) if flag else str(self)


@dataclass(frozen=True)
class TwinConfig:
    service_rate: float
    """Requests per second one replica serves within its latency target."""
    period: float = float(RECONCILE_INTERVAL_SECONDS)
    """Seconds between controller cycles (`gpupool reconcile --interval`'s default)."""
    horizon: float | None = None
    """Seconds simulated (default: the whole load curve)."""
    warmup: float = DAY
    """Metrics start this many seconds in (the steady state)."""
    replica_gpus: int = 1
    """Whole cards one replica asks for."""
    concurrency: float = 10.0
    """Requests one replica has in service at once at its full rate (its batch): a request
    takes `concurrency / service_rate` seconds; the in-flight part of `queue_length`."""
    load_time: float = 120.0
    """Seconds from a replica's start until it serves (model load)."""
    restart_cost: float = 300.0
    """Seconds a preempted job spends restarting before it progresses again."""
    repartition_time: float = 60.0
    """Seconds a node's cards are not useful after a MIG reconfiguration / sharing change."""
    checkpoint_time: float = 60.0
    """Seconds a checkpoint the plan asks for holds the cards (checkpointable jobs)."""
    service: str | None = None
    """namespace/name of the ScalingPolicy target the load feeds (default: the only one)."""
    service_class: str | None = None
    """The service's priority class (default: the highest inference class)."""
    training_namespace: str = "training"
    training_class: str | None = None
    """The training jobs' class (default: the PriorityPolicy's defaultClass)."""
    training_pool: str | None = None
    """The pool training jobs ask for (default: the service's pool)."""
    start: datetime | None = None
    """Wall time of t = 0 (default: the load curve's first bin)."""
    max_pending: int = 64
    """At most this many arrived jobs are pending pods at once; the rest wait in arrival
    order outside the cluster (as a batch queue holds workloads whose pods it has not
    created), their wait counted from arrival."""
    failure_rate: float = 0.0
    """Node failures per node-day of up time (0: none); see `reconciler.sim.failures`."""
    repair_time: float = 4 * 3600.0
    """Seconds a failed node stays NotReady before it returns."""
    failure_seed: int = 0
    """Seed of the failure schedule (the same for the unified pool and the static splits)."""

    def __post_init__(self) -> None:
        if not self.service_rate > 0:
            raise OptionError(
                f"{FLAG} must be positive (requests/s per replica), got {self.service_rate:g}",
                "service_rate",
            )
        if not self.period > 0:
            raise OptionError(
                f"{FLAG} {self.period:g}s: the cycle period must be positive, like 30s", "period"
            )
        if not self.concurrency > 0:
            raise OptionError(f"{FLAG} must be positive, got {self.concurrency:g}", "concurrency")
        if self.failure_rate < 0 or not self.repair_time > 0:
            raise OptionError(
                f"{FLAG}: failures need a rate >= 0 per node-day and a positive repair time, "
                f"got {self.failure_rate:g} and {self.repair_time:g} s",
                "failure_rate",
            )
        if self.replica_gpus < 1:
            raise OptionError(
                f"{FLAG} {self.replica_gpus}: a replica asks for at least one card", "replica_gpus"
            )


# ----------------------------------------------------------------------------- the desired state
def service_target(desired: DesiredState, wanted: str | None) -> tuple[ScalingPolicy, ScaleTarget]:
    """The ScalingPolicy target the load feeds: `wanted` (namespace/name), or the only one."""
    found = [
        (pol, t)
        for _, pol in sorted(desired.scaling.items())
        for t in pol.spec.targets
        if wanted is None or f"{t.namespace}/{t.name}" == wanted
    ]
    if not found:
        if not wanted or not desired.scaling:
            raise ValueError(
                "the desired state has no ScalingPolicy: the load needs a service to feed"
            )
        names = ", ".join(
            f"{t.namespace}/{t.name}" for _, pol in sorted(desired.scaling.items())
            for t in pol.spec.targets
        )  # fmt: skip
        raise OptionError(
            f"{FLAG} {wanted}: no ScalingPolicy targets it; the targets are {names}", "service"
        )
    if len(found) > 1:
        names = ", ".join(f"{t.namespace}/{t.name}" for _, t in found)
        raise OptionError(
            f"several ScalingPolicy targets ({names}): choose one with {FLAG} NS/NAME", "service"
        )
    return found[0]


def _default_classes(desired: DesiredState, cfg: TwinConfig) -> tuple[str | None, str | None]:
    pp = desired.priority
    if pp is None:
        return cfg.service_class, cfg.training_class
    serving = max(
        (c for c in pp.spec.classes if c.workload == "inference"),
        key=lambda c: c.value,
        default=None,
    )
    svc = cfg.service_class or (serving.name if serving else None)
    train = cfg.training_class or pp.spec.default_class
    for name in (svc, train):
        if name is not None and desired.priority_class(name) is None:
            raise ValueError(f"priority class {name!r} is not in the PriorityPolicy")
    return svc, train


def pool_nodes(desired: DesiredState) -> list[Node]:
    """The nodes each pool's capacity describes, labelled so its selector matches them."""
    out = []
    for name, pool in sorted(desired.pools.items()):
        cap = pool.spec.capacity
        model = pool.spec.gpu_model
        labels = {
            **pool.spec.node_selector.match_labels,
            POOL_LABEL: name,
            PRODUCT_LABEL: PRODUCT.get(model, model),
        }
        for i in range(cap.nodes):
            out.append(
                Node(
                    name=f"{name}-{i:03d}",
                    labels=labels,
                    gpus=[
                        gpu(k, util=0.0, model=model).model_copy(update={"idle_since": None})
                        for k in range(cap.gpus_per_node)
                    ],
                )
            )
    return out


def static_split(desired: DesiredState, pool: str, inference_gpus: int) -> tuple[DesiredState, str]:
    """The desired state of a static split of `pool`: it keeps `inference_gpus` cards (whole
    nodes) and its inference; a new pool `<pool>-train` gets the other nodes, for training
    only. Nothing is lent across: the scheduler binds a pod only in the pool it asks for.
    Returns the desired state and the training pool's name."""
    p = desired.pools.get(pool)
    if p is None:
        raise ValueError(f"no pool {pool!r} to split")
    cap = p.spec.capacity
    if inference_gpus % cap.gpus_per_node or not 0 < inference_gpus < cap.nodes * cap.gpus_per_node:
        raise OptionError(
            f"{FLAG} {inference_gpus}: a static split of {pool} takes whole nodes: "
            f"{inference_gpus} is not a multiple of {cap.gpus_per_node} between 1 and "
            f"{cap.nodes * cap.gpus_per_node - 1}",
            "static",
        )
    n_inf = inference_gpus // cap.gpus_per_node
    n_train = cap.nodes - n_inf
    train_name = f"{pool}-train"
    spec = p.spec
    infer = p.model_copy(
        update={
            "spec": spec.model_copy(
                update={
                    "capacity": cap.model_copy(update={"nodes": n_inf}),
                    "training": spec.training.model_copy(update={"min_gpus": 0, "max_gpus": None}),
                    "inference": spec.inference.model_copy(
                        update={"min_gpus": min(spec.inference.min_gpus, inference_gpus)}
                    ),
                }
            )
        }
    )
    train_gpus = n_train * cap.gpus_per_node
    train = p.model_copy(
        update={
            "metadata": p.metadata.model_copy(update={"name": train_name}),
            "spec": spec.model_copy(
                update={
                    "node_selector": spec.node_selector.model_copy(
                        update={"match_labels": {POOL_LABEL: train_name}, "match_expressions": []}
                    ),
                    "capacity": cap.model_copy(update={"nodes": n_train}),
                    "training": spec.training.model_copy(
                        update={"min_gpus": min(spec.training.min_gpus, train_gpus)}
                    ),
                    "inference": spec.inference.model_copy(update={"min_gpus": 0, "max_gpus": 0}),
                }
            ),
        }
    )
    pools = {**desired.pools, pool: infer, train_name: train}
    return dataclasses.replace(desired, pools=pools), train_name
