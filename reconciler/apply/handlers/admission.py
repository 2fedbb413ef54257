"""Admission handlers: admit a gated gang where the plan placed it, hold a pod that stays
gated (with the reason in its condition)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime

from reconciler import conventions as C
from reconciler.apply.handlers.base import (
    CACHE_POLL_SECONDS,
    CLAIM_POLL_SECONDS,
    CLAIMS_WAIT_RECENT_SECONDS,
    GONE_POLL_SECONDS,
    GONE_WAIT_RECENT_SECONDS,
    Context,
    Outcome,
    _ns_name,
    handles,
)
from reconciler.apply.handlers.dra_admit import (
    KIND,
    Replaced,
    delete_replaced,
    is_ref,
    mark_claims,
    pin_claims,
)
from reconciler.apply.port import ApiError, PodInfo
from reconciler.plan.actions import Admit, Hold, PodAdmission

# A gated pod (`gpupool.io/admission` scheduling gate, deploy/admission-gate.yaml) is left alone
# by kube-scheduler until gpupool admits it: the Admit step pins it to the node the plan chose
# (required node affinity on metadata.name) and removes the gate in one patch
# (`ClusterOps.admit_pod`); Hold tells the owner of a pod that stays gated why.


def _gone(a: Admit, key: str, what: str = "gone") -> Outcome:
    return Outcome(a.id, "skipped", f"pod {key} is {what}; the gang is planned again next cycle")


def _still_there(ctx: Context, after: tuple[str, ...]) -> list[tuple[str, PodInfo]]:
    """The pods of `after` that kube-scheduler still counts on their node: not finished (its
    pod informer lists only pods not Succeeded or Failed: k8s.io/kubernetes v1.37.2
    pkg/scheduler/scheduler.go, newPodInformer), and terminating or bound. A pod of that name
    that exists unbound and not terminating is a new pod (a StatefulSet recreates its evicted
    pod under the same name): it holds no card."""
    out = []
    for key in after:
        ns, name = _ns_name(key)
        p = ctx.ops.read_pod(ns, name)
        if p is None or p.phase in ("Succeeded", "Failed"):
            continue
        if not p.deleting and p.node is None:
            continue
        out.append((key, p))
    return out


def _going_now(ctx: Context, pods: list[tuple[str, PodInfo]]) -> bool:
    """Each pod is terminating, its deletion asked for a moment ago: worth a short wait."""
    now = ctx.wall()
    return all(
        p.deleting
        and p.delete_asked is not None
        and abs((now - p.delete_asked).total_seconds()) < GONE_WAIT_RECENT_SECONDS
        for _, p in pods
    )


def _unnamed(ctx: Context, p: PodInfo) -> bool:
    """A pod created a moment ago (`CLAIMS_WAIT_RECENT_SECONDS`) whose status does not name a
    claim of its own yet: Kubernetes' resourceclaim controller makes the claim from the pod's
    template, then writes its name there, tens of ms after the pod's creation."""
    if p.created is None or all(name for _, name in p.claims):
        return False
    return abs((ctx.wall() - p.created).total_seconds()) < CLAIMS_WAIT_RECENT_SECONDS


def _claims_named(a: Admit, ctx: Context, pods: dict[str, PodInfo]) -> Outcome | None:
    """Step 1 on DRA: the pods just created whose claims are not named yet (`_unnamed`) are
    looked at again, for up to `gone_wait_seconds`, until their status names them (`pods`
    updated): their claims are written in this step, not a cycle later (without a name step 5
    can only say `waiting`). Each look takes the watch cache's copy where it has one (every
    `CACHE_POLL_SECONDS`: no request; the name comes with kube-controller-manager's status
    write), else reads the pod (every `GONE_POLL_SECONDS`). One gone or terminating
    meanwhile: the step's outcome for it. Whatever is still unnamed after the wait is step
    5's to say."""
    left = [w.name for w in a.pods if _unnamed(ctx, pods[w.name])]
    budget = ctx.cfg.gone_wait_seconds
    pause = CACHE_POLL_SECONDS if _all_cached(ctx, a.namespace, left) else GONE_POLL_SECONDS
    while left and budget > 1e-9:
        ctx.sleep(pause)
        budget -= pause
        pause = CACHE_POLL_SECONDS
        for name in left:
            pod = ctx.ops.peek_pod(a.namespace, name)
            if pod is None or pod.deleting:  # not held: read; deleting: the server says so too
                pod, pause = ctx.ops.read_pod(a.namespace, name), GONE_POLL_SECONDS
            if pod is None or pod.deleting:
                what = "gone" if pod is None else "terminating"
                return _gone(a, f"{a.namespace}/{name}", what)
            pods[name] = pod
        left = [n for n in left if not all(c for _, c in pods[n].claims)]
    return None


def _all_cached(ctx: Context, ns: str, names: list[str]) -> bool:
    """Whether the watch cache holds each of these pods (`peek_pod`)."""
    return bool(names) and all(ctx.ops.peek_pod(ns, n) is not None for n in names)


def _allocated(ctx: Context, claims: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
    """The ResourceClaims of `claims` (namespace/name) that still have an allocation: their
    devices are taken to kube-scheduler's allocator until Kubernetes' resourceclaim controller
    deallocates them (the pod that held one is gone) or deletes them; and whether that was
    said without a request. The watch cache's copy (`peek_dra_object`) is taken when it shows
    the claim deallocated (the departing pod's claim was allocated long before: a copy without
    the allocation has seen it go) or still allocated (it may lag: looked at again); a claim
    the cache does not hold is read (deleted, or no cache)."""
    out, asked = [], False
    for key in claims:
        ns, name = _ns_name(key)
        claim = ctx.ops.peek_dra_object(KIND, ns, name)
        if claim is None:
            claim, asked = ctx.ops.read_dra_object(KIND, ns, name), True
        if claim is not None and (claim.get("status") or {}).get("allocation"):
            out.append(key)
    return tuple(out), not asked


def _wait_gone(ctx: Context, left: list[tuple[str, PodInfo]], claims: tuple[str, ...]) -> str:
    """The pods of `left` (`_still_there`'s first reading, the caller's) read again every
    `GONE_POLL_SECONDS` for up to `gone_wait_seconds` while what is left is going now
    (`_going_now`); once those pods are gone, the `claims` they held (DRA) until each is
    deallocated, within the same time: every `CACHE_POLL_SECONDS` while the watch cache
    answers for them (`_allocated`), else read every `CLAIM_POLL_SECONDS`. Then what the step
    still waits for, said ("" when nothing)."""
    held, cached = _allocated(ctx, claims) if not left else (claims, False)
    budget = ctx.cfg.gone_wait_seconds
    while (left or held) and budget > 1e-9 and _going_now(ctx, left):
        pause = GONE_POLL_SECONDS if left else CACHE_POLL_SECONDS if cached else CLAIM_POLL_SECONDS
        ctx.sleep(pause)
        budget -= pause
        left = _still_there(ctx, tuple(k for k, _ in left))
        held, cached = _allocated(ctx, held) if not left else (held, False)
    if left:
        pods = [f"{k} (terminating)" if p.deleting else f"{k} (not evicted yet)" for k, p in left]
        return f"waits for {', '.join(pods)} to be gone: kube-scheduler still counts its cards"
    if held:
        claimed = ", ".join(f"ResourceClaim {k} (still allocated)" for k in held)
        return (
            f"waits for {claimed} to be deallocated: kube-scheduler's allocator still counts "
            f"its devices"
        )
    return ""


@dataclass
class _Written:
    """What a run of `admit` has written so far, for its outcome when a request fails midway."""

    wrote: bool = False
    current: str = ""
    """The pod of the last write made or tried (the one a 404 or 422 is about)."""


def _reserve(a: Admit, ctx: Context, pods: dict[str, PodInfo], done: _Written) -> None:
    """The reservation annotation on every gated pod of the gang that does not carry it yet."""
    ns = a.namespace
    for want in a.pods:
        pod = pods[want.name]
        reserved = f"{want.node}:{','.join(map(str, want.gpus))}"
        if C.ADMISSION_GATE in pod.gates and pod.annotations.get(C.RESERVED_ANN) != reserved:
            done.current = want.name
            ctx.ops.annotate_pod(ns, want.name, {C.RESERVED_ANN: reserved})
            done.wrote = True


def _holders(a: Admit, pods: dict[str, PodInfo]) -> tuple[list[PodAdmission], list[str]]:
    """Who holds each pod now: the pods still to admit, and why any pod is not gpupool's to
    admit (admitted elsewhere before, ungated by someone else, held by another gate)."""
    todo, left = [], []
    for want in a.pods:
        pod = pods[want.name]
        if C.ADMISSION_GATE not in pod.gates:
            admitted = pod.annotations.get(C.ADMITTED_ANN)
            if admitted == want.node:
                continue  # admitted by an earlier run of this step
            left.append(
                f"{want.name} was admitted to {admitted} before"
                if admitted
                else f"{want.name} was ungated by someone else"
            )
        elif len(pod.gates) > 1:
            others = ", ".join(g for g in pod.gates if g != C.ADMISSION_GATE)
            left.append(f"{want.name} is held by another admission system ({others})")
        else:
            todo.append(want)
    return todo, left


def _admit_pods(
    a: Admit,
    ctx: Context,
    pods: dict[str, PodInfo],
    todo: list[PodAdmission],
    done: _Written,
) -> None:
    """Affinity, the gate's removal and the annotations in one patch per pod of `todo`."""
    ns = a.namespace
    for want in todo:
        annotations = {C.ADMITTED_ANN: want.node}
        if want.gpus:
            annotations[C.INTENDED_GPUS_ANN] = ",".join(map(str, want.gpus))
        done.current = want.name
        ctx.ops.admit_pod(ns, want.name, node=want.node, annotations=annotations)
        done.wrote = True
        held = pods[want.name].condition(C.ADMITTED_CONDITION)
        if held is not None and held.status == "False":
            # the wait a Hold reported is over: say so, not a stale reason
            ctx.ops.set_pod_condition(
                ns,
                want.name,
                type=C.ADMITTED_CONDITION,
                status="True",
                reason="Admitted",
                message=f"admitted to {want.node}",
                last_transition_time=_rfc3339(ctx.clock()),
            )


def _pins_early(a: Admit) -> bool:
    """A DRA admission that waits for pods to go, whose pins are selectors only: its claims can
    be written before a short wait. Not a planned DynamicMIG partition (`is_ref`), nor an
    admission by allocation (`refs`): gpupool writes the allocation, which must not name a
    device the allocator still counts taken."""
    devices = [d for p in a.pods for d in p.devices]
    refs = any(p.refs for p in a.pods)
    return bool(a.after) and bool(devices) and not refs and not any(is_ref(d) for d in devices)


def _marks_early(a: Admit) -> bool:
    """A DRA admission by allocation (`refs`) that waits for pods to go or their claims to be
    deallocated: each pod's own claim can get its first write (the plan and Kubernetes'
    finalizer: dra_own.py `mark_own`) before the wait, and only the allocation after it. The
    allocation itself must wait: it must not name a device the allocator still counts
    taken."""
    return bool(a.after or a.after_claims) and any(p.refs for p in a.pods)


def _mark_early(
    a: Admit, ctx: Context, pods: dict[str, PodInfo], done: _Written, marked: dict[str, dict]
) -> None:
    """`_marks_early`'s writes, on the pods gpupool holds (none when one is not: the step
    stops at step 3 all the same)."""
    todo, left = _holders(a, pods)
    if left:
        return
    for want in todo:
        done.current = want.name
        mark_claims(ctx, a.namespace, want, pods[want.name], marked)
    done.wrote = done.wrote or bool(marked)


def _pin(
    a: Admit,
    ctx: Context,
    pods: dict[str, PodInfo],
    done: _Written,
    pinned: list[str],
    replaced: list[Replaced],
    marked: dict[str, dict] | None = None,
) -> tuple[list[PodAdmission], Outcome | None]:
    """Steps 3 and 4 of `admit`: (the pods still to admit, None) when every one is gpupool's
    and its claims are written, else (those pods, the step's outcome)."""
    # 3. who holds each pod now
    todo, left = _holders(a, pods)
    if left:
        return todo, Outcome(
            a.id,
            "skipped",
            f"{'; '.join(left)}: left alone, nothing admitted; the gang is planned again "
            f"next cycle",
            changed=done.wrote,
        )
    # 4. DRA pools: every pod's claims written for its planned devices (all of the gang's
    # before any pod is released, so a claim that cannot be pinned admits none); the claims
    # the pinned ones replace are only collected here
    for want in todo:
        done.current = want.name
        pod = pods[want.name]
        status, why = pin_claims(ctx, a.namespace, want, pod, pinned, replaced, marked)
        done.wrote = done.wrote or bool(pinned)
        if status:
            return todo, Outcome(a.id, status, why, changed=done.wrote)
    return todo, None


@handles(Admit)
def admit(a: Admit, ctx: Context) -> Outcome:
    """Level-triggered over the gang's pods: reservation annotations, then (once every pod
    evicted for the cards is gone) one admission patch per pod still gated. A gang is admitted
    whole: a pod gone, terminating, held by another admission system's gate or ungated by
    someone else skips the step (nothing admitted), and the next cycle plans again.

    The pods are taken from the watch cache the cycle observed through where it holds them
    (`ClusterOps.peek_pod`: no request; what a plan was made from), not read again: every write
    that follows is conditional on what it was made from (the admission patch on the pod's
    resourceVersion, a claim's writes on the claim's). One refused because the pod changed
    meanwhile (409), or a step that fails on a copy that was behind (the gate removed by
    someone else, a claim allocated since), runs once more on pods read from the server."""
    out = _admit(a, ctx, fresh=False)
    if isinstance(out, _Again):
        again = _admit(a, ctx, fresh=True)
        assert not isinstance(again, _Again)
        return dataclasses.replace(again, changed=again.changed or out.changed)
    return out


@dataclass
class _Again:
    """`_admit`'s answer when its run on the cache's copies is to be run again on fresh reads."""

    changed: bool


def _pods_of(a: Admit, ctx: Context, fresh: bool) -> tuple[dict[str, PodInfo], bool] | Outcome:
    """The gang's pods (the cache's copies unless `fresh`, read where it has none) and whether
    any is the cache's copy; or the step's outcome when one is gone or terminating (as
    deletion cannot be undone, the cache's word is enough)."""
    pods: dict[str, PodInfo] = {}
    peeked = False
    for want in a.pods:
        pod = None if fresh else ctx.ops.peek_pod(a.namespace, want.name)
        peeked = peeked or pod is not None
        if pod is None:
            pod = ctx.ops.read_pod(a.namespace, want.name)
        if pod is None or pod.deleting:
            what = "gone" if pod is None else "terminating"
            return _gone(a, f"{a.namespace}/{want.name}", what)
        pods[want.name] = pod
    return pods, peeked


def _admit(a: Admit, ctx: Context, fresh: bool) -> Outcome | _Again:
    """`admit`, on the cache's copies of the pods unless `fresh` (then on reads)."""
    got = _pods_of(a, ctx, fresh)
    if isinstance(got, Outcome):
        return got
    pods, peeked = got
    out = _admit_read(a, ctx, pods, peeked)
    if peeked and not isinstance(out, _Again) and out.status == "failed":
        return _Again(out.changed)
    return out


def _admit_read(a: Admit, ctx: Context, pods: dict[str, PodInfo], peeked: bool) -> Outcome | _Again:
    """`admit` on `pods` (`peeked`: some are the cache's copies)."""
    ns = a.namespace
    unnamed = _claims_named(a, ctx, pods)
    if unnamed is not None:
        return unnamed
    done = _Written()
    try:
        # 1. the pods evicted for these cards must be GONE, not just terminating: kube-scheduler
        # keeps a bound pod in its cache, counting its requests on the node, until the pod's
        # delete event (k8s.io/kubernetes v1.37.2 pkg/scheduler/eventhandlers.go,
        # deleteAssignedPodFromCache), so an admitted pod would find the node full. Worse, its
        # DefaultPreemption may then preempt OTHER pods on the node: it holds a preemptor back
        # only while a pod on its nominated node is terminating *by scheduler preemption*
        # (pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go,
        # PodEligibleToPreemptOthers -> preemption.PodTerminatingByPreemption, which looks for
        # a DisruptionTarget condition with reason PreemptionByScheduler); a pod evicted through
        # the Eviction API carries reason EvictionByEvictionAPI instead
        # (pkg/registry/core/pod/storage/eviction.go), so it does not hold anything back.
        # (a pod that is going now is waited for a moment, GONE_WAIT_RECENT_SECONDS: its cards
        # go on the moment it is gone, not a cycle later; on DRA then its claims, until
        # Kubernetes' resourceclaim controller deallocates them, a few ms after the pod went:
        # the allocator counts a device taken while an allocation names it)
        # (on DRA, where the pins are selectors only, steps 3 and 4 come first when the pods
        # of `after` are going now: the pinned claims are written while they go, off the path
        # from their going to the gate's release; an unallocated claim of a gated pod holds
        # nothing. Not for a longer wait: the template's claim and the pinned one would both
        # count against the namespace's quota meanwhile)
        # (by allocation, each pod's own claim gets its first write, the plan and the
        # finalizer, before that wait, and only its allocation after it: `_marks_early`)
        pinned: list[str] = []
        replaced: list[Replaced] = []
        marked: dict[str, dict] = {}
        left = _still_there(ctx, a.after)
        early = _pins_early(a) and _going_now(ctx, left)
        if early:
            todo, stop = _pin(a, ctx, pods, done, pinned, replaced)
            if stop is not None:
                return stop
        elif _marks_early(a) and _going_now(ctx, left):
            _mark_early(a, ctx, pods, done, marked)
        waiting = _wait_gone(ctx, left, a.after_claims)
        # 2. the reservation, before this step waits or admits a gang pod by pod: the next
        # cycles plan from scratch and read it back, so they keep freeing these cards for this
        # gang instead of giving them to someone else (one pod admitted at once needs none)
        if waiting or len(a.pods) > 1:
            _reserve(a, ctx, pods, done)
        if waiting:
            return Outcome(a.id, "waiting", waiting, changed=done.wrote)
        if not early:
            todo, stop = _pin(a, ctx, pods, done, pinned, replaced, marked)
            if stop is not None:
                return stop
        # 5. admit: affinity, the gate's removal and the annotations in one patch per pod
        _admit_pods(a, ctx, pods, todo, done)
        # 6. then the replaced claims are deleted, off the path from plan to running pod: each
        # pod's status names its pinned claim already, which is all kube-scheduler and the
        # resourceclaim controller go by (dra_admit.py `delete_replaced`); one that cannot be
        # deleted now is left to the planner's sweep, the pods stay admitted
        done.current = ""
        left = delete_replaced(ctx, ns, replaced)
    except ApiError as exc:
        if exc.status == 409 and peeked:  # changed since the cache's copy: read, decide again
            return _Again(done.wrote)
        if exc.status == 404 and done.current:  # deleted since it was read
            return dataclasses.replace(_gone(a, f"{ns}/{done.current}"), changed=done.wrote)
        if exc.status == 422:  # e.g. the gate went between our read and the patch
            return Outcome(
                a.id,
                "failed",
                f"pod {ns}/{done.current}: the API server refused the admission: {exc.message}",
                done.wrote,
            )
        raise
    placed = ", ".join(f"{w.name} -> {w.node}" for w in a.pods)
    if not todo:
        return Outcome(a.id, "done", f"already admitted {len(a.pods)} pod(s): {placed}", done.wrote)
    return Outcome(
        a.id,
        "done",
        f"admitted {len(a.pods)} pod(s): {placed}" + (f"; {left}" if left else ""),
        changed=True,
    )


def condition_reason(code: str) -> str:
    """A condition reason (CamelCase) from a finding code: `held-cap` -> `HeldCap`."""
    return "".join(p[:1].upper() + p[1:] for p in code.replace("_", "-").split("-") if p)


def _rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@handles(Hold)
def hold(a: Hold, ctx: Context) -> Outcome:
    """The condition `gpupool.io/Admitted` False, with the reason, on a pod that stays gated
    (`kubectl describe pod` shows it). Written only when it says something else.

    Decided on the watch cache's copy of the pod where it holds one (`ClusterOps.peek_pod`: no
    request), as an Admit is: its gate gone is certain (a gate never comes back), and the
    condition is gpupool's own, which the copy shows as gpupool last wrote it; the write is
    conditional on the copy's version, so a pod changed since (ungated by someone else, say)
    is a 409, and the step is decided again on the pod read from the server."""
    ns, name = _ns_name(a.target)
    pod = ctx.ops.peek_pod(ns, name)
    if pod is not None and pod.resource_version:
        out = _hold(a, ctx, pod, conditional=True)
        if out is not None:
            return out
    out = _hold(a, ctx, ctx.ops.read_pod(ns, name), conditional=False)
    assert out is not None  # only a conditional write answers None
    return out


def _hold(a: Hold, ctx: Context, pod: PodInfo | None, conditional: bool) -> Outcome | None:
    """`hold` on `pod` (None: gone); None when the write was conditional and the pod changed
    since the copy (409): to be decided again on a read."""
    ns, name = _ns_name(a.target)
    if pod is None:
        return Outcome(a.id, "done", "pod is gone")
    if C.ADMISSION_GATE not in pod.gates:
        return Outcome(a.id, "done", "admitted meanwhile (no longer gated)")
    reason = condition_reason(a.code)
    cur = pod.condition(C.ADMITTED_CONDITION)
    # a node named for an admission that did not go through (dra_admit.py `_replace`): while
    # only gpupool's gate holds the pod, where it goes is gpupool's to say, and it has no place
    stale = bool(pod.nominated) and pod.gates == (C.ADMISSION_GATE,)
    if (
        cur is not None
        and (cur.status, cur.reason, cur.message) == ("False", reason, a.message)
        and not stale
    ):
        return Outcome(a.id, "done", f"already held: {a.message}")
    since = (  # the time the status last changed: kept while it stays False
        cur.last_transition_time
        if cur is not None and cur.status == "False" and cur.last_transition_time
        else _rfc3339(ctx.clock())
    )
    try:
        ctx.ops.set_pod_condition(
            ns,
            name,
            type=C.ADMITTED_CONDITION,
            status="False",
            reason=reason,
            message=a.message,
            last_transition_time=since,
            clear_nominated=stale,
            resource_version=pod.resource_version if conditional else "",
        )
    except ApiError as exc:
        if exc.status == 404:
            return Outcome(a.id, "done", "pod is gone")
        if exc.status == 409 and conditional:
            return None
        raise
    return Outcome(a.id, "done", f"held: {a.message}", changed=True)
