"""Step 0b: recovery from node failure (docs/planner.md, "Recovery").

Kubernetes detects a failed node (the node-lifecycle controller marks it NotReady/Unknown and
taints it `node.kubernetes.io/unreachable`); the node is fenced in step 0. This step decides
what becomes of the work that was there:

* a gang (`gang_key`) with a member on a failed node, or a member terminating (evicted,
  deleted) or Failed (`ObservedState.failed_members`: it failed during the gang's current run)
  while others still run, cannot progress: it is stopped whole. Its survivors on
  healthy nodes are asked to checkpoint, then stopped (the Job suspended, else each pod
  evicted); the pods on the failed node get no checkpoint request (nothing there would see it)
  and their stop waits for the survivors'. A suspended Job is demand again next cycle and is
  resumed all or nothing on healthy nodes; its gated pending pods are not demand now. The
  GPU-time since the gang's last checkpoint is reported lost (a finding and the reasons);
* a Job stopped this way soon after it started (`QUICK_FAILURE_SECONDS`) counts one more
  recovery in a row (`gpupool.io/recoveries` on the Job); at `RECOVERY_ATTEMPTS` it is held
  suspended with a finding (`demand.suspended_demand`), and its cards go to other work;
* an inference replica (a ReplicaSet's pod) on a failed node is evicted at once, so its
  Deployment replaces it elsewhere now rather than after the pod's NoExecute toleration;
* a node back Ready after a failure is not capacity until it has been Ready for its pool's
  `nodeSettleTime`: a flapping node does not take a gang down twice; and a Ready node whose
  agent has not published since it came back is not capacity either (`fence_unreported`): its
  partition is read afresh before anything lands there.

No action here needs a failed node's agent: checkpoints are asked of survivors only, and
stops go through the API server (Eviction, Job suspension)."""

from __future__ import annotations

from datetime import datetime, timedelta

from reconciler import conventions as C
from reconciler.observe.model import Node, Workload
from reconciler.plan.cluster import PoolView
from reconciler.plan.evictions import stop_lost
from reconciler.plan.run import Run, gang_key, kueue_mode, suspended_job

LOST_TAINTS = frozenset({"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"})
"""The node-lifecycle controller's taints for a node whose kubelet stopped reporting."""


def recover(run: Run, workloads: list[Workload]) -> set[str]:
    """Step 0b. `workloads`: every pod of the snapshot, terminating ones included. Returns the
    pending pods of the gangs stopped now: not demand this cycle (their gang comes back whole)."""
    settle_returned_nodes(run)
    fence_unreported(run)
    failed = failed_nodes(run)
    held: set[str] = set()
    # Only a gang with a member on a failed node, terminating, or Failed can be stopped
    # (`stop_gang`), and only a replica on a failed node replaced: those are found by a pass
    # of attribute reads, and only their gangs are gathered (in key order, as before).
    lost = [w for w in workloads if w.terminating or w.failed_at is not None or w.node in failed]
    failed_members = run.observed.failed_members
    if not lost and not failed_members:
        return held
    touched = {k for w in [*lost, *failed_members] if (k := gang_key(w)) is not None}
    ids = {id(w) for w in lost}
    gangs: dict[tuple[str, str, str], list[Workload]] = {}
    for w in sorted(
        (w for w in workloads if gang_key(w) in touched or id(w) in ids) if touched else lost,
        key=lambda w: w.key,
    ):
        key = gang_key(w)
        if key is not None:
            gangs.setdefault(key, []).append(w)
        elif w.placed and not w.terminating and w.node in failed:
            replace_replica(run, w, failed[w.node])
    for w in sorted(failed_members, key=lambda w: w.key):
        key = gang_key(w)
        if key is not None:
            gangs.setdefault(key, []).append(w)
    for key, members in sorted(gangs.items()):
        held |= stop_gang(run, key, members, failed)
    return held


def failed_nodes(run: Run) -> dict[str, str]:
    """Node -> why it failed: NotReady/Unknown or tainted by the node-lifecycle controller
    (`LOST_TAINTS`), or gone (a pod is placed on a node the cluster no longer lists)."""
    out: dict[str, str] = {}
    known = {n.name for n in run.observed.nodes}
    for n in run.observed.nodes:
        why = node_failure(n)
        if why:
            out[n.name] = why
    for w in run.observed.workloads:
        if w.placed and w.node and w.node not in known:
            out[w.node] = "gone (the cluster no longer lists it)"
    return out


def node_failure(n: Node) -> str:
    since = f" since {n.ready_changed_at.isoformat()}" if n.ready_changed_at else ""
    if not n.ready:
        return f"NotReady{since}"
    taint = next((t for t in sorted(n.taints, key=lambda t: t.key) if t.key in LOST_TAINTS), None)
    return f"tainted {taint.key}:{taint.effect}" if taint else ""


def settle_returned_nodes(run: Run) -> None:
    """Fence a node back Ready after a failure until it has been Ready for its pool's
    `nodeSettleTime`. Back from a failure: Ready since a time later than `nodeSettleTime` after
    the Node was created (a node Ready soon after it joined is new); without a creation time,
    any recent Ready transition counts."""
    for pool, pv in sorted(run.cluster.pools.items()):
        settle: timedelta = pv.pool.spec.node_settle_time
        for name, n in sorted(pv.nodes.items()):
            until = settled_at(n, settle)
            if until is None or until <= run.now or not n.ready or name in run.cluster.fenced_nodes:
                continue
            back = until - settle
            why = f"back Ready since {back.isoformat()}, settling until {until.isoformat()}"
            fence(run, pv, name, why)
            run.find(
                "info",
                "node-settling",
                name,
                f"{why} (Pool {pool} nodeSettleTime): gpupool places nothing there until then, "
                "and reads its partition afresh first",
            )


def fence_unreported(run: Run) -> None:
    """Fence a Ready node whose agent last published its cards before the node's Ready
    transition (`Node.agent_reported_at` < `ready_changed_at`): it came back (or its kubelet
    restarted) and what the plan knows of its partition, labels aside, is from before; a
    repartition left under way there may have gone on or been undone. Nothing is placed,
    repartitioned or uncordoned there until the agent reports again."""
    for pool, pv in sorted(run.cluster.pools.items()):
        for name, n in sorted(pv.nodes.items()):
            back, seen = n.ready_changed_at, n.agent_reported_at
            if not n.ready or back is None or seen is None or seen >= back:
                continue
            why = (
                f"Ready since {back.isoformat()}, its node agent last reported at "
                f"{seen.isoformat()}, before that"
            )
            fence(run, pv, name, why)
            run.find(
                "info",
                "node-unreported",
                name,
                f"{why}: gpupool places, repartitions and uncordons nothing there until the "
                f"agent has read its cards again (Pool {pool})",
            )


def fence(run: Run, pv: PoolView, name: str, why: str) -> None:
    """Node `name` of `pv` is no capacity now, for `why` (a reason given before stays)."""
    run.cluster.fenced_nodes.setdefault(name, why)
    for s in pv.gpus:
        if s.node == name:
            s.fenced = s.fenced or why


def settled_at(n: Node, settle: timedelta) -> datetime | None:
    """When `n`, back Ready after a failure, counts as capacity again (None: not back from
    one, or no time known)."""
    back = n.ready_changed_at
    if back is None or settle <= timedelta(0):
        return None
    if n.created_at is not None and back - n.created_at <= settle:
        return None  # Ready soon after it joined: a new node
    return back + settle


def replace_replica(run: Run, w: Workload, why: str) -> None:
    """An inference replica on a failed node: evicted now (no checkpoint: nothing on the node
    would see it), so its ReplicaSet creates a replacement that lands elsewhere. A
    StatefulSet's pod is left to Kubernetes (its controller creates none until the old pod is
    gone for good, which takes the failed node's kubelet or a person)."""
    if w.owner_kind != "ReplicaSet" or w.key in run.evicted:
        return
    stop_lost(
        run,
        w,
        f"{w.key} was lost with node {w.node} ({why}): evicted now so that its Deployment "
        "replaces it on a healthy node (counted against its service's SLO)",
        checkpoint=False,
        recoveries=None,
    )


def stop_gang(
    run: Run, key: tuple[str, str, str], members: list[Workload], failed: dict[str, str]
) -> set[str]:
    """Stop the gang `key` whole when it lost a member; the pending pods it holds back."""
    if not failed and not any(m.terminating or m.failed_at is not None for m in members):
        return set()  # nothing lost, nothing gone: what follows finds the same
    live = [m for m in members if m.placed and not m.terminating and m.failed_at is None]
    lost_on_node = [m for m in live if m.node in failed]
    # gone: evicted or deleted (on a failed node too: its NoExecute toleration ran out before
    # the survivors' stop was done), or Failed during this run of the gang
    gone = [m for m in members if m.terminating and m.placed]
    gone += [m for m in members if m.failed_at is not None and failed_in_run(m, live)]
    if not lost_on_node and not (gone and live):
        return set()
    survivors = [m for m in live if m.node not in failed]
    if any(m.key in run.evicted for m in live):
        return set()
    what = f"gang {key[2]}" if key[1] == "gang" else f"{key[1]} {key[0]}/{key[2]}"
    first = (lost_on_node or gone)[0]
    how = (
        f"{first.key} on node {first.node} ({failed[first.node or '']})"
        if first in lost_on_node or first.node in failed
        else f"{first.key} failed on node {first.node}"
        if first.failed_at is not None
        else f"{first.key} was evicted or deleted"
    )
    gpu_hours = lost_gpu_hours(run, live)
    count = recoveries(run, live)
    reason = (
        f"{what} lost {how}: stopped whole ({gpu_hours:.2f} GPU-hours since its last "
        "checkpoint lost), to be re-admitted whole on healthy nodes"
    )
    stops = tuple(stop_lost(run, m, reason, checkpoint=True, recoveries=count) for m in survivors)
    for m in lost_on_node:
        stop_lost(run, m, reason, checkpoint=False, recoveries=count, after=stops)
    run.freed()
    held_note = (
        f"; recovery {count} of {C.RECOVERY_ATTEMPTS} in a row soon after a start"
        if count is not None and count > 1
        else ""
    )
    run.find(
        "warning",
        "gang-member-lost",
        first.key,
        f"{what} lost {how}: gpupool asks its {len(survivors)} surviving pod(s) to checkpoint, "
        f"stops the whole gang and re-admits it all or nothing on healthy nodes; "
        f"{gpu_hours:.2f} GPU-hours since its last checkpoint are lost{held_note}",
    )
    return {m.key for m in members if m.phase == "Pending" and not m.placed}


def failed_in_run(m: Workload, live: list[Workload]) -> bool:
    """The Failed member `m` belongs to the gang's current run: it failed no earlier than the
    first of the running members was created (a member that failed before the gang was
    stopped and resumed is history: the resumed pods were all created after it). Times not
    known: it counts."""
    created = [w.created_at for w in live if w.created_at is not None]
    return m.failed_at is None or not created or m.failed_at >= min(created)


def lost_gpu_hours(run: Run, live: list[Workload]) -> float:
    """GPU-hours the gang's running pods did since their last checkpoint (or start): what
    resuming from the checkpoint loses."""
    total = 0.0
    for m in live:
        seconds = run.unsaved_seconds(m) or 0.0
        total += max(seconds, 0.0) * float(m.request.gpus or len(m.allocations) or 1)
    return total / 3600


def recoveries(run: Run, live: list[Workload]) -> int | None:
    """The Job's recovery count after this stop (None: not a Job gpupool suspends): one more
    than before when the gang started within `QUICK_FAILURE_SECONDS` (it failed right after a
    resume), else 1."""
    job = suspended_job(live[0]) if live else ""
    if not job or kueue_mode(run):
        return None
    starts = [m.started_at for m in live]
    quick = (
        all(t is not None for t in starts)
        and (run.now - min(t for t in starts if t is not None)).total_seconds()
        < C.QUICK_FAILURE_SECONDS
    )
    before = run.observed.job_recoveries.get(f"{live[0].namespace}/{job}", 0)
    return before + 1 if quick else 1
