"""Seeding a row's starting state into the real API server of the integration suite's `kube`
fixture (`tests.integration.world.World`) through the client: gpupool's CRDs are installed;
Nodes are created through the API as plain objects, with no kubelet behind them, so nothing
but the handler changes the pods on them.

Namespaced objects go into a namespace of the test's own; the rows' namespace `NS` in targets
and messages is rewritten to it. Cluster-scoped names (nodes, PriorityClasses) are made unique
on a real server and deleted at teardown.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client

from reconciler import conventions as C
from reconciler.apply.handlers import ApplyConfig
from reconciler.apply.kube import KubeOps
from reconciler.apply.port import ClusterOps, NodeInfo, PriorityClassInfo, WorkloadKind
from reconciler.plan.actions import Action, Admit, ApplyPriorityClass
from tests.apply.table import (
    NODE,
    NS,
    ConfigMap,
    Job,
    Node,
    NodeState,
    Pod,
    PriorityClass,
    Probe,
    ReplicaSet,
    Row,
    Seed,
    Workload,
)
from tests.support.wait import wait_for

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
HOLD = "gpupool.test/hold"
"""A finalizer that keeps a deleted pod terminating (no kubelet stand-in needed)."""
NOBODY = "gpupool.test/nobody"
"""The `spec.managedBy` of the rows' Jobs: a controller that does not exist, so the Job
controller leaves them and their pods alone (JobManagedBy, GA since Kubernetes 1.35)."""


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _absent(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


class ApiWorld:
    """One test's view of the API server: seeds, name mapping, the config and a probe."""

    def __init__(self, kube: Any):
        self.kube = kube
        self.api_client = kube.api_client
        self.core = client.CoreV1Api(self.api_client)
        self.apps = client.AppsV1Api(self.api_client)
        self.batch = client.BatchV1Api(self.api_client)
        self.pcs: dict[str, str] = {}
        self.uids: dict[tuple[str, str], str] = {}
        """(kind, name) -> uid of the seeded Jobs and ReplicaSets (pods' ownerReferences)."""
        self.nodes: dict[str, str] = {}
        # the World's namespace is gpupool's own, for the whole session; this test gets one
        self.ns = unique("gpupool-apply")
        self.core.create_namespace({"metadata": {"name": self.ns}})
        kube.cleanup(lambda: self.core.delete_namespace(self.ns))  # runs last; not waited for
        self._own_pods_cleanup = False
        self._sa_ready = False

    # ---------------------------------------------------------------- names
    def pc(self, name: str) -> str:
        """The server-side name of a row's PriorityClass (unique; deleted at teardown)."""
        if name not in self.pcs:
            real = self.pcs[name] = unique(name)
            self.kube.cleanup(
                lambda: client.SchedulingV1Api(self.api_client).delete_priority_class(real)
            )
        return self.pcs[name]

    def node(self, name: str) -> str:
        """A row's node name on the server: unique, so that listing the pods on a node sees this
        test's only."""
        return self.nodes.setdefault(name, unique(name))

    def localize(self, row: Row) -> tuple[Row, Action]:
        a = row.action
        if isinstance(a, Admit):  # the gang's namespace and the pods it waits for
            a = a.model_copy(
                update={
                    "namespace": self.ns if a.namespace == NS else a.namespace,
                    "after": tuple(
                        self.ns + k[len(NS) :] if k.startswith(f"{NS}/") else k for k in a.after
                    ),
                }
            )
        if isinstance(a, ApplyPriorityClass):
            a = a.model_copy(update={"target": self.pc(a.target)})
        elif a.target.startswith(f"{NS}/"):
            a = a.model_copy(update={"target": self.ns + a.target[len(NS) :]})
        else:
            a = a.model_copy(update={"target": self.node(a.target)})
        return dataclasses.replace(row, message=row.message.replace(f"{NS}/", f"{self.ns}/")), a

    def config(self) -> ApplyConfig:
        return ApplyConfig(mig_config_namespace=self.ns)

    def ops(self) -> KubeOps:
        return KubeOps(self.api_client)

    def probe(self) -> ApiProbe:
        return ApiProbe(self, self.ops(), self.ns, self.config())

    # ---------------------------------------------------------------- seeding
    def seed(self, seeds: tuple[Seed, ...]) -> None:
        for s in seeds:
            if isinstance(s, Node):
                self._node(s)
            elif isinstance(s, NodeState):
                self._node_state(s)
            elif isinstance(s, Job):
                self._job(s)
            elif isinstance(s, ReplicaSet):
                self._replica_set(s)
            elif isinstance(s, Pod):
                self._pod(s)
            elif isinstance(s, Workload):
                self._workload(s)
            elif isinstance(s, ConfigMap):
                self.core.create_namespaced_config_map(
                    self.ns, {"metadata": {"name": s.name}, "data": dict(s.data)}
                )
            elif isinstance(s, PriorityClass):
                client.SchedulingV1Api(self.api_client).create_priority_class(
                    {
                        "metadata": {
                            "name": self.pc(s.name),
                            "labels": (
                                {"app.kubernetes.io/managed-by": s.managed_by}
                                if s.managed_by
                                else {}
                            ),
                        },
                        "value": s.value,
                        "preemptionPolicy": s.preemption_policy,
                        "globalDefault": s.global_default,
                    }
                )
            else:  # pragma: no cover
                raise TypeError(s)

    def _node(self, s: Node) -> None:
        name = self.node(s.name)
        self.core.create_node(
            {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **s.labels}}}
        )
        self.kube.cleanup(lambda: self.core.delete_node(name))
        body: dict[str, Any] = {"metadata": {"annotations": dict(s.annotations)}}
        if s.cordoned:
            body["spec"] = {"unschedulable": True}
        self.core.patch_node(name, body, _content_type=MERGE)
        if s.allocatable:  # what a kubelet posts for the device plugin's resources
            res = dict(s.allocatable)
            self.core.patch_node_status(
                name, {"status": {"capacity": res, "allocatable": res}}, _content_type=MERGE
            )

    def _node_state(self, s: NodeState) -> None:
        """The node agent's GpuNodeState (create, then the status subresource)."""
        custom = client.CustomObjectsApi(self.api_client)
        name = self.node(s.node)
        custom.create_cluster_custom_object(
            C.GROUP,
            C.VERSION,
            C.NODE_STATE_PLURAL,
            {"apiVersion": C.API_VERSION, "kind": C.NODE_STATE_KIND, "metadata": {"name": name}},
        )
        self.kube.cleanup(
            lambda: custom.delete_cluster_custom_object(
                C.GROUP, C.VERSION, C.NODE_STATE_PLURAL, name
            )
        )
        custom.patch_cluster_custom_object_status(
            C.GROUP,
            C.VERSION,
            C.NODE_STATE_PLURAL,
            name,
            {"status": {"gpus": [dict(g) for g in s.gpus]}},
            _content_type=MERGE,
        )

    def _wait_service_account(self) -> None:
        """A real cluster admits pods only once the namespace's default ServiceAccount exists."""
        if not self._sa_ready:
            wait_for(
                "the default ServiceAccount",
                lambda: (
                    _absent(lambda: self.core.read_namespaced_service_account("default", self.ns))
                    is not None
                ),
            )
            self._sa_ready = True
        if not self._own_pods_cleanup:
            # no kubelet finishes these pods' graceful deletion: remove them at once at teardown
            # (registered first, so it runs after the finalizers are taken off)
            self.kube.cleanup(
                lambda: self.core.delete_collection_namespaced_pod(self.ns, grace_period_seconds=0)
            )
            self._own_pods_cleanup = True

    def _job(self, s: Job) -> None:
        body = {
            "metadata": {"name": s.name, "annotations": dict(s.annotations)},
            "spec": {
                "managedBy": NOBODY,
                "suspend": s.suspended,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "registry.example/train:1"}],
                    }
                },
            },
        }
        job = self.batch.create_namespaced_job(self.ns, body)
        self.uids[("Job", s.name)] = job.metadata.uid

    def _replica_set(self, s: ReplicaSet) -> None:
        labels = {"app": f"{s.name}-replicas"}  # no row's pod has it: the controller ignores them
        body = {
            "metadata": {"name": s.name},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "srv", "image": "registry.example/serve:1"}]},
                },
            },
        }
        rs = self.apps.create_namespaced_replica_set(self.ns, body)
        self.uids[("ReplicaSet", s.name)] = rs.metadata.uid

    def _owner_reference(self, kind: str, name: str, controller: bool) -> dict[str, Any]:
        uid = self.uids.get((kind, name))
        assert uid is not None, f"seed the {kind} {name} before the pods it owns"
        api_version = {"Job": "batch/v1", "ReplicaSet": "apps/v1"}[kind]
        return {
            "apiVersion": api_version,
            "kind": kind,
            "name": name,
            "uid": uid,
            "controller": controller,
        }

    def _pod(self, s: Pod) -> None:
        self._wait_service_account()
        limits = {C.GPU_RESOURCE: "1"} if s.gpus else {}
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/train:1",
                    "resources": {"limits": limits},
                }
            ]
        }
        if s.node:
            spec["nodeName"] = self.node(s.node)
        else:  # stays unscheduled: the real scheduler would otherwise bind it to any free node
            spec["nodeSelector"] = {"gpupool.test/unschedulable": "true"}
        if s.gates:  # only at creation: afterwards a gate can only be removed
            spec["schedulingGates"] = [{"name": g} for g in s.gates]
        if s.affinity:
            spec["affinity"] = {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [dict(t) for t in s.affinity]
                    }
                }
            }
        meta: dict[str, Any] = {
            "name": s.name,
            "labels": {"app": s.name},
            "annotations": dict(s.annotations),
        }
        if s.deleting:
            meta["finalizers"] = [HOLD]
        if s.owners:
            meta["ownerReferences"] = [
                self._owner_reference(o.kind, o.name, o.controller) for o in s.owners
            ]
        kw = {"field_manager": s.annotated_by} if s.annotated_by else {}
        self.core.create_namespaced_pod(self.ns, {"metadata": meta, "spec": spec}, **kw)
        phase = s.phase or ("Running" if s.node else "Pending")
        if phase != "Pending":  # what the kubelet would report
            ready = "True" if phase == "Running" else "False"
            self.core.patch_namespaced_pod_status(
                s.name,
                self.ns,
                {
                    "status": {
                        "phase": phase,
                        "conditions": [
                            {"type": "Ready", "status": ready},
                            {"type": "ContainersReady", "status": ready},
                        ],
                    }
                },
            )
        if s.conditions:
            self.core.patch_namespaced_pod_status(
                s.name,
                self.ns,
                {
                    "status": {
                        "conditions": [
                            {
                                "type": c.type,
                                "status": c.status,
                                "reason": c.reason or None,
                                "message": c.message or None,
                                "lastTransitionTime": c.last_transition_time or None,
                            }
                            for c in s.conditions
                        ]
                    }
                },
                _content_type=STRATEGIC,
            )
        if s.pdb:
            self._pdb(s.name)
        if s.deleting:
            self.kube.cleanup(
                lambda: self.core.patch_namespaced_pod(
                    s.name, self.ns, {"metadata": {"finalizers": None}}, _content_type=MERGE
                )
            )
            self.core.delete_namespaced_pod(s.name, self.ns)

    def _pdb(self, pod: str) -> None:
        """A PodDisruptionBudget that allows the pod no disruption, once the server has
        computed what it allows (a real cluster's disruption controller does that later)."""
        policy = client.PolicyV1Api(self.api_client)
        name = f"{pod}-budget"
        policy.create_namespaced_pod_disruption_budget(
            self.ns,
            {
                "metadata": {"name": name},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": pod}}},
            },
        )
        wait_for(
            f"PDB {name}'s status",
            lambda: (
                (st := policy.read_namespaced_pod_disruption_budget(name, self.ns).status)
                is not None
                and st.observed_generation is not None
                and st.current_healthy == 1
            ),
        )

    def _workload(self, s: Workload) -> None:
        labels = {"app": s.name}
        template = {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "srv", "image": "registry.example/serve:1"}]},
        }
        body: dict[str, Any] = {
            "metadata": {"name": s.name, "annotations": dict(s.annotations)},
            "spec": {
                "replicas": s.replicas,
                "selector": {"matchLabels": labels},
                "template": template,
            },
        }
        if s.kind == "Deployment":
            self.apps.create_namespaced_deployment(self.ns, body)
        else:
            body["spec"]["serviceName"] = s.name
            self.apps.create_namespaced_stateful_set(self.ns, body)
        self._settle(s.kind, s.name)

    def _settle(self, kind: WorkloadKind, name: str) -> None:
        """Let a real cluster's controller catch up with a new workload, so that its status
        writes do not bump the resourceVersion between a handler's read and its patch."""
        last: list[str] = []

        def quiet() -> bool:
            obj = self.read_workload(kind, name)
            rv = obj.metadata.resource_version
            settled = ((obj.status and obj.status.observed_generation) or 0) >= (
                obj.metadata.generation or 0
            )
            stable = bool(last) and last[-1] == rv
            last.append(rv)
            return settled and stable

        wait_for(f"{kind} {name} to settle", quiet, interval=1.0)

    def read_workload(self, kind: WorkloadKind, name: str) -> Any:
        read = (
            self.apps.read_namespaced_deployment
            if kind == "Deployment"
            else self.apps.read_namespaced_stateful_set
        )
        return read(name, self.ns)


class ApiProbe(Probe):
    def __init__(self, world: ApiWorld, ops: ClusterOps, namespace: str, cfg: ApplyConfig):
        super().__init__(ops, namespace, cfg)
        self.world = world

    def node(self, name: str = NODE) -> NodeInfo:
        return super().node(self.world.node(name))

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        return super().priority_class(self.world.pcs.get(name, name))

    def pod_terms(self, name: str) -> list[dict]:
        pod = self.world.core.read_namespaced_pod(name, self.namespace)
        aff = pod.spec.affinity
        na = aff.node_affinity if aff else None
        req = na.required_during_scheduling_ignored_during_execution if na else None
        if req is None:
            return []
        return [
            self.world.api_client.sanitize_for_serialization(t)
            for t in req.node_selector_terms or []
        ]

    def job_annotations(self, name: str) -> dict[str, str] | None:
        job = _absent(lambda: self.world.batch.read_namespaced_job(name, self.namespace))
        return None if job is None else dict(job.metadata.annotations or {})

    def job_suspended(self, name: str) -> bool | None:
        job = _absent(lambda: self.world.batch.read_namespaced_job(name, self.namespace))
        return None if job is None else bool(job.spec.suspend)

    def workload(self, kind: WorkloadKind, name: str) -> dict[str, Any]:
        obj = self.world.read_workload(kind, name)
        return {
            "replicas": obj.spec.replicas,
            "annotations": dict(obj.metadata.annotations or {}),
            "resource_version": obj.metadata.resource_version,
        }

    def quota(self, name: str) -> dict[str, Any] | None:
        q = _absent(lambda: self.world.core.read_namespaced_resource_quota(name, self.namespace))
        return (
            None
            if q is None
            else {"labels": dict(q.metadata.labels or {}), "hard": dict(q.spec.hard or {})}
        )
