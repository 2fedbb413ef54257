"""Carry out a Plan against the Kubernetes API, one action at a time, idempotently.

Level-triggered: every step first looks at the cluster and does nothing if its effect is
already there, so a crash between any two steps is healed by the next cycle with nothing done
twice. Steps that must wait (a checkpoint grace period, mig-manager's state label, a PDB that
blocks an eviction) report `waiting`/`blocked` and hold back only what depends on them; the next
cycle plans again from what it then observes.

Only this package and `reconciler.observe.kube` talk to the API (an import-linter contract).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reconciler.observe.kube import SHARED_SLICES_ANN
from reconciler.plan.model import Action, Plan
from reconciler.plan.planner import CORDON_ANNOTATION

FIELD_MANAGER = "gpupool"
ANN = "gpupool.io/"
CHECKPOINT_ANN = ANN + "checkpoint-requested-at"
CORDON_ANN = CORDON_ANNOTATION
LAST_SCALE_ANN = ANN + "last-scale"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
SHARING_LABEL = "nvidia.com/device-plugin.config"
PARTITION_ANN = ANN + "partition"
MIG_CONFIG_KEY = "config.yaml"  # mig-manager reads one file; the node label names an entry of its mig-configs
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
STALE_CHECKPOINT_SECONDS = 3600.0  # a checkpoint request older than grace + this is asked again
TRANSIENT = frozenset({409, 429, 500, 503, 504})


@dataclass(frozen=True)
class ApplyConfig:
    mig_config_namespace: str = "gpu-operator"
    mig_config_map: str = "gpupool-mig-parted-config"
    sharing_config_map: str = "gpupool-device-plugin-config"
    mig_timeout_seconds: float = 900.0
    events_namespace: str = "default"
    emit_events: bool = True


@dataclass
class Outcome:
    action: str
    status: str  # done | waiting | blocked | failed | skipped
    message: str = ""
    changed: bool = False
    """This step wrote to the cluster (Events are emitted for disruptive steps that did)."""


@dataclass
class ApplyResult:
    outcomes: list[Outcome] = field(default_factory=list)

    def by_status(self, status: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def converged(self) -> bool:
        return all(o.status == "done" for o in self.outcomes)

    @property
    def failed(self) -> bool:
        return any(o.status == "failed" for o in self.outcomes)


def _now() -> datetime:
    return datetime.now(UTC)


def _parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _ns_name(target: str) -> tuple[str, str]:
    ns, _, name = target.partition("/")
    return ns, name


class Executor:
    """Applies plans through an injected `kubernetes.client.ApiClient`."""

    def __init__(self, api_client: Any, config: ApplyConfig | None = None, clock: Callable[[], datetime] = _now):
        from kubernetes import client

        self.k = client
        self.api = api_client
        self.cfg = config or ApplyConfig()
        self.clock = clock
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.sched = client.SchedulingV1Api(api_client)
        self._grace: dict[str, float] = {}
        self._before_preempt: Callable[[Action], None] | None = None

    # ------------------------------------------------------------------ driver
    def apply(self, plan: Plan, *, on_outcome: Callable[[Action, Outcome], None] | None = None,
              before_preempt: Callable[[Action], None] | None = None) -> ApplyResult:
        """`before_preempt` runs just before a preemption's Eviction request: the controller
        records it there first (write-ahead), so a crash right after cannot lose it from the
        hourly budget."""
        result = ApplyResult()
        self._before_preempt = before_preempt
        state: dict[str, str] = {}
        self._grace = {a.id: float(a.details.get("gracePeriodSeconds", 0)) for a in plan.actions if a.kind == "checkpoint"}
        for action in plan.actions:
            pending = [d for d in action.depends_on if state.get(d, "done") != "done"]
            if pending:
                out = Outcome(action.id, "skipped", f"waits for {', '.join(pending)}")
            else:
                try:
                    out = getattr(self, "_" + action.kind.replace("-", "_"))(action)
                except self.k.ApiException as exc:
                    if exc.status in TRANSIENT:  # a conflict or an overloaded server: the next cycle retries
                        out = Outcome(action.id, "waiting", f"API {exc.status} {exc.reason}: retried next cycle")
                    else:
                        out = Outcome(action.id, "failed", f"API {exc.status}: {exc.reason}")
            state[action.id] = out.status
            result.outcomes.append(out)
            if out.changed and action.disruptive and self.cfg.emit_events:
                self._event(action, out)
            if on_outcome:
                on_outcome(action, out)
        return result

    # ------------------------------------------------------------------ helpers
    def _missing(self, exc: Exception) -> bool:
        return isinstance(exc, self.k.ApiException) and exc.status == 404

    def _event(self, action: Action, out: Outcome | None = None) -> None:
        ns, name = _ns_name(action.target) if "/" in action.target else (self.cfg.events_namespace, action.target)
        kind = "Pod" if action.kind in ("checkpoint", "preempt", "reclaim", "move") else (
            "Node" if action.kind in ("cordon", "uncordon", "mig-reconfigure", "set-sharing", "label-node") else "Namespace")
        now = self.clock()
        digest = hashlib.sha1(f"{action.id}/{now.isoformat()}".encode()).hexdigest()[:10]
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"gpupool.{digest}", "namespace": ns if kind == "Pod" else self.cfg.events_namespace},
            "involvedObject": {"kind": kind, "name": name if kind == "Pod" else action.target, "namespace": ns if kind == "Pod" else None},
            "reason": "GpuPool" + "".join(p.title() for p in action.kind.split("-")),
            "message": (action.reason + (f" ({out.message})" if out and out.message else ""))[:1000],
            "type": "Normal" if action.kind in ("uncordon", "scale") else "Warning",
            "source": {"component": "gpupool"},
            "firstTimestamp": now.isoformat(), "lastTimestamp": now.isoformat(), "count": 1,
        }
        with contextlib.suppress(self.k.ApiException):  # an event is a courtesy; never fail over it
            self.core.create_namespaced_event(body["metadata"]["namespace"], body)

    def _pod(self, target: str):
        ns, name = _ns_name(target)
        try:
            return self.core.read_namespaced_pod(name, ns)
        except self.k.ApiException as exc:
            if self._missing(exc):
                return None
            raise

    # ------------------------------------------------------------------ nodes
    def _cordon(self, a: Action) -> Outcome:
        node = self.core.read_node(a.target)
        if node.spec.unschedulable:
            return Outcome(a.id, "done", "already cordoned")
        self.core.patch_node(a.target, {"spec": {"unschedulable": True}, "metadata": {"annotations": {CORDON_ANN: "repartition"}}},
                             _content_type=MERGE)
        return Outcome(a.id, "done", "cordoned", changed=True)

    def _uncordon(self, a: Action) -> Outcome:
        node = self.core.read_node(a.target)
        anns = node.metadata.annotations or {}
        if not node.spec.unschedulable:
            return Outcome(a.id, "done", "already schedulable")
        if CORDON_ANN not in anns:
            return Outcome(a.id, "done", "cordoned by someone else: left alone")
        labels = node.metadata.labels or {}
        if (labels.get(MIG_CONFIG_LABEL, "").startswith("gpupool-") and labels.get(MIG_STATE_LABEL) == "pending"):
            return Outcome(a.id, "waiting", f"mig-manager is still applying {labels[MIG_CONFIG_LABEL]}")
        self.core.patch_node(a.target, {"spec": {"unschedulable": None}, "metadata": {"annotations": {CORDON_ANN: None}}},
                             _content_type=MERGE)
        return Outcome(a.id, "done", "uncordoned", changed=True)

    def _label_node(self, a: Action) -> Outcome:
        labels = a.details.get("labels", {})
        node = self.core.read_node(a.target)
        have = node.metadata.labels or {}
        if all(have.get(k) == v for k, v in labels.items()):
            return Outcome(a.id, "done", "labels present")
        self.core.patch_node(a.target, {"metadata": {"labels": labels}}, _content_type=MERGE)
        return Outcome(a.id, "done", "labelled", changed=True)

    def _gpus_busy(self, node: str, gpus: set[int]) -> list[str]:
        """Pods gpupool knows to hold those GPUs on the node (by the node agent's annotation)."""
        from reconciler.observe.kube import parse_allocation, pod_request

        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        busy = []
        for p in pods:
            if p.status.phase in ("Succeeded", "Failed"):
                continue
            if pod_request(p).kind == "none":
                continue
            ann = (p.metadata.annotations or {}).get(ANN + "gpus")
            held = {x.gpu for x in parse_allocation(ann)} if ann else None
            if held is None or held & gpus:
                busy.append(f"{p.metadata.namespace}/{p.metadata.name}")
        return sorted(busy)

    def _reconfigure(self, a: Action, *, config_map: str, label: str, render: Callable[[Action], dict], state_label: str | None) -> Outcome:
        node = self.core.read_node(a.target)
        if not node.spec.unschedulable:
            return Outcome(a.id, "blocked", "node is not cordoned")
        spec = render(a)
        # A label value holds at most 63 characters: name the config by its content only (nodes
        # that get the same layout share one entry).
        name = config_name(spec)
        labels = node.metadata.labels or {}
        if labels.get(label) == name:
            if state_label is None:
                return Outcome(a.id, "done", f"{label}={name}")
            st = labels.get(state_label, "")
            if st == "failed":
                return Outcome(a.id, "failed", f"mig-manager reports failed for {name}")
            since = _parse_time((node.metadata.annotations or {}).get(ANN + "reconfigure-since"))
            if st == "success":
                if self._agent_shows(a):
                    return Outcome(a.id, "done", f"mig-manager applied {name}")
                msg = f"mig-manager applied {name}; waiting for the node agent to publish the new layout"
            else:
                msg = f"{state_label}={st or 'unset'}"
            if since and (self.clock() - since).total_seconds() > self.cfg.mig_timeout_seconds:
                return Outcome(a.id, "failed", f"{msg}: stuck for over {int(self.cfg.mig_timeout_seconds)}s")
            return Outcome(a.id, "waiting", msg)
        changed = {int(g) for g in a.details.get("gpus", {})}
        busy = self._gpus_busy(a.target, changed)
        if busy:
            return Outcome(a.id, "waiting", f"GPUs still in use by {', '.join(busy)}")
        if state_label:
            self._put_mig_config(config_map, name, spec)
        else:
            self._put_config(config_map, name, spec)
        patch = {"metadata": {"labels": {label: name}, "annotations": {ANN + "reconfigure-since": self.clock().isoformat(),
                                                                       PARTITION_ANN: json.dumps(a.details.get("gpus", {}), sort_keys=True)}}}
        if not state_label:  # the device plugin applies its config on the label change: record the slices
            patch["metadata"]["annotations"][SHARED_SLICES_ANN] = json.dumps(a.details.get("sharedSlices", {}), sort_keys=True)
        if state_label:
            patch["metadata"]["labels"][state_label] = None  # mig-manager writes it afresh
        self.core.patch_node(a.target, patch, _content_type=MERGE)
        return Outcome(a.id, "waiting" if state_label else "done", f"{label}={name}", changed=True)

    def _agent_shows(self, a: Action) -> bool:
        """The node agent's GpuNodeState shows the target MIG layout on every changed GPU (so the
        next plan sees it and does not repartition again). No object: nothing to wait for."""
        from reconciler.observe.kube import GROUP, NODE_STATE_PLURAL, VERSION

        try:
            obj = self.k.CustomObjectsApi(self.api).get_cluster_custom_object(GROUP, VERSION, NODE_STATE_PLURAL, a.target)
        except self.k.ApiException as exc:
            if self._missing(exc):
                return True
            raise
        gpus = {g.get("index"): g for g in ((obj.get("status") or {}).get("gpus") or [])}
        if not gpus:
            return True
        for idx, layout in (a.details.get("layout") or {}).items():
            if str(idx) not in {str(k) for k in a.details.get("gpus", {})}:
                continue
            g = gpus.get(int(idx)) or {}
            have = sorted(i.get("profile") for i in g.get("migInstances") or []) if g.get("migEnabled") else None
            want = sorted(layout) if layout else None
            if have != want and not (want is None and not have):
                return False
        return True

    def _put_config(self, config_map: str, key: str, spec: dict) -> None:
        """Device-plugin config: one key per named config (the node label selects the key)."""
        ns = self.cfg.mig_config_namespace
        text = _yaml_text(spec)
        try:
            cm = self.core.read_namespaced_config_map(config_map, ns)
            data = dict(cm.data or {})
        except self.k.ApiException as exc:
            if not self._missing(exc):
                raise
            data = None
        if data is None:
            self.core.create_namespaced_config_map(ns, {"metadata": {"name": config_map, "namespace": ns}, "data": {key: text}})
        elif data.get(key) != text:
            self.core.patch_namespaced_config_map(config_map, ns, {"data": {key: text}}, _content_type=MERGE)

    def _put_mig_config(self, config_map: str, name: str, spec: dict) -> None:
        """mig-parted config (`version: v1`, `mig-configs:`) in the ConfigMap's `config.yaml`:
        add the entry `name` next to the ones already there (the operator's defaults, other
        nodes' layouts). Written with the resourceVersion read, so two writers never lose one."""
        ns = self.cfg.mig_config_namespace
        entry = spec["mig-configs"]["gpupool"]
        try:
            cm = self.core.read_namespaced_config_map(config_map, ns)
        except self.k.ApiException as exc:
            if not self._missing(exc):
                raise
            body = {"version": "v1", "mig-configs": {"all-disabled": [{"devices": "all", "mig-enabled": False}], name: entry}}
            self.core.create_namespaced_config_map(ns, {"metadata": {"name": config_map, "namespace": ns},
                                                        "data": {MIG_CONFIG_KEY: _yaml_text(body)}})
            return
        current = _yaml_load((cm.data or {}).get(MIG_CONFIG_KEY) or "") or {}
        configs = dict(current.get("mig-configs") or {})
        if configs.get(name) == entry and current.get("version") == "v1":
            return
        configs[name] = entry
        body = {**current, "version": "v1", "mig-configs": configs}
        self.core.patch_namespaced_config_map(
            config_map, ns, {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {MIG_CONFIG_KEY: _yaml_text(body)}},
            _content_type=MERGE)

    def _mig_reconfigure(self, a: Action) -> Outcome:
        return self._reconfigure(a, config_map=self.cfg.mig_config_map, label=MIG_CONFIG_LABEL,
                                 render=render_mig_parted, state_label=MIG_STATE_LABEL)

    def _set_sharing(self, a: Action) -> Outcome:
        return self._reconfigure(a, config_map=self.cfg.sharing_config_map, label=SHARING_LABEL,
                                 render=render_sharing, state_label=None)

    # ------------------------------------------------------------------ workloads
    def _checkpoint(self, a: Action) -> Outcome:
        pod = self._pod(a.target)
        if pod is None:
            return Outcome(a.id, "done", "pod is gone")
        anns = pod.metadata.annotations or {}
        asked = _parse_time(anns.get(CHECKPOINT_ANN))
        if asked is not None:
            age = (self.clock() - asked).total_seconds()
            if age <= self._grace.get(a.id, 0.0) + STALE_CHECKPOINT_SECONDS:
                return Outcome(a.id, "done", f"requested at {anns[CHECKPOINT_ANN]}")
            # left over from an earlier, abandoned plan: ask again, and wait the grace again
        ns, name = _ns_name(a.target)
        self.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {CHECKPOINT_ANN: self.clock().isoformat()}}}, _content_type=MERGE)
        return Outcome(a.id, "done", "checkpoint requested", changed=True)

    def _grace_left(self, a: Action, pod) -> float:
        ck = next((d for d in a.depends_on if d.startswith("checkpoint:")), None)
        if ck is None:
            return 0.0
        grace = self._grace.get(ck, 0.0)  # from the checkpoint action's details
        asked = _parse_time((pod.metadata.annotations or {}).get(CHECKPOINT_ANN))
        if asked is None:
            return grace
        if (pod.metadata.annotations or {}).get(ANN + "checkpoint-done"):
            return 0.0
        return grace - (self.clock() - asked).total_seconds()

    def _evict(self, a: Action) -> Outcome:
        pod = self._pod(a.target)
        if pod is None:
            return Outcome(a.id, "done", "pod is gone")
        if pod.metadata.deletion_timestamp:
            return Outcome(a.id, "done", "pod is terminating")
        left = self._grace_left(a, pod)
        if left > 0:
            return Outcome(a.id, "waiting", f"checkpoint grace period: {int(left)}s left")
        ns, name = _ns_name(a.target)
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
        to = a.details.get("toNode") if a.kind == "move" else None
        if to and (pod.metadata.annotations or {}).get(ANN + "move-to") != to:
            self.core.patch_namespaced_pod(name, ns, {"metadata": {"annotations": {ANN + "move-to": to}}}, _content_type=MERGE)
        if a.kind == "preempt" and self._before_preempt is not None:
            self._before_preempt(a)
        try:
            self.core.create_namespaced_pod_eviction(name, ns, body)
        except self.k.ApiException as exc:
            if exc.status == 429:
                return Outcome(a.id, "blocked", f"a PodDisruptionBudget does not allow it now; retried next cycle ({_status_message(exc)})")
            if self._missing(exc):
                return Outcome(a.id, "done", "pod is gone")
            raise
        return Outcome(a.id, "done", "evicted", changed=True)

    _preempt = _reclaim = _move = _evict

    def _scale(self, a: Action) -> Outcome:
        """One merge patch sets replicas and the last-scale annotation together (a crash cannot
        leave one without the other), guarded by the resourceVersion read (no lost update)."""
        ns, name = _ns_name(a.target)
        kind, want = a.details.get("kind", "Deployment"), int(a.details["to"])
        read = self.apps.read_namespaced_deployment if kind == "Deployment" else self.apps.read_namespaced_stateful_set
        patch = self.apps.patch_namespaced_deployment if kind == "Deployment" else self.apps.patch_namespaced_stateful_set
        cur = read(name, ns)
        have = cur.spec.replicas if cur.spec.replicas is not None else 1
        if have == want:
            return Outcome(a.id, "done", f"already {want} replicas")
        if have != int(a.details["from"]):
            return Outcome(a.id, "skipped", f"replicas changed to {have} since the plan; replanned next cycle")
        patch(name, ns, {"metadata": {"resourceVersion": cur.metadata.resource_version,
                                      "annotations": {LAST_SCALE_ANN: self.clock().isoformat()}},
                         "spec": {"replicas": want}}, _content_type=MERGE)
        return Outcome(a.id, "done", f"{have} -> {want} replicas", changed=True)

    # ------------------------------------------------------------------ objects
    def _quota(self, a: Action) -> Outcome:
        ns, name = _ns_name(a.target)
        body = {"apiVersion": "v1", "kind": "ResourceQuota",
                "metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "gpupool"}},
                "spec": {"hard": a.details["hard"]}}
        try:
            self.core.read_namespace(ns)
        except self.k.ApiException as exc:
            if self._missing(exc):
                return Outcome(a.id, "blocked", f"namespace {ns} does not exist")
            raise
        self.core.patch_namespaced_resource_quota(name, ns, body, field_manager=FIELD_MANAGER, force=True, _content_type=APPLY)
        return Outcome(a.id, "done", "applied", changed=True)

    def _priority_class(self, a: Action) -> Outcome:
        value, policy = int(a.details["value"]), a.details["preemptionPolicy"]
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": a.target, "labels": {"app.kubernetes.io/managed-by": "gpupool"}},
                "value": value, "preemptionPolicy": policy, "description": "managed by gpupool"}
        try:
            cur = self.sched.read_priority_class(a.target)
            # value and preemptionPolicy are immutable in Kubernetes: replace the object
            if cur.value != value or (cur.preemption_policy or "PreemptLowerPriority") != policy:
                self.sched.delete_priority_class(a.target)
        except self.k.ApiException as exc:
            if not self._missing(exc):
                raise
        self.sched.patch_priority_class(a.target, body, field_manager=FIELD_MANAGER, force=True, _content_type=APPLY)
        return Outcome(a.id, "done", "applied", changed=True)


def _status_message(exc: Exception) -> str:
    try:
        return json.loads(exc.body).get("message", "")[:300]  # type: ignore[attr-defined]
    except (TypeError, ValueError, AttributeError):
        return ""


def config_name(spec: dict) -> str:
    """The name of a rendered config (label value and mig-configs key): `gpupool-` + a digest."""
    return "gpupool-" + hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def _yaml_load(text: str):
    from ruamel.yaml import YAML

    return YAML(typ="safe", pure=True).load(text) if text.strip() else None


def _yaml_text(data: dict) -> str:
    import io

    from ruamel.yaml import YAML

    buf = io.StringIO()
    y = YAML(typ="safe", pure=True)
    y.default_flow_style = False
    y.dump(data, buf)
    return buf.getvalue()


def render_mig_parted(a: Action) -> dict:
    """The mig-parted config (version v1) for a node: one entry per GPU, MIG on/off."""
    entries = []
    for gpu, layout in sorted(a.details.get("layout", {}).items(), key=lambda kv: int(kv[0])):
        if layout:
            counts: dict[str, int] = {}
            for p in layout:
                counts[p] = counts.get(p, 0) + 1
            entries.append({"devices": [int(gpu)], "mig-enabled": True, "mig-devices": counts})
        else:
            entries.append({"devices": [int(gpu)], "mig-enabled": False})
    return {"version": "v1", "mig-configs": {"gpupool": entries}}


def render_sharing(a: Action) -> dict:
    """A device-plugin sharing config: time-slicing replicas for the shared cards."""
    slices = a.details.get("sharedSlices", {})
    replicas = max(slices.values()) if slices else 1
    return {
        "version": "v1",
        "sharing": {"timeSlicing": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": replicas, "devices": sorted(int(g) for g in slices)}]}},
    }
