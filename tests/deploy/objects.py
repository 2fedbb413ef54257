"""Rendered objects sent to the real API server: server-side dry-run create (what `kubectl
create --dry-run=server` does) and server-side apply (what `kubectl apply --server-side` does),
both through the official client's dynamic client, CRDs first."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from kubernetes import client, dynamic

FIRST = ("CustomResourceDefinition", "Namespace")


def ordered(objects: list[dict]) -> list[dict]:
    """CRDs, then namespaces, then the rest in the order given."""
    rank = {kind: i for i, kind in enumerate(FIRST)}
    return sorted(objects, key=lambda o: rank.get(o["kind"], len(FIRST)))


def _resource(dyn: dynamic.DynamicClient, obj: dict) -> Any:
    return dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])


def dry_run_create(api_client: client.ApiClient, objects: list[dict]) -> dict[str, str]:
    """Each object as a server-side dry-run create, CRDs first; an object that already exists
    (409: the suite installed deploy/'s copy) as a dry-run server-side apply instead, which
    runs the same validation and admission as an update. Returns {key: "create" | "apply"};
    the API server's refusal raises with the object named."""
    dyn = dynamic.DynamicClient(api_client)
    how = {}
    for obj in ordered(objects):
        meta = obj["metadata"]
        key = f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")
        res = _resource(dyn, obj)
        ns = meta.get("namespace") if res.namespaced else None
        try:
            dyn.create(res, body=obj, namespace=ns, dry_run="All")
            how[key] = "create"
        except dynamic.exceptions.ConflictError:
            dyn.server_side_apply(
                res,
                body=obj,
                namespace=ns,
                field_manager="gpupool-chart-dry-run",
                force_conflicts=True,
                dry_run="All",
            )
            how[key] = "apply"
        except dynamic.exceptions.DynamicApiError as exc:
            raise AssertionError(f"the API server refused {key}: {exc.summary()}") from None
    return how


def server_side_apply(api_client: client.ApiClient, objects: list[dict], manager: str) -> None:
    """Apply each object (CRDs first, each CRD established before what follows), taking over
    the fields another manager set (`kubectl apply --server-side --force-conflicts`): in the
    suite the same objects were created from deploy/ before, and an atomic field such as a
    MutatingAdmissionPolicy's matchConstraints, defaulted by the API server, conflicts even
    when its value is the same."""
    dyn = dynamic.DynamicClient(api_client)
    ext = client.ApiextensionsV1Api(api_client)
    for obj in ordered(objects):
        res = _resource(dyn, obj)
        ns = obj["metadata"].get("namespace") if res.namespaced else None
        dyn.server_side_apply(
            res, body=obj, namespace=ns, field_manager=manager, force_conflicts=True
        )
        if obj["kind"] == "CustomResourceDefinition":
            _established(ext, obj["metadata"]["name"])


def _established(ext: client.ApiextensionsV1Api, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        conds = ext.read_custom_resource_definition(name).status.conditions or []
        if any(c.type == "Established" and c.status == "True" for c in conds):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not established")
        time.sleep(0.1)


def key(obj: dict) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def existing(api_client: client.ApiClient, objects: list[dict]) -> set[tuple[str, str, str]]:
    """The keys of the objects that the API server already holds."""
    dyn = dynamic.DynamicClient(api_client)
    found = set()
    for obj in objects:
        res = _resource(dyn, obj)
        ns = obj["metadata"].get("namespace") if res.namespaced else None
        try:
            dyn.get(res, name=obj["metadata"]["name"], namespace=ns)
        except dynamic.exceptions.NotFoundError:
            continue
        found.add(key(obj))
    return found


def delete(api_client: client.ApiClient, objects: list[dict]) -> None:
    """Delete the objects (their dependents in the background); absent ones are skipped."""
    dyn = dynamic.DynamicClient(api_client)
    for obj in reversed(ordered(objects)):
        res = _resource(dyn, obj)
        ns = obj["metadata"].get("namespace") if res.namespaced else None
        with contextlib.suppress(dynamic.exceptions.NotFoundError):
            dyn.delete(
                res, name=obj["metadata"]["name"], namespace=ns, propagation_policy="Background"
            )
