"""Fingerprints of a plan's inputs, so a saved plan can be refused once they change.

Like Terraform's "saved plan is stale": `plan --out` records them, `apply PLAN` recomputes
them from what it sees now. The observed fingerprint leaves out what changes every second
without changing what the plan would do (the snapshot's time, utilization, memory in use,
process lists); everything that can change a decision (who runs where, pending demand, layouts,
idle-since times, queue signals, quotas, recent preemptions) is in.

The desired state's revision (the git commit it was read at, `Plan.revision`) is part of its
fingerprint: a plan made at one commit is stale at another, even where the documents read the
same. `revision_fingerprint` binds the plan's own `revision` field to it, so a saved plan whose
`revision` was changed afterwards is refused when it is read (`reconciler.plan.model.Plan`).

`actions_fingerprint` covers the plan's own actions, so that an edit after `plan --out` is
named as such; it is no defence by itself (whoever edits can recompute it), which is why
`apply` also plans again from the same inputs and requires the same actions.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from pydantic import BaseModel

from reconciler.observe.model import ObservedState
from reconciler.policy.state import DesiredState

VOLATILE_GPU_FIELDS = {"utilization", "memory_used_mib", "processes"}


def _digest(data: object) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def desired_fingerprint(desired: DesiredState) -> str:
    docs = sorted(
        (d.model.model_dump(mode="json", by_alias=True) for d in desired.documents),
        key=lambda m: (m["kind"], m["metadata"]["name"]),
    )
    return _digest({"revision": desired.revision, "documents": docs})


def revision_fingerprint(revision: str | None) -> str:
    """The digest of a plan's `revision` (None: read from a directory, not a commit)."""
    return _digest({"revision": revision})


def observed_fingerprint(observed: ObservedState) -> str:
    # Prometheus readings are measurements, like utilization: a queue that moved from 41 to 42
    # is no stale plan. Whether they still lead to the same decisions is `apply`'s check that
    # planning again from its own readings gives the same actions and findings.
    data = observed.model_dump(mode="json", exclude={"observed_at", "signals"})
    for n in data["nodes"]:
        for g in n["gpus"]:
            for k in VOLATILE_GPU_FIELDS:
                g.pop(k, None)
    data["nodes"].sort(key=lambda n: n["name"])
    data["workloads"].sort(key=lambda w: (w["namespace"], w["name"]))
    return _digest(data)


def actions_fingerprint(actions: Sequence[BaseModel]) -> str:
    return _digest([a.model_dump(mode="json") for a in actions])


def fingerprint(
    desired: DesiredState, observed: ObservedState, actions: Sequence[BaseModel] = ()
) -> dict[str, str]:
    return {
        "desired": desired_fingerprint(desired),
        "observed": observed_fingerprint(observed),
        "actions": actions_fingerprint(actions),
        "revision": revision_fingerprint(desired.revision),
    }
