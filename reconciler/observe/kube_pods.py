"""Pods: what each GPU pod requests and holds, how it is admitted (scheduling gates,
gpupool's `admitted` annotation), its reservations and its gang, read into `Workload`s. Which
cards a pod holds comes from its node's `GpuNodeState` `status.pods`, else its `gpupool.io/gpus`
annotation where the node agent wrote it (`reconciler/observe/trust.py`; anyone else's makes a
bound pod's cards unknown), else a guess (see `reconciler/observe/kube.py`).

gpupool's own state on a pod (`GPUPOOL_STATE`: admitted, reserved, intended cards) is believed
only where gpupool wrote it: the API server names gpupool's field manager as the owner of that
annotation in the pod's `metadata.managedFields` (`kube_owners.gpupool_wrote`). Anyone who may
update a pod may write an annotation, and a tenant's `gpupool.io/admitted: <node>` on its own
pending pod would otherwise hold a node's cards and keep real demand out. A value gpupool did not
write, or an admission to a node that does not exist, is left out with a `forged-state` report
(an `unreadable-object` finding in the plan, and the controller's `GpuPoolUnreadable` Event on
the pod): the pod is read as if it did not carry it (`believed`). The check is
`pod_workloads`'s, i.e. `observe_cluster`'s, on pods as the API server returns them;
`_workload` reads whatever pod it is given (tests build pods without managedFields). A snapshot
file is trusted input: its workloads say what is admitted and reserved, with no managedFields
to check, and one `gpupool observe` wrote holds only what passed this check.
deploy/state-admission.yaml keeps these annotations out of everyone's reach but the
controller's where the API server enforces it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from reconciler import conventions as C
from reconciler.observe.kube_common import (
    Shape,
    VersionMemo,
    _each,
    _gpus,
    _int,
    _node_cards,
    _shape,
    _truthy,
    _ts,
    _unreadable,
    _who,
    _why,
)
from reconciler.observe.kube_owners import Owners, field_managers, gpupool_wrote, not_written
from reconciler.observe.kube_podgroups import PodGroups, gang_of, held_for_group
from reconciler.observe.kube_requests import pod_request
from reconciler.observe.model import (
    Allocation,
    Node,
    PodGpus,
    Request,
    Workload,
    parse_allocation,
)
from reconciler.observe.trust import GPUS_WRITERS, annotation_path, gpus_believed

Holding = tuple[Any, Request, list[Allocation] | None]
"""A GPU pod, its request, and the cards it is known to hold (None: not known)."""

GPUPOOL_STATE = (C.ADMITTED_ANN, C.RESERVED_ANN, C.INTENDED_GPUS_ANN)
"""gpupool's state on a pod that observation reads, written only by the controller: believed
only where its field manager owns the annotation (`believed`)."""


def believed(p: Any, nodes: dict[str, Node]) -> Any:
    """The pod as observation may believe it: `p` itself, or a copy without the annotations of
    `GPUPOOL_STATE` that gpupool did not write (but an admission the API server already
    enforces, `_in_force`, is kept), nor an admission to a node not in `nodes`. `p`
    is not changed (it may be the watch cache's object). On a pod not bound yet, where they
    decide what it holds or is owed, what was left out is reported (`forged-state`, one report
    per pod); a bound pod's are dropped quietly: nothing reads them there (a pod bound to a
    node holds its cards whatever it says), and pods admitted before gpupool named its field
    manager still carry them."""
    ann = p.metadata.annotations or {}
    bound = bool(p.spec.node_name)
    admitted = ann.get(C.ADMITTED_ANN)
    drop = [
        k
        for k in GPUPOOL_STATE
        if k in ann
        and not gpupool_wrote(p, k)
        and not (k == C.ADMITTED_ANN and not bound and admitted in nodes and _in_force(p, admitted))
    ]
    why = [not_written(p, k) for k in drop]
    if admitted and C.ADMITTED_ANN not in drop and not bound and admitted not in nodes:
        drop.append(C.ADMITTED_ANN)
        why.append(f"{C.ADMITTED_ANN} names node {str(admitted)[:80]!r}, which does not exist")
    if not drop:
        return p
    if not bound:
        _unreadable(
            "Pod",
            p.metadata.namespace,
            p.metadata.name,
            f"forged-state: {'; '.join(why)}; ignored",
        )
    meta = copy.copy(p.metadata)
    meta.annotations = {k: v for k, v in ann.items() if k not in drop}
    out = copy.copy(p)
    out.metadata = meta
    return out


def _believed_copy(p: Any, nodes: dict[str, Node]) -> Any:
    """`believed(p, nodes)` where it is a copy of `p`; None where it is `p` itself."""
    out = believed(p, nodes)
    return None if out is p else out


def _in_force(p: Any, node: str) -> bool:
    """The API server already enforces an admission of the unbound pod `p` to `node`, whoever
    wrote the annotation: it has no scheduling gate and its required node affinity allows only
    `node` (gpupool's pin), so kube-scheduler binds it there and nowhere else. Such an admission
    is believed without gpupool's field manager on record: an admission made before gpupool
    named its field manager (docs/operations.md, "Upgrading"), or a pod its owner pinned and
    ungated itself, which goes there all the same."""
    return not p.spec.scheduling_gates and _pinned_node(p) == node


def _pinned_node(p: Any) -> str | None:
    """The one node the pod's required node affinity allows, where every term requires
    `metadata.name In [that node]` (the pin gpupool's admission writes); else None."""
    aff = p.spec.affinity
    na = aff.node_affinity if aff else None
    req = na.required_during_scheduling_ignored_during_execution if na else None
    found: set[str] = set()
    for term in (req.node_selector_terms if req else None) or []:
        pins = [
            tuple(f.values or ())
            for f in term.match_fields or []
            if f.key == "metadata.name" and f.operator == "In"
        ]
        if len(pins) != 1 or len(pins[0]) != 1:
            return None
        found.add(str(pins[0][0]))
    return found.pop() if len(found) == 1 else None


def pod_holdings(
    raw_pods: Any,
    held: dict[str, dict[str, list[Allocation] | None]],
    claimed: Callable[[Any], tuple[Request, list[Allocation] | None]] | None = None,
    memo: WorkloadMemo | None = None,
) -> tuple[list[Holding], dict[str, set[int]]]:
    """The pods that hold or want cards, oldest first, each with what it is known to hold
    (`held`: node -> the pods its agent publishes, `published_pods`); and node -> the cards
    pods are known to hold there. `claimed(pod)`: what a pod that asks for no GPU resource asks
    and holds through DRA claims (observe/dra_holdings.py `DraIndex`). `memo`: a pod's request,
    and what its annotation says it holds, read once per version of the pod (`WorkloadMemo`)."""
    memo = memo if memo is not None else _NO_MEMO
    pods = sorted(
        _each("Pod", raw_pods, lambda p: (str(p.metadata.creation_timestamp), p)),
        key=lambda x: (x[0], x[1].metadata.namespace, x[1].metadata.name),
    )
    # Known holdings first (the agent's status.pods, else the annotation), so that a guess
    # never hands out a card a pod is known to hold.
    taken: dict[str, set[int]] = {}

    def holding(p: Any) -> Holding | None:
        x = _holding(p, held, claimed, memo)
        if x is not None and x[2] is not None:
            taken.setdefault(p.spec.node_name or "", set()).update(a.gpu for a in x[2])
        return x

    gpu_pods = [x for x in _each("Pod", [p for _, p in pods], holding) if x is not None]
    return gpu_pods, taken


def _holding(
    p: Any,
    held: dict[str, dict[str, list[Allocation] | None]],
    claimed: Callable[[Any], tuple[Request, list[Allocation] | None]] | None,
    memo: Any,
) -> Holding | None:
    """One pod of `pod_holdings`: (it, its request, the cards it is known to hold), or None
    where it holds and wants no card."""
    if p.status.phase in ("Succeeded", "Failed"):
        return None
    if p.metadata.deletion_timestamp and not p.spec.node_name:
        return None  # an unbound pod being deleted holds nothing and is nobody's demand
    req, known = memo.kept("request", p, (), lambda: pod_request(p)), None
    if req.kind == "none" and claimed is not None:
        req, known = claimed(p)
    if req.kind == "none":
        return None
    node_name = p.spec.node_name or ""
    if known is None:
        node_pods = held.get(node_name)
        known = (
            _known_allocations(p, node_pods)
            if node_pods is not None  # a lookup: nothing to keep
            else memo.kept("annotated", p, (), lambda: _known_allocations(p, None))
        )
    return p, req, known


def pod_workloads(
    gpu_pods: list[Holding],
    by_name: dict[str, Node],
    taken: dict[str, set[int]],
    owners: Owners,
    memo: WorkloadMemo | None = None,
) -> list[Workload]:
    """Each GPU pod as a `Workload` with the cards it holds: those known, else for a pod
    admitted to a node the cards meant for it, else a guess; `taken` (node -> cards held)
    grows with each. gpupool's state on each pod is read only where gpupool wrote it
    (`believed`). Each pod reads only its own part of `owners` (`owner_facts`). `memo`: the same
    `Workload` as the last observation's for a pod whose version and inputs are unchanged
    (`WorkloadMemo`)."""
    memo = memo if memo is not None else _NO_MEMO

    def workload(x: Holding) -> Workload:
        prep = _prepared(x, by_name, memo)
        return _made(prep, _allocated(prep, by_name, taken), owners, memo)

    # bound pods first: an admitted pod yields to what the kubelet has handed out or will
    return _each(
        "Pod",
        sorted(gpu_pods, key=lambda x: not x[0].spec.node_name),
        workload,
        named=lambda x: x[0],
    )


Prepared = tuple[Any, Any, Request, list[Allocation] | None, bool, str | None]
"""A GPU pod read as far as it does not depend on the other pods: (the pod, the pod as
believed, its request, the cards it is known to hold, whether the node its `admitted`
annotation names exists, the node it is admitted to and not bound yet)."""


def _prepared(x: Holding, by_name: dict[str, Node], memo: Any) -> Prepared:
    """The first step of `pod_workloads` for one pod: what gpupool's state on it is believed
    (`believed`) and which node it is admitted to."""
    raw, req, known = x
    admitted = (raw.metadata.annotations or {}).get(C.ADMITTED_ANN)
    node_known = isinstance(admitted, str) and admitted in by_name  # all `believed` asks
    # the believed copy is kept, not the pod itself (that is this cycle's object)
    p = memo.kept("believed", raw, (node_known,), lambda: _believed_copy(raw, by_name)) or raw
    admitted_to = None if p.spec.node_name else _admission(p)[1]
    return raw, p, req, known, node_known, admitted_to


def _allocated(
    prep: Prepared, by_name: dict[str, Node], taken: dict[str, set[int]]
) -> list[Allocation]:
    """The cards the pod holds: those known, else for a pod admitted to a node the cards
    meant for it, else a guess; `taken` (node -> cards held) grows with each. Only the node it
    is admitted to, else its own node, is read from `taken` (`PodDelta` keeps one such group
    per node)."""
    _, p, req, known, _, admitted_to = prep
    node_name = p.spec.node_name or ""
    if admitted_to and known is not None:  # its claims are allocated already (DRA)
        return known
    if admitted_to:
        return admitted_allocations(
            p, req, by_name.get(admitted_to), taken.setdefault(admitted_to, set())
        )
    if known is not None:
        return known
    return _guess_allocations(req, by_name.get(node_name), taken.setdefault(node_name, set()))


def _made(prep: Prepared, allocs: list[Allocation], owners: Owners, memo: Any) -> Workload:
    """The pod's `Workload`, holding `allocs`, reading its part of `owners`."""
    raw, p, req, _, node_known, _ = prep
    facts = owner_facts(p, owners)
    return memo.kept(
        "workload",
        raw,
        (node_known, req, allocs, facts),
        lambda: _workload(p, req, allocs, _owners_from(facts)),
    )


def owner_facts(p: Any, owners: Owners) -> tuple:
    """What `owners` says about the pod `p`, all `_workload` reads of it: (its owner's key
    (namespace, name), the gang sizes of its owner and of its coscheduling pod group, its
    owner's next-pod reservation, Kueue queue and whether another controller manages it (a
    Job), its Workload-API PodGroup: None where the API is not served, () where the pod names
    no group that exists, else (key, policy); whether its owner is a Job that was read).
    Compared by `WorkloadMemo` between cycles: an owner's change that leaves the pod's own
    version as it was still reaches the pod."""
    ns = p.metadata.namespace
    owner = (p.metadata.owner_references or [None])[0]
    keys = []
    job = moved = queue = None
    foreign = known = False
    if owner is not None:
        job = (ns, owner.name)
        keys.append((ns, owner.kind, owner.name))
        moved, queue = owners.next_pod.get(job), owners.queues.get(job)
        foreign = job in owners.foreign_jobs
        known = owner.kind == "Job" and job in owners.jobs
    group = (p.metadata.labels or {}).get(C.POD_GROUP_LABEL)
    if group:
        keys.append((ns, "PodGroup", group))
    sizes = tuple((k, owners.sizes[k]) for k in keys if k in owners.sizes)
    groups = None
    if owners.pod_groups is not None:
        sg = getattr(p.spec, "scheduling_group", None)
        name = getattr(sg, "pod_group_name", None) if sg is not None else None
        policy = owners.pod_groups.groups.get((ns, name)) if isinstance(name, str) else None
        groups = ((ns, name), policy) if policy is not None else ()
    return job, sizes, moved, queue, foreign, groups, known


def _owners_from(facts: tuple) -> Owners:
    """`Owners` holding only `facts` (`owner_facts`)."""
    job, sizes, moved, queue, foreign, groups, known = facts
    return Owners(
        sizes=dict(sizes),
        next_pod={job: moved} if moved is not None else {},
        queues={job: queue} if queue is not None else {},
        foreign_jobs={job} if foreign else set(),
        pod_groups=None if groups is None else PodGroups(dict([groups]) if groups else {}),
        jobs={job} if known else set(),
    )


def held_for_job(p: Any, owners: Owners) -> bool:
    """A gated pod owned by a Job the observation did not read: its gang's size is the Job's
    parallelism, unknown here, and admitting the pods that exist could start part of a gang.
    The Job was made an instant ago and its watch has not delivered it yet (the controller
    reads Jobs and pods through separate watches), or it is gone and the garbage collector
    deletes its pods. gpupool does not admit it until its Job is read, and says why."""
    owner = (p.metadata.owner_references or [None])[0]
    if owner is None or owner.kind != "Job" or (p.metadata.namespace, owner.name) in owners.jobs:
        return False
    _unreadable(
        "Pod",
        p.metadata.namespace,
        p.metadata.name,
        f"owned by Job {owner.name}, which was not read (created an instant ago, or deleted): "
        "its gang's size is unknown; gpupool holds it until the Job is read",
    )
    return True


def _admission(p: Any) -> tuple[str, str | None]:
    """(`Workload.admission`, the node it was admitted to) from the pod's scheduling gates and
    gpupool's `admitted` annotation. A gate of another system (Kueue's) wins: the pod is not
    gpupool's demand until that system removed its gate."""
    gates = [g.name for g in (p.spec.scheduling_gates or [])]
    if any(g != C.ADMISSION_GATE for g in gates):
        return "other", None
    if gates:
        return "gpupool", None
    admitted = (p.metadata.annotations or {}).get(C.ADMITTED_ANN)
    if admitted and not p.spec.node_name:
        return "admitted", admitted
    return "scheduler", None


def failed_members(raw_pods: Any, owners: Owners) -> list[Workload]:
    """Bound GPU pods in phase Failed that belong to a gang (an explicit gang, a pod group, or
    an owner that is no Deployment/ReplicaSet/StatefulSet/DaemonSet), not being deleted, as
    `Workload`s that hold nothing, with when they failed (`Workload.failed_at`): a member lost
    to its own failure (issue 29), which recovery weighs like one lost with its node."""

    def member(p: Any) -> Workload | None:
        # only a Failed pod is read further (any other was read, or reported, as a holding)
        if not is_failed(p):
            return None
        if not p.spec.node_name:
            return None
        if p.metadata.deletion_timestamp is not None:
            return None
        owner = (p.metadata.owner_references or [None])[0]
        gang, _ = _gang(p, owners)
        if not gang and (owner is None or owner.kind in SERVICE_OWNER_KINDS):
            return None
        req = pod_request(p)
        if req.kind == "none":
            return None
        w = _workload(p, req, [], owners)
        return w.model_copy(update={"failed_at": _failed_at(p)})

    return [w for w in _each("Pod", list(raw_pods), member) if w is not None]


SERVICE_OWNER_KINDS = frozenset({"ReplicaSet", "Deployment", "StatefulSet", "DaemonSet"})
"""Owners whose pods are service replicas, each standing alone (the planner's `gang_key`)."""


def _failed_at(p: Any) -> Any:
    """When the Failed pod `p` ended: its containers' last `finishedAt`, else its conditions'
    last transition, else its creation (a pod the kubelet refused has neither)."""
    st = p.status
    ends = [
        c.state.terminated.finished_at
        for c in (st.container_statuses or [])
        if c.state and c.state.terminated and c.state.terminated.finished_at
    ]
    ends = ends or [c.last_transition_time for c in (st.conditions or []) if c.last_transition_time]
    return _ts(max(ends)) if ends else _ts(p.metadata.creation_timestamp)


def admission_event(kind: str, p: Any) -> bool:
    """A pod watch event (ADDED | MODIFIED | DELETED) that admission should act on now, not at
    the next interval: a GPU pod waiting behind gpupool's gate (new demand, or a gang that
    became complete), or one that stops holding cards (deleted, terminating, finished), which
    an admission may be waiting for or held demand may now fit into. A GPU pod asks cards as an
    extended resource, or through ResourceClaims (a DRA pool: no `nvidia.com/gpu`; which class
    a claim asks is not on the pod, so any pod with claims counts: at worst a cycle early)."""
    try:
        if pod_request(p).kind == "none" and not (p.spec.resource_claims or []):
            return False
        if kind == "DELETED" or p.metadata.deletion_timestamp is not None:
            return True
        if (p.status.phase if p.status else None) in ("Succeeded", "Failed"):
            return True
        return _admission(p)[0] == "gpupool"
    except (AttributeError, TypeError, ValueError):  # a malformed pod: the interval finds it
        return False


def terminating_event(kind: str, p: Any) -> bool:
    """A pod watch event of a pod on its way out that still counts on its node: terminating
    (a deletionTimestamp), not yet deleted or finished. Its cards can be planned for the next
    holder now (the planner's `Run.stopping`), whose admission waits for it to be gone."""
    try:
        if kind == "DELETED" or p.metadata.deletion_timestamp is None:
            return False
        return (p.status.phase if p.status else None) not in ("Succeeded", "Failed")
    except AttributeError:  # a malformed pod: not one to act on
        return False


def _reservation(p: Any) -> tuple[str | None, list[int]]:
    """`gpupool.io/reserved` = "<node>:<gpus>"; unreadable: none (reported)."""
    text = (p.metadata.annotations or {}).get(C.RESERVED_ANN)
    if not text:
        return None, []
    found = _node_cards(str(text))
    if found is None:
        _unreadable(
            "Pod",
            p.metadata.namespace,
            p.metadata.name,
            f"unreadable {C.RESERVED_ANN} annotation {text!r}; ignored",
        )
        return None, []
    return found


def _held(p: Any) -> str:
    for c in (p.status.conditions or []) if p.status else []:
        if c.type == C.ADMITTED_CONDITION and c.status == "False":
            return c.message or ""
    return ""


def _gang(p: Any, owners: Owners) -> tuple[str, int | None]:
    """(`Workload.gang`, `gang_size`): a Workload-API PodGroup gang (`kube_podgroups.gang_of`:
    not for a Job's pod), else an explicit `gpupool.io/gang` (its size from
    `gpupool.io/gang-size`), else a coscheduling pod group (its PodGroup's minMember), else
    the owning Job (its parallelism; the gang key is the owner then, so `gang` stays empty,
    and the planner stops the gang by suspending the Job). A Job another controller manages
    is named as an explicit gang instead, `job:<name>`: suspending it would stop nothing."""
    sizes = owners.sizes
    ns = p.metadata.namespace
    ann = p.metadata.annotations or {}
    owner = (p.metadata.owner_references or [None])[0]
    job = owner is not None and owner.kind == "Job" and (ns, owner.name) not in owners.foreign_jobs
    scheduled_as_gang = gang_of(p, owners.pod_groups, job_gang=job)
    if scheduled_as_gang is not None:
        return scheduled_as_gang
    if ann.get(C.GANG_ANN):
        return ann[C.GANG_ANN], _int(ann.get(C.GANG_SIZE_ANN))
    group = (p.metadata.labels or {}).get(C.POD_GROUP_LABEL)
    if group:
        return f"pod-group:{group}", sizes.get((ns, "PodGroup", group))
    if owner is not None:
        size = sizes.get((ns, owner.kind, owner.name))
        if owner.kind == "Job" and (ns, owner.name) in owners.foreign_jobs:
            return f"job:{owner.name}", size
        return "", size
    return "", None


def _workload(
    p: Any,
    req: Request,
    allocations: list[Allocation],
    owners: Owners | None = None,
) -> Workload:
    ann = p.metadata.annotations or {}
    owner = (p.metadata.owner_references or [None])[0]
    owners = owners or Owners()
    # bound is running as far as cards go: kube-scheduler counts a pod's resources on its
    # node from the binding on, before the kubelet has started it
    running = bool(p.spec.node_name)
    admission, admitted_to = _admission(p)
    if admission == "gpupool" and (held_for_group(p, owners.pod_groups) or held_for_job(p, owners)):
        admission = "other"  # not to be admitted as its PodGroup or its Job stands
    reserved_node, reserved_gpus = _reservation(p)
    moved = owners.next_pod.get((p.metadata.namespace, owner.name)) if owner else None
    created = _ts(p.metadata.creation_timestamp)
    if (
        reserved_node is None
        and admission == "gpupool"
        and owner is not None
        and owner.kind == "Job"
        and moved is not None
        and created is not None
        and 0 <= (created - moved[2]).total_seconds() <= C.NEXT_POD_RESERVATION_TTL_SECONDS
    ):
        reserved_node, reserved_gpus = moved[0], moved[1]  # a move's target, for this pod
    gang, gang_size = _gang(p, owners)
    node = p.spec.node_name if running else admitted_to
    if not running and not admitted_to:
        allocations = []  # a pod not bound nor admitted holds nothing
    return Workload(
        namespace=p.metadata.namespace,
        name=p.metadata.name,
        priority_class=p.spec.priority_class_name,
        phase="Running" if running else "Pending",
        request=req,
        pool=(p.spec.node_selector or {}).get(C.POOL_LABEL),
        node=node,
        allocations=allocations,
        created_at=_ts(p.metadata.creation_timestamp),
        started_at=_ts(p.status.start_time) if running else None,
        last_checkpoint_at=_ts(ann.get(C.LAST_CHECKPOINT_ANN)),
        owner_kind=owner.kind if owner else "",
        owner_name=owner.name if owner else "",
        checkpointable=_truthy(ann.get(C.CHECKPOINTABLE_ANN)),
        migratable=_truthy(ann.get(C.MIGRATABLE_ANN)),
        admission=admission,
        terminating=p.metadata.deletion_timestamp is not None,
        reserved_node=reserved_node,
        reserved_gpus=reserved_gpus,
        gang=gang,
        gang_size=gang_size,
        held=_held(p),
        # Kueue reads the label from the Job (its queue), or from a plain pod it manages
        queue_name=(p.metadata.labels or {}).get(C.KUEUE_QUEUE_LABEL)
        or (
            owners.queues.get((p.metadata.namespace, owner.name), "")
            if owner is not None and owner.kind == "Job"
            else ""
        ),
    )


_ALLOCATION_FIELDS = ("gpu", "migStart", "migProfile", "slices")


def published_pods(state: dict | None) -> dict[str, list[Allocation]] | None:
    """Pod key -> allocations from a `GpuNodeState`'s `status.pods`; None when the agent
    published none (no key, or not a list). Fields a newer agent adds are ignored; an entry
    that does not parse (not an object, `allocations` not a list of objects, a field that does
    not validate) is left out, reported with its field: that pod falls back as if unlisted."""
    status = (state or {}).get("status")
    pods = status.get("pods") if isinstance(status, dict) else None
    if not isinstance(pods, list):
        return None
    node = _who(C.NODE_STATE_KIND, state)[2]
    out: dict[str, list[Allocation]] = {}
    for i, entry in enumerate(pods):
        try:
            pod = _pod_gpus(entry, f"status.pods[{i}]")
        except (Shape, ValidationError) as exc:
            why = _why(exc) if isinstance(exc, Shape) else f"status.pods[{i}].{_why(exc)}"
            _unreadable(
                C.NODE_STATE_KIND, "", node, f"{why}; entry left out, its pod read as not listed"
            )
            continue
        out[pod.key] = pod.allocations
    return out


def _pod_gpus(entry: Any, field: str) -> PodGpus:
    """One entry of a `GpuNodeState`'s `status.pods`; raises `Shape` (naming the field) or
    pydantic's ValidationError."""
    _shape(entry, dict, field, required=True)
    allocs = _shape(entry.get("allocations"), list, f"{field}.allocations") or []
    for j, a in enumerate(allocs):
        _shape(a, dict, f"{field}.allocations[{j}]", required=True)
    return PodGpus.model_validate(
        {
            "namespace": entry.get("namespace"),
            "name": entry.get("name"),
            "allocations": [{k: a[k] for k in _ALLOCATION_FIELDS if k in a} for a in allocs],
        }
    )


def _known_allocations(
    p: Any, node_pods: dict[str, list[Allocation]] | None
) -> list[Allocation] | None:
    """What the node agent says the pod holds; the annotation only where the agent publishes
    no pods, and only where the agent's field manager wrote it (`trust.gpus_believed`); None
    when neither says. A bound pod's annotation anyone else wrote makes its cards unknown:
    an empty list (the planner's `allocation-unknown`: it may hold any card of its node, and
    those are fenced), with a `forged-state` report. (An unbound pod holds nothing, whatever
    its annotation says: `_workload`.)"""
    if node_pods is not None:
        return node_pods.get(f"{p.metadata.namespace}/{p.metadata.name}")
    ann = (p.metadata.annotations or {}).get(C.GPUS_ANN)
    if not ann:
        return None
    if p.spec.node_name and not gpus_believed(field_managers(p, *annotation_path(C.GPUS_ANN))):
        _unreadable(
            "Pod",
            p.metadata.namespace,
            p.metadata.name,
            f"forged-state: {not_written(p, C.GPUS_ANN, sorted(GPUS_WRITERS))}; which cards "
            "it holds is unknown: it counts as holding any card of its node it may",
        )
        return []
    try:
        return parse_allocation(ann)
    except ValueError:  # pydantic's ValidationError is one too
        _unreadable(
            "Pod",
            p.metadata.namespace,
            p.metadata.name,
            f"unreadable {C.GPUS_ANN} annotation {ann!r}; ignored",
        )
        return None


def admitted_allocations(
    p: Any, req: Request, node: Node | None, taken: set[int]
) -> list[Allocation]:
    """The whole cards an admitted pod holds in the view until it is bound and the node agent
    reports what it got (MIG instances or slices are not known before, so none are claimed).

    kube-scheduler binds it by count, and the kubelet's device manager then hands it cards of
    its own choosing: the device plugin's GetPreferredAllocation, else any free ones
    (kubelet pkg/kubelet/cm/devicemanager/manager.go, devicesToAllocate); nothing reads
    `gpupool.io/intended-gpus`. So the pod keeps the cards meant for it that no pod bound
    there holds (`taken`), and takes other free whole cards of its node for the rest. Only when
    the node has too few free cards does it keep cards that are taken: the consistency check
    then reports the collision and fences them."""
    intended = _gpus((p.metadata.annotations or {}).get(C.INTENDED_GPUS_ANN)) or []
    if not req.gpus:
        return []
    if node is None:
        chosen = intended[: req.gpus]
    else:
        whole = [g.index for g in node.gpus if g.mode == "whole"]
        free = [i for i in intended if i in whole and i not in taken]
        free += [i for i in whole if i not in taken and i not in free]
        chosen = free[: req.gpus]
        if len(chosen) < req.gpus:
            chosen += [i for i in intended if i not in chosen][: req.gpus - len(chosen)]
    taken.update(chosen)
    return [Allocation(gpu=i) for i in chosen]


def _guess_allocations(req: Request, node: Node | None, taken: set[int]) -> list[Allocation]:
    if node is None or not req.gpus:
        return []
    free = [g.index for g in node.gpus if g.mode == "whole" and g.index not in taken]
    chosen = free[: req.gpus]
    taken.update(chosen)
    return [Allocation(gpu=i) for i in chosen]


MEMO_STEPS = ("published", "request", "annotated", "believed", "workload")
"""The steps of reading pods that `WorkloadMemo` keeps, in the order a pod goes through."""


def pod_version(p: Any) -> tuple | None:
    """(uid, resourceVersion): one state of one pod; None where either is missing."""
    meta = p.metadata
    uid, rv = getattr(meta, "uid", None), getattr(meta, "resource_version", None)
    return (uid, rv) if uid and rv else None


def is_failed(p: Any) -> bool:
    """Phase Failed: the only pods `failed_members` reads further."""
    return getattr(getattr(p, "status", None), "phase", None) == "Failed"


class WorkloadMemo(VersionMemo):
    """Pods read into `Workload`s once per version: kept by the controller across cycles and
    passed to `observe_cluster` (as `CardMemo` is for nodes' cards). What each node's agent
    publishes its pods hold (`published`: `published_pods`) is kept per node under its
    GpuNodeState's resourceVersion. Each step of reading a pod that costs is kept per pod
    (namespace, name) under a key: the pod's `metadata.uid` and `metadata.resourceVersion` (one
    state of one object) and every input of the step that is not the pod itself:

    - `request` (`pod_request`) and `annotated` (the cards its `gpupool.io/gpus` annotation
      says it holds, where its node's agent publishes none): the pod alone;
    - `believed` (gpupool's state on it, `believed`): whether the node its `admitted`
      annotation names exists;
    - `workload` (`_workload`): that, its request (from the pod, or its DRA claims), the cards
      it holds (the agent's publication, the annotation, an admission's or a guess: made
      every cycle, since they depend on the other pods), and its part of the owners
      (`owner_facts`: gang sizes, its Job's queue, next-pod reservation and manager, its
      PodGroup).

    Nothing else is read there: no clock (a next-pod reservation's age is counted from the
    pod's creation), and namespaces' gating is read apart (`ObservedState.gated_namespaces`).
    With the key equal, the step's value is the one kept (the same object: the planner's memo
    recognises an unchanged pod's `Workload` by identity) and what the step reported
    unreadable is reported again, so the snapshot equals one made without the memo. A pod
    without a uid or a resourceVersion (a GpuNodeState without a resourceVersion) is read
    every time. Only the pods and nodes of the last observation are kept (`begin` / `end`):
    memory follows the live pods. Failed gang members (`failed_members`: few) are read every
    time.

    `delta` (`kube_pod_delta.PodDelta`): the last observation's pods and every result per pod,
    so that the next one reads again only what changed (`kube_pod_delta.read_pods`); the steps
    above are then asked only for those pods, and `end` keeps the others' values too
    (`keep_unasked`)."""

    def __init__(self) -> None:
        super().__init__(MEMO_STEPS)
        self.delta: Any = None
        """The last observation's pods and what each read as (`kube_pod_delta.PodDelta`):
        the next one reads again only what changed."""
        self._gone: set | None = None

    def begin(self) -> None:
        super().begin()
        self._gone = None

    def keep_unasked(self, gone: set) -> None:
        """This observation asked only the pods that changed (`PodDelta`): at `end`, keep
        every pod's values of the last one too, but those of the pods `gone`."""
        self._gone = set(gone)

    def end(self) -> None:
        gone, self._gone = self._gone, None
        if gone is None:
            super().end()
            return
        for step in MEMO_STEPS[1:]:  # in place: what changed, not every pod
            kept = self._kept[step]
            kept.update(self._next[step])
            for name in gone:
                kept.pop(name, None)
        self._kept["published"] = self._next["published"]
        self._next = {s: {} for s in MEMO_STEPS}

    def kept_pods(self) -> int:
        """How many pods' `Workload`s are kept (those of the last observation)."""
        return self.size("workload")

    def kept(self, step: str, p: Any, inputs: tuple, make: Callable[[], Any]) -> Any:
        """`make()`, or the value it gave for the same version of `p` and the same `inputs`."""
        meta, version = p.metadata, pod_version(p)
        key = version and (*version, inputs)
        return self.get(step, (meta.namespace, meta.name), key, make)

    def published(self, node: str, state: dict) -> dict[str, list[Allocation]] | None:
        """`published_pods(state)` of the node's GpuNodeState (`_agent_state`'s reading of
        it), or what it gave for the same resourceVersion of that object."""
        rv = (state.get("metadata") or {}).get("resourceVersion")
        return self.get("published", ("", node), rv, lambda: published_pods(state))


class _Unkept:
    """No memo: every step is made."""

    def kept(self, step: str, p: Any, inputs: tuple, make: Callable[[], Any]) -> Any:
        return make()


_NO_MEMO: Any = _Unkept()
