"""Demand: the units the plan tries to place (`Demand`, run.py): pending pods (a gang as one
unit, all or nothing), Jobs gpupool suspended, and the replicas scaling adds; why a unit can
never run in its pool; and `record_wait`, the one way a unit waits (a finding, and a Hold on
its gated pods)."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

from reconciler.conventions import (
    KUEUE_LOCAL_QUEUE,
    KUEUE_QUEUE_LABEL,
    RECOVERIES_ANN,
    RECOVERY_ATTEMPTS,
)
from reconciler.observe.model import (
    Request,
    Workload,
)
from reconciler.plan.actions import (
    Hold,
)
from reconciler.plan.cluster import (
    PoolView,
)
from reconciler.plan.run import BUDGET, Demand, Run, gang_key, kueue_mode
from reconciler.policy.quantity import quantity_bytes

ADMISSION_CODES = frozenset({"held-cap", "held-quota", "held-borrowing", "held-lending"})


ADMITTED_ELSEWHERE = frozenset({"admitted", "other"})  # pending pods that are not demand


def pending_demand(run: Run) -> list[Demand]:
    """Pending pods as units of demand: the pending whole-card pods of one gang (`gang_key`)
    are one unit, placed, admitted and stopped all together or not at all. Pods admitted
    already, or still gated by another admission system, are not demand. A gang whose pods
    disagree (request, class, pool, size) or that is not complete yet (fewer pods than its
    size) waits, with a finding."""
    groups: dict[object, list[Workload]] = {}
    for w in run.cluster.workloads.values():
        if w.phase != "Pending" or w.request.kind == "none" or w.admission in ADMITTED_ELSEWHERE:
            continue
        if w.admission == "scheduler" and w.reserved_node:
            run.find(
                "warning",
                "gate-removed",
                w.key,
                f"gpupool's scheduling gate was removed by someone else before it admitted the "
                f"pod (cards were reserved for it on {w.reserved_node}): kube-scheduler places "
                "it outside gpupool's plan",
            )
        elif (
            w.admission == "gpupool"
            and run.observed.gated_namespaces is not None
            and w.namespace not in run.observed.gated_namespaces
        ):
            run.find(
                "warning",
                "gated-unmanaged-namespace",
                w.key,
                f"carries gpupool's scheduling gate in namespace {w.namespace}, which is not "
                "labelled for gpupool's admission (someone added the gate, or removed the "
                "label): gpupool admits it like any gated pod",
            )
        key = gang_key(w) if w.request.kind == "whole" else None
        groups.setdefault(key if key is not None else w.key, []).append(w)
    placed: Counter | None = None  # gang -> its placed pods, counted once a gang's size asks
    out = []
    for key, ws in groups.items():
        head = ws[0]
        p = Demand(
            head.key, head.namespace, head.request, head.priority_class, head.pool, head.created_at
        )
        p.members = tuple(w.key for w in ws)
        p.gated = all(w.admission == "gpupool" for w in ws)
        p.reserved = {
            w.key: (w.reserved_node, tuple(w.reserved_gpus)) for w in ws if w.reserved_node
        }
        if not isinstance(key, tuple):
            out.append(p)
            continue
        if any(
            (w.request, w.priority_class, w.pool, w.gang_size)
            != (head.request, head.priority_class, head.pool, head.gang_size)
            for w in ws
        ):
            record_wait(
                run,
                p,
                "gang-inconsistent",
                f"the pods of gang {key[2]} disagree on request, class, pool or size "
                f"({', '.join(w.name for w in ws)}): none is admitted until they agree",
                "warning",
            )
            continue
        size = head.gang_size
        if size is not None and placed is None:
            placed = Counter(gang_key(w) for w in run.cluster.workloads.values() if w.placed)
        if size is not None and len(ws) + placed[key] < size:
            record_wait(
                run,
                p,
                "gang-incomplete",
                f"gang {key[2]} has {len(ws) + placed[key]} of its {size} pods: it is admitted "
                "once all exist",
            )
            continue
        out.append(p)
    return out


def pending_pool(run: Run, p: Demand) -> str | None:
    if p.pool:
        return p.pool if p.pool in run.cluster.pools else None
    for pv in run.cluster.pools.values():  # first pool (by name) that offers what it asks
        if pv.model is None:
            continue
        inf = pv.pool.spec.inference
        r = p.request
        if (
            r.gpus
            or (r.shared_slices and inf.shared)
            or (
                r.mig
                and inf.mig
                and all(any(prof in lay.profiles for lay in inf.mig.layouts) for prof in r.mig)
            )
        ):
            return pv.name
    return None


def largest_node(pv: PoolView) -> int:
    """The most cards one node of `pv` has (available or not)."""
    return max((len(s) for s in pv.by_node().values()), default=0)


def unreachable(run: Run, pv: PoolView, p: Demand, largest: int | None = None) -> str:
    """Why `p` can never run in `pv` whatever is freed or repartitioned ('' when it can).
    Judged before anything is disrupted for it, against every node of the pool (a node that
    is unavailable now may come back). `largest`: `largest_node(pv)`, when the caller asks
    for many units (it does not change while demand is admitted)."""
    r = p.request
    inf = pv.pool.spec.inference
    if largest is None:
        largest = largest_node(pv)
    if r.gpus:
        if r.gpus > largest:
            return f"asks {r.gpus} GPUs on one node; the largest node of {pv.name} has {largest}"
        return ""
    if r.shared_slices:
        if inf.shared is None:
            return f"asks shared slices; {pv.name} offers none"
        if r.shared_slices > inf.shared.slices_per_gpu:
            return (
                f"asks {r.shared_slices} shared slices of one card; "
                f"{pv.name}'s cards offer {inf.shared.slices_per_gpu}"
            )
        card_mib = pv.model.memory_gib * 1024 if pv.model is not None else 0
        if card_mib and r.gpu_memory_mib > card_mib:
            return (
                f"declares {r.gpu_memory_mib} MiB of GPU memory; a card of {pv.name} has "
                f"{card_mib} MiB"
            )
        if inf.shared.strategy == "mps" and r.shared_slices > 1:
            # the plugin fails a request for more than one shared replica under MPS
            # (failRequestsGreaterThanOne, NVIDIA/k8s-device-plugin api/config/v1/config.go)
            return f"asks {r.shared_slices} shared slices; under MPS a pod gets one"
        return ""
    if inf.mig is None or pv.model is None or not pv.model.mig_capable:
        return f"asks MIG instances; {pv.name} offers no MIG"
    for prof, n in sorted(r.mig.items()):
        most = max((lay.profiles.count(prof) for lay in inf.mig.layouts), default=0)
        if most == 0:
            return f"asks MIG {prof}; no layout of {pv.name} offers it"
        if n > most * largest:
            return f"asks {n} x MIG {prof} on one node; a node of {pv.name} offers at most " + str(
                most * largest
            )
    return ""


def share_mib(pv: PoolView, slices: int) -> int:
    """The GPU memory (MiB) `slices` slices of `pv`'s policy promise: slices x memoryPerSlice."""
    sh = pv.pool.spec.inference.shared
    return slices * quantity_bytes(sh.memory_per_slice) // 2**20 if sh is not None else 0


def slice_need_mib(pv: PoolView, r: Request) -> int:
    """The GPU memory (MiB) shared request `r` needs for all its slices, as placement judges
    it: what the pod declares (`gpu_memory_mib` is the pod's, for all its slices), at most
    its share (slices x memoryPerSlice): beyond it the pod is warned about
    (`memory_beyond_share`), not held, since no card the policy shapes has more; undeclared,
    its share: the policy's slice is what it was sized to and may use."""
    share = share_mib(pv, r.shared_slices)
    return min(r.gpu_memory_mib, share) if r.gpu_memory_mib else share


def card_slice_mib(pv: PoolView, card_slices: int) -> Fraction:
    """The GPU memory (MiB) one slice of a card of `pv` shared x`card_slices` has."""
    return Fraction(pv.model.memory_gib * 1024 if pv.model is not None else 0, card_slices)


def slice_memory_fits(pv: PoolView, r: Request, card_slices: int) -> bool:
    """A card of `pv` shared x`card_slices` has the GPU memory each slice of shared request
    `r` needs: card memory / `card_slices` >= `slice_need_mib` / `r.shared_slices`. A card of
    the policy's count always does (slicesPerGPU x memoryPerSlice fits the card, validate.py);
    one still shared with more slices than the policy now gives may not. Time-slicing
    isolates no memory, so a pod placed where it does not fit over-commits the card once its
    slices fill up (under MPS it fails to allocate)."""
    if pv.model is None or not r.shared_slices or not card_slices:
        return True
    return slice_need_mib(pv, r) * card_slices <= pv.model.memory_gib * 1024 * r.shared_slices


def gib(mib: Fraction | int) -> str:
    """MiB as people read GPU memory: 10240 -> 10Gi, 12800 -> 12.5Gi."""
    if mib % 1024 == 0:
        return f"{int(mib) // 1024}Gi"
    return f"{float(mib) / 1024:.1f}Gi"


def memory_beyond_share(run: Run, pv: PoolView, p: Demand) -> None:
    """Shared work that declares more GPU memory than its slices' share (slices x
    memoryPerSlice): under time-slicing nothing stops it from taking its neighbours' memory
    (MPS caps it and the pod fails instead). Said, not held: the card has the memory."""
    sh = pv.pool.spec.inference.shared
    r = p.request
    if sh is None or not r.shared_slices or not r.gpu_memory_mib:
        return
    share = share_mib(pv, r.shared_slices)
    if r.gpu_memory_mib > share:
        run.find(
            "warning",
            "memory-over-share",
            p.key,
            f"declares {r.gpu_memory_mib} MiB of GPU memory for {r.shared_slices} slice(s) of "
            f"{sh.memory_per_slice}: "
            + (
                "MPS caps it at its share, so it will fail to allocate"
                if sh.strategy == "mps"
                else "time-slicing does not isolate memory, so its neighbours may run out"
            ),
        )


def _describe_request(r: Request) -> str:
    if r.gpus:
        return f"{r.gpus} whole GPU{'s' if r.gpus > 1 else ''}"
    if r.mig:
        return ", ".join(f"{n} x MIG {p}" for p, n in sorted(r.mig.items()))
    return f"{r.shared_slices} shared slice{'s' if r.shared_slices > 1 else ''}"


def describe(p: Demand) -> str:
    each = _describe_request(p.request)
    return each if len(p.members) == 1 else f"{len(p.members)} pods x {each}"


def record_wait(run: Run, p: Demand, code: str, why: str, severity: str = "info") -> None:
    """`p` waits, and the finding says why; a wait the hourly budget causes says so by code."""
    if code == "waits" and BUDGET in why:
        code, severity = "budget-spent", "warning"
    run.waiting[p.key] = why
    if not p.origin.startswith("scale-up") or code not in ADMISSION_CODES:
        run.find(severity, code, p.key, why)
    # a replica admission holds is reported once, on its service (`emit_scales`)
    if not p.gated:
        return
    for m in p.members:  # the pod stays gated: its owner sees why in `kubectl describe`
        w = run.cluster.workloads.get(m)
        if w is not None and w.held != why:
            run.add(
                Hold(
                    id=f"hold:{m}",
                    target=m,
                    pool=p.pool,
                    reason=f"{m} stays gated: {why}",
                    code=code,
                    message=why,
                )
            )


def suspended_demand(run: Run) -> list[Demand]:
    """Jobs gpupool suspended to stop their gang: demand for all their pods again (created
    when the Job is resumed, gated, then admitted); not one that lost a member soon after each
    of its last `RECOVERY_ATTEMPTS` starts (held, with a finding: no flapping)."""
    if kueue_mode(run):
        _kueue_suspended(run)
        return []
    out = []
    for j in sorted(run.observed.suspended_jobs, key=lambda j: j.key):
        tries = run.observed.job_recoveries.get(j.key, 0)
        if tries >= RECOVERY_ATTEMPTS:
            run.find(
                "warning",
                "recovery-held",
                j.key,
                f"Job {j.key} lost a member soon after each of its last {tries} starts "
                f"({RECOVERIES_ANN}): gpupool keeps it suspended and gives its cards to other "
                f"work; fix it (a checkpoint it cannot restore?), then remove {RECOVERIES_ANN} "
                "from the Job to let gpupool resume it",
            )
            continue
        p = Demand(
            j.key,
            j.namespace,
            j.request,
            j.priority_class,
            j.pool,
            j.suspended_at,
            origin="suspended job",
        )
        p.members = tuple(f"{j.key}#{i}" for i in range(j.parallelism))
        out.append(p)
    return out


def kueue_findings(run: Run) -> None:
    """In kueue mode, training that Kueue will not see or that gpupool's gate keeps back."""
    if run.desired.admission_controller == "kueue" and run.observed.kueue is None:
        run.find(
            "warning",
            "kueue-not-installed",
            "Kueue",
            "the PriorityPolicy chooses admission.controller kueue, but Kueue's CRDs "
            "(kueue.x-k8s.io ResourceFlavor, ClusterQueue, LocalQueue) are not served: no Kueue "
            "object is applied, and gpupool keeps its ResourceQuotas and its own admission "
            "until they are",
        )
        return
    if not kueue_mode(run):
        return
    seen: set[object] = set()
    for w in sorted(run.observed.workloads, key=lambda w: w.key):
        if w.request.kind != "whole" or run.desired.quota_for_namespace(w.namespace) is None:
            continue
        key = gang_key(w) or w.key
        if key in seen:
            continue
        seen.add(key)
        who = f"{w.owner_kind} {w.namespace}/{w.owner_name}" if w.owner_name else f"Pod {w.key}"
        if not w.queue_name:
            run.find(
                "warning",
                "kueue-queue-name-missing",
                w.key,
                f"{who} trains in team namespace {w.namespace} without the label "
                f"{KUEUE_QUEUE_LABEL}: Kueue does not queue it, so it runs outside the team's "
                f"ClusterQueue. Label it {KUEUE_QUEUE_LABEL}={KUEUE_LOCAL_QUEUE}",
            )


def _kueue_suspended(run: Run) -> None:
    for j in sorted(run.observed.suspended_jobs, key=lambda j: j.key):
        run.find(
            "warning",
            "kueue-suspended-job",
            j.key,
            f"Job {j.key} was suspended by gpupool before kueue mode; gpupool resumes nothing in "
            f"kueue mode. Kueue admits it if it carries {KUEUE_QUEUE_LABEL}; otherwise resume "
            "it by hand (spec.suspend: false)",
        )
