"""Workload handlers: checkpoint requests, stopping a running pod (preempt, reclaim, move:
evict it or suspend its Job), resuming a Job gpupool suspended, and scaling (replicas, or an
autoscaler's min/max)."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context, Outcome, _ns_name, handles, parse_time
from reconciler.apply.port import ApiError, PodInfo
from reconciler.plan.actions import (
    Checkpoint,
    Eviction,
    Move,
    Preempt,
    Reclaim,
    Resume,
    Scale,
    SetScaleEnvelope,
)

STALE_CHECKPOINT_SECONDS = 3600.0  # a checkpoint request older than grace + this is asked again


@handles(Checkpoint)
def checkpoint(a: Checkpoint, ctx: Context) -> Outcome:
    ns, name = _ns_name(a.target)
    pod = ctx.ops.read_pod(ns, name)
    if pod is None:
        return Outcome(a.id, "done", "pod is gone")
    asked = parse_time(pod.annotations.get(C.CHECKPOINT_REQUESTED_ANN))
    if asked is not None:
        age = (ctx.clock() - asked).total_seconds()
        if age <= a.grace_period_seconds + STALE_CHECKPOINT_SECONDS:
            return Outcome(
                a.id, "done", f"requested at {pod.annotations[C.CHECKPOINT_REQUESTED_ANN]}"
            )
        # left over from an earlier, abandoned plan: ask again, and wait the grace again
    # a done mark left from an earlier request must not cut this one's grace period short
    ctx.ops.annotate_pod(
        ns, name, {C.CHECKPOINT_REQUESTED_ANN: ctx.clock().isoformat(), C.CHECKPOINT_DONE_ANN: None}
    )
    return Outcome(a.id, "done", "checkpoint requested", changed=True)


def _grace_left(a: Eviction, ctx: Context, annotations: dict[str, str]) -> float:
    ck = next((d for d in a.depends_on if d.startswith("checkpoint:")), None)
    if ck is None:
        return 0.0
    grace = ctx.grace.get(ck, 0.0)
    asked = parse_time(annotations.get(C.CHECKPOINT_REQUESTED_ANN))
    if asked is None:
        return grace
    if annotations.get(C.CHECKPOINT_DONE_ANN):
        return 0.0
    return grace - (ctx.clock() - asked).total_seconds()


def _reserve_next_pod(a: Move, ctx: Context, pod: PodInfo) -> str:
    """A move lands where the plan meant only if the pod that replaces the evicted one is
    admitted to `to_node`: for a Job's pod, the Job gets `gpupool.io/next-pod-reserved:
    <node>:<cards>@<now>` before the eviction, and the pod it creates next (gated) is reserved
    on those cards. Left alone when the Job already says so for the same cards (a retry after a
    PodDisruptionBudget refused the eviction), unless that was more than half of
    NEXT_POD_RESERVATION_TTL_SECONDS ago: the reservation is honoured only for pods created
    within the TTL of its time, so the pod this eviction makes room for gets at least half of
    it. Returns a note for the Outcome's message."""
    if pod.owner_kind != "Job" or not pod.owner_name:
        # a ReplicaSet's or StatefulSet's replacement is not reserved (it is admitted like any
        # new pod, wherever the plan then finds room); a bare pod is not recreated at all
        return ""
    ns, job = pod.namespace, pod.owner_name
    where = f"{a.to_node}:{','.join(map(str, a.to_gpus))}"
    gone = f" (its Job {job} is gone: no pod replaces it)"
    info = ctx.ops.read_job(ns, job)
    if info is None:
        return gone
    held, _, since = info.annotations.get(C.NEXT_POD_RESERVED_ANN, "").partition("@")
    at = parse_time(since)
    fresh = at is not None and (
        (ctx.clock() - at).total_seconds() <= C.NEXT_POD_RESERVATION_TTL_SECONDS / 2
    )
    if held != where or not fresh:
        try:
            ctx.ops.annotate_job(
                ns, job, {C.NEXT_POD_RESERVED_ANN: f"{where}@{ctx.clock().isoformat()}"}
            )
        except ApiError as exc:
            if exc.status == 404:  # deleted since: nothing will recreate the pod
                return gone
            raise
    return f"; the next pod of Job {job} is reserved on {a.to_node}"


# Suspending a Job, as the Job controller carries it out (k8s.io/kubernetes v1.37.2
# pkg/controller/job/job_controller.go):
# * `manageJob`: while `jobSuspended(job)` (spec.suspend true) it deletes every active pod
#   ("Deleting all active pods in suspended job": `deleteJobPods` on all of `activePods`) and
#   returns before the code that creates pods, so it creates none while suspended; once
#   spec.suspend is false again the same function creates pods up to `parallelism` (the
#   `wantActive` branch). `syncJob` sets the JobSuspended condition (reason JobSuspended, then
#   JobResumed) and, on resume, restarts `status.startTime`, so activeDeadlineSeconds counts
#   only time not suspended.
# * `deleteJobPods` -> `RealPodControl.DeletePod` (pkg/controller/controller_utils.go) is a plain
#   DELETE with empty DeleteOptions: graceful (the kubelet sends SIGTERM, then SIGKILL after the
#   pod's terminationGracePeriodSeconds), and NOT through the Eviction API, so no
#   PodDisruptionBudget is consulted.
# * Not counted as failures: `deleteJobPods` first removes the pod's `batch.kubernetes.io/
#   job-tracking` finalizer (`removeTrackingFinalizerPatch`), then deletes it. The failure
#   count that `exceedsBackoffLimit := jobCtx.failed > *job.Spec.BackoffLimit` compares comes
#   from `getNewFinishedPods` -> `getValidPodsWithFilter` and from
#   `trackJobStatusAndRemoveFinalizers`, and both skip pods without that finalizer. So pods
#   deleted because of the suspension never reach status.failed or backoffLimit. (A pod evicted
#   or deleted by anyone else keeps the finalizer and `isPodFailed` counts it: phase Failed, or
#   deleted before it succeeded; only a podFailurePolicy rule can ignore it. Evicting a Job's
#   pods spends its backoffLimit, suspending the Job does not.)
# * `managedByExternalController`: a Job whose spec.managedBy names another controller is not
#   synced at all, so none of the above happens to it (its manager decides).


def _suspend_job(a: Eviction, ctx: Context, ns: str, job: str) -> Outcome | None:
    """Stop the pod's gang by suspending its Job: one merge patch of `spec.suspend: true` and
    `gpupool.io/suspended-at: <now>` (the mark gpupool resumes by; a recovery also writes its
    `gpupool.io/recoveries` count). None: the Job is gone, the
    caller evicts the pod instead."""
    info = ctx.ops.read_job(ns, job)
    if info is None:
        return None
    if info.suspended:
        if C.SUSPENDED_BY_ANN not in info.annotations:
            return Outcome(
                a.id,
                "done",
                f"Job {job} is already suspended by someone else (no {C.SUSPENDED_BY_ANN}): "
                "the Job controller stops its pods; gpupool will not resume it",
            )
        return Outcome(
            a.id,
            "done",
            f"Job {job} already suspended by gpupool at {info.annotations[C.SUSPENDED_BY_ANN]}: "
            "the Job controller stops its pods",
            stopped=True,
        )
    try:
        marks = {C.SUSPENDED_BY_ANN: ctx.clock().isoformat()}
        if a.recoveries is not None:
            marks[C.RECOVERIES_ANN] = str(a.recoveries)
        ctx.ops.set_job_suspend(ns, job, suspend=True, annotations=marks)
    except ApiError as exc:
        if exc.status == 404:  # deleted since it was read
            return None
        raise
    return Outcome(
        a.id,
        "done",
        f"suspended Job {job}: the Job controller stops its pods",
        changed=True,
        stopped=True,
    )


@handles(Preempt, Reclaim, Move)
def evict(a: Eviction, ctx: Context) -> Outcome:
    """Stop a running pod: wait out its checkpoint's grace period, record the stop in the
    hourly budget (`before_preempt`, write-ahead, once per run that gets this far), then, for a
    Job's gang (`suspend_job`, never a move), suspend the Job; else (or when that Job is gone)
    evict the pod through the Eviction API. A pod already gone or terminating: done, nothing
    recorded or written."""
    ns, name = _ns_name(a.target)
    pod = ctx.ops.read_pod(ns, name)
    if pod is None:
        return Outcome(a.id, "done", "pod is gone")
    if pod.deleting:
        return Outcome(a.id, "done", "pod is terminating")
    left = _grace_left(a, ctx, pod.annotations)
    if left > 0:
        return Outcome(a.id, "waiting", f"checkpoint grace period: {int(left)}s left")
    note = ""
    if a.suspend_job and not isinstance(a, Move):
        if ctx.before_preempt is not None:  # before the write that stops it: write-ahead
            ctx.before_preempt(a, pod)
        out = _suspend_job(a, ctx, ns, a.suspend_job)
        if out is not None:
            return out
        note = f" (its Job {a.suspend_job} is gone: the pod is evicted instead)"
    else:
        if isinstance(a, Move) and a.to_node:
            if pod.annotations.get(C.MOVE_TO_ANN) != a.to_node:
                ctx.ops.annotate_pod(ns, name, {C.MOVE_TO_ANN: a.to_node})
            note = _reserve_next_pod(a, ctx, pod)
        if ctx.before_preempt is not None:  # every eviction kind spends the hourly budget
            ctx.before_preempt(a, pod)
    try:
        ctx.ops.evict_pod(ns, name)
    except ApiError as exc:
        if exc.status == 429:
            return Outcome(
                a.id,
                "blocked",
                f"a PodDisruptionBudget does not allow it now; retried next cycle ({exc.message})",
            )
        if exc.status == 404:
            return Outcome(a.id, "done", "pod is gone")
        raise
    return Outcome(a.id, "done", f"evicted{note}", changed=True, stopped=True)


@handles(Resume)
def resume(a: Resume, ctx: Context) -> Outcome:
    """Let a Job gpupool suspended run again: one merge patch of `spec.suspend: false` that
    also removes `gpupool.io/suspended-at`; the Job controller then creates its pods (gated by
    the admission policy, admitted like any gated gang). Only a Job that carries that mark: one
    suspended by someone else (its owner, Kueue) is theirs to resume."""
    ns, name = _ns_name(a.target)
    job = ctx.ops.read_job(ns, name)
    if job is None:
        return Outcome(a.id, "done", "Job is gone")
    if not job.suspended:
        return Outcome(a.id, "done", "Job is not suspended: nothing to resume")
    if C.SUSPENDED_BY_ANN not in job.annotations:
        return Outcome(
            a.id,
            "skipped",
            f"Job {name} was suspended by someone else (no {C.SUSPENDED_BY_ANN}, e.g. by Kueue "
            "or its owner): gpupool leaves it suspended",
        )
    try:
        ctx.ops.set_job_suspend(ns, name, suspend=False, annotations={C.SUSPENDED_BY_ANN: None})
    except ApiError as exc:
        if exc.status == 404:  # deleted since it was read
            return Outcome(a.id, "done", "Job is gone")
        raise
    return Outcome(
        a.id,
        "done",
        f"resumed Job {name} (suspended at {job.annotations[C.SUSPENDED_BY_ANN]}): the Job "
        "controller creates its pods",
        changed=True,
    )


@handles(Scale)
def scale(a: Scale, ctx: Context) -> Outcome:
    """One patch sets replicas and the last-scale annotation together (a crash cannot leave one
    without the other), guarded by the resourceVersion read (no lost update)."""
    ns, name = _ns_name(a.target)
    cur = ctx.ops.read_workload(a.workload_kind, ns, name)
    if cur.replicas == a.to_replicas:
        return Outcome(a.id, "done", f"already {a.to_replicas} replicas")
    if cur.replicas != a.from_replicas:
        return Outcome(
            a.id,
            "skipped",
            f"replicas changed to {cur.replicas} since the plan; replanned next cycle",
        )
    ctx.ops.scale_workload(
        a.workload_kind,
        ns,
        name,
        replicas=a.to_replicas,
        resource_version=cur.resource_version,
        annotations={C.LAST_SCALE_ANN: ctx.clock().isoformat()},
    )
    return Outcome(a.id, "done", f"{cur.replicas} -> {a.to_replicas} replicas", changed=True)


@handles(SetScaleEnvelope)
def scale_envelope(a: SetScaleEnvelope, ctx: Context) -> Outcome:
    """The autoscaler's min/max and the last-scale annotation in one merge patch, guarded by
    the resourceVersion read (no lost update); the workload itself is never written (its
    autoscaler scales it). Skipped when the autoscaler is gone, scales another workload, is
    the HPA KEDA made for a ScaledObject (KEDA would revert it) or changed since the plan."""
    ns, name = _ns_name(a.target)
    cur = ctx.ops.read_autoscaler(a.autoscaler_kind, ns, name)
    what = f"{a.autoscaler_kind} {name}"
    if cur is None:
        return Outcome(a.id, "skipped", f"{what} is gone; replanned next cycle")
    if cur.owner:
        return Outcome(
            a.id, "skipped", f"{what} is managed by {cur.owner} (KEDA); gpupool leaves it alone"
        )
    if (cur.target_kind, cur.target_name) != (a.workload_kind, a.workload):
        return Outcome(
            a.id,
            "skipped",
            f"{what} now scales {cur.target_kind} {cur.target_name}, not {a.workload_kind} "
            f"{a.workload}; replanned next cycle",
        )
    if (cur.min_replicas, cur.max_replicas) == (a.to_min, a.to_max):
        return Outcome(a.id, "done", f"already min {a.to_min}, max {a.to_max}")
    if (cur.min_replicas, cur.max_replicas) != (a.from_min, a.from_max):
        return Outcome(
            a.id,
            "skipped",
            f"min/max changed to {cur.min_replicas}/{cur.max_replicas} since the plan; "
            "replanned next cycle",
        )
    ctx.ops.set_autoscaler_bounds(
        a.autoscaler_kind,
        ns,
        name,
        min_replicas=a.to_min,
        max_replicas=a.to_max,
        resource_version=cur.resource_version,
        annotations={C.LAST_SCALE_ANN: ctx.clock().isoformat()},
    )
    return Outcome(
        a.id,
        "done",
        f"min/max {cur.min_replicas}/{cur.max_replicas} -> {a.to_min}/{a.to_max}",
        changed=True,
    )
