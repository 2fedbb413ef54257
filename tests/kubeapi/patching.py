"""Patch formats and server-side-apply field ownership for the fake API server.

* ``merge_patch`` — RFC 7386 JSON merge patch (``application/merge-patch+json``).
* ``strategic_merge_patch`` — an *approximation* of Kubernetes' strategic merge patch: a merge
  patch, except that lists of objects named in ``LIST_MERGE_KEYS`` are merged element-wise by
  their merge key (``containers`` by ``name``, ``conditions`` by ``type``, ...), ``finalizers``
  are unioned, and the ``$patch: delete|replace`` and ``$deleteFromPrimitiveList/<field>``
  directives are honoured.  ``$setElementOrder`` and ``$retainKeys`` are accepted and ignored.
  The real server derives merge keys from the Go types; here they come from a fixed table keyed by
  the field's name, regardless of where the field sits.
* ``json_patch`` — RFC 6902 (``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``).
* Field paths: ownership is tracked on *leaf paths* (tuples of map keys).  Lists are atomic leaves
  (the real server tracks list-map elements such as containers individually), so two managers
  that each apply one container of the same list conflict here where they would not in a cluster.
"""

from __future__ import annotations

import copy
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


def strategic_merge_patch(target: Any, patch: Any) -> Any:
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
        elif isinstance(value, list) and key in LIST_MERGE_KEYS and all(
            isinstance(x, dict) for x in value
        ):
            result[key] = _merge_list_by_key(result.get(key) or [], value, LIST_MERGE_KEYS[key])
        elif isinstance(value, list) and key in PRIMITIVE_MERGE_LISTS:
            merged = list(result.get(key) or [])
            merged += [x for x in value if x not in merged]
            result[key] = merged
        elif isinstance(value, dict):
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = copy.deepcopy(value)
    return result


def _merge_list_by_key(current: list, patch: list, key: str) -> list:
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
        idx = next(
            (i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                result.pop(idx)
            continue
        if idx is None:
            result.append(strategic_merge_patch({}, item))
        else:
            result[idx] = strategic_merge_patch(result[idx], item)
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

Path = tuple[str, ...]
MISSING = object()

# top-level keys never owned through managedFields
_UNMANAGED_TOP = {"apiVersion", "kind"}
_MANAGED_METADATA = {"labels", "annotations", "finalizers", "ownerReferences"}


def leaf_paths(obj: Any, status_only: bool = False, with_status: bool = True) -> set[Path]:
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


def get_path(obj: Any, path: Path) -> Any:
    node = obj
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return MISSING
        node = node[key]
    return node


def delete_path(obj: dict, path: Path) -> None:
    node = obj
    for key in path[:-1]:
        if not isinstance(node, dict) or key not in node:
            return
        node = node[key]
    if isinstance(node, dict):
        node.pop(path[-1], None)


def overlaps(a: Path, b: Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def render_fields_v1(paths: set[Path]) -> dict:
    root: dict = {}
    for path in sorted(paths):
        node = root
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return root


def format_path(path: Path) -> str:
    return "." + ".".join(path)
