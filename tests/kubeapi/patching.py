"""Patch formats and server-side-apply field ownership for the fake API server.

* ``merge_patch`` — RFC 7386 JSON merge patch (``application/merge-patch+json``).
* ``strategic_merge_patch`` — Kubernetes' strategic merge patch, simplified: a merge patch in
  which lists whose schema says ``x-kubernetes-patch-strategy: merge`` are merged element-wise by
  their ``x-kubernetes-patch-merge-key`` (or unioned, for lists of scalars), and the
  ``$patch: delete|replace`` and ``$deleteFromPrimitiveList/<field>`` directives are honoured;
  ``$setElementOrder`` and ``$retainKeys`` are accepted and ignored.  The per-list strategy comes
  from the kind's published schema; without ``kubernetes-validate`` a fixed table keyed by field
  name (``LIST_MERGE_KEYS``) stands in.
* ``json_patch`` — RFC 6902 (``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``).
* Field paths: ownership is tracked on *leaf paths*; elements of list-maps (containers by name,
  conditions by type, CRD lists marked ``x-kubernetes-list-type: map`` with one key) are tracked
  one by one, other lists are atomic.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any


class PatchError(ValueError):
    """A patch that cannot be applied (becomes a 422 Invalid, or 400 for bad documents)."""


# --------------------------------------------------------------------------- merge patch


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --------------------------------------------------------------------------- strategic merge

LIST_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "addresses": "type",
}
PRIMITIVE_MERGE_LISTS = {"finalizers"}


StrategyFn = Callable[[tuple], "tuple[str, str | None]"]  # path -> (patch strategy, merge key)


def _table_strategy(path: tuple) -> tuple[str, str | None]:
    field = path[-1] if path else ""
    if field in LIST_MERGE_KEYS:
        return "merge", LIST_MERGE_KEYS[field]
    if field in PRIMITIVE_MERGE_LISTS:
        return "merge", None
    return "", None


def strategic_merge_patch(target: Any, patch: Any, strategy: StrategyFn | None = None,
                          path: tuple = ()) -> Any:
    """Strategic merge patch.  ``strategy`` gives each list's patch strategy and merge key (from
    the kind's schema); without it the field-name table above is used."""
    strategy = strategy or _table_strategy
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [x for x in result.get(field) or [] if x not in (value or [])]
            continue
        if value is None:
            result.pop(key, None)
            continue
        if isinstance(value, list):
            how, merge_key = strategy(path + (key,))
            merging = "merge" in how.split(",")
            if merging and merge_key and all(isinstance(x, dict) for x in value):
                result[key] = _merge_list_by_key(result.get(key) or [], value, merge_key,
                                                 strategy, path + (key,))
            elif merging and not merge_key:
                merged = list(result.get(key) or [])
                merged += [x for x in value if x not in merged]
                result[key] = merged
            else:
                result[key] = copy.deepcopy(value)
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value, strategy, path + (key,))
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list_by_key(current: list, patch: list, key: str, strategy: StrategyFn,
                       path: tuple) -> list:
    if any(item.get("$patch") == "replace" for item in patch):
        return [
            {k: v for k, v in item.items() if k != "$patch"}
            for item in patch
            if item.get("$patch") != "replace"
        ]
    result = copy.deepcopy(current)
    for item in patch:
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        seg = path + ("k:" + json.dumps({key: item[key]}, separators=(",", ":")),)
        idx = next(
            (i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append(strategic_merge_patch({}, item, strategy, seg))
        else:
            result[idx] = strategic_merge_patch(result[idx], item, strategy, seg)
    return result


# --------------------------------------------------------------------------- JSON patch


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _container(doc: Any, parts: list[str], op: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
    return node, parts[-1]


def _get(doc: Any, parts: list[str], op: str) -> Any:
    if not parts:
        return doc
    node, last = _container(doc, parts, op)
    if isinstance(node, dict) and last in node:
        return node[last]
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node[int(last)]
    raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")


def _remove(doc: Any, parts: list[str], op: str) -> Any:
    node, last = _container(doc, parts, op)
    if isinstance(node, dict) and last in node:
        return node.pop(last)
    if isinstance(node, list) and last.isdigit() and int(last) < len(node):
        return node.pop(int(last))
    raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")


def _add(doc: Any, parts: list[str], value: Any, op: str, replace: bool = False) -> Any:
    if not parts:
        return value
    node, last = _container(doc, parts, op)
    if isinstance(node, dict):
        if replace and last not in node:
            raise PatchError(f"replace operation does not apply: doc is missing key: /{'/'.join(parts)}")
        node[last] = value
    elif isinstance(node, list):
        if last == "-" and not replace:
            node.append(value)
        elif last.isdigit() and int(last) <= len(node) - (1 if replace else 0):
            if replace:
                node[int(last)] = value
            else:
                node.insert(int(last), value)
        else:
            raise PatchError(f"{op} operation does not apply: index out of range: /{'/'.join(parts)}")
    else:
        raise PatchError(f"{op} operation does not apply: doc is missing path: /{'/'.join(parts)}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("json patch must be a list of operations")
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"invalid json patch operation {operation!r}")
        op, parts = operation["op"], _pointer(operation["path"])
        if op == "add":
            doc = _add(doc, parts, copy.deepcopy(operation.get("value")), op)
        elif op == "remove":
            _remove(doc, parts, op)
        elif op == "replace":
            doc = _add(doc, parts, copy.deepcopy(operation.get("value")), op, replace=True)
        elif op in ("move", "copy"):
            source = _pointer(operation["from"])
            value = _remove(doc, source, op) if op == "move" else copy.deepcopy(_get(doc, source, op))
            doc = _add(doc, parts, value, op)
        elif op == "test":
            actual = _get(doc, parts, op)
            if actual != operation.get("value"):
                raise PatchError(
                    f"testing value /{'/'.join(parts)} failed: test failed"
                )
        else:
            raise PatchError(f"unexpected kind: {op}")
    return doc


# --------------------------------------------------------------------------- field paths
#
# A path is a tuple of segments: a map key, or ``k:{"<key>":<value>}`` for one element of a
# list-map (a list whose elements are identified by a key field: containers by name, conditions
# by type, ... — ``ListKeyFn`` says which lists are list-maps).  A path that ends in a ``k:``
# segment stands for the element itself (FieldsV1's ``"."``): whoever owns anything in the
# element co-owns it, and the element is removed only when nobody does.  Other lists are atomic.

Path = tuple[str, ...]
ListKeyFn = Callable[[Path], "str | None"]  # path of a list -> its key field, or None if atomic
MISSING = object()

# top-level keys never owned through managedFields
_UNMANAGED_TOP = {"apiVersion", "kind"}
_MANAGED_METADATA = {"labels", "annotations", "finalizers", "ownerReferences"}


def builtin_list_key(path: Path) -> str | None:
    """Built-in kinds: list-maps by field name (the table strategic merge uses)."""
    return LIST_MERGE_KEYS.get(path[-1]) if path and not path[-1].startswith("k:") else None


def schema_list_key(schema: dict | None) -> ListKeyFn:
    """Custom resources: lists the CRD schema marks ``x-kubernetes-list-type: map`` (one key)."""

    def find(path: Path) -> str | None:
        node = schema
        for seg in path:
            if not isinstance(node, dict):
                return None
            if seg.startswith("k:"):
                node = node.get("items")
                continue
            props = node.get("properties") or {}
            addl = node.get("additionalProperties")
            node = props.get(seg, addl if isinstance(addl, dict) else None)
        if isinstance(node, dict) and node.get("x-kubernetes-list-type") == "map":
            keys = node.get("x-kubernetes-list-map-keys") or []
            return keys[0] if len(keys) == 1 else None
        return None

    return find


def element_segment(key: str, value: Any) -> str:
    return "k:" + json.dumps({key: value}, separators=(",", ":"))


def _is_list_map(node: Any, key: str | None) -> bool:
    return bool(key) and isinstance(node, list) and all(
        isinstance(e, dict) and key in e for e in node)


def is_element(path: Path) -> bool:
    return bool(path) and path[-1].startswith("k:")


def leaf_paths(obj: Any, status_only: bool = False, with_status: bool = True,
               list_key: ListKeyFn = builtin_list_key) -> set[Path]:
    """Leaf paths that field management tracks, for the main resource or the status subresource."""
    paths: set[Path] = set()
    if not isinstance(obj, dict):
        return paths

    def walk(node: Any, prefix: Path) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, prefix + (key,))
        elif isinstance(node, dict):
            return  # empty maps own nothing
        elif isinstance(node, list) and node and _is_list_map(node, key := list_key(prefix)):
            for element in node:
                seg = prefix + (element_segment(key, element[key]),)
                paths.add(seg)
                walk(element, seg)
        else:
            paths.add(prefix)

    for key, value in obj.items():
        if key in _UNMANAGED_TOP:
            continue
        if status_only and key != "status":
            continue
        if not status_only and key == "status" and not with_status:
            continue
        if key == "metadata":
            for mkey in _MANAGED_METADATA:
                if mkey in (value or {}):
                    walk(value[mkey], ("metadata", mkey))
            continue
        walk(value, (key,))
    return paths


def _find_element(node: Any, seg: str) -> int | None:
    if not isinstance(node, list):
        return None
    ((key, value),) = json.loads(seg[2:]).items()
    return next((i for i, e in enumerate(node) if isinstance(e, dict) and e.get(key) == value), None)


def get_path(obj: Any, path: Path) -> Any:
    node = obj
    for seg in path:
        if seg.startswith("k:") and isinstance(node, list):
            idx = _find_element(node, seg)
            if idx is None:
                return MISSING
            node = node[idx]
        elif isinstance(node, dict) and seg in node:
            node = node[seg]
        else:
            return MISSING
    return node


def delete_path(obj: dict, path: Path) -> None:
    parent = get_path(obj, path[:-1])
    if path[-1].startswith("k:") and isinstance(parent, list):
        idx = _find_element(parent, path[-1])
        if idx is not None:
            parent.pop(idx)
    elif isinstance(parent, dict):
        parent.pop(path[-1], None)


def same_value(old: Any, new: Any, path: Path) -> bool:
    """Is the field at ``path`` unchanged?  For a list-map element only its presence counts."""
    a, b = get_path(old, path), get_path(new, path)
    if is_element(path):
        return (a is MISSING) == (b is MISSING)
    return a == b


def apply_merge(base: Any, config: Any, list_key: ListKeyFn = builtin_list_key,
                path: Path = ()) -> Any:
    """Merge an apply configuration into the live object: maps recursively, list-maps by key
    (elements the configuration does not mention are kept), other lists replaced."""
    if isinstance(config, dict) and isinstance(base, dict):
        out = copy.deepcopy(base)
        for k, v in config.items():
            out[k] = apply_merge(out.get(k), v, list_key, path + (k,))
        return out
    key = list_key(path) if path else None
    if _is_list_map(config, key) and _is_list_map(base, key):
        out = copy.deepcopy(base)
        for element in config:
            seg = element_segment(key, element[key])
            idx = _find_element(out, seg)
            if idx is None:
                out.append(copy.deepcopy(element))
            else:
                out[idx] = apply_merge(out[idx], element, list_key, path + (seg,))
        return out
    return copy.deepcopy(config)


def overlaps(a: Path, b: Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def render_fields_v1(paths: set[Path]) -> dict:
    root: dict = {}
    for path in sorted(paths):
        node = root
        for seg in path:
            node = node.setdefault(seg if seg.startswith("k:") else f"f:{seg}", {})
        if is_element(path):
            node.setdefault(".", {})
    return root


def format_path(path: Path) -> str:
    out = ""
    for seg in path:
        if seg.startswith("k:"):
            ((key, value),) = json.loads(seg[2:]).items()
            out += f"[{key}={json.dumps(value)}]"
        else:
            out += f".{seg}"
    return out
