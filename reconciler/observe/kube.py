"""Kubernetes adapter: read nodes, pods, workloads' demand and policy objects into a snapshot.

Thin and read-only. The seam is the official client's `ApiClient`: in a cluster it comes from
the in-cluster config or a kubeconfig; in tests it points at the fake API server over HTTP.
Adapters never decide policy: this only translates API objects into `ObservedState`.

Where Kubernetes does not say something gpupool needs, it reads conventions:
- per-node GPU facts (MIG layout, utilization, idle time) from the node agent's
  `GpuNodeState` object (gpupool.io/v1alpha1, cluster-scoped, named after the node); without
  one, a node's `nvidia.com/gpu` capacity gives that many whole cards;
- which cards a running pod holds from its node's `GpuNodeState` `status.pods`: the node agent
  asks the kubelet's PodResources API (the only place Kubernetes knows it) and maps the device
  IDs to cards through NVML UUIDs. Only for a node whose agent publishes no `status.pods` (an
  older agent, no PodResources socket, a failed List) is the pod's `gpupool.io/gpus` annotation
  read instead ("0,1", "2:4" = GPU 2, MIG instance at start 4, "3/2" = two shared slices), if
  something writes it. A pod known neither way (say it started after the agent's last
  publication) gets whole cards guessed: the lowest indices nobody is known to hold, in
  creation order (an approximation, said so in the README);
- workload traits from annotations: `gpupool.io/checkpointable`, `gpupool.io/migratable`,
  `gpupool.io/last-checkpoint` (RFC 3339);
- inference services: Deployments/StatefulSets labelled `gpupool.io/inference=true`, with
  `gpupool.io/queue-length` and `gpupool.io/pending-p99-seconds` annotations kept current by
  the serving stack's exporter, and `gpupool.io/last-scale` written by gpupool's apply.

What the cluster publishes is not trusted to be well formed, and nothing here raises on it:
a time without a timezone is read as UTC; a negative, infinite or unreadable demand signal
counts as absent; a published card that does not validate, a GPU index published twice
(every copy) and a card whose MIG instances collide (`node_problems`) are left out, logged;
an unreadable `gpupool.io/gpus` annotation counts as absent. So a snapshot dumped from here
always loads (`ObservedState` refuses exactly what is left out here). Drift between cards and
what pods hold is kept as observed: the planner reports and fences it
(`reconciler/plan/consistency.py`).
"""

from __future__ import annotations

import contextvars
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from reconciler import conventions as C
from reconciler.observe.model import (
    Allocation,
    Autoscaler,
    Gpu,
    InferenceService,
    KueueObject,
    MigInstance,
    Node,
    ObservedState,
    PodGpus,
    PriorityClassObject,
    QuotaObject,
    Request,
    SuspendedJob,
    Taint,
    UnreadableObject,
    Workload,
    node_problems,
    parse_allocation,
)
from reconciler.policy.quantity import parse_quantity

JOB_CONTROLLER = "kubernetes.io/job-controller"
"""`spec.managedBy` of a Job the built-in Job controller reconciles (also: no value)."""
log = logging.getLogger(__name__)


_UNREADABLE: contextvars.ContextVar[list[UnreadableObject] | None] = contextvars.ContextVar(
    "gpupool_unreadable", default=None
)
"""The list `observe_cluster` collects unreadable objects into (per call and thread); outside
it (the agent, admission events) `_unreadable` only logs."""

_BAD_OBJECT = (ValueError, TypeError, AttributeError, KeyError, IndexError, ArithmeticError)
"""What converting one malformed object may raise (pydantic's ValidationError is a
ValueError): that object is left out, the rest of the cycle goes on."""


def _unreadable(kind: str, namespace: str | None, name: str | None, message: str) -> None:
    log.warning("%s %s%s: %s", kind, f"{namespace}/" if namespace else "", name, message)
    found = _UNREADABLE.get()
    if found is not None:
        found.append(
            UnreadableObject(
                kind=kind, namespace=namespace or "", name=name or "?", message=message[:500]
            )
        )


def _each(
    kind: str,
    objs: Any,
    convert: Callable[[Any], Any],
    named: Callable[[Any], Any] = lambda o: o,
) -> list[Any]:
    """`convert` applied to each object; one that raises is left out and reported under the
    name of the Kubernetes object `named` finds in it (a model object, or a dict)."""
    out = []
    for o in objs:
        try:
            out.append(convert(o))
        except _BAD_OBJECT as exc:
            obj = named(o)
            if isinstance(obj, dict):
                meta = obj.get("metadata") or {}
                ns, name = meta.get("namespace"), meta.get("name")
            else:
                meta = getattr(obj, "metadata", None)
                ns, name = getattr(meta, "namespace", None), getattr(meta, "name", None)
            _unreadable(kind, ns, name, f"left out: {type(exc).__name__}: {exc}".splitlines()[0])
    return out


def _ts(value: Any) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        t = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _stamp(value: str) -> str | None:
    """A published time as ISO text with a timezone (UTC when it had none); None if unreadable."""
    stamp = _ts(value)
    return stamp.isoformat() if stamp else None


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "true", "yes")


def _float(v: str | None) -> float | None:
    """A demand signal from an annotation: a finite number >= 0, else absent (None). A
    negative queue length would read as calm and scale a service down."""
    try:
        x = float(v) if v not in (None, "") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) and x >= 0 else None


def request_from_resources(resources: dict[str, Any] | None) -> Request:
    """GPU request of a container set: whole cards, MIG instances by profile, shared slices."""
    gpus, slices, mig = 0, 0, {}
    for k, v in (resources or {}).items():
        n = int(math.ceil(parse_quantity(str(v))))
        if k == C.GPU_RESOURCE:
            gpus += n
        elif k == C.SHARED_RESOURCE:
            slices += n
        elif k.startswith(C.MIG_RESOURCE_PREFIX):
            prof = k[len(C.MIG_RESOURCE_PREFIX) :]
            prof = prof[:-3] + "+me" if prof.endswith(".me") else prof
            mig[prof] = mig.get(prof, 0) + n
    return Request(gpus=gpus, mig=mig, shared_slices=slices)


def _declared_memory_mib(annotations: dict | None, who: tuple[str, str, str]) -> int:
    """`gpupool.io/gpu-memory` as MiB; an unreadable value counts as undeclared (reported
    against `who`: kind, namespace, name)."""
    text = (annotations or {}).get(C.GPU_MEMORY_ANN)
    if not text:
        return 0
    try:
        value = parse_quantity(str(text))
    except (ValueError, TypeError):
        _unreadable(*who, f"{C.GPU_MEMORY_ANN}={text!r} is not a quantity; read as undeclared")
        return 0
    return max(0, int(math.ceil(value / 2**20)))


def pod_request(pod: Any) -> Request:
    meta = pod.metadata
    return _pod_resources(pod).model_copy(
        update={
            "gpu_memory_mib": _declared_memory_mib(
                meta.annotations, ("Pod", meta.namespace, meta.name)
            )
        }
    )


def _pod_resources(pod: Any) -> Request:
    total: dict[str, int] = {}
    for c in pod.spec.containers or []:
        res = (c.resources.limits or {}) if c.resources else {}
        req = (c.resources.requests or {}) if c.resources else {}
        for k, v in {**req, **res}.items():
            if k in (C.GPU_RESOURCE, C.SHARED_RESOURCE) or k.startswith(C.MIG_RESOURCE_PREFIX):
                total[k] = total.get(k, 0) + int(math.ceil(parse_quantity(str(v))))
    return request_from_resources(total)


def _node(n: Any, state: dict | None) -> Node:
    labels = n.metadata.labels or {}
    ready = any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
    published = (state or {}).get("status") or {}
    if "gpus" in published:  # an agent's object with nothing published yet says nothing
        gpus = published_gpus(n.metadata.name, published.get("gpus"))
    else:
        count = int((n.status.capacity or {}).get(C.GPU_RESOURCE, "0") or 0)
        gpus = [Gpu(index=i) for i in range(count)]
    gpus = _overlay_sharing(n.metadata.name, gpus, n.status.allocatable)
    node = Node(
        name=n.metadata.name,
        labels=labels,
        annotations=n.metadata.annotations or {},
        allocatable={k: str(v) for k, v in (n.status.allocatable or {}).items()},
        unschedulable=bool(n.spec.unschedulable),
        taints=[
            Taint(key=t.key, value=t.value or "", effect=t.effect) for t in (n.spec.taints or [])
        ],
        ready=ready,
        gpus=gpus,
    )
    return _without_broken_cards(node)


def published_gpus(node: str, entries: Any) -> list[Gpu]:
    """The cards a `GpuNodeState` publishes (`status.gpus`); an entry that does not validate
    is left out, logged, and a time without a timezone is read as UTC (`idleSince` and each
    `belowSince` level; an unreadable idle time is read as not idle)."""
    out = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if not isinstance(entry, dict):
            _unreadable("GpuNodeState", "", node, f"status.gpus[{i}] is not an object; left out")
            continue
        entry = _known_fields(Gpu, entry)  # fields a newer agent adds are ignored
        if isinstance(entry.get("migInstances"), list):
            entry["migInstances"] = [
                _known_fields(MigInstance, m) if isinstance(m, dict) else m
                for m in entry["migInstances"]
            ]
        for key in ("idleSince", "idle_since"):
            if isinstance(entry.get(key), str):  # a time without a timezone is UTC
                entry[key] = _stamp(entry[key])
        for key in ("belowSince", "below_since"):
            if isinstance(entry.get(key), dict):  # level -> time, read the same way
                stamps = {
                    level: _stamp(value) if isinstance(value, str) else value
                    for level, value in entry[key].items()
                }
                # an unreadable time drops its level: that idle stretch is not known
                entry[key] = {level: t for level, t in stamps.items() if t is not None}
        try:
            out.append(Gpu.model_validate(entry))
        except ValidationError as exc:
            first = exc.errors()[0] if exc.errors() else {}
            where = ".".join(str(x) for x in first.get("loc", ()))
            _unreadable(
                "GpuNodeState",
                "",
                node,
                f"status.gpus[{i}] left out: {where}: {first.get('msg', exc)}",
            )
    return out


def _known_fields(model: type, entry: dict) -> dict:
    """`entry` without the keys `model` does not know (by YAML name or Python name): a model of
    what another component writes accepts what a newer version of it adds."""
    known = set()
    for name, f in model.model_fields.items():
        known.update({name, f.alias or name})
    return {k: v for k, v in entry.items() if k in known}


def _without_broken_cards(node: Node) -> Node:
    """`node` without the cards `ObservedState` would refuse: every copy of an index
    published twice, and cards whose MIG instances collide. Logged, never raised."""
    problems = node_problems(node)
    if not problems:
        return node
    bad = {node.gpus[path[1]].index for path, _ in problems}
    for path, msg in problems:
        _unreadable("GpuNodeState", "", node.name, f"{path[:2]}: {msg}; card left out")
    return node.model_copy(update={"gpus": [g for g in node.gpus if g.index not in bad]})


def _overlay_sharing(node: str, gpus: list[Gpu], allocatable: Any) -> list[Gpu]:
    """Shared slices come from what the device plugin advertises, not from NVML: it shares every
    card of the node not in MIG mode the same number of ways (its config applies per node and
    ignores a `devices` list), advertised as `nvidia.com/gpu.shared` in the node's allocatable.
    S of them over P such cards: each is shared S // P ways. Never raises: a remainder is
    logged and floored, slices with no such card (or none published) are logged and ignored."""
    value = (allocatable or {}).get(C.SHARED_RESOURCE)
    try:
        total = int(math.floor(parse_quantity(str(value)))) if value is not None else 0
    except (ValueError, TypeError, ArithmeticError):
        _unreadable(
            "Node", "", node, f"{C.SHARED_RESOURCE}={value!r} unreadable; read as not shared"
        )
        return gpus
    if total <= 0:
        return gpus
    plain = [g for g in gpus if not g.mig_enabled]
    if not plain:
        log.warning(
            "node %s: %s=%d but no card out of MIG mode is published; read as not shared",
            node,
            C.SHARED_RESOURCE,
            total,
        )
        return gpus
    each, rest = divmod(total, len(plain))
    if rest:
        log.warning(
            "node %s: %s=%d is not a multiple of its %d cards out of MIG mode; %d slices each",
            node,
            C.SHARED_RESOURCE,
            total,
            len(plain),
            each,
        )
    return [
        g if g.mig_enabled else g.model_copy(update={"shared_slices": each or None}) for g in gpus
    ]


def _int(text: str | None) -> int | None:
    try:
        value = int(str(text))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def _gpus(text: str | None) -> list[int] | None:
    """ "0,1,2": card indices; None when unreadable."""
    try:
        out = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        return None
    return out if all(i >= 0 for i in out) else None


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


def admission_event(kind: str, p: Any) -> bool:
    """A pod watch event (ADDED | MODIFIED | DELETED) that admission should act on now, not at
    the next interval: a GPU pod waiting behind gpupool's gate (new demand, or a gang that
    became complete), or one that stops holding cards (deleted, terminating, finished), which
    an admission may be waiting for or held demand may now fit into."""
    try:
        if pod_request(p).kind == "none":
            return False
        if kind == "DELETED" or p.metadata.deletion_timestamp is not None:
            return True
        if (p.status.phase if p.status else None) in ("Succeeded", "Failed"):
            return True
        return _admission(p)[0] == "gpupool"
    except (AttributeError, TypeError, ValueError):  # a malformed pod: the interval finds it
        return False


def _node_cards(text: str) -> tuple[str, list[int]] | None:
    """ "<node>:<gpus>" ("node-a:0,1"); None when unreadable."""
    node, _, cards = text.rpartition(":")
    gpus = _gpus(cards)
    return (node, gpus) if node and gpus else None


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
        if c.type == C.HELD_CONDITION and c.status == "False":
            return c.message or ""
    return ""


def _next_pod_reservation(j: Any) -> tuple[str, list[int], datetime] | None:
    """A Job's `gpupool.io/next-pod-reserved` = "<node>:<gpus>@<time>"; unreadable: None."""
    text = (j.metadata.annotations or {}).get(C.NEXT_POD_RESERVED_ANN)
    if not text:
        return None
    where, _, when = str(text).rpartition("@")
    found, at = _node_cards(where), _ts(when)
    if found is None or at is None:
        _unreadable(
            "Job",
            j.metadata.namespace,
            j.metadata.name,
            f"unreadable {C.NEXT_POD_RESERVED_ANN} annotation {text!r}; ignored",
        )
        return None
    return found[0], found[1], at


def _gang(p: Any, owners: Owners) -> tuple[str, int | None]:
    """(`Workload.gang`, `gang_size`): an explicit `gpupool.io/gang` (its size from
    `gpupool.io/gang-size`), else a coscheduling pod group (its PodGroup's minMember), else
    the owning Job (its parallelism; the gang key is the owner then, so `gang` stays empty,
    and the planner stops the gang by suspending the Job). A Job another controller manages
    is named as an explicit gang instead, `job:<name>`: suspending it would stop nothing."""
    sizes = owners.sizes
    ns = p.metadata.namespace
    ann = p.metadata.annotations or {}
    if ann.get(C.GANG_ANN):
        return ann[C.GANG_ANN], _int(ann.get(C.GANG_SIZE_ANN))
    group = (p.metadata.labels or {}).get(C.POD_GROUP_LABEL)
    if group:
        return f"pod-group:{group}", sizes.get((ns, "PodGroup", group))
    owner = (p.metadata.owner_references or [None])[0]
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


@dataclass
class Owners:
    """What pods' owners say about them."""

    sizes: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(namespace, kind, name) -> pods a complete gang has."""
    next_pod: dict[tuple[str, str], tuple[str, list[int], datetime]] = field(default_factory=dict)
    """(namespace, Job) -> (node, cards, since): where a move reserved its next pod."""
    suspended: list[SuspendedJob] = field(default_factory=list)
    """Jobs gpupool suspended to stop their gang (`gpupool.io/suspended-at`)."""
    foreign_jobs: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, Job) of Jobs another controller manages (`spec.managedBy`)."""
    queues: dict[tuple[str, str], str] = field(default_factory=dict)
    """(namespace, Job) -> its Kueue queue (`kueue.x-k8s.io/queue-name` label), if any."""


def _suspended_by_us(j: Any) -> bool:
    """gpupool's suspension is still the one in force: its field manager owns `spec.suspend`.
    The annotation alone is not enough: if someone else unsuspended the Job and another
    system (Kueue) suspended it again, the annotation is left over, but the API server moved
    the field's ownership to whoever changed it last (kubernetes.io, "Server-Side Apply",
    Field management: whenever a field's value changes, ownership moves from its current
    manager to the one that changed it, through non-apply patches and updates too)."""
    for entry in j.metadata.managed_fields or []:
        if entry.manager == C.FIELD_MANAGER and "f:suspend" in (
            (entry.fields_v1 or {}).get("f:spec") or {}
        ):
            return True
    return False


def _suspended_job(j: Any, parallelism: int, since: str) -> SuspendedJob:
    """A Job gpupool suspended, as demand: its pod template's request, class and pool."""
    tmpl = j.spec.template
    return SuspendedJob(
        namespace=j.metadata.namespace,
        name=j.metadata.name,
        parallelism=parallelism,
        request=template_request(tmpl.spec),
        priority_class=tmpl.spec.priority_class_name,
        pool=(tmpl.spec.node_selector or {}).get(C.POOL_LABEL),
        suspended_at=_ts(since),
    )


def read_owners(api_client: Any) -> Owners:
    """Gang sizes: a Job's `parallelism` (default 1), a coscheduling PodGroup's `minMember`
    (kubernetes-sigs/scheduler-plugins apis/scheduling/v1alpha1; absent CRD or no
    permission: none); and the next-pod reservations moves left on Jobs."""
    from kubernetes import client

    owners = Owners()
    out = owners.sizes

    def read_job(j: Any) -> None:
        par = j.spec.parallelism if j.spec.parallelism is not None else 1
        if par > 0:
            out[(j.metadata.namespace, "Job", j.metadata.name)] = par
        ann = j.metadata.annotations or {}
        queue = (j.metadata.labels or {}).get(C.KUEUE_QUEUE_LABEL)
        if queue:
            owners.queues[(j.metadata.namespace, j.metadata.name)] = queue
        moved = _next_pod_reservation(j)
        if moved is not None:
            owners.next_pod[(j.metadata.namespace, j.metadata.name)] = moved
        if j.spec.managed_by not in (None, "", JOB_CONTROLLER):
            # the built-in Job controller skips such a Job (batch/v1 JobSpec.managedBy): a
            # suspension would stop nothing, so its gang is stopped pod by pod (`_gang`)
            owners.foreign_jobs.add((j.metadata.namespace, j.metadata.name))
        elif j.spec.suspend and C.SUSPENDED_BY_ANN in ann and par > 0 and _suspended_by_us(j):
            owners.suspended.append(_suspended_job(j, par, ann[C.SUSPENDED_BY_ANN]))

    _each("Job", client.BatchV1Api(api_client).list_job_for_all_namespaces().items, read_job)
    try:
        groups = client.CustomObjectsApi(api_client).list_cluster_custom_object(
            C.POD_GROUP_GROUP, C.POD_GROUP_VERSION, C.POD_GROUP_PLURAL
        )
    except client.ApiException as exc:
        if exc.status not in (403, 404):
            raise
        groups = {}
    for g in groups.get("items", []):
        meta, spec = g.get("metadata") or {}, g.get("spec") or {}
        size = _int(spec.get("minMember"))
        if size is not None and meta.get("namespace") and meta.get("name"):
            out[(meta["namespace"], "PodGroup", meta["name"])] = size
    return owners


_ALLOCATION_FIELDS = ("gpu", "migStart", "migProfile", "slices")


def published_pods(state: dict | None) -> dict[str, list[Allocation]] | None:
    """Pod key -> allocations from a `GpuNodeState`'s `status.pods`; None when the agent
    published none (no key, or not a list). Fields a newer agent adds are ignored; an entry
    that does not parse is left out (that pod falls back as if unlisted)."""
    pods = ((state or {}).get("status") or {}).get("pods")
    if not isinstance(pods, list):
        return None
    out: dict[str, list[Allocation]] = {}
    for entry in pods:
        if not isinstance(entry, dict):
            continue
        allocs = entry.get("allocations") or []
        try:
            pod = PodGpus.model_validate(
                {
                    "namespace": entry.get("namespace"),
                    "name": entry.get("name"),
                    "allocations": [
                        {k: a[k] for k in _ALLOCATION_FIELDS if k in a}
                        for a in allocs
                        if isinstance(a, dict)
                    ],
                }
            )
        except ValidationError:
            continue
        out[pod.key] = pod.allocations
    return out


def _known_allocations(
    p: Any, node_pods: dict[str, list[Allocation]] | None
) -> list[Allocation] | None:
    """What the node agent says the pod holds; the annotation only where the agent publishes
    no pods; None when neither says."""
    if node_pods is not None:
        return node_pods.get(f"{p.metadata.namespace}/{p.metadata.name}")
    ann = (p.metadata.annotations or {}).get(C.GPUS_ANN)
    if not ann:
        return None
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


def template_request(spec: Any) -> Request:
    """The GPU request of one pod a pod template (`spec`) makes."""
    resources: dict[str, Any] = {}
    for c in spec.containers or []:
        if c.resources:
            resources.update(c.resources.requests or {})
            resources.update(c.resources.limits or {})
    return request_from_resources(resources)


def _service(obj: Any, kind: str) -> InferenceService:
    ann = obj.metadata.annotations or {}
    return InferenceService(
        namespace=obj.metadata.namespace,
        name=obj.metadata.name,
        kind=kind,
        replicas=obj.spec.replicas if obj.spec.replicas is not None else 1,
        ready_replicas=(obj.status.ready_replicas or 0) if obj.status else 0,
        replica_request=template_request(obj.spec.template.spec).model_copy(
            update={
                "gpu_memory_mib": _declared_memory_mib(
                    obj.spec.template.metadata.annotations,
                    (kind, obj.metadata.namespace, obj.metadata.name),
                )
                if obj.spec.template.metadata
                else 0
            }
        ),
        priority_class=obj.spec.template.spec.priority_class_name,
        pool=(obj.spec.template.spec.node_selector or {}).get(C.POOL_LABEL),
        queue_length=_float(ann.get(C.QUEUE_LENGTH_ANN)),
        pending_seconds_p99=_float(ann.get(C.PENDING_P99_ANN)),
        last_scale_at=_ts(ann.get(C.LAST_SCALE_ANN)),
    )


REQUEST_TIMEOUT = (5.0, 60.0)
"""(connect, read) seconds for every API call that names no timeout of its own."""


def make_api_client(kubeconfig: str | None = None) -> Any:
    """An official-client ApiClient from a kubeconfig file, or the in-cluster config, whose
    every call is bounded in time (`bound_requests`)."""
    from kubernetes import client, config

    if kubeconfig:
        return bound_requests(config.new_client_from_config(config_file=kubeconfig))
    config.load_incluster_config()
    return bound_requests(client.ApiClient())


def bound_requests(api_client: Any, timeout: tuple[float, float] = REQUEST_TIMEOUT) -> Any:
    """`api_client` with a client-side timeout on every request that sets none.

    The official client waits forever by default: its REST layer hands urllib3
    `timeout=None` when a call passes no `_request_timeout` (kubernetes/client/rest.py,
    `RESTClientObject.request`), and an explicit None overrides any pool default, so a server
    or proxy that accepts and never answers stops the caller for good. Every typed method goes
    through `rest_client.request` (GET, POST, ... call it), so the default is set there. A call
    that passes its own `_request_timeout` (a watch, bounded by its server-side timeout plus a
    grace) keeps it."""
    rest = api_client.rest_client
    if getattr(rest, "gpupool_bounded", False):
        return api_client
    unbounded = rest.request

    def request(method, url, *args, _request_timeout=None, **kw):
        return unbounded(method, url, *args, _request_timeout=_request_timeout or timeout, **kw)

    rest.request = request
    rest.gpupool_bounded = True
    return api_client


def observe_cluster(
    api_client: Any = None,
    *,
    kubeconfig: str | None = None,
    now: datetime | None = None,
    recent_preemptions: list[datetime] | None = None,
    cache: Any = None,
) -> ObservedState:
    """The cluster as an ObservedState. Nodes and pods come from `cache` (the controller's
    watch-fed informers: `cache.nodes()`, `cache.pods()`, or None until synced) when given,
    else from lists; the rest is listed each time (few objects, rarely changing)."""
    found: list[UnreadableObject] = []
    token = _UNREADABLE.set(found)
    try:
        return _observe(api_client or make_api_client(kubeconfig), now, recent_preemptions, cache)
    finally:
        _UNREADABLE.reset(token)


def _observe(
    api_client: Any, now: datetime | None, recent_preemptions: list[datetime] | None, cache: Any
) -> ObservedState:
    """`observe_cluster`, collecting what does not parse into `_UNREADABLE`: each object is
    converted on its own (`_each`), so one malformed object is left out and reported, and the
    rest of the snapshot is made."""
    from kubernetes import client

    core = client.CoreV1Api(api_client)
    states: dict[str, dict] = {}
    try:
        objs = client.CustomObjectsApi(api_client).list_cluster_custom_object(
            C.GROUP, C.VERSION, C.NODE_STATE_PLURAL
        )
        states = dict(
            _each("GpuNodeState", objs.get("items", []), lambda o: (o["metadata"]["name"], o))
        )
    except client.ApiException as exc:
        if exc.status != 404:  # no CRD installed: fall back to node capacity
            raise
    cached_nodes = cache.nodes() if cache is not None else None
    cached_pods = cache.pods() if cache is not None else None
    raw_nodes = cached_nodes if cached_nodes is not None else core.list_node().items
    raw_pods = cached_pods if cached_pods is not None else core.list_pod_for_all_namespaces().items
    nodes = _each("Node", raw_nodes, lambda n: _node(n, states.get(n.metadata.name)))
    by_name = {n.name: n for n in nodes}
    held = {name: published_pods(state) for name, state in states.items()}
    pods = sorted(
        _each("Pod", raw_pods, lambda p: (str(p.metadata.creation_timestamp), p)),
        key=lambda x: (x[0], x[1].metadata.namespace, x[1].metadata.name),
    )
    # Known holdings first (the agent's status.pods, else the annotation), so that a guess
    # never hands out a card a pod is known to hold.
    taken: dict[str, set[int]] = {}

    def holding(p: Any) -> tuple[Any, Request, list[Allocation] | None] | None:
        if p.status.phase in ("Succeeded", "Failed"):
            return None
        if p.metadata.deletion_timestamp and not p.spec.node_name:
            return None  # an unbound pod being deleted holds nothing and is nobody's demand
        req = pod_request(p)
        if req.kind == "none":
            return None
        node_name = p.spec.node_name or ""
        known = _known_allocations(p, held.get(node_name))
        if known is not None:
            taken.setdefault(node_name, set()).update(a.gpu for a in known)
        return p, req, known

    gpu_pods = [x for x in _each("Pod", [p for _, p in pods], holding) if x is not None]
    owners = read_owners(api_client)

    def workload(x: tuple[Any, Request, list[Allocation] | None]) -> Workload:
        p, req, known = x
        node_name = p.spec.node_name or ""
        admitted_to = None if node_name else _admission(p)[1]
        if admitted_to:
            allocs = admitted_allocations(
                p, req, by_name.get(admitted_to), taken.setdefault(admitted_to, set())
            )
        elif known is not None:
            allocs = known
        else:
            allocs = _guess_allocations(
                req, by_name.get(node_name), taken.setdefault(node_name, set())
            )
        return _workload(p, req, allocs, owners)

    # bound pods first: an admitted pod yields to what the kubelet has handed out or will
    workloads = _each(
        "Pod",
        sorted(gpu_pods, key=lambda x: not x[0].spec.node_name),
        workload,
        named=lambda x: x[0],
    )
    apps = client.AppsV1Api(api_client)
    services = _each(
        "Deployment",
        apps.list_deployment_for_all_namespaces(label_selector=f"{C.INFERENCE_LABEL}=true").items,
        lambda d: _service(d, "Deployment"),
    )
    services += _each(
        "StatefulSet",
        apps.list_stateful_set_for_all_namespaces(label_selector=f"{C.INFERENCE_LABEL}=true").items,
        lambda d: _service(d, "StatefulSet"),
    )
    services = with_autoscalers(services, read_autoscalers(api_client))
    quotas = _each(
        "ResourceQuota",
        core.list_resource_quota_for_all_namespaces().items,
        lambda q: QuotaObject(
            namespace=q.metadata.namespace,
            name=q.metadata.name,
            hard={k: str(v) for k, v in (q.spec.hard or {}).items()},
            managed_by=(q.metadata.labels or {}).get(C.MANAGED_BY_LABEL, ""),
        ),
    )
    classes = _each(
        "PriorityClass",
        client.SchedulingV1Api(api_client).list_priority_class().items,
        lambda c: PriorityClassObject(
            name=c.metadata.name,
            value=c.value,
            preemption_policy=c.preemption_policy or "PreemptLowerPriority",
            global_default=bool(c.global_default),
            managed_by=(c.metadata.labels or {}).get(C.MANAGED_BY_LABEL, ""),
        ),
    )
    gated = core.list_namespace(
        label_selector=f"{C.ADMISSION_NAMESPACE_LABEL}={C.ADMISSION_NAMESPACE_VALUE}"
    ).items
    kueue = read_kueue(api_client)
    return ObservedState(
        kueue=kueue,
        suspended_jobs=owners.suspended,
        gated_namespaces=sorted(n.metadata.name for n in gated),
        observed_at=_ts(now) or datetime.now(UTC),
        nodes=nodes,
        workloads=workloads,
        services=services,
        quotas=quotas,
        priority_classes=classes,
        recent_preemptions=[t for t in map(_ts, recent_preemptions or []) if t is not None],
        unreadable=sorted(
            {(u.kind, u.namespace, u.name, u.message): u for u in _UNREADABLE.get() or []}.values(),
            key=lambda u: (u.kind, u.namespace, u.name, u.message),
        ),
    )


# --------------------------------------------------------------------------- autoscalers

TargetRef = tuple[str, str, str]
"""(namespace, kind, name) of the workload an autoscaler scales."""


def _apps_target(namespace: str, api_version: str, kind: str, name: str) -> TargetRef | None:
    """The workload a scaleTargetRef names, when it is an apps/* Deployment or StatefulSet
    (the only kinds gpupool scales); None otherwise."""
    group = api_version.split("/", 1)[0] if "/" in api_version else ""
    if group != "apps" or kind not in ("Deployment", "StatefulSet") or not name:
        return None
    return (namespace, kind, name)


def _hpa(h: Any) -> tuple[TargetRef | None, Autoscaler]:
    """An autoscaling/v2 HorizontalPodAutoscaler: its target and envelope. One KEDA made for a
    ScaledObject (KEDA sets the ScaledObject as its controller ownerReference: keda v2.19.0
    controllers/keda/hpa.go, newHPAForScaledObject, SetControllerReference) is marked with
    that owner."""
    meta, spec = h.metadata, h.spec
    ref = spec.scale_target_ref
    owner = next(
        (
            f"{C.SCALED_OBJECT_KIND}/{r.name}"
            for r in meta.owner_references or []
            if r.controller
            and r.kind == C.SCALED_OBJECT_KIND
            and (r.api_version or "").split("/", 1)[0] == C.KEDA_GROUP
        ),
        "",
    )
    return _apps_target(meta.namespace, ref.api_version or "", ref.kind, ref.name), Autoscaler(
        kind=C.HPA_KIND,
        namespace=meta.namespace,
        name=meta.name,
        min_replicas=spec.min_replicas if spec.min_replicas is not None else C.HPA_DEFAULT_MIN,
        max_replicas=spec.max_replicas,
        owner=owner,
        last_change_at=_ts((meta.annotations or {}).get(C.LAST_SCALE_ANN)),
    )


def _scaled_object(o: dict) -> tuple[TargetRef | None, Autoscaler]:
    """A KEDA ScaledObject: its target (scaleTargetRef's apiVersion defaults to apps/v1 and its
    kind to Deployment: keda v2.19.0 apis/keda/v1alpha1/gvkr.go, ParseGVKR) and envelope
    (minReplicaCount 0 and maxReplicaCount 100 when absent: `C.KEDA_DEFAULT_MIN/MAX`)."""
    meta, spec = o["metadata"], o.get("spec") or {}
    ref = spec["scaleTargetRef"]
    lo, hi = spec.get("minReplicaCount"), spec.get("maxReplicaCount")
    for field_name, v in (("minReplicaCount", lo), ("maxReplicaCount", hi)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise ValueError(f"spec.{field_name} {v!r} is not an integer")
    target = _apps_target(
        meta["namespace"],
        ref.get("apiVersion") or "apps/v1",
        ref.get("kind") or "Deployment",
        ref["name"],
    )
    return target, Autoscaler(
        kind=C.SCALED_OBJECT_KIND,
        namespace=meta["namespace"],
        name=meta["name"],
        min_replicas=C.KEDA_DEFAULT_MIN if lo is None else lo,
        max_replicas=C.KEDA_DEFAULT_MAX if hi is None else hi,
        last_change_at=_ts((meta.get("annotations") or {}).get(C.LAST_SCALE_ANN)),
    )


def read_autoscalers(api_client: Any) -> list[tuple[TargetRef | None, Autoscaler]]:
    """Every HPA (autoscaling/v2) and KEDA ScaledObject with the workload it scales. Listed each
    cycle, like the workloads (few objects; the controller watches only nodes and pods). No
    ScaledObject CRD (404): KEDA is not installed, there are none. Any other error (a 403: the
    RBAC rule is missing) fails the observation: planning without knowing which workloads KEDA
    scales would patch replicas KEDA owns. A malformed object is left out and reported."""
    from kubernetes import client

    hpas = client.AutoscalingV2Api(api_client).list_horizontal_pod_autoscaler_for_all_namespaces()
    out = _each(C.HPA_KIND, hpas.items, _hpa)
    try:
        objs = client.CustomObjectsApi(api_client).list_cluster_custom_object(
            C.KEDA_GROUP, C.KEDA_VERSION, C.SCALED_OBJECT_PLURAL
        )
    except client.ApiException as exc:
        if exc.status != 404:
            raise
        objs = {}
    out += _each(C.SCALED_OBJECT_KIND, objs.get("items", []), _scaled_object)
    return out


def with_autoscalers(
    services: list[InferenceService], found: list[tuple[TargetRef | None, Autoscaler]]
) -> list[InferenceService]:
    """Each service with the autoscalers that target it (sorted by kind and name)."""
    by_target: dict[TargetRef, list[Autoscaler]] = {}
    for target, a in found:
        if target is not None:
            by_target.setdefault(target, []).append(a)
    out = []
    for s in services:
        mine = by_target.get((s.namespace, s.kind, s.name))
        if mine:
            s = s.model_copy(update={"autoscalers": sorted(mine, key=lambda a: (a.kind, a.name))})
        out.append(s)
    return out


# --------------------------------------------------------------------------- Kueue (issue 14)


def read_kueue(api_client: Any) -> list[KueueObject] | None:
    """Kueue's ResourceFlavors, ClusterQueues and LocalQueues (kueue.x-k8s.io, the stored
    version, conventions.KUEUE_VERSION); None when Kueue's CRDs are not served (404 on a
    list: the group or the resource is unknown to the API server). All of them, not only
    gpupool's: a name gpupool would use and someone else took is a finding."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    out: list[KueueObject] = []
    for kind, plural in C.KUEUE_PLURALS.items():
        try:
            listed = api.list_cluster_custom_object(C.KUEUE_GROUP, C.KUEUE_VERSION, plural)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

        def one(o: dict, kind: str = kind) -> KueueObject:
            meta = o.get("metadata") or {}
            return KueueObject(
                kind=kind,
                namespace=meta.get("namespace") or "",
                name=meta["name"],
                spec=o.get("spec") or {},
                managed_by=(meta.get("labels") or {}).get(C.MANAGED_BY_LABEL, ""),
                terminating=bool(meta.get("deletionTimestamp")),
            )

        out.extend(_each(kind, listed.get("items", []), one))
    return out
