"""What a plan does to a cluster, as a pure function of snapshots: the one effect model.

`apply_plan` carries out a plan's actions on an `ObservedState` the way the executor's
handlers (`reconciler/apply/handlers/`) and the components behind them would, assuming every
wait ends within the cycle (checkpoint grace periods, mig-manager, the device plugin).
`schedule` is a kube-scheduler stand-in that binds pending pods; `step` is one controller
cycle: apply, schedule, advance the clock. The multi-cycle tests (tests/plan/test_cycles.py),
`bench/cycles.py` and a future digital twin judge plans through this module alone.

Pure: no I/O, no clock (time is an argument), no randomness; the same inputs give the same
snapshot. Snapshot lists keep their order; new pods are appended.

The model is split by concept; the rest of the code imports it from here (every public name
of the modules below is re-exported), and this module has the cycle itself:

* `reconciler.sim.actions`: `apply_plan`, what each kind of action does (the list of what is
  modelled, per action, is its docstring);
* `reconciler.sim.partition`: MigReconfigure and SetSharing, as mig-manager and the device
  plugin carry them out (`sharing_config`);
* `reconciler.sim.scheduler`: `schedule`, the kube-scheduler stand-in;
* `reconciler.sim.world`: the mutable working copy of a snapshot and the API server's
  admission of the pods owners create (`with_default_class`, `admitted`);
* here: `step` (apply, schedule, advance the clock) and `finish` (completed pods leave).

Telemetry: a whole card a pod leaves is idle from then on (utilization 0, `idle_since` kept
if it was idle already, else now); a whole card a pod is bound to is busy (a started pod is
assumed to use its cards). What a workload really does on its cards is not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from reconciler.observe.model import ObservedState
from reconciler.plan.model import Plan
from reconciler.policy.state import DesiredState
from reconciler.sim.actions import EFFECTS, apply_plan, recreated
from reconciler.sim.partition import Partition, sharing_config
from reconciler.sim.scheduler import BLOCKING_EFFECTS, BUSY_UTILIZATION, EPOCH, schedule
from reconciler.sim.world import World, admitted, with_default_class

__all__ = [
    "BLOCKING_EFFECTS",
    "BUSY_UTILIZATION",
    "EFFECTS",
    "EPOCH",
    "Partition",
    "World",
    "admitted",
    "apply_plan",
    "finish",
    "recreated",
    "schedule",
    "sharing_config",
    "step",
    "with_default_class",
]


def step(
    desired: DesiredState,
    observed: ObservedState,
    plan: Plan,
    *,
    now: datetime,
    period: timedelta,
) -> ObservedState:
    """One controller cycle: the plan takes effect, pending pods are scheduled, and the next
    snapshot is taken `period` later."""
    after = schedule(desired, apply_plan(desired, observed, plan, now=now), now=now)
    return after.model_copy(update={"observed_at": observed.observed_at + period})


# ----------------------------------------------------------------------------- completions
def finish(
    desired: DesiredState, observed: ObservedState, keys: Iterable[str], *, now: datetime
) -> ObservedState:
    """Pods that ran to completion are gone (a finished Job's pod leaves the snapshot), and
    the whole cards they held are idle from `now` (the telemetry `leave_cards` keeps).
    Used by the digital twin (`reconciler.sim.twin`), which knows when a job's work is done."""
    gone = set(keys)
    if not gone:
        return observed
    world = World.of(desired, observed)
    for w in world.workloads:
        if w.key in gone and w.phase == "Running":
            world.leave_cards(w, now)
    world.workloads = [w for w in world.workloads if w.key not in gone]
    return world.state()
