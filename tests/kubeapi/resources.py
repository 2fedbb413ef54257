"""Resource types the fake API server serves, their defaulting and their validation.

Built-in kinds are validated against the published OpenAPI schemas shipped by the
``kubernetes-validate`` package when it is installed (Kubernetes 1.37 schemas, matching the
``kubernetes`` 37 client); without it only the fake's own checks run (names, labels, required
metadata).  Custom resources are validated, pruned and defaulted from their CRD's
``openAPIV3Schema`` with ``jsonschema``.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from .quantity import canonical_quantity

try:  # optional: schema validation of built-in kinds
    import jsonschema
    import kubernetes_validate  # noqa: F401
    from importlib_resources import files as _res_files
    from referencing import Registry, Resource

    HAVE_SCHEMAS = True
except ImportError:  # pragma: no cover - depends on the environment
    HAVE_SCHEMAS = False

try:
    import jsonschema as _jsonschema
except ImportError:  # pragma: no cover
    _jsonschema = None

KUBE_VERSION = "1.37"


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    generation: bool = True  # metadata.generation maintained
    return_deleted_object: bool = False  # DELETE answers with the object instead of a Status
    allow_create_on_update: bool = False
    allow_unconditional_update: bool = True
    custom: bool = False
    verbs: tuple[str, ...] = (
        "create", "delete", "deletecollection", "get", "list", "patch", "update", "watch",
    )
    schema: dict | None = field(default=None, compare=False, hash=False)
    selectable_fields: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


def _rt(group, version, plural, kind, namespaced, **kw) -> ResourceType:
    kw.setdefault("singular", kind.lower())
    return ResourceType(group, version, plural, kind, namespaced, **kw)


BUILTIN_TYPES: list[ResourceType] = [
    _rt("", "v1", "namespaces", "Namespace", False, short_names=("ns",),
        subresources=frozenset({"status"}), generation=False,
        verbs=("create", "delete", "get", "list", "patch", "update", "watch")),
    _rt("", "v1", "nodes", "Node", False, short_names=("no",),
        subresources=frozenset({"status"}), generation=False),
    _rt("", "v1", "pods", "Pod", True, short_names=("po",),
        subresources=frozenset({"status", "eviction", "binding"}), return_deleted_object=True),
    _rt("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",), generation=False),
    _rt("", "v1", "secrets", "Secret", True, generation=False),
    _rt("", "v1", "events", "Event", True, short_names=("ev",), generation=False,
        allow_create_on_update=True),
    _rt("", "v1", "resourcequotas", "ResourceQuota", True, short_names=("quota",),
        subresources=frozenset({"status"}), generation=False),
    _rt("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False,
        short_names=("pc",), generation=False),
    _rt("coordination.k8s.io", "v1", "leases", "Lease", True, generation=False,
        allow_create_on_update=True),
    _rt("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True,
        short_names=("pdb",), subresources=frozenset({"status"})),
    _rt("apps", "v1", "deployments", "Deployment", True, short_names=("deploy",),
        subresources=frozenset({"status", "scale"})),
    _rt("apps", "v1", "statefulsets", "StatefulSet", True, short_names=("sts",),
        subresources=frozenset({"status", "scale"})),
    _rt("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",), generation=False,
        allow_create_on_update=True),
    _rt("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        False, short_names=("crd", "crds"), subresources=frozenset({"status"}),
        allow_unconditional_update=False),
]

# Fields a fieldSelector may name, per (group, plural); metadata.name/namespace always work.
FIELD_SELECTORS: dict[tuple[str, str], set[str]] = {
    ("", "pods"): {
        "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
        "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName",
    },
    ("", "nodes"): {"spec.unschedulable"},
    ("", "namespaces"): {"status.phase"},
    ("", "events"): {
        "involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
        "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
        "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type",
    },
    ("", "secrets"): {"type"},
}


# --------------------------------------------------------------------------- metadata checks

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _qualified_name_errors(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    errors = []
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        errors.append("prefix part must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        errors.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character"
        )
    return errors


def metadata_causes(rt: ResourceType, obj: dict) -> list[dict]:
    """Field errors (as StatusCause dicts) for metadata, the same checks the real server makes."""
    causes = []
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not name:
        causes.append(_cause("FieldValueRequired", "metadata.name", "Required value: name or generateName is required"))
    else:
        pattern, limit = (_DNS_LABEL, 63) if rt.plural == "namespaces" else (_DNS_SUBDOMAIN, 253)
        if rt.custom or rt.plural in ("customresourcedefinitions",):
            pattern, limit = _DNS_SUBDOMAIN, 253
        if len(name) > limit or not pattern.match(name):
            causes.append(_cause(
                "FieldValueInvalid", "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 '
                f'{"label" if pattern is _DNS_LABEL else "subdomain"} must consist of lower case '
                "alphanumeric characters, '-' or '.', and must start and end with an "
                "alphanumeric character",
            ))
    for key, value in (meta.get("labels") or {}).items():
        for err in _qualified_name_errors(key):
            causes.append(_cause("FieldValueInvalid", "metadata.labels", f'Invalid value: "{key}": {err}'))
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            causes.append(_cause(
                "FieldValueInvalid", "metadata.labels",
                f'Invalid value: "{value}": a valid label must be an empty string or consist of '
                "alphanumeric characters, '-', '_' or '.', and must start and end with an "
                "alphanumeric character",
            ))
    for key, value in (meta.get("annotations") or {}).items():
        for err in _qualified_name_errors(key):
            causes.append(_cause("FieldValueInvalid", "metadata.annotations", f'Invalid value: "{key}": {err}'))
        if not isinstance(value, str):
            causes.append(_cause("FieldValueInvalid", "metadata.annotations", "annotation values must be strings"))
    return causes


def _cause(reason: str, field_: str, message: str) -> dict:
    return {"reason": reason, "message": message, "field": field_}


# --------------------------------------------------------------------------- schema validation


@lru_cache(maxsize=1)
def _definitions() -> Any:
    base = _res_files("kubernetes_validate").joinpath("kubernetes-json-schema")
    return base


@lru_cache(maxsize=64)
def _builtin_validator(kind: str, api_version: str):
    if not HAVE_SCHEMAS:
        return None
    base = _definitions()
    schema_dir = f"v{KUBE_VERSION}.0-local-strict"
    group_part = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = base.joinpath(schema_dir).joinpath(f"{kind.lower()}-{group_part}.json")
    try:
        schema = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    defs = json.loads(base.joinpath(schema_dir).joinpath("_definitions.json").read_text())
    registry = Resource.from_contents(defs) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def schema_check(rt: ResourceType, obj: dict, field_validation: str
                 ) -> tuple[list[dict], list[str], list[dict], list[str]]:
    """Validate a built-in object.

    Returns (causes for 422 Invalid, warnings about unknown fields, unknown-field causes,
    type errors — which the real server reports as 400 decode errors).
    Unknown fields are pruned from ``obj`` in place (the server's default ``Warn`` behaviour);
    the caller turns the third list into a 400 when ``fieldValidation=Strict``.
    """
    validator = _builtin_validator(rt.kind, rt.api_version)
    if validator is None:
        return [], [], [], []
    causes, warnings, unknown, type_errors = [], [], [], []
    checked = copy.deepcopy(obj)
    checked.setdefault("apiVersion", rt.api_version)
    checked.setdefault("kind", rt.kind)
    checked.get("metadata", {}).pop("managedFields", None)
    for error in validator.iter_errors(checked):
        path = _dotted(error.absolute_path)
        if error.validator == "additionalProperties":
            known = set((error.schema or {}).get("properties", {}))
            for extra in sorted(set(error.instance) - known):
                field_path = f"{path}.{extra}" if path else extra
                warnings.append(f'unknown field "{field_path}"')
                unknown.append(_cause("FieldValueInvalid", field_path, f'unknown field "{field_path}"'))
                _prune(obj, list(error.absolute_path) + [extra])
            continue
        if error.validator == "type":
            type_errors.append(f"{path}: {error.message}")
        elif error.validator == "required":
            causes.append(_cause("FieldValueRequired", path, f"Required value: {error.message}"))
        else:
            causes.append(_cause("FieldValueInvalid", path, f"Invalid value: {error.message}"))
    return causes, warnings, unknown, type_errors


def _dotted(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _prune(obj: Any, path: list) -> None:
    node = obj
    for part in path[:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(node, dict):
        node.pop(path[-1], None)


# --------------------------------------------------------------------------- CRD schemas


def openapi_to_jsonschema(schema: Any) -> Any:
    """Turn a CRD structural schema (OpenAPI v3.0 flavour) into a JSON schema jsonschema reads."""
    if isinstance(schema, list):
        return [openapi_to_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in ("default", "example", "externalDocs"):
            continue
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: openapi_to_jsonschema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "allOf", "anyOf", "oneOf"):
            out[key] = openapi_to_jsonschema(value) if not isinstance(value, bool) else value
        elif key == "nullable":
            continue
        elif key == "format":
            continue  # formats are not enforced
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def prune_and_default(schema: Any, value: Any, is_root: bool = True) -> Any:
    """Structural pruning of unknown fields plus ``default`` values, like the apiextensions server."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        if props is not None:
            for key, sub in props.items():
                if key not in value and isinstance(sub, dict) and "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
            for key in list(value):
                if is_root and key in ("apiVersion", "kind", "metadata"):
                    continue
                if key in props:
                    value[key] = prune_and_default(props[key], value[key], False)
                elif isinstance(addl, dict):
                    value[key] = prune_and_default(addl, value[key], False)
                elif not preserve and addl is not True:
                    del value[key]
        elif isinstance(addl, dict):
            for key in list(value):
                value[key] = prune_and_default(addl, value[key], False)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune_and_default(schema["items"], v, False) for v in value]
    return value


def custom_schema_causes(rt: ResourceType, obj: dict) -> list[dict]:
    if not rt.schema or _jsonschema is None:
        return []
    schema = openapi_to_jsonschema(rt.schema)
    checked = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    props = dict(schema.get("properties") or {})
    for key in ("apiVersion", "kind", "metadata"):
        props.pop(key, None)
    schema = {**schema, "properties": props}
    validator = _jsonschema.Draft7Validator(schema)
    causes = []
    for error in validator.iter_errors(checked):
        path = _dotted(error.absolute_path)
        reason = "FieldValueRequired" if error.validator == "required" else "FieldValueInvalid"
        causes.append(_cause(reason, path, f"{'Required value' if reason == 'FieldValueRequired' else 'Invalid value'}: {error.message}"))
    return causes


# --------------------------------------------------------------------------- normalisation

# metav1.MicroTime fields; every other *Time / *Timestamp of a built-in kind is a metav1.Time,
# which the real server stores with second precision.
MICRO_TIME_KEYS = {"acquireTime", "renewTime", "eventTime", "lastObservedTime"}
TIME_KEYS = {"startedAt", "finishedAt"}


def _norm_time(value: str, micro: bool) -> str:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    parsed = parsed.astimezone(UTC)
    return parsed.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def normalize_times(node: Any) -> None:
    """Re-serialise timestamps the way the Go types do (Time: seconds, MicroTime: microseconds)."""
    if isinstance(node, list):
        for item in node:
            normalize_times(item)
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if isinstance(value, str) and (key in MICRO_TIME_KEYS or key in TIME_KEYS
                                       or key.endswith("Time") or key.endswith("Timestamp")):
            node[key] = _norm_time(value, key in MICRO_TIME_KEYS)
        elif key != "managedFields":
            normalize_times(value)


def _canon_map(resources_map: Any) -> None:
    if isinstance(resources_map, dict):
        for key, value in resources_map.items():
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                resources_map[key] = canonical_quantity(value)  # ValueError -> 400


def _canon_pod_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    for group in ("containers", "initContainers", "ephemeralContainers"):
        for c in spec.get(group) or []:
            if isinstance(c, dict) and isinstance(c.get("resources"), dict):
                _canon_map(c["resources"].get("requests"))
                _canon_map(c["resources"].get("limits"))
    _canon_map(spec.get("overhead"))
    if isinstance(spec.get("resources"), dict):
        _canon_map(spec["resources"].get("requests"))
        _canon_map(spec["resources"].get("limits"))


def canonicalize_quantities(rt: ResourceType, obj: dict) -> None:
    """Quantities come back in canonical form ("0.5" -> "500m", "1024Mi" -> "1Gi")."""
    spec, status = obj.get("spec"), obj.get("status")
    if rt.plural == "pods" and not rt.group:
        _canon_pod_spec(spec)
    elif rt.plural in ("deployments", "statefulsets") and isinstance(spec, dict):
        _canon_pod_spec((spec.get("template") or {}).get("spec"))
    elif rt.plural == "nodes" and isinstance(status, dict):
        _canon_map(status.get("capacity"))
        _canon_map(status.get("allocatable"))
    elif rt.plural == "resourcequotas":
        if isinstance(spec, dict):
            _canon_map(spec.get("hard"))
        if isinstance(status, dict):
            _canon_map(status.get("hard"))
            _canon_map(status.get("used"))


# --------------------------------------------------------------------------- list semantics


@lru_cache(maxsize=1)
def _schema_defs() -> dict:
    base = _definitions().joinpath(f"v{KUBE_VERSION}.0-local")
    return json.loads(base.joinpath("_definitions.json").read_text()).get("$defs", {})


@lru_cache(maxsize=64)
def builtin_root_schema(kind: str, api_version: str) -> dict | None:
    """The published (non-strict) schema of a built-in kind, or None without kubernetes-validate."""
    if not HAVE_SCHEMAS:
        return None
    group_part = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    path = _definitions().joinpath(f"v{KUBE_VERSION}.0-local").joinpath(
        f"{kind.lower()}-{group_part}.json")
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def _resolve(node: Any) -> Any:
    for _ in range(20):
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if ref is None and isinstance(node.get("allOf"), list) and len(node["allOf"]) == 1:
            ref = node["allOf"][0].get("$ref")
        if ref is None:
            return node
        node = _schema_defs().get(ref.rsplit("/", 1)[-1])
    return node


def schema_at(root: dict | None, path: tuple) -> dict | None:
    """The schema node at ``path`` (map keys, or ``k:`` list-element segments)."""
    node = _resolve(root)
    for seg in path:
        if not isinstance(node, dict):
            return None
        if seg.startswith("k:"):
            node = _resolve(node.get("items"))
            continue
        props = node.get("properties") or {}
        addl = node.get("additionalProperties")
        node = _resolve(props.get(seg, addl if isinstance(addl, dict) else None))
    return node if isinstance(node, dict) else None


@lru_cache(maxsize=64)
def builtin_list_key_fn(rt: ResourceType):
    """SSA list-map keys of a built-in kind from its schema (``x-kubernetes-list-type: map``
    with one key); falls back to the field-name table without schemas."""
    from . import patching

    root = builtin_root_schema(rt.kind, rt.api_version)
    if root is None:
        return patching.builtin_list_key

    def find(path: tuple) -> str | None:
        node = schema_at(root, path)
        if node and node.get("x-kubernetes-list-type") == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            return keys[0] if len(keys) == 1 else None
        return None

    return find


@lru_cache(maxsize=64)
def builtin_patch_strategy_fn(rt: ResourceType):
    """Strategic-merge directives of a built-in kind's lists from its schema:
    ``path -> (strategy, merge key)``; None without schemas (the table is used then)."""
    root = builtin_root_schema(rt.kind, rt.api_version)
    if root is None:
        return None

    def find(path: tuple) -> tuple[str, str | None]:
        node = schema_at(root, path) or {}
        strategy = node.get("x-kubernetes-patch-strategy", "")
        return strategy, node.get("x-kubernetes-patch-merge-key")

    return find
