"""The state behind the fake API server: storage, resourceVersions, admission, watch history.

Everything here is transport-free: ``server.py`` maps HTTP requests onto ``Cluster`` methods,
which raise ``ApiError`` carrying the ``Status`` the real server would return.  Tests may also
call the ``Cluster`` directly (``server.cluster``) to seed state or act as the kubelet /
scheduler, which the fake does not have; such writes go through the same commit path, so they get
resourceVersions and watch events like any other write.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import random
import threading
import uuid
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any

from . import patching, resources
from .quantity import format_quantity, parse_quantity
from .resources import BUILTIN_TYPES, FIELD_SELECTORS, ResourceType
from .selectors import (
    SelectorError,
    label_selector_to_string,
    match_fields,
    match_label_selector_object,
    match_labels,
    parse_field_selector,
    parse_label_selector,
)

SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CONTROLLER_MANAGER = "kube-controller-manager"
_SERVER_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                "generation", "managedFields", "selfLink")


def now(offset_seconds: float = 0) -> str:
    return (datetime.now(UTC) + timedelta(seconds=offset_seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


class ApiError(Exception):
    """An error the API server answers with a ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, details: dict | None = None,
                 headers: dict | None = None):
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message = code, reason, message
        self.details = details
        self.headers = headers or {}

    def status(self) -> dict:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(rt: ResourceType, name: str | None, **extra) -> dict:
    details: dict[str, Any] = {"kind": rt.plural}
    if name:
        details["name"] = name
    if rt.group:
        details["group"] = rt.group
    details.update(extra)
    return details


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{rt.group_resource} "{name}" not found', _details(rt, name))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.group_resource} "{name}": {why}',
                    _details(rt, name))


def stale(rt: ResourceType, name: str) -> ApiError:
    return conflict(rt, name, "the object has been modified; please apply your changes to the "
                    "latest version and try again")


def invalid(rt: ResourceType, name: str, causes: list[dict]) -> ApiError:
    summary = ", ".join(f"{c['field']}: {c['message']}" if c.get("field") else c["message"]
                        for c in causes)
    if len(causes) > 1:
        summary = f"[{summary}]"
    return ApiError(422, "Invalid", f'{rt.kind}.{rt.group or "core"} "{name}" is invalid: {summary}'
                    if rt.group else f'{rt.kind} "{name}" is invalid: {summary}',
                    _details(rt, name, kind=rt.kind, causes=causes))


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'{rt.group_resource} "{name}" is forbidden: {why}',
                    _details(rt, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


@dataclass
class Event:
    rv: int
    storage: tuple[str, str]
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict
    old: dict | None


@dataclass
class FieldSet:
    paths: set
    time: str
    api_version: str


class Cluster:
    """In-memory API state.  All public methods are thread-safe (one re-entrant lock)."""

    def __init__(self, history_size: int = 10_000, pod_termination_seconds: float | None = None):
        # None: deleting a pod removes it at once (as if the kubelet confirmed instantly).
        # A number: pods bound to a node are marked terminating (deletionTimestamp) and the
        # kubelet stand-in removes them after min(grace period, this many seconds).
        self.pod_termination_seconds = pod_termination_seconds
        self._grace_elapsed: set[str] = set()
        self._usage_cache: dict[tuple, dict[str, Fraction]] = {}
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 0
        self.history_size = history_size
        self.history: deque[Event] = deque()
        self.compacted_rv = 0
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        self.objects: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
        self.fields: dict[tuple, dict[tuple[str, str, str], FieldSet]] = {}
        for rt in BUILTIN_TYPES:
            self._register(rt)
        for ns in SYSTEM_NAMESPACES:
            self.create(self.rt("", "v1", "namespaces"), None,
                        {"metadata": {"name": ns}}, manager="kube-apiserver")
        for name, value in (("system-cluster-critical", 2000000000),
                            ("system-node-critical", 2000001000)):
            self.create(self.rt("scheduling.k8s.io", "v1", "priorityclasses"), None,
                        {"metadata": {"name": name}, "value": value,
                         "description": "Used for system critical pods that must not be moved."},
                        manager="kube-apiserver")

    # ------------------------------------------------------------------ registry

    def _register(self, rt: ResourceType) -> None:
        self.types[(rt.group, rt.version, rt.plural)] = rt
        self.objects.setdefault(rt.storage_key, {})

    def rt(self, group: str, version: str, plural: str) -> ResourceType:
        return self.types[(group, version, plural)]

    def find_type(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self.types.get((group, version, plural))

    def group_versions(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for group, version, _ in self.types:
            versions = out.setdefault(group, [])
            if version not in versions:
                versions.append(version)
        return out

    def types_in(self, group: str, version: str) -> list[ResourceType]:
        return [rt for (g, v, _), rt in self.types.items() if g == group and v == version]

    # ------------------------------------------------------------------ helpers

    def _store(self, rt: ResourceType) -> dict[tuple[str, str], dict]:
        return self.objects[rt.storage_key]

    def _key(self, rt: ResourceType, ns: str | None, name: str) -> tuple[str, str]:
        return (ns or "" if rt.namespaced else "", name)

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, rt: ResourceType, type_: str, obj: dict, old: dict | None) -> None:
        self.history.append(Event(int(obj["metadata"]["resourceVersion"]), rt.storage_key, type_,
                                  copy.deepcopy(obj), copy.deepcopy(old) if old else None))
        while len(self.history) > self.history_size:
            self.compacted_rv = self.history.popleft().rv
        self.changed.notify_all()

    def compact(self) -> int:
        """Forget the whole watch history (as etcd compaction would); returns the compacted rv."""
        with self.lock:
            self.history.clear()
            self.compacted_rv = self.rv
            return self.rv

    def get_object(self, rt: ResourceType, ns: str | None, name: str) -> dict:
        with self.lock:
            obj = self._store(rt).get(self._key(rt, ns, name))
            if obj is None:
                raise not_found(rt, name)
            return copy.deepcopy(obj)

    def _current(self, rt: ResourceType, ns: str | None, name: str) -> dict | None:
        return self._store(rt).get(self._key(rt, ns, name))

    def render(self, rt: ResourceType, obj: dict, in_list: bool = False) -> dict:
        out = copy.deepcopy(obj)
        if in_list and not rt.custom:
            out.pop("apiVersion", None)
            out.pop("kind", None)
        else:
            out["apiVersion"] = rt.api_version
            out["kind"] = rt.kind
            out = {"apiVersion": out.pop("apiVersion"), "kind": out.pop("kind"), **out}
        return out

    # ------------------------------------------------------------------ field management

    def _fields_for(self, rt: ResourceType, ns: str | None, name: str) -> dict:
        return self.fields.setdefault((rt.storage_key, self._key(rt, ns, name)), {})

    @staticmethod
    def _list_key(rt: ResourceType) -> patching.ListKeyFn:
        return patching.schema_list_key(rt.schema) if rt.custom else resources.builtin_list_key_fn(rt)

    @classmethod
    def _scope_paths(cls, rt: ResourceType, obj: dict, subresource: str | None) -> set:
        if subresource == "status":
            return patching.leaf_paths(obj, status_only=True, list_key=cls._list_key(rt))
        return patching.leaf_paths(obj, with_status=not rt.has_status, list_key=cls._list_key(rt))

    def _track_update(self, rt, ns, name, old: dict | None, new: dict, manager: str,
                      subresource: str | None) -> None:
        entries = self._fields_for(rt, ns, name)
        new_paths = self._scope_paths(rt, new, subresource)
        old_paths = self._scope_paths(rt, old, subresource) if old else set()
        changed = {p for p in new_paths if old is None or not patching.same_value(old, new, p)}
        removed = old_paths - new_paths
        for key, entry in entries.items():
            if key[0] == manager and key[1] == "Update":
                continue
            entry.paths = {q for q in entry.paths
                           if not any(_takes_over(p, q) for p in changed | removed)}
        if changed:
            key = (manager, "Update", subresource or "")
            entry = entries.setdefault(key, FieldSet(set(), now(), rt.api_version))
            entry.paths = {q for q in entry.paths if q not in removed} | changed
            entry.time = now()
        for entry in entries.values():
            entry.paths -= removed
        self._prune_entries(entries)

    @staticmethod
    def _prune_entries(entries: dict) -> None:
        for key in [k for k, e in entries.items() if not e.paths]:
            del entries[key]

    def _render_managed(self, rt, ns, name, obj: dict) -> None:
        entries = self.fields.get((rt.storage_key, self._key(rt, ns, name)), {})
        managed = []
        for (manager, operation, sub), entry in sorted(entries.items()):
            item = {"manager": manager, "operation": operation, "apiVersion": entry.api_version,
                    "time": entry.time, "fieldsType": "FieldsV1",
                    "fieldsV1": patching.render_fields_v1(entry.paths)}
            if sub:
                item["subresource"] = sub
            managed.append(item)
        if managed:
            obj["metadata"]["managedFields"] = managed
        else:
            obj["metadata"].pop("managedFields", None)

    # ------------------------------------------------------------------ body checks

    def _check_type_meta(self, rt: ResourceType, body: Any) -> None:
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a {rt.kind} object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if rt.custom and (not api_version or not kind):
            raise bad_request("Object 'Kind' is missing in the request body")
        if kind and kind != rt.kind:
            raise bad_request(f'the kind in the body ({kind}) does not match the kind of the '
                              f'requested resource ({rt.kind})')
        if api_version and api_version != rt.api_version:
            raise bad_request(f"the API version in the data ({api_version}) does not match the "
                              f"expected API version ({rt.api_version})")
        meta = body.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise bad_request("metadata must be an object")

    def _decode_check(self, rt: ResourceType, obj: dict, field_validation: str
                      ) -> tuple[list[str], list[dict]]:
        """What decoding does before defaulting: type errors are 400s, unknown fields are pruned
        (``Warn``/``Ignore``) or rejected (``Strict``).  Returns (warnings, schema causes)."""
        if rt.custom:
            return [], []
        causes, warnings, unknown, type_errors = resources.schema_check(rt, obj, field_validation)
        if type_errors:
            raise bad_request(f"{rt.kind} in version \"{rt.version}\" cannot be handled as a "
                              f"{rt.kind}: " + "; ".join(type_errors))
        if unknown and field_validation == "Strict":
            raise bad_request("strict decoding error: " + ", ".join(c["message"] for c in unknown))
        return ([] if field_validation == "Ignore" else warnings), causes

    def _validate(self, rt: ResourceType, obj: dict, old: dict | None, schema_causes: list[dict]
                  ) -> None:
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        causes = resources.metadata_causes(rt, obj) + list(schema_causes)
        if rt.custom:
            causes += resources.custom_schema_causes(rt, obj)
        else:
            causes += self._kind_causes(rt, obj, old)
        if causes:
            raise invalid(rt, name, causes)

    def _kind_causes(self, rt: ResourceType, obj: dict, old: dict | None) -> list[dict]:
        causes = []
        spec = obj.get("spec") or {}
        if rt.plural == "pods":
            if not spec.get("containers"):
                causes.append({"reason": "FieldValueRequired", "field": "spec.containers",
                               "message": "Required value"})
            if old is not None:
                mutable = ("containers", "initContainers", "activeDeadlineSeconds", "tolerations",
                           "terminationGracePeriodSeconds", "schedulingGates")

                def strip(s: dict) -> dict:
                    s = {k: v for k, v in (s or {}).items() if k not in mutable}
                    return s

                def images(s: dict) -> list:
                    return [{k: v for k, v in c.items() if k != "image"}
                            for c in (s or {}).get("containers", [])]

                old_spec = old.get("spec") or {}
                if strip(spec) != strip(old_spec) or images(spec) != images(old_spec):
                    causes.append({
                        "reason": "FieldValueForbidden", "field": "spec",
                        "message": "Forbidden: pod updates may not change fields other than "
                                   "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                                   "`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
                                   "additions to existing tolerations),"
                                   "`spec.terminationGracePeriodSeconds` (allow it to be set to "
                                   "1 if it was previously negative)"})
        elif rt.plural == "poddisruptionbudgets":
            if "minAvailable" in spec and "maxUnavailable" in spec:
                causes.append({"reason": "FieldValueInvalid", "field": "spec",
                               "message": "Invalid value: minAvailable and maxUnavailable cannot "
                                          "be both set"})
        elif rt.plural in ("deployments", "statefulsets"):
            selector = spec.get("selector")
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
            if not selector:
                causes.append({"reason": "FieldValueRequired", "field": "spec.selector",
                               "message": "Required value"})
            elif not match_label_selector_object(selector, labels):
                causes.append({"reason": "FieldValueInvalid", "field": "spec.template.metadata.labels",
                               "message": "Invalid value: `selector` does not match template "
                                          "`labels`"})
            if old is not None and selector != (old.get("spec") or {}).get("selector"):
                causes.append({"reason": "FieldValueInvalid", "field": "spec.selector",
                               "message": "Invalid value: field is immutable"})
            if old is not None and rt.plural == "statefulsets":
                mutable = ("replicas", "ordinals", "template", "updateStrategy", "minReadySeconds",
                           "persistentVolumeClaimRetentionPolicy", "revisionHistoryLimit")
                a = {k: v for k, v in spec.items() if k not in mutable}
                b = {k: v for k, v in (old.get("spec") or {}).items() if k not in mutable}
                if a != b:
                    causes.append({"reason": "FieldValueForbidden", "field": "spec",
                                   "message": "Forbidden: updates to statefulset spec for fields "
                                              "other than 'replicas', 'ordinals', 'template', "
                                              "'updateStrategy', 'revisionHistoryLimit', "
                                              "'persistentVolumeClaimRetentionPolicy' and "
                                              "'minReadySeconds' are forbidden"})
        elif rt.plural == "priorityclasses":
            value = obj.get("value")
            if isinstance(value, int) and value > 1_000_000_000 and \
                    not obj["metadata"].get("name", "").startswith("system-"):
                causes.append({"reason": "FieldValueForbidden", "field": "value",
                               "message": "Forbidden: maximum allowed value of a user defined "
                                          "priority is 1000000000"})
            if old is not None and value != old.get("value"):
                causes.append({"reason": "FieldValueForbidden", "field": "value",
                               "message": "Forbidden: may not be changed in an update."})
        elif rt.plural == "customresourcedefinitions":
            causes += self._crd_causes(obj)
        return causes

    # ------------------------------------------------------------------ defaulting

    def _default(self, rt: ResourceType, obj: dict, creating: bool) -> None:
        spec = obj.get("spec")
        if rt.custom:
            if rt.schema:
                resources.prune_and_default(rt.schema, obj)
            return
        resources.normalize_times(obj)
        try:
            resources.canonicalize_quantities(rt, obj)
        except ValueError as e:
            raise bad_request(f"{rt.kind} in version \"{rt.version}\" cannot be handled as a "
                              f"{rt.kind}: quantities must match the regular expression "
                              f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$' ({e})") from e
        if rt.plural == "pods" and isinstance(spec, dict):
            spec.setdefault("restartPolicy", "Always")
            spec.setdefault("dnsPolicy", "ClusterFirst")
            spec.setdefault("schedulerName", "default-scheduler")
            spec.setdefault("terminationGracePeriodSeconds", 30)
            spec.setdefault("securityContext", {})
            spec.setdefault("enableServiceLinks", True)
            for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
                if not isinstance(c, dict):
                    continue
                image = c.get("image") or ""
                tag = image.rsplit("/", 1)[-1]
                latest = ":" not in tag or tag.endswith(":latest")
                c.setdefault("imagePullPolicy", "Always" if latest and "@" not in tag else "IfNotPresent")
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                res = c.get("resources")
                if isinstance(res, dict) and isinstance(res.get("limits"), dict):
                    requests = res.setdefault("requests", {})
                    for r, q in res["limits"].items():
                        requests.setdefault(r, q)
            if creating:
                status = obj.setdefault("status", {})
                status.setdefault("phase", "Pending")
                status.setdefault("qosClass", _qos_class(spec))
        elif rt.plural == "namespaces":
            obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = \
                obj["metadata"]["name"]
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj.setdefault("status", {}).setdefault("phase", "Active")
        elif rt.plural == "deployments" and isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
            strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
            if strategy.get("type", "RollingUpdate") == "RollingUpdate":
                strategy.setdefault("type", "RollingUpdate")
                strategy.setdefault("rollingUpdate", {}).setdefault("maxUnavailable", "25%")
                strategy["rollingUpdate"].setdefault("maxSurge", "25%")
        elif rt.plural == "statefulsets" and isinstance(spec, dict):
            spec.setdefault("replicas", 1)
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("revisionHistoryLimit", 10)
            strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
            if strategy.get("type") == "RollingUpdate":
                strategy.setdefault("rollingUpdate", {}).setdefault("partition", 0)
            spec.setdefault("persistentVolumeClaimRetentionPolicy",
                            {"whenDeleted": "Retain", "whenScaled": "Retain"})
        elif rt.plural == "priorityclasses":
            obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        elif rt.plural == "resourcequotas" and creating:
            obj["status"] = {}
        elif rt.plural == "customresourcedefinitions" and creating:
            obj.setdefault("status", {})

    # ------------------------------------------------------------------ admission

    def _admit(self, rt: ResourceType, ns: str | None, obj: dict, creating: bool) -> None:
        name = obj["metadata"].get("name") or obj["metadata"].get("generateName", "")
        if rt.namespaced and creating:
            ns_obj = self._current(self.rt("", "v1", "namespaces"), None, ns)
            if ns_obj is None:
                raise ApiError(404, "NotFound", f'namespaces "{ns}" not found',
                               {"name": ns, "kind": "namespaces"})
            if ns_obj["metadata"].get("deletionTimestamp"):
                raise forbidden(rt, name, f"unable to create new content in namespace {ns} "
                                "because it is being terminated")
        if rt.plural == "pods" and not rt.group and creating:
            self._admit_priority(rt, obj, name)
        if rt.namespaced and creating:
            self._admit_quota(rt, ns, obj, name)

    def _admit_priority(self, rt: ResourceType, pod: dict, name: str) -> None:
        spec = pod.setdefault("spec", {})
        pcs = self._store(self.rt("scheduling.k8s.io", "v1", "priorityclasses"))
        class_name = spec.get("priorityClassName")
        if class_name:
            pc = pcs.get(("", class_name))
            if pc is None:
                raise forbidden(rt, name, f"no PriorityClass with name {class_name} was found")
        else:
            pc = next((p for _, p in sorted(pcs.items()) if p.get("globalDefault")), None)
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
        value = pc.get("value", 0) if pc else 0
        policy = pc.get("preemptionPolicy", "PreemptLowerPriority") if pc else "PreemptLowerPriority"
        if "priority" in spec and spec["priority"] is not None and spec["priority"] != value:
            raise forbidden(rt, name, f"the integer value of priority ({spec['priority']}) must "
                            f"not be provided in pod spec; priority admission controller computed "
                            f"{value} from the given PriorityClass name")
        if spec.get("preemptionPolicy") and spec["preemptionPolicy"] != policy and pc:
            raise forbidden(rt, name, f"the string value of PreemptionPolicy "
                            f"({spec['preemptionPolicy']}) must not be provided in pod spec; "
                            f"priority admission controller computed {policy} from the given "
                            "PriorityClass name")
        spec["priority"] = value
        spec["preemptionPolicy"] = policy

    def _quota_usage_of(self, rt: ResourceType, obj: dict) -> dict[str, Fraction]:
        """What one object adds to a quota's usage (keys as they may appear in spec.hard)."""
        usage: dict[str, Fraction] = {}
        count_key = f"count/{rt.group_resource}"
        usage[count_key] = Fraction(1)
        if not rt.group and rt.plural in ("configmaps", "secrets", "resourcequotas", "services",
                                          "persistentvolumeclaims", "replicationcontrollers"):
            usage[rt.plural] = Fraction(1)
        if rt.plural == "pods" and not rt.group:
            if not _pod_counts_for_quota(obj):
                return {}
            usage["pods"] = Fraction(1)
            requests, limits = _pod_resources(obj.get("spec") or {})
            for r, q in requests.items():
                usage[f"requests.{r}"] = q
                if r in ("cpu", "memory", "ephemeral-storage"):
                    usage[r] = q
            for r, q in limits.items():
                usage[f"limits.{r}"] = q
        return usage

    def _quota_applies(self, quota: dict, rt: ResourceType, obj: dict) -> bool:
        spec = quota.get("spec") or {}
        scopes = list(spec.get("scopes") or [])
        exprs = list(((spec.get("scopeSelector") or {}).get("matchExpressions")) or [])
        if not scopes and not exprs:
            return True
        if rt.plural != "pods" or rt.group:
            return False
        pod_spec = obj.get("spec") or {}
        for scope in scopes:
            exprs.append({"scopeName": scope, "operator": "Exists"})
        for expr in exprs:
            scope, op, values = expr.get("scopeName"), expr.get("operator"), expr.get("values") or []
            if scope == "PriorityClass":
                pcn = pod_spec.get("priorityClassName")
                ok = {"In": pcn in values, "NotIn": pcn not in values,
                      "Exists": bool(pcn), "DoesNotExist": not pcn}.get(op, False)
            elif scope in ("BestEffort", "NotBestEffort"):
                best = _qos_class(pod_spec) == "BestEffort"
                ok = best if scope == "BestEffort" else not best
            elif scope in ("Terminating", "NotTerminating"):
                term = pod_spec.get("activeDeadlineSeconds") is not None
                ok = term if scope == "Terminating" else not term
            else:
                ok = False
            if not ok:
                return False
        return True

    def _stored_usage(self, rt: ResourceType, obj: dict) -> dict[str, Fraction]:
        """``_quota_usage_of`` memoised per stored object version."""
        key = (rt.storage_key, obj["metadata"].get("namespace"), obj["metadata"]["name"],
               obj["metadata"].get("resourceVersion"))
        usage = self._usage_cache.get(key)
        if usage is None:
            if len(self._usage_cache) > 100_000:
                self._usage_cache.clear()
            usage = self._usage_cache[key] = self._quota_usage_of(rt, obj)
        return usage

    def _quota_used(self, ns: str, quota: dict) -> dict[str, Fraction]:
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = {k: Fraction(0) for k in hard}
        for rt in {t.storage_key: t for t in self.types.values() if t.namespaced}.values():
            for (obj_ns, _), obj in self._store(rt).items():
                if obj_ns != ns or not self._quota_applies(quota, rt, obj):
                    continue
                for k, v in self._stored_usage(rt, obj).items():
                    if k in used:
                        used[k] += v
        return used

    def _admit_quota(self, rt: ResourceType, ns: str, obj: dict, name: str) -> None:
        delta = self._quota_usage_of(rt, obj)
        if not delta:
            return
        quotas = [q for (qns, _), q in sorted(self._store(self.rt("", "v1", "resourcequotas")).items())
                  if qns == ns]
        for quota in quotas:
            if not self._quota_applies(quota, rt, obj):
                continue
            hard = (quota.get("spec") or {}).get("hard") or {}
            if rt.plural == "pods" and not rt.group:
                missing = [k for k in hard if k in ("requests.cpu", "requests.memory", "limits.cpu",
                                                      "limits.memory", "cpu", "memory")
                           and k not in delta]
                if missing:
                    raise forbidden(rt, name, f"failed quota: {quota['metadata']['name']}: must "
                                    f"specify {','.join(sorted(missing))}")
            used = self._quota_used(ns, quota)
            over = sorted(k for k in hard if k in delta
                          and used[k] + delta[k] > parse_quantity(hard[k]))
            if over:
                def fmt(values: dict, keys=over) -> str:
                    return ",".join(f"{k}={values[k]}" for k in keys)
                raise forbidden(rt, name, (
                    f"exceeded quota: {quota['metadata']['name']}, "
                    f"requested: {fmt({k: format_quantity(delta[k]) for k in over})}, "
                    f"used: {fmt({k: format_quantity(used[k]) for k in over})}, "
                    f"limited: {fmt({k: hard[k] for k in over})}"))

    # ------------------------------------------------------------------ controllers (synchronous)

    def _after_write(self, rt: ResourceType, ns: str | None) -> None:
        if rt.namespaced and ns:
            self._sync_quotas(ns)
        if rt.plural in ("pods", "poddisruptionbudgets", "statefulsets", "deployments") and ns:
            self._sync_pdbs(ns)

    def _set_status(self, rt: ResourceType, obj: dict, status: dict) -> None:
        if obj.get("status") == status:
            return
        old = copy.deepcopy(obj)
        obj["status"] = status
        ns, name = obj["metadata"].get("namespace"), obj["metadata"]["name"]
        self._track_update(rt, ns, name, old, obj, CONTROLLER_MANAGER, "status")
        obj["metadata"]["resourceVersion"] = str(self._next_rv())
        self._render_managed(rt, ns, name, obj)
        self._emit(rt, "MODIFIED", obj, old)

    def _sync_quotas(self, ns: str) -> None:
        rtq = self.rt("", "v1", "resourcequotas")
        for (qns, _), quota in sorted(self._store(rtq).items()):
            if qns != ns:
                continue
            hard = dict((quota.get("spec") or {}).get("hard") or {})
            used = {k: format_quantity(v, binary=str(hard.get(k, "")).endswith("i"))
                    for k, v in self._quota_used(ns, quota).items()}
            self._set_status(rtq, quota, {"hard": hard, "used": used})

    def _pdb_state(self, pdb: dict, ns: str) -> dict:
        spec = pdb.get("spec") or {}
        pods = [p for (pns, _), p in sorted(self._store(self.rt("", "v1", "pods")).items())
                if pns == ns and match_label_selector_object(spec.get("selector"),
                                                              p["metadata"].get("labels"))]
        expected = len(pods)
        healthy = len([p for p in pods if _pod_healthy(p)])
        if "maxUnavailable" in spec or str(spec.get("minAvailable", "")).endswith("%"):
            scale = self._controller_scale(pods, ns)
            if scale is not None:
                expected = scale
        if "minAvailable" in spec:
            desired = _scaled(spec["minAvailable"], expected)
        elif "maxUnavailable" in spec:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        else:
            desired = expected  # maxUnavailable defaults to 0 disruptions... see README
        allowed = max(0, healthy - desired)
        status = copy.deepcopy(pdb.get("status") or {})
        status.update({"observedGeneration": pdb["metadata"].get("generation", 1),
                       "expectedPods": expected, "currentHealthy": healthy,
                       "desiredHealthy": desired, "disruptionsAllowed": allowed})
        status.pop("disruptedPods", None)
        cond = {"type": "DisruptionAllowed", "status": "True" if allowed > 0 else "False",
                "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                "message": "", "observedGeneration": status["observedGeneration"]}
        old_cond = next((c for c in status.get("conditions", []) if c.get("type") == cond["type"]), None)
        if old_cond and old_cond.get("status") == cond["status"]:
            cond["lastTransitionTime"] = old_cond.get("lastTransitionTime")
        else:
            cond["lastTransitionTime"] = now()
        status["conditions"] = [cond]
        return status

    def _controller_scale(self, pods: list[dict], ns: str) -> int | None:
        """Sum of spec.replicas of the pods' controllers (StatefulSet / Deployment / ReplicaSet),
        as the disruption controller computes expectedPods; None if a pod has no such controller
        (the fake then counts the selected pods — see README)."""
        seen: dict[str, int] = {}
        for p in pods:
            ref = next((r for r in p["metadata"].get("ownerReferences") or [] if r.get("controller")),
                       None)
            if ref is None:
                return None
            kind_to_type = {"StatefulSet": ("apps", "statefulsets"),
                            "Deployment": ("apps", "deployments"),
                            "ReplicaSet": ("apps", "replicasets")}
            if ref.get("kind") not in kind_to_type:
                return None
            store = self.objects.get(kind_to_type[ref["kind"]], {})
            owner = store.get((ns, ref.get("name")))
            if owner is None or owner["metadata"]["uid"] != ref.get("uid"):
                return None
            seen[ref["uid"]] = (owner.get("spec") or {}).get("replicas", 1)
        return sum(seen.values()) if seen else None

    def _sync_pdbs(self, ns: str) -> None:
        rtp = self.rt("policy", "v1", "poddisruptionbudgets")
        for (pns, _), pdb in sorted(self._store(rtp).items()):
            if pns == ns:
                self._set_status(rtp, pdb, self._pdb_state(pdb, ns))

    # ------------------------------------------------------------------ create

    def create(self, rt: ResourceType, ns: str | None, body: Any, *, manager: str = "unknown",
               dry_run: bool = False, field_validation: str = "Warn",
               keep_status: bool = False, _apply_paths: set | None = None) -> tuple[dict, list[str]]:
        with self.lock:
            self._check_type_meta(rt, body)
            obj = copy.deepcopy(body)
            meta = obj.setdefault("metadata", {})
            if rt.namespaced:
                if meta.get("namespace") and meta["namespace"] != ns:
                    raise bad_request("the namespace of the provided object does not match the "
                                      "namespace sent on the request")
                meta["namespace"] = ns
            else:
                meta.pop("namespace", None)
            for k in _SERVER_META:
                meta.pop(k, None)
            meta.pop("resourceVersion", None)
            if not meta.get("name") and meta.get("generateName"):
                for _ in range(10):
                    candidate = meta["generateName"] + "".join(
                        random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
                    if self._current(rt, ns, candidate) is None:
                        meta["name"] = candidate
                        break
            if rt.has_status and not keep_status and rt.plural != "nodes":
                obj.pop("status", None)
            obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
            submitted = self._scope_paths(rt, obj, None)  # defaults are owned by nobody
            warnings, schema_causes = self._decode_check(rt, obj, field_validation)
            self._default(rt, obj, creating=True)
            self._validate(rt, obj, None, schema_causes)
            self._admit(rt, ns, obj, creating=True)
            name = meta["name"]
            if self._current(rt, ns, name) is not None:
                raise ApiError(409, "AlreadyExists", f'{rt.group_resource} "{name}" already exists',
                               _details(rt, name))
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now()
            if rt.generation:
                meta["generation"] = 1
            if dry_run:
                meta["resourceVersion"] = str(self.rv)
                return self.render(rt, obj), warnings
            self.fields.pop((rt.storage_key, self._key(rt, ns, name)), None)
            if _apply_paths is not None:
                self._fields_for(rt, ns, name)[(manager, "Apply", "")] = FieldSet(
                    set(_apply_paths), now(), rt.api_version)
            elif submitted:
                self._fields_for(rt, ns, name)[(manager, "Update", "")] = FieldSet(
                    submitted, now(), rt.api_version)
            meta["resourceVersion"] = str(self._next_rv())
            self._render_managed(rt, ns, name, obj)
            self._store(rt)[self._key(rt, ns, name)] = obj
            self._emit(rt, "ADDED", obj, None)
            if rt.plural == "customresourcedefinitions":
                self._crd_established(rt, obj)
            if rt.plural == "namespaces" and not rt.group:  # the root-CA publisher controller
                self.create(self.rt("", "v1", "configmaps"), name, {
                    "metadata": {"name": "kube-root-ca.crt",
                                 "annotations": {"kubernetes.io/description": "Contains a CA bundle "
                                                 "that can be used to verify the kube-apiserver "
                                                 "when using internal endpoints."}},
                    "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"}},
                    manager="kube-controller-manager")
            self._after_write(rt, ns)
            return self.render(rt, self._current(rt, ns, name)), warnings

    # ------------------------------------------------------------------ update

    def update(self, rt: ResourceType, ns: str | None, name: str, body: Any, *,
               manager: str = "unknown", subresource: str | None = None, dry_run: bool = False,
               field_validation: str = "Warn", _ownership: dict | None = None
               ) -> tuple[dict, list[str], bool]:
        """PUT semantics.  Returns (object, warnings, created)."""
        with self.lock:
            self._check_type_meta(rt, body)
            current = self._current(rt, ns, name)
            body_meta = body.get("metadata") or {}
            if body_meta.get("name") and body_meta["name"] != name:
                raise bad_request(f"the name of the object ({body_meta['name']}) does not match "
                                  f"the name on the URL ({name})")
            if rt.namespaced and body_meta.get("namespace") and body_meta["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the "
                                  "namespace sent on the request")
            if current is None:
                if rt.allow_create_on_update and subresource is None:
                    body = copy.deepcopy(body)
                    body.setdefault("metadata", {})["name"] = name
                    obj, warnings = self.create(rt, ns, body, manager=manager, dry_run=dry_run,
                                                field_validation=field_validation)
                    return obj, warnings, True
                raise not_found(rt, name)
            rv = body_meta.get("resourceVersion")
            if rv:
                if str(rv) != current["metadata"]["resourceVersion"]:
                    raise stale(rt, name)
            elif not rt.allow_unconditional_update:
                raise invalid(rt, name, [{"reason": "FieldValueInvalid",
                                          "field": "metadata.resourceVersion",
                                          "message": "Invalid value: 0: must be specified for an "
                                                     "update"}])
            if body_meta.get("uid") and body_meta["uid"] != current["metadata"]["uid"]:
                raise conflict(rt, name, f"Precondition failed: UID in precondition: "
                               f"{body_meta['uid']}, UID in object meta: {current['metadata']['uid']}")
            if subresource == "status":
                new = copy.deepcopy(current)
                if "status" in body:
                    new["status"] = copy.deepcopy(body["status"])
                else:
                    new.pop("status", None)
            else:
                new = copy.deepcopy(body)
                new_meta = new.setdefault("metadata", {})
                for k in _SERVER_META:
                    new_meta.pop(k, None)
                    if k in current["metadata"]:
                        new_meta[k] = copy.deepcopy(current["metadata"][k])
                new_meta["name"] = name
                if rt.namespaced:
                    new_meta["namespace"] = ns
                if rt.has_status:
                    if "status" in current:
                        new["status"] = copy.deepcopy(current["status"])
                    else:
                        new.pop("status", None)
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            warnings, schema_causes = self._decode_check(rt, new, field_validation)
            self._default(rt, new, creating=False)
            if rt.plural == "pods" and subresource is None:
                new.setdefault("spec", {})
                new["spec"].setdefault("priority", current["spec"].get("priority"))
                new["spec"].setdefault("preemptionPolicy", current["spec"].get("preemptionPolicy"))
                if current["spec"].get("priorityClassName"):
                    new["spec"].setdefault("priorityClassName", current["spec"]["priorityClassName"])
            self._validate(rt, new, current, schema_causes)
            if rt.plural == "namespaces" and subresource is None:
                new["spec"] = copy.deepcopy(current.get("spec", {}))
            owners_changed = _ownership is not None and {
                k: v.paths for k, v in _ownership.items() if v.paths} != {
                k: v.paths for k, v in self._fields_for(rt, ns, name).items() if v.paths}
            if _strip_volatile(new) == _strip_volatile(current) and not owners_changed:
                return self.render(rt, current), warnings, False  # no-op: no new resourceVersion
            if rt.generation and _spec_part(new) != _spec_part(current):
                new["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
            if dry_run:
                return self.render(rt, new), warnings, False
            if (new["metadata"].get("deletionTimestamp")
                    and not new["metadata"].get("finalizers")
                    and (not new["metadata"].get("deletionGracePeriodSeconds")
                         or new["metadata"]["uid"] in self._grace_elapsed)):
                self._finalize_delete(rt, ns, name, new, propagation="Background")
                return self.render(rt, new), warnings, False
            if _ownership is not None:
                entries = self._fields_for(rt, ns, name)
                entries.clear()
                entries.update(_ownership)
                self._prune_entries(entries)
            else:
                self._track_update(rt, ns, name, current, new, manager, subresource)
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self._render_managed(rt, ns, name, new)
            self._store(rt)[self._key(rt, ns, name)] = new
            self._emit(rt, "MODIFIED", new, current)
            if rt.plural == "customresourcedefinitions":
                self._crd_established(rt, new)
            self._after_write(rt, ns)
            return self.render(rt, new), warnings, False

    # ------------------------------------------------------------------ patch

    def patch(self, rt: ResourceType, ns: str | None, name: str, patch: Any, content_type: str, *,
              manager: str | None, force: bool = False, subresource: str | None = None,
              dry_run: bool = False, field_validation: str = "Warn") -> tuple[dict, list[str], bool]:
        """Returns (object, warnings, created)."""
        with self.lock:
            if content_type == "application/apply-patch+yaml":
                return self._apply(rt, ns, name, patch, manager, force, subresource, dry_run,
                                   field_validation)
            if force:
                raise bad_request("force: Forbidden: may not be specified for non-apply patch")
            current = self._current(rt, ns, name)
            if current is None:
                raise not_found(rt, name)
            view = self.render(rt, current)
            try:
                if content_type == "application/merge-patch+json":
                    if not isinstance(patch, dict):
                        raise patching.PatchError("merge patch must be a JSON object")
                    patched = patching.merge_patch(view, patch)
                elif content_type == "application/strategic-merge-patch+json":
                    if rt.custom:
                        raise ApiError(415, "UnsupportedMediaType",
                                       "the body of the request was in an unknown format - "
                                       "accepted media types include: application/json-patch+json, "
                                       "application/merge-patch+json, application/apply-patch+yaml")
                    if not isinstance(patch, dict):
                        raise patching.PatchError("strategic merge patch must be a JSON object")
                    patched = patching.strategic_merge_patch(
                        view, patch, resources.builtin_patch_strategy_fn(rt))
                elif content_type == "application/json-patch+json":
                    patched = patching.json_patch(view, patch)
                else:
                    raise ApiError(415, "UnsupportedMediaType",
                                   f"the body of the request was in an unknown format - accepted "
                                   f"media types include: application/json-patch+json, "
                                   f"application/merge-patch+json, application/apply-patch+yaml"
                                   f"{'' if rt.custom else ', application/strategic-merge-patch+json'}")
            except patching.PatchError as e:
                raise ApiError(422, "Invalid", "the server rejected our request due to an error "
                               "in our request", {"causes": [{"reason": "UnexpectedServerResponse",
                                                              "message": str(e)}]}) from e
            if not isinstance(patched, dict):
                raise bad_request("patch produced a non-object")
            patched.setdefault("metadata", {})
            if not patched["metadata"].get("resourceVersion"):
                patched["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            obj, warnings, _ = self.update(rt, ns, name, patched, manager=manager or "unknown",
                                           subresource=subresource, dry_run=dry_run,
                                           field_validation=field_validation)
            return obj, warnings, False

    def _apply(self, rt, ns, name, config, manager, force, subresource, dry_run, field_validation):
        if not manager:
            raise invalid(rt, name, [{"reason": "FieldValueRequired", "field": "fieldManager",
                                      "message": "Required value: is required for apply patch"}])
        if not isinstance(config, dict):
            raise bad_request("apply patch must be an object")
        if not config.get("apiVersion") or not config.get("kind"):
            raise bad_request("invalid object type: apply patch must have apiVersion and kind")
        self._check_type_meta(rt, config)
        meta = config.setdefault("metadata", {})
        if meta.get("name") and meta["name"] != name:
            raise bad_request(f"the name of the object ({meta['name']}) does not match the name "
                              f"on the URL ({name})")
        meta["name"] = name
        sub = subresource or ""
        applied = self._scope_paths(rt, config, subresource)
        current = self._current(rt, ns, name)
        if current is None:
            if subresource:
                raise not_found(rt, name)
            obj, warnings = self.create(rt, ns, config, manager=manager, dry_run=dry_run,
                                        field_validation=field_validation, _apply_paths=applied)
            return obj, warnings, True
        merged = patching.apply_merge(self.render(rt, current), config, self._list_key(rt))
        entries = {k: FieldSet(set(v.paths), v.time, v.api_version)
                   for k, v in self._fields_for(rt, ns, name).items()}
        conflicts: list[tuple[str, tuple]] = []
        for (other, op, other_sub), entry in entries.items():
            if other == manager or other_sub != sub:
                continue
            shown = f'"{other}"' + (f' with subresource "{other_sub}"' if other_sub else "")
            if op == "Update":
                shown += f" using {entry.api_version}"
            for q in sorted(entry.paths):
                if any(patching.overlaps(p, q) for p in applied) and \
                        not patching.same_value(current, merged, q):
                    conflicts.append((shown, q))
        if conflicts and not force:
            causes = [{"reason": "FieldManagerConflict", "message": f"conflict with {m}",
                       "field": patching.format_path(q)} for m, q in conflicts]
            if len(conflicts) == 1:
                m, q = conflicts[0]
                msg = f"Apply failed with 1 conflict: conflict with {m}: {patching.format_path(q)}"
            else:
                lines = []
                for m in sorted({m for m, _ in conflicts}):
                    lines.append(f"conflicts with {m}:")
                    lines += [f"- {patching.format_path(q)}" for mm, q in conflicts if mm == m]
                msg = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
            raise ApiError(409, "Conflict", msg, _details(rt, name, causes=causes))
        for (other, _op, other_sub), entry in entries.items():
            if other == manager or other_sub != sub:
                continue
            # forced: the conflicting fields change hands; co-owned, unchanged ones stay shared
            entry.paths = {q for q in entry.paths
                           if not (any(patching.overlaps(p, q) for p in applied)
                                   and not patching.same_value(current, merged, q))}
        mine = entries.get((manager, "Apply", sub))
        previously = mine.paths if mine else set()
        others = set()
        for key, entry in entries.items():
            if key != (manager, "Apply", sub):
                others |= entry.paths
        for p in sorted(previously - applied, key=len, reverse=True):
            if len(p) > 1 and patching.is_element(p[:-1]) and \
                    p[-1] in json.loads(p[-2][2:]):
                continue  # a list-map element's key goes with the element, not on its own
            if not any(_takes_over(p, q) for q in others | applied):
                patching.delete_path(merged, p)
        entries[(manager, "Apply", sub)] = FieldSet(set(applied), now(), rt.api_version)
        obj, warnings, _ = self.update(rt, ns, name, merged, manager=manager,
                                       subresource=subresource, dry_run=dry_run,
                                       field_validation=field_validation, _ownership=entries)
        return obj, warnings, False

    # ------------------------------------------------------------------ delete

    def delete(self, rt: ResourceType, ns: str | None, name: str, options: dict | None = None, *,
               dry_run: bool = False) -> dict:
        with self.lock:
            options = options or {}
            current = self._current(rt, ns, name)
            if current is None:
                raise not_found(rt, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
                raise conflict(rt, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                               f"UID in object meta: {current['metadata']['uid']}")
            if pre.get("resourceVersion") and \
                    str(pre["resourceVersion"]) != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name, f"Precondition failed: ResourceVersion in precondition: "
                               f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                               f"{current['metadata']['resourceVersion']}")
            propagation = options.get("propagationPolicy") or (
                "Orphan" if options.get("orphanDependents") else "Background")
            if propagation not in ("Orphan", "Background", "Foreground"):
                raise invalid(rt, name, [{"reason": "FieldValueNotSupported",
                                          "field": "propagationPolicy",
                                          "message": f'Unsupported value: "{propagation}"'}])
            if dry_run:
                return self.render(rt, current) if rt.return_deleted_object else _success(rt, current)
            grace = self._pod_grace(rt, current, options)
            if current["metadata"].get("finalizers") or grace:
                if current["metadata"].get("deletionTimestamp"):
                    return self.render(rt, current)
                new = copy.deepcopy(current)
                new["metadata"]["deletionTimestamp"] = now(grace or 0)
                new["metadata"]["deletionGracePeriodSeconds"] = grace or 0
                if rt.generation:
                    new["metadata"]["generation"] = new["metadata"].get("generation", 1) + 1
                new["metadata"]["resourceVersion"] = str(self._next_rv())
                self._store(rt)[self._key(rt, ns, name)] = new
                self._emit(rt, "MODIFIED", new, current)
                self._after_write(rt, ns)
                if grace:
                    timer = threading.Timer(min(grace, self.pod_termination_seconds or 0),
                                            self.kubelet_remove_pod,
                                            (ns, name, current["metadata"]["uid"]))
                    timer.daemon = True
                    timer.start()
                return self.render(rt, new)
            gone = self._finalize_delete(rt, ns, name, current, propagation)
            return self.render(rt, gone) if rt.return_deleted_object else _success(rt, current)

    def _pod_grace(self, rt: ResourceType, pod: dict, options: dict) -> int:
        """Grace period for a graceful pod deletion, or 0 when the pod goes at once."""
        if self.pod_termination_seconds is None or rt.plural != "pods" or rt.group:
            return 0
        if not (pod.get("spec") or {}).get("nodeName"):
            return 0  # never scheduled: nothing to stop
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return 0
        grace = options.get("gracePeriodSeconds")
        if grace is None:
            grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        return max(0, int(grace))

    def kubelet_remove_pod(self, ns: str, name: str, uid: str | None = None) -> bool:
        """The kubelet stand-in: remove a terminating pod now (no-op if it has finalizers)."""
        rt = self.rt("", "v1", "pods")
        with self.lock:
            pod = self._current(rt, ns, name)
            if pod is None or (uid and pod["metadata"]["uid"] != uid) \
                    or not pod["metadata"].get("deletionTimestamp"):
                return False
            self._grace_elapsed.add(pod["metadata"]["uid"])
            if pod["metadata"].get("finalizers"):
                return False  # goes when the last finalizer is removed
            self._finalize_delete(rt, ns, name, pod, "Background")
            return True

    def _finalize_delete(self, rt, ns, name, current, propagation) -> dict:
        del self._store(rt)[self._key(rt, ns, name)]
        self.fields.pop((rt.storage_key, self._key(rt, ns, name)), None)
        gone = copy.deepcopy(current)
        gone["metadata"]["resourceVersion"] = str(self._next_rv())
        self._emit(rt, "DELETED", gone, current)
        uid = current["metadata"]["uid"]
        if rt.plural == "customresourcedefinitions":
            self._crd_removed(current)
        if rt.plural == "namespaces" and not rt.group:
            for other in list({t.storage_key: t for t in self.types.values() if t.namespaced}.values()):
                for (ons, oname) in sorted(self._store(other)):
                    if ons == name and (ons, oname) in self._store(other):
                        self._finalize_delete(other, ons, oname,
                                              self._store(other)[(ons, oname)], "Background")
        self._collect_garbage(uid, propagation)
        self._after_write(rt, ns)
        return gone

    def _collect_garbage(self, owner_uid: str, propagation: str) -> None:
        """Synchronous stand-in for the garbage collector: cascade over ownerReferences."""
        for rt in list({t.storage_key: t for t in self.types.values()}.values()):
            for key, obj in list(self._store(rt).items()):
                refs = obj["metadata"].get("ownerReferences") or []
                if not any(r.get("uid") == owner_uid for r in refs):
                    continue
                rest = [r for r in refs if r.get("uid") != owner_uid]
                if propagation == "Orphan" or rest:
                    new = copy.deepcopy(obj)
                    if rest:
                        new["metadata"]["ownerReferences"] = rest
                    else:
                        new["metadata"].pop("ownerReferences", None)
                    new["metadata"]["resourceVersion"] = str(self._next_rv())
                    self._store(rt)[key] = new
                    self._emit(rt, "MODIFIED", new, obj)
                elif key in self._store(rt):
                    with contextlib.suppress(ApiError):
                        self.delete(rt, key[0] or None, key[1], {"propagationPolicy": propagation})

    def delete_collection(self, rt, ns, label_selector=None, field_selector=None,
                          options=None, dry_run=False) -> dict:
        with self.lock:
            items, _, _, _ = self.list(rt, ns, label_selector, field_selector)
            for item in items:
                try:
                    self.delete(rt, item["metadata"].get("namespace"), item["metadata"]["name"],
                                options, dry_run=dry_run)
                except ApiError as e:
                    if e.code != 404:
                        raise
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}

    # ------------------------------------------------------------------ list / selectors

    def matcher(self, rt: ResourceType, label_selector: str | None, field_selector: str | None):
        try:
            lreqs = parse_label_selector(label_selector)
            freqs = parse_field_selector(field_selector)
        except SelectorError as e:
            raise bad_request(str(e)) from e
        allowed = {"metadata.name", "metadata.namespace"} | FIELD_SELECTORS.get(rt.storage_key, set())
        allowed |= set(rt.selectable_fields)
        for path, _, _ in freqs:
            if path not in allowed:
                raise bad_request(f'field label not supported: {path}')

        def match(obj: dict) -> bool:
            if not match_labels(lreqs, obj["metadata"].get("labels")):
                return False

            def get(path: str) -> str:
                node: Any = obj
                for part in path.split("."):
                    node = node.get(part) if isinstance(node, dict) else None
                if isinstance(node, bool):
                    return "true" if node else "false"
                return "" if node is None else str(node)

            return match_fields(freqs, get)

        return match

    def list(self, rt: ResourceType, ns: str | None, label_selector: str | None = None,
             field_selector: str | None = None, limit: int | None = None,
             continue_from: str | None = None) -> tuple[list[dict], int, str | None, int | None]:
        with self.lock:
            match = self.matcher(rt, label_selector, field_selector)
            keys = sorted(self._store(rt))
            items = [self.render(rt, self._store(rt)[k], in_list=True) for k in keys
                     if (not ns or not rt.namespaced or k[0] == ns) and match(self._store(rt)[k])]
            if continue_from:
                start = int(continue_from)
                items = items[start:]
            else:
                start = 0
            token, remaining = None, None
            if limit and len(items) > limit:
                remaining = len(items) - limit
                items = items[:limit]
                token = str(start + limit)
            return items, self.rv, token, remaining

    # ------------------------------------------------------------------ subresources

    def evict(self, ns: str, name: str, body: Any, dry_run: bool = False) -> dict:
        rt = self.rt("", "v1", "pods")
        with self.lock:
            if not isinstance(body, dict) or body.get("kind", "Eviction") != "Eviction":
                raise bad_request("the body of the request must be an Eviction")
            if (body.get("metadata") or {}).get("name", name) != name:
                raise bad_request("name in URL does not match name in Eviction object")
            pod = self._current(rt, ns, name)
            if pod is None:
                raise not_found(rt, name)
            options = dict(body.get("deleteOptions") or {})
            phase = (pod.get("status") or {}).get("phase")
            ignore_pdb = bool(pod["metadata"].get("deletionTimestamp")) or phase in (
                "Succeeded", "Failed", "Pending")
            rtp = self.rt("policy", "v1", "poddisruptionbudgets")
            pdbs = [p for (pns, _), p in sorted(self._store(rtp).items()) if pns == ns and
                    match_label_selector_object((p.get("spec") or {}).get("selector"),
                                                pod["metadata"].get("labels"))]
            if not ignore_pdb and pdbs:
                if len(pdbs) > 1:
                    raise ApiError(500, "InternalError", "This pod has more than one "
                                   "PodDisruptionBudget, which the eviction subresource does not "
                                   "support.")
                pdb = pdbs[0]
                state = self._pdb_state(pdb, ns)
                policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
                unhealthy_ok = not _pod_healthy(pod) and (
                    policy == "AlwaysAllow" or state["currentHealthy"] >= state["desiredHealthy"])
                if not unhealthy_ok and state["disruptionsAllowed"] <= 0:
                    raise ApiError(
                        429, "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {"causes": [{"reason": "DisruptionBudget", "message":
                                     f"The disruption budget {pdb['metadata']['name']} needs "
                                     f"{state['desiredHealthy']} healthy pods and has "
                                     f"{state['currentHealthy']} currently"}]})
            self.delete(rt, ns, name, options, dry_run=dry_run)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "code": 201}

    def bind(self, ns: str, name: str, body: Any) -> dict:
        rt = self.rt("", "v1", "pods")
        with self.lock:
            target = (body or {}).get("target") or {}
            pod = self._current(rt, ns, name)
            if pod is None:
                raise not_found(rt, name)
            if pod["spec"].get("nodeName"):
                raise conflict(rt, name, f"pod {name} is already assigned to node "
                               f"\"{pod['spec']['nodeName']}\"")
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = target.get("name")
            _set_condition(new, "PodScheduled", "True")
            self._track_update(rt, ns, name, pod, new, "kube-scheduler", "binding")
            new["metadata"]["resourceVersion"] = str(self._next_rv())
            self._render_managed(rt, ns, name, new)
            self._store(rt)[self._key(rt, ns, name)] = new
            self._emit(rt, "MODIFIED", new, pod)
            self._after_write(rt, ns)
            return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "code": 201}

    def get_scale(self, rt: ResourceType, ns: str, name: str) -> dict:
        obj = self.get_object(rt, ns, name)
        meta = obj["metadata"]
        return {"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion",
                                                  "creationTimestamp") if k in meta},
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
                "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                           "selector": label_selector_to_string((obj.get("spec") or {}).get("selector"))}}

    def set_scale(self, rt: ResourceType, ns: str, name: str, scale: Any, manager: str,
                  content_type: str | None = None) -> dict:
        with self.lock:
            current = self.get_scale(rt, ns, name)
            if content_type:
                if content_type == "application/json-patch+json":
                    scale = patching.json_patch(current, scale)
                else:
                    scale = patching.merge_patch(current, scale)
            if not isinstance(scale, dict):
                raise bad_request("the body of the request must be a Scale")
            rv = (scale.get("metadata") or {}).get("resourceVersion")
            obj = self._current(rt, ns, name)
            if rv and str(rv) != obj["metadata"]["resourceVersion"]:
                raise stale(rt, name)
            replicas = (scale.get("spec") or {}).get("replicas")
            if not isinstance(replicas, int) or replicas < 0:
                raise invalid(rt, name, [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                          "message": "Invalid value: must be greater than or equal to 0"}])
            new = self.render(rt, obj)
            new["spec"]["replicas"] = replicas
            self.update(rt, ns, name, new, manager=manager, subresource="scale")
            return self.get_scale(rt, ns, name)

    # ------------------------------------------------------------------ CRDs

    def _crd_causes(self, crd: dict) -> list[dict]:
        spec = crd.get("spec") or {}
        names = spec.get("names") or {}
        causes = []
        expected = f"{names.get('plural')}.{spec.get('group')}"
        if crd["metadata"].get("name") != expected:
            causes.append({"reason": "FieldValueInvalid", "field": "metadata.name",
                           "message": f'Invalid value: "{crd["metadata"].get("name")}": must be '
                                      f"spec.names.plural+\".\"+spec.group"})
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            causes.append({"reason": "FieldValueNotSupported", "field": "spec.scope",
                           "message": 'Unsupported value: supported values: "Cluster", "Namespaced"'})
        versions = spec.get("versions") or []
        if sum(1 for v in versions if v.get("storage")) != 1:
            causes.append({"reason": "FieldValueInvalid", "field": "spec.versions",
                           "message": "Invalid value: must have exactly one version marked as "
                                      "storage version"})
        for v in versions:
            if not (v.get("schema") or {}).get("openAPIV3Schema"):
                causes.append({"reason": "FieldValueRequired",
                               "field": f"spec.versions[{v.get('name')}].schema.openAPIV3Schema",
                               "message": "Required value: schemas are required"})
        return causes

    def _crd_types(self, crd: dict) -> list[ResourceType]:
        spec = crd["spec"]
        names = spec["names"]
        out = []
        for v in spec.get("versions") or []:
            if not v.get("served", True):
                continue
            subs = set((v.get("subresources") or {}).keys())
            selectable = tuple(f.get("jsonPath", "").lstrip(".")
                               for f in v.get("selectableFields") or [])
            out.append(ResourceType(
                spec["group"], v["name"], names["plural"], names["kind"],
                spec["scope"] == "Namespaced", singular=names.get("singular", names["kind"].lower()),
                short_names=tuple(names.get("shortNames") or ()), subresources=frozenset(subs),
                return_deleted_object=True, custom=True, allow_unconditional_update=False,
                schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                selectable_fields=selectable))
        return out

    def _crd_established(self, rt: ResourceType, crd: dict) -> None:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        for key in [k for k, t in self.types.items() if t.custom and (k[0], k[2]) == (group, plural)]:
            del self.types[key]
        for t in self._crd_types(crd):
            self._register(t)
        storage = next(v["name"] for v in crd["spec"]["versions"] if v.get("storage"))
        status = {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
                 "message": "no conflicts found", "lastTransitionTime": now()},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
                 "message": "the initial names have been accepted", "lastTransitionTime": now()},
            ],
            "acceptedNames": copy.deepcopy(crd["spec"]["names"]),
            "storedVersions": sorted(set((crd.get("status") or {}).get("storedVersions", []))
                                     | {storage}),
        }
        old_status = crd.get("status") or {}
        if {k: v for k, v in old_status.items() if k != "conditions"} != \
                {k: v for k, v in status.items() if k != "conditions"} or not old_status.get("conditions"):
            self._set_status(rt, crd, status)

    def _crd_removed(self, crd: dict) -> None:
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        types = [t for k, t in self.types.items() if t.custom and (k[0], k[2]) == (group, plural)]
        if types:
            rt = types[0]
            for (ns, name), obj in sorted(self._store(rt).items()):
                self._finalize_delete(rt, ns or None, name, obj, "Background")
        for t in types:
            del self.types[(t.group, t.version, t.plural)]
        self.objects.pop((group, plural), None)

    # ------------------------------------------------------------------ kubelet / scheduler stand-ins

    def add_node(self, name: str, gpus: int = 8, labels: dict | None = None,
                 gpu_resource: str = "nvidia.com/gpu", cpu: str = "64", memory: str = "512Gi",
                 ready: bool = True) -> dict:
        """Create a Node as a kubelet would register it (status included)."""
        capacity = {"cpu": cpu, "memory": memory, "pods": "110", gpu_resource: str(gpus)}
        node = {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                     **(labels or {})}},
                "spec": {},
                "status": {"capacity": capacity, "allocatable": dict(capacity),
                           "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                           "reason": "KubeletReady", "message": "",
                                           "lastHeartbeatTime": now(),
                                           "lastTransitionTime": now()}]}}
        obj, _ = self.create(self.rt("", "v1", "nodes"), None, node, manager="kubelet",
                             keep_status=True)
        return obj

    def set_pod_status(self, ns: str, name: str, phase: str = "Running", ready: bool = True,
                       node: str | None = None) -> dict:
        """Act as scheduler + kubelet: bind to ``node`` (if given) and report phase/readiness."""
        rt = self.rt("", "v1", "pods")
        with self.lock:
            pod = self.get_object(rt, ns, name)
            if node and not pod["spec"].get("nodeName"):
                self.bind(ns, name, {"target": {"kind": "Node", "name": node}})
                pod = self.get_object(rt, ns, name)
            pod["status"]["phase"] = phase
            _set_condition(pod, "Ready", "True" if ready and phase == "Running" else "False")
            _set_condition(pod, "ContainersReady", "True" if ready and phase == "Running" else "False")
            obj, _, _ = self.update(rt, ns, name, pod, manager="kubelet", subresource="status")
            return obj


# ---------------------------------------------------------------------- module helpers


def _success(rt: ResourceType, obj: dict) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": obj["metadata"]["name"], "group": rt.group, "kind": rt.plural,
                        "uid": obj["metadata"]["uid"]}}


def _takes_over(p: tuple, q: tuple) -> bool:
    """Does a write to field ``p`` affect ``q``'s ownership?  Yes when they overlap — except
    that writing inside a list-map element leaves the element's own ownership alone."""
    if patching.is_element(q) and len(q) < len(p):
        return False
    return patching.overlaps(p, q)


def _strip_volatile(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    out["metadata"].pop("managedFields", None)
    out["metadata"].pop("resourceVersion", None)
    return out


def _spec_part(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _set_condition(obj: dict, type_: str, status: str) -> None:
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conds:
        if c.get("type") == type_:
            if c.get("status") != status:
                c["status"] = status
                c["lastTransitionTime"] = now()
            return
    conds.append({"type": type_, "status": status, "lastTransitionTime": now()})


def _pod_healthy(pod: dict) -> bool:
    """Counts toward a PDB: not terminating and condition Ready=True (like the disruption controller)."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _pod_counts_for_quota(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _pod_resources(spec: dict) -> tuple[dict[str, Fraction], dict[str, Fraction]]:
    def total(containers: list, kind: str) -> dict[str, Fraction]:
        out: dict[str, Fraction] = {}
        for c in containers or []:
            for r, q in ((c.get("resources") or {}).get(kind) or {}).items():
                out[r] = out.get(r, Fraction(0)) + parse_quantity(q)
        return out

    result = []
    for kind in ("requests", "limits"):
        main = total(spec.get("containers"), kind)
        for c in spec.get("initContainers") or []:
            for r, q in ((c.get("resources") or {}).get(kind) or {}).items():
                main[r] = max(main.get(r, Fraction(0)), parse_quantity(q))
        for r, q in (spec.get("overhead") or {}).items():
            main[r] = main.get(r, Fraction(0)) + parse_quantity(q)
        result.append(main)
    return result[0], result[1]


def _qos_class(spec: dict) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set, guaranteed = False, True
    for c in containers:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        if req or lim:
            any_set = True
        for r in ("cpu", "memory"):
            if r not in lim or (r in req and parse_quantity(req[r]) != parse_quantity(lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)

