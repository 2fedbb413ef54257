"""`MemoryCluster`: an in-memory `ClusterOps` for table tests of apply's handlers.

It keeps the semantics the handlers depend on as the API server (behind `KubeOps`) has them:

* one global resourceVersion, bumped by every write that changes an object (a no-op write
  changes nothing, as on a real server); a ConfigMap or workload write carrying a stale
  resourceVersion is refused with 409 `Conflict`, creating one that exists with 409
  `AlreadyExists`;
* reads by name of a missing object give None where `KubeOps` turns the 404 into None (nodes,
  node states, pods, ConfigMaps, PriorityClasses), and raise `ApiError(404)` where it does not
  (workloads); writes to a missing object raise 404, and so does creating a namespaced object
  in a namespace that does not exist;
* node, pod and Job patches are merge patches: a None value removes that key (or the cordon);
* a pod's owner (`owner_kind`, `owner_name`) is its controller ownerReference's, else its
  first's; Jobs (`add_job`) are read as the controller reads them (a list by name: None when
  missing), annotated, and suspended or resumed (`spec.suspend` with annotations), each with
  one merge patch (404 when missing). No Job controller runs here: a suspended Job's pods stay
  as they are (on a server the Job controller deletes them; tests/apply/test_handlers_api.py
  shows it);
* `admit_pod` removes gpupool's scheduling gate (other gates stay), requires the node by
  affinity (added to each of the pod's own required node affinity terms, if it has any) and
  sets the annotations; like the API server it refuses (422) a pod that has no scheduling
  gate left when the affinity would change (affinity is mutable only while a pod is gated;
  one with another system's gate is still gated, so accepted); `set_pod_condition` merges
  by condition type; a pod is never created with both a node and scheduling gates (422);
* an eviction of a missing pod is a 404; one a PodDisruptionBudget refuses is a 429 (pods in
  `pdb_blocked`; like the real Eviction API, a pod that is Pending, finished or already
  terminating is not checked against its budget); an accepted eviction of a running pod bound
  to a node marks it terminating (`deleting`, as a kubelet's graceful termination does) and
  `finish_deletion` removes it; an unbound or finished pod goes at once;
* PriorityClass `value` and `preemptionPolicy` are immutable: applying a change is a 422;
* an Event must be in the namespace of the object it is about, and one about a cluster-scoped
  object (a Node) in "default": anything else is a 422, as core/v1 validation has it.

Knobs: `fail={"op": ApiError(...)}` makes every call of that operation raise (a list: one
error per call, in order, then the call goes through); `after={"op": fn}` runs `fn()` after
that operation succeeds (another writer between a read and a write). Every call of an
operation is in `calls`; `writes` lists the mutating ones that succeeded (a refused request
changes nothing).
"""

from __future__ import annotations

import copy
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reconciler import conventions as C
from reconciler.apply.port import (
    ApiError,
    AutoscalerInfo,
    AutoscalerKind,
    ConfigMapInfo,
    JobInfo,
    NodeInfo,
    PodCondition,
    PodInfo,
    PriorityClassInfo,
    Unset,
    WorkloadInfo,
    WorkloadKind,
)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
MUTATING = frozenset(
    {
        "patch_node",
        "annotate_pod",
        "annotate_job",
        "set_job_suspend",
        "admit_pod",
        "set_pod_condition",
        "set_pod_claim",
        "evict_pod",
        "scale_workload",
        "set_autoscaler_bounds",
        "write_config_map",
        "server_side_apply",
        "delete_priority_class",
        "delete_resource_quota",
        "create_event",
        "create_kueue_object",
        "patch_kueue_object",
        "delete_kueue_object",
        "create_dra_object",
        "patch_dra_object",
        "delete_dra_object",
        "replace_dra_status",
    }
)
PLURAL = {"Deployment": "deployments.apps", "StatefulSet": "statefulsets.apps"}


def not_found(kind: str, name: str) -> ApiError:
    return ApiError(404, "Not Found", f'{kind} "{name}" not found')


def modified(kind: str, name: str) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {kind} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
    )


def merge(current: dict[str, str], patch: dict[str, str | None] | None) -> dict[str, str]:
    """RFC 7386 on a string map: None removes the key."""
    out = dict(current)
    for k, v in (patch or {}).items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


@dataclass
class Call:
    op: str
    args: dict[str, Any]
    error: ApiError | None = None

    @property
    def mutating(self) -> bool:
        return self.op in MUTATING


@dataclass
class _Node:
    unschedulable: bool = False
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    """status.allocatable: the kubelet's to write (`set_allocatable`), never a handler's."""


@dataclass
class _Pod:
    node: str | None
    phase: str
    annotations: dict[str, str]
    labels: dict[str, str]
    gpu_resources: bool
    deleting: bool = False
    gates: list[str] = field(default_factory=list)
    """spec.schedulingGates names."""
    terms: list[dict] = field(default_factory=list)
    """spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
    .nodeSelectorTerms, as the API's JSON."""
    conditions: list[PodCondition] = field(default_factory=list)
    owner_kind: str = ""
    owner_name: str = ""
    writers: dict[str, frozenset[str]] = field(default_factory=dict)
    """Annotation key -> the field managers that own it (`PodInfo.annotation_writers`)."""
    claims: list[tuple[str, str]] = field(default_factory=list)
    """(entry, ResourceClaim name or "") of its DRA claims (`PodInfo.claims`)."""
    uid: str = ""
    delete_asked: datetime | None = None
    """`PodInfo.delete_asked` of a terminating pod (None: not on record)."""
    created: datetime | None = None
    """`PodInfo.created` (None: not on record)."""
    templates: dict[str, str] = field(default_factory=dict)
    nominated: str = ""
    """`status.nominatedNodeName` (`PodInfo.nominated`)."""

    def annotate(self, annotations: dict[str, str | None]) -> None:
        """A merge patch of its annotations by gpupool (`KubeOps` names its field manager):
        gpupool then owns each key it set; a removed key has no owner."""
        self.annotations = merge(self.annotations, annotations)
        for k, v in annotations.items():
            if v is None:
                self.writers.pop(k, None)
            else:
                self.writers[k] = frozenset({C.FIELD_MANAGER})


def pinned(terms: list[dict], node: str) -> list[dict]:
    """Required node affinity terms once a pod is admitted to `node`: the node's requirement
    in each of its own terms, or one term with only it."""
    pin = {"key": "metadata.name", "operator": "In", "values": [node]}
    if not terms:
        return [{"matchFields": [pin]}]
    out = []
    for t in terms:
        fields = list(t.get("matchFields") or [])
        out.append({**t, "matchFields": fields if pin in fields else [*fields, pin]})
    return out


def _version_of(p: _Pod) -> str:
    """The pod's "resourceVersion": one for each state of it (a digest of every field), so a
    write conditional on a copy's is refused once the pod changed, as the API server's is."""
    return str(zlib.crc32(repr(p).encode()))


@dataclass
class _Versioned:
    body: dict[str, Any]
    resource_version: str


class MemoryCluster:
    """See the module docstring. Seed with the `add_*` methods (not logged as writes)."""

    def __init__(
        self,
        *,
        namespaces: tuple[str, ...] | set[str] = (),
        pdb_blocked: set[str] | None = None,
        fail: dict[str, ApiError | list[ApiError]] | None = None,
        after: dict[str, Callable[[], None]] | None = None,
    ):
        self.namespaces: set[str] = {*DEFAULT_NAMESPACES, *namespaces}
        self.nodes: dict[str, _Node] = {}
        self.node_states: dict[str, dict] = {}
        self.pods: dict[tuple[str, str], _Pod] = {}
        self.workloads: dict[tuple[str, str, str], _Versioned] = {}
        self.jobs: dict[tuple[str, str], _Versioned] = {}
        """batch/v1 Jobs by (namespace, name): `{"annotations": {...}, "suspend": bool}`."""
        self.autoscalers: dict[tuple[str, str, str], _Versioned] = {}
        """HPAs and ScaledObjects by (kind, namespace, name): `{"min", "max", "target_kind",
        "target_name", "owner", "annotations"}`."""
        self.config_maps: dict[tuple[str, str], _Versioned] = {}
        self.quotas: dict[tuple[str, str], dict] = {}
        self.priority_classes: dict[str, dict] = {}
        self.kueue: dict[tuple[str, str, str], dict] = {}
        """Kueue objects by (kind, namespace or "", name): whole objects as stored."""
        self.dra: dict[tuple[str, str, str], dict] = {}
        """DeviceClasses, ResourceClaimTemplates and ResourceClaims by (kind, namespace or "",
        name)."""
        self.events: list[tuple[str, dict]] = []
        self.evictions: list[str] = []
        self.applied: list[dict] = []
        """Bodies of server-side applies that succeeded, in order."""
        self.pdb_blocked: set[str] = set(pdb_blocked or ())
        """`namespace/name` of pods a PodDisruptionBudget protects (no disruption allowed)."""
        self.fail: dict[str, ApiError | list[ApiError]] = dict(fail or {})
        self.after: dict[str, Callable[[], None]] = dict(after or {})
        self.calls: list[Call] = []
        self.dra_cache: dict[tuple[str, str, str], dict] | None = None
        """What `peek_dra_object` answers (a watch cache's copies); None: no cache."""
        self._peeked: dict[tuple[str, str], PodInfo] = {}
        """The copy `admit_pod` patches against, as KubeOps's resourceVersion precondition:
        a pod's last `peek_pod` answer, until `read_pod` reads it again."""
        self.pod_cache: dict[tuple[str, str], PodInfo] | None = None
        """What `peek_pod` answers (a watch cache's copies, as of when a test took them:
        `cache_pods`); None: no cache."""
        self._rv = 1000
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ bookkeeping
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _enter(self, op: str, **args: Any) -> Call:
        call = Call(op, args)
        self.calls.append(call)
        err = self.fail.get(op)
        if isinstance(err, list):
            err = err.pop(0) if err else None
        if err is not None:
            call.error = err
            raise err
        return call

    def _run(self, op: str, fn: Callable[[], Any], **args: Any) -> Any:
        with self._lock:  # one request at a time, as the API server serializes one object's
            call = self._enter(op, **args)
            try:
                out = fn()
            except ApiError as exc:
                call.error = exc
                raise
            key = (args.get("namespace"), args.get("name"))
            if call.mutating and key in self._peeked and key in self.pods:
                # gpupool's own write answers the pod as written: KubeOps patches against that
                self._peeked[key] = self._info(key, self.pods[key])  # type: ignore[index]
            hook = self.after.get(op)
            if hook is not None:
                hook()
            return out

    @property
    def writes(self) -> list[Call]:
        """Mutating calls that succeeded."""
        return [c for c in self.calls if c.mutating and c.error is None]

    def write_ops(self) -> list[str]:
        return [c.op for c in self.writes]

    def _need_namespace(self, ns: str) -> None:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)

    # ------------------------------------------------------------------ seeding
    def add_namespace(self, name: str) -> None:
        self.namespaces.add(name)

    def add_node(
        self,
        name: str,
        *,
        unschedulable: bool = False,
        labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None,
        allocatable: dict[str, str] | None = None,
    ) -> None:
        self.nodes[name] = _Node(
            unschedulable, dict(labels or {}), dict(annotations or {}), dict(allocatable or {})
        )

    def set_allocatable(self, name: str, allocatable: dict[str, str]) -> None:
        """What the kubelet posts once the device plugin advertises its resources."""
        self.nodes[name].allocatable = dict(allocatable)

    def set_node_state(self, node: str, obj: dict) -> None:
        """The node agent's GpuNodeState (`{"status": {"gpus": [...]}}`)."""
        self.node_states[node] = copy.deepcopy(obj)

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str | None = None,
        phase: str | None = None,
        annotations: dict[str, str] | None = None,
        labels: dict[str, str] | None = None,
        gpu_resources: bool = False,
        deleting: bool = False,
        gates: tuple[str, ...] = (),
        terms: list[dict] | None = None,
        conditions: tuple[PodCondition, ...] = (),
        owner: tuple[str, str] | None = None,
        annotated_by: str | None = None,
        claims: tuple[tuple[str, str], ...] = (),
        templates: dict[str, str] | None = None,
        delete_asked: datetime | None = None,
    ) -> None:
        """A pod; `phase` defaults to Running when it is bound to a node, else Pending;
        `gates`: its scheduling gates (set only at creation, on an unbound pod); `terms`: its
        required node affinity terms; `owner`: (kind, name) of its owner (the Job need not
        exist: a pod outlives its deleted Job until the garbage collector catches up);
        `annotated_by`: the field manager that wrote its annotations (None: none on record);
        `claims`: its DRA claims (entry, ResourceClaim name or ""), then its uid is
        `uid-<name>`; `templates`: entry -> the ResourceClaimTemplate it names."""
        self._need_namespace(namespace)
        if node and gates:
            raise ApiError(
                422,
                "Unprocessable Entity",
                f'Pod "{name}" is invalid: spec.nodeName: Forbidden: cannot be set until all '
                "schedulingGates have been cleared",
            )
        self.pods[(namespace, name)] = _Pod(
            node,
            phase or ("Running" if node else "Pending"),
            dict(annotations or {}),
            dict(labels or {}),
            gpu_resources,
            deleting,
            list(gates),
            copy.deepcopy(list(terms or [])),
            list(conditions),
            *(owner or ("", "")),
            writers={k: frozenset({annotated_by}) for k in annotations or {}}
            if annotated_by
            else {},
            claims=list(claims),
            uid=f"uid-{name}" if claims else "",
            templates=dict(templates or {}),
            delete_asked=delete_asked,
        )

    def pod_terms(self, namespace: str, name: str) -> list[dict]:
        """Test access: the pod's required node affinity terms (not a port operation)."""
        return copy.deepcopy(self.pods[(namespace, name)].terms)

    def add_workload(
        self,
        kind: WorkloadKind,
        namespace: str,
        name: str,
        *,
        replicas: int,
        annotations: dict[str, str] | None = None,
    ) -> None:
        self._need_namespace(namespace)
        self.workloads[(kind, namespace, name)] = _Versioned(
            {"replicas": replicas, "annotations": dict(annotations or {})}, self._next_rv()
        )

    def add_job(
        self,
        namespace: str,
        name: str,
        *,
        annotations: dict[str, str] | None = None,
        suspend: bool = False,
    ) -> None:
        """A batch/v1 Job (only its annotations and `spec.suspend` are kept)."""
        self._need_namespace(namespace)
        self.jobs[(namespace, name)] = _Versioned(
            {"annotations": dict(annotations or {}), "suspend": suspend}, self._next_rv()
        )

    def job_annotations(self, namespace: str, name: str) -> dict[str, str] | None:
        """Test access: a Job's annotations, None when it is missing (not a port operation)."""
        j = self.jobs.get((namespace, name))
        return None if j is None else dict(j.body["annotations"])

    def job_suspended(self, namespace: str, name: str) -> bool | None:
        """Test access: a Job's `spec.suspend`, None when it is missing (not a port operation)."""
        j = self.jobs.get((namespace, name))
        return None if j is None else bool(j.body["suspend"])

    def add_config_map(self, namespace: str, name: str, data: dict[str, str]) -> None:
        self._need_namespace(namespace)
        self.config_maps[(namespace, name)] = _Versioned({"data": dict(data)}, self._next_rv())

    def add_priority_class(
        self,
        name: str,
        *,
        value: int,
        preemption_policy: str = "PreemptLowerPriority",
        global_default: bool = False,
        managed_by: str = "",
    ) -> None:
        self.priority_classes[name] = {
            "value": value,
            "preemptionPolicy": preemption_policy,
            "globalDefault": global_default,
            "labels": {C.MANAGED_BY_LABEL: managed_by} if managed_by else {},
        }

    def finish_deletion(self, namespace: str, name: str) -> bool:
        """The kubelet confirms a terminating pod is gone; False when it was not terminating."""
        pod = self.pods.get((namespace, name))
        if pod is None or not pod.deleting:
            return False
        del self.pods[(namespace, name)]
        return True

    # ------------------------------------------------------------------ nodes
    def read_node(self, name: str) -> NodeInfo | None:
        def read() -> NodeInfo | None:
            n = self.nodes.get(name)
            if n is None:
                return None  # KubeOps: 404 -> None
            return NodeInfo(
                name, n.unschedulable, dict(n.labels), dict(n.annotations), dict(n.allocatable)
            )

        return self._run("read_node", read, name=name)

    def patch_node(
        self,
        name: str,
        *,
        unschedulable: bool | None | object = Unset,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> None:
        def patch() -> None:
            n = self.nodes.get(name)
            if n is None:
                raise not_found("nodes", name)
            if unschedulable is not Unset:
                n.unschedulable = bool(unschedulable)  # null removes the field: schedulable
            n.labels = merge(n.labels, labels)
            n.annotations = merge(n.annotations, annotations)

        self._run(
            "patch_node",
            patch,
            name=name,
            unschedulable=unschedulable,
            labels=copy.deepcopy(labels),
            annotations=copy.deepcopy(annotations),
        )

    def read_node_state(self, node: str) -> dict | None:
        return self._run(
            "read_node_state", lambda: copy.deepcopy(self.node_states.get(node)), node=node
        )

    # ------------------------------------------------------------------ pods
    def _info(self, key: tuple[str, str], p: _Pod) -> PodInfo:
        return PodInfo(
            key[0],
            key[1],
            p.phase,
            dict(p.annotations),
            p.deleting,
            p.gpu_resources,
            node=p.node,
            gates=tuple(p.gates),
            conditions=tuple(p.conditions),
            owner_kind=p.owner_kind,
            owner_name=p.owner_name,
            uid=p.uid,
            claims=tuple(p.claims),
            claim_templates=dict(p.templates),
            annotation_writers=dict(p.writers),
            delete_asked=p.delete_asked,
            created=p.created,
            nominated=p.nominated,
            resource_version=_version_of(p),
        )

    def read_pod(self, namespace: str, name: str) -> PodInfo | None:
        def read() -> PodInfo | None:
            self._peeked.pop((namespace, name), None)
            p = self.pods.get((namespace, name))
            return None if p is None else self._info((namespace, name), p)

        return self._run("read_pod", read, namespace=namespace, name=name)

    def peek_pod(self, namespace: str, name: str) -> PodInfo | None:
        """The "watch cache" a test gave (`pod_cache`); no cache by default. Recorded, never
        failed: it is no request."""
        self.calls.append(Call("peek_pod", {"namespace": namespace, "name": name}))
        got = (self.pod_cache or {}).get((namespace, name))
        if got is not None:
            self._peeked[(namespace, name)] = got
        return got

    def cache_pods(self) -> None:
        """A watch cache holding every pod as it is now (`peek_pod` answers these copies until
        the next call, however the pods change meanwhile)."""
        self.pod_cache = {k: self._info(k, p) for k, p in self.pods.items()}

    def pods_on_node(self, node: str) -> list[PodInfo]:
        def list_() -> list[PodInfo]:
            return [self._info(k, p) for k, p in sorted(self.pods.items()) if p.node == node]

        return self._run("pods_on_node", list_, node=node)

    def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        def patch() -> None:
            p = self.pods.get((namespace, name))
            if p is None:
                raise not_found("pods", name)
            p.annotate(annotations)

        self._run(
            "annotate_pod", patch, namespace=namespace, name=name, annotations=dict(annotations)
        )

    def admit_pod(
        self, namespace: str, name: str, *, node: str, annotations: dict[str, str]
    ) -> None:
        def patch() -> None:
            p = self.pods.get((namespace, name))
            if p is None:
                raise not_found("pods", name)
            seen = self._peeked.pop((namespace, name), None)
            if seen is not None and seen.resource_version != _version_of(p):
                # KubeOps patches with the resourceVersion of the copy it took the terms from
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}"')
            terms = pinned(p.terms, node)
            if not p.gates and terms != p.terms:
                # ValidatePodUpdate: node affinity is mutable only while the pod is gated
                raise ApiError(
                    422,
                    "Unprocessable Entity",
                    f'Pod "{name}" is invalid: spec: Forbidden: pod updates may not change '
                    "fields other than ...",
                )
            p.gates = [g for g in p.gates if g != C.ADMISSION_GATE]
            p.terms = terms
            p.annotate(annotations)

        self._run(
            "admit_pod",
            patch,
            namespace=namespace,
            name=name,
            node=node,
            annotations=dict(annotations),
        )

    def set_pod_condition(
        self,
        namespace: str,
        name: str,
        *,
        type: str,
        status: str,
        reason: str,
        message: str,
        last_transition_time: str,
        clear_nominated: bool = False,
        resource_version: str = "",
    ) -> None:
        cond = PodCondition(type, status, reason, message, last_transition_time)

        def patch() -> None:
            p = self.pods.get((namespace, name))
            if p is None:
                raise not_found("pods", name)
            if resource_version and resource_version != _version_of(p):
                raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}"')
            others = [c for c in p.conditions if c.type != type]
            at = next((i for i, c in enumerate(p.conditions) if c.type == type), len(others))
            p.conditions = [*others[:at], cond, *others[at:]]
            if clear_nominated:
                p.nominated = ""

        extra: dict[str, Any] = {"clear_nominated": True} if clear_nominated else {}
        if resource_version:
            extra["resource_version"] = resource_version
        self._run(
            "set_pod_condition", patch, namespace=namespace, name=name, condition=cond, **extra
        )

    def set_pod_claim(
        self, namespace: str, name: str, entry: str, claim: str, *, node: str = ""
    ) -> None:
        def patch() -> None:
            p = self.pods.get((namespace, name))
            if p is None:
                raise not_found("pods", name)
            kept = [(e, n) for e, n in p.claims if e != entry]
            p.claims = [*kept, (entry, claim)]  # merged by entry name, as the server does
            if node:
                p.nominated = node

        extra = {"node": node} if node else {}
        self._run(
            "set_pod_claim",
            patch,
            namespace=namespace,
            name=name,
            entry=entry,
            claim=claim,
            **extra,
        )

    def evict_pod(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"

        def evict() -> None:
            p = self.pods.get((namespace, name))
            if p is None:
                raise not_found("pods", name)
            checked = not p.deleting and p.phase not in ("Pending", "Succeeded", "Failed")
            if checked and key in self.pdb_blocked:
                raise ApiError(
                    429,
                    "Too Many Requests",
                    "Cannot evict pod as it would violate the pod's disruption budget.",
                )
            self.evictions.append(key)
            if p.node is None or p.phase in ("Succeeded", "Failed"):
                del self.pods[(namespace, name)]  # nothing to stop: deleted at once
            else:
                p.deleting = True

        self._run("evict_pod", evict, namespace=namespace, name=name)

    # ------------------------------------------------------------------ jobs
    def read_job(self, namespace: str, name: str) -> JobInfo | None:
        def read() -> JobInfo | None:
            j = self.jobs.get((namespace, name))
            if j is None:
                return None
            return JobInfo(dict(j.body["annotations"]), suspended=bool(j.body["suspend"]))

        return self._run("read_job", read, namespace=namespace, name=name)

    def annotate_job(self, namespace: str, name: str, annotations: dict[str, str | None]) -> None:
        def patch() -> None:
            j = self.jobs.get((namespace, name))
            if j is None:
                raise not_found("jobs.batch", name)
            new = merge(j.body["annotations"], annotations)
            if new != j.body["annotations"]:
                j.body, j.resource_version = {**j.body, "annotations": new}, self._next_rv()

        self._run(
            "annotate_job", patch, namespace=namespace, name=name, annotations=dict(annotations)
        )

    def set_job_suspend(
        self, namespace: str, name: str, *, suspend: bool, annotations: dict[str, str | None]
    ) -> None:
        def patch() -> None:
            j = self.jobs.get((namespace, name))
            if j is None:
                raise not_found("jobs.batch", name)
            body = {"annotations": merge(j.body["annotations"], annotations), "suspend": suspend}
            if body != j.body:
                j.body, j.resource_version = body, self._next_rv()

        self._run(
            "set_job_suspend",
            patch,
            namespace=namespace,
            name=name,
            suspend=suspend,
            annotations=dict(annotations),
        )

    # ------------------------------------------------------------------ workloads
    def read_workload(self, kind: WorkloadKind, namespace: str, name: str) -> WorkloadInfo:
        def read() -> WorkloadInfo:
            w = self.workloads.get((kind, namespace, name))
            if w is None:
                raise not_found(PLURAL[kind], name)
            return WorkloadInfo(w.body["replicas"], w.resource_version)

        return self._run("read_workload", read, kind=kind, namespace=namespace, name=name)

    def scale_workload(
        self,
        kind: WorkloadKind,
        namespace: str,
        name: str,
        *,
        replicas: int,
        resource_version: str,
        annotations: dict[str, str],
    ) -> None:
        def patch() -> None:
            w = self.workloads.get((kind, namespace, name))
            if w is None:
                raise not_found(PLURAL[kind], name)
            if resource_version != w.resource_version:
                raise modified(PLURAL[kind], name)
            body = {"replicas": replicas, "annotations": merge(w.body["annotations"], annotations)}
            if body != w.body:
                w.body, w.resource_version = body, self._next_rv()

        self._run(
            "scale_workload",
            patch,
            kind=kind,
            namespace=namespace,
            name=name,
            replicas=replicas,
            resource_version=resource_version,
            annotations=dict(annotations),
        )

    # ------------------------------------------------------------------ autoscalers
    def add_autoscaler(
        self,
        kind: AutoscalerKind,
        namespace: str,
        name: str,
        *,
        min_replicas: int,
        max_replicas: int,
        target: tuple[str, str] = ("Deployment", "serve"),
        owner: str = "",
        annotations: dict[str, str] | None = None,
    ) -> None:
        self.autoscalers[(kind, namespace, name)] = _Versioned(
            {
                "min": min_replicas,
                "max": max_replicas,
                "target_kind": target[0],
                "target_name": target[1],
                "owner": owner,
                "annotations": dict(annotations or {}),
            },
            self._next_rv(),
        )

    def read_autoscaler(
        self, kind: AutoscalerKind, namespace: str, name: str
    ) -> AutoscalerInfo | None:
        def read() -> AutoscalerInfo | None:
            a = self.autoscalers.get((kind, namespace, name))
            if a is None:
                return None
            b = a.body
            return AutoscalerInfo(
                b["min"],
                b["max"],
                b["target_kind"],
                b["target_name"],
                a.resource_version,
                b["owner"],
            )

        return self._run("read_autoscaler", read, kind=kind, namespace=namespace, name=name)

    def set_autoscaler_bounds(
        self,
        kind: AutoscalerKind,
        namespace: str,
        name: str,
        *,
        min_replicas: int,
        max_replicas: int,
        resource_version: str,
        annotations: dict[str, str],
    ) -> None:
        def patch() -> None:
            a = self.autoscalers.get((kind, namespace, name))
            if a is None:
                raise not_found(kind, name)
            if resource_version != a.resource_version:
                raise modified(kind, name)
            body = {
                **a.body,
                "min": min_replicas,
                "max": max_replicas,
                "annotations": merge(a.body["annotations"], annotations),
            }
            if body != a.body:
                a.body, a.resource_version = body, self._next_rv()

        self._run(
            "set_autoscaler_bounds",
            patch,
            kind=kind,
            namespace=namespace,
            name=name,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            resource_version=resource_version,
            annotations=dict(annotations),
        )

    def workload(self, kind: WorkloadKind, namespace: str, name: str) -> dict[str, Any]:
        """Test access: replicas, annotations and resourceVersion (not a port operation)."""
        w = self.workloads[(kind, namespace, name)]
        return {**copy.deepcopy(w.body), "resource_version": w.resource_version}

    # ------------------------------------------------------------------ objects
    def read_config_map(self, namespace: str, name: str) -> ConfigMapInfo | None:
        def read() -> ConfigMapInfo | None:
            cm = self.config_maps.get((namespace, name))
            return None if cm is None else ConfigMapInfo(dict(cm.body["data"]), cm.resource_version)

        return self._run("read_config_map", read, namespace=namespace, name=name)

    def write_config_map(
        self, namespace: str, name: str, data: dict[str, str], *, resource_version: str | None
    ) -> None:
        def write() -> None:
            self._need_namespace(namespace)
            cm = self.config_maps.get((namespace, name))
            if resource_version is None:
                if cm is not None:
                    raise ApiError(409, "Conflict", f'configmaps "{name}" already exists')
                self.config_maps[(namespace, name)] = _Versioned(
                    {"data": dict(data)}, self._next_rv()
                )
                return
            if cm is None:
                raise not_found("configmaps", name)
            if resource_version != cm.resource_version:
                raise modified("configmaps", name)
            new = merge(cm.body["data"], data)
            if new != cm.body["data"]:
                cm.body, cm.resource_version = {"data": new}, self._next_rv()

        self._run(
            "write_config_map",
            write,
            namespace=namespace,
            name=name,
            data=dict(data),
            resource_version=resource_version,
        )

    def namespace_exists(self, name: str) -> bool:
        return self._run("namespace_exists", lambda: name in self.namespaces, name=name)

    def server_side_apply(self, body: dict) -> None:
        def apply() -> None:
            md = body["metadata"]
            if body["kind"] == "ResourceQuota":
                self._need_namespace(md["namespace"])
                self.quotas[(md["namespace"], md["name"])] = copy.deepcopy(body)
            elif body["kind"] == "PriorityClass":
                cur = self.priority_classes.get(md["name"])
                policy = body.get("preemptionPolicy", "PreemptLowerPriority")
                if cur is not None:
                    for fld, new in (("value", body["value"]), ("preemptionPolicy", policy)):
                        if cur[fld] != new:
                            raise ApiError(
                                422,
                                "Unprocessable Entity",
                                f'PriorityClass.scheduling.k8s.io "{md["name"]}" is invalid: '
                                f"{fld}: Forbidden: may not be changed in an update.",
                            )
                # one globalDefault class: kubernetes plugin/pkg/admission/priority/admission.go
                taken = [
                    n
                    for n, pc in self.priority_classes.items()
                    if pc.get("globalDefault") and n != md["name"]
                ]
                if body.get("globalDefault") and taken:
                    raise ApiError(
                        403,
                        "Forbidden",
                        f"PriorityClass {taken[0]} is already marked as default. "
                        "Only one default can exist",
                    )
                self.priority_classes[md["name"]] = {
                    "value": body["value"],
                    "preemptionPolicy": policy,
                    "globalDefault": bool(body.get("globalDefault")),
                    "labels": dict(md.get("labels") or {}),
                }
            else:
                raise ValueError(f"server_side_apply: unsupported kind {body['kind']}")
            self.applied.append(copy.deepcopy(body))

        self._run("server_side_apply", apply, body=copy.deepcopy(body))

    def read_priority_class(self, name: str) -> PriorityClassInfo | None:
        def read() -> PriorityClassInfo | None:
            pc = self.priority_classes.get(name)
            return (
                None
                if pc is None
                else PriorityClassInfo(
                    pc["value"],
                    pc["preemptionPolicy"],
                    pc["globalDefault"],
                    (pc.get("labels") or {}).get(C.MANAGED_BY_LABEL, ""),
                )
            )

        return self._run("read_priority_class", read, name=name)

    def quota_manager(self, namespace: str, name: str) -> str | None:
        def read() -> str | None:
            q = self.quotas.get((namespace, name))
            if q is None:
                return None
            return ((q.get("metadata") or {}).get("labels") or {}).get(C.MANAGED_BY_LABEL, "")

        return self._run("quota_manager", read, namespace=namespace, name=name)

    def delete_priority_class(self, name: str) -> None:
        def delete() -> None:
            if self.priority_classes.pop(name, None) is None:
                raise not_found("priorityclasses.scheduling.k8s.io", name)

        self._run("delete_priority_class", delete, name=name)

    def delete_resource_quota(self, namespace: str, name: str) -> None:
        def delete() -> None:
            if self.quotas.pop((namespace, name), None) is None:
                raise not_found("resourcequotas", name)

        self._run("delete_resource_quota", delete, namespace=namespace, name=name)

    def create_event(self, namespace: str, body: dict) -> None:
        def create() -> None:
            self._need_namespace(namespace)
            name = body["metadata"]["name"]
            involved = (body.get("involvedObject") or {}).get("namespace") or ""
            if (
                body.get("eventTime") is None
                and involved != namespace
                and (involved or namespace != "default")
            ):
                # core/v1 validation: an Event lives in its object's namespace, one about a
                # cluster-scoped object (no involvedObject.namespace) in "default"
                raise ApiError(
                    422,
                    "Unprocessable Entity",
                    f'Event "{name}" is invalid: involvedObject.namespace: '
                    f'Invalid value: "{involved}": does not match event.namespace',
                )
            if any(ns == namespace and e["metadata"]["name"] == name for ns, e in self.events):
                raise ApiError(409, "Conflict", f'events "{name}" already exists')
            self.events.append((namespace, copy.deepcopy(body)))

        self._run("create_event", create, namespace=namespace, body=copy.deepcopy(body))

    # ------------------------------------------------------------------ Kueue (issue 14), DRA (32)
    # Both are plain objects by (kind, namespace, name) in a store of their own: `_objects`.
    def kueue_manager(self, kind: str, namespace: str, name: str) -> str | None:
        return self._objects("kueue").manager(kind, namespace, name)

    def create_kueue_object(self, body: dict) -> None:
        self._objects("kueue").create(body)

    def patch_kueue_object(self, kind: str, namespace: str, name: str, patch: dict) -> None:
        self._objects("kueue").patch(kind, namespace, name, patch)

    def delete_kueue_object(self, kind: str, namespace: str, name: str) -> None:
        self._objects("kueue").delete(kind, namespace, name)

    def dra_manager(self, kind: str, namespace: str, name: str) -> str | None:
        return self._objects("dra").manager(kind, namespace, name)

    def read_dra_object(self, kind: str, namespace: str, name: str) -> dict | None:
        return self._objects("dra").read(kind, namespace, name)

    def peek_dra_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """The "watch cache" a test gave (`dra_cache`: (kind, namespace, name) -> object); no
        cache by default. Recorded, never failed: it is no request."""
        self.calls.append(Call("peek_dra_object", {"kind": kind, "name": name}))
        return (self.dra_cache or {}).get((kind, namespace, name))

    def create_dra_object(self, body: dict) -> None:
        self._objects("dra").create(body)

    def patch_dra_object(self, kind: str, namespace: str, name: str, patch: dict) -> dict | None:
        return self._objects("dra").patch(kind, namespace, name, patch)

    def replace_dra_status(self, kind: str, namespace: str, name: str, body: dict) -> None:
        self._objects("dra").replace_status(kind, namespace, name, body)

    def delete_dra_object(self, kind: str, namespace: str, name: str) -> None:
        self._objects("dra").delete(kind, namespace, name)

    def _objects(self, which: str) -> _ObjectStore:
        return _ObjectStore(self, which, GROUP_OF[which])


GROUP_OF = {"kueue": "kueue.x-k8s.io", "dra": "resource.k8s.io"}


class _ObjectStore:
    """The in-memory cluster's objects of one group (`cluster.kueue` or `cluster.dra`), with the
    port's calls recorded and failed as the cluster's `_run` does (operation
    `<verb>_<which>_object`, `<which>_manager`)."""

    def __init__(self, cluster: Any, which: str, group: str):
        self.cluster, self.which, self.group = cluster, which, group
        self.store: dict = getattr(cluster, which)

    def manager(self, kind: str, namespace: str, name: str) -> str | None:
        def read() -> str | None:
            o = self.store.get((kind, namespace, name))
            if o is None:
                return None
            return ((o.get("metadata") or {}).get("labels") or {}).get(C.MANAGED_BY_LABEL, "")

        op = f"{self.which}_manager"
        return self.cluster._run(op, read, kind=kind, namespace=namespace, name=name)

    def read(self, kind: str, namespace: str, name: str) -> dict | None:
        def read() -> dict | None:
            return copy.deepcopy(self.store.get((kind, namespace, name)))

        op = f"read_{self.which}_object"
        return self.cluster._run(op, read, kind=kind, namespace=namespace, name=name)

    def create(self, body: dict) -> None:
        def create() -> None:
            md = body["metadata"]
            key = (body["kind"], md.get("namespace") or "", md["name"])
            if key[1]:
                self.cluster._need_namespace(key[1])
            if key in self.store:
                raise ApiError(409, "Conflict", f'{body["kind"]} "{md["name"]}" already exists')
            self.store[key] = copy.deepcopy(body)

        self.cluster._run(f"create_{self.which}_object", create, body=copy.deepcopy(body))

    def patch(self, kind: str, namespace: str, name: str, patch: dict) -> dict | None:
        def apply() -> dict:
            key = (kind, namespace, name)
            if key not in self.store:
                raise not_found(f"{kind.lower()}s.{self.group}", name)
            want = (patch.get("metadata") or {}).get("resourceVersion")
            have = (self.store[key].get("metadata") or {}).get("resourceVersion")
            if want is not None and want != have:
                raise ApiError(409, "Conflict", f"the object {name} has been modified")
            self.store[key] = merge_patch(self.store[key], patch)
            return copy.deepcopy(self.store[key])

        op = f"patch_{self.which}_object"
        return self.cluster._run(op, apply, kind=kind, namespace=namespace, name=name, patch=patch)

    def replace_status(self, kind: str, namespace: str, name: str, body: dict) -> None:
        def put() -> None:
            key = (kind, namespace, name)
            if key not in self.store:
                raise not_found(f"{kind.lower()}s.{self.group}", name)
            self.store[key] = {**self.store[key], "status": copy.deepcopy(body.get("status"))}

        op = f"replace_{self.which}_status"
        self.cluster._run(op, put, kind=kind, namespace=namespace, name=name, body=body)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        def delete() -> None:
            if self.store.pop((kind, namespace, name), None) is None:
                raise not_found(f"{kind.lower()}s.{self.group}", name)

        op = f"delete_{self.which}_object"
        self.cluster._run(op, delete, kind=kind, namespace=namespace, name=name)


def merge_patch(into: Any, p: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(p, dict):
        return copy.deepcopy(p)
    out = dict(into) if isinstance(into, dict) else {}
    for k, v in p.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out
