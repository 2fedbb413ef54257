"""Dynamic Resource Allocation as the API server serves it (resource.k8s.io/v1, Kubernetes
1.37): ResourceSlices, DeviceClasses, ResourceClaims and ResourceClaimTemplates, and each pod's
claims, into `DraState` (observe/model_dra.py; the names NVIDIA's driver publishes are cited
there).

Read as plain JSON (`CustomObjectsApi` lists built-in groups too), so any shape the server lets
through is read field by field: an object whose field is not the JSON type it should be is
left out and reported (`_each`), never a traceback; one bad device leaves out its slice, one
bad claim only that claim. None when resource.k8s.io/v1 is not served (404)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from reconciler import conventions as C
from reconciler.observe.kube_common import _each, _objects, _shape
from reconciler.observe.model_dra import (
    ClaimTemplateObject,
    CounterConsumption,
    CounterSet,
    DeviceClassObject,
    DeviceResult,
    DeviceTaint,
    DeviceTaintRuleObject,
    DraDevice,
    DraState,
    PodClaims,
    ResourceClaimObject,
    ResourceSlice,
)

GROUP, VERSION, PLURALS = C.DRA_GROUP, C.DRA_VERSION, C.DRA_PLURALS
MAX_DEVICES_PER_SLICE = 128
"""resource.k8s.io/v1 ResourceSliceMaxDevices: more is not a slice the API server made."""


_UNSEEN = object()


class DraMemo:
    """Each DRA object converted once per version of it: (kind, uid, resourceVersion) -> the
    model `read_dra` made of it. Kept by the controller's watch cache (`ClusterCache.dra_memo`)
    across cycles; a uid and resourceVersion name one state of one object, so the state equals
    one made without the memo. An object without either, or one that does not convert (left
    out and reported each time), is converted every time. Only the objects of the last read
    are kept (`begin` / `end`). A kind whose objects are the very ones of the last read is not
    looked at again (`each`): in a cycle without a change there, the DRA objects cost a
    comparison of identities (py-spy, bench/README.md: `read_dra` was a third of a DRA
    cycle's observation)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, str], Any] = {}
        self._next: dict[tuple[str, str, str], Any] = {}
        self._pods: dict[int, tuple[Any, tuple[str, str, str]]] = {}
        """id(pod) -> (the pod, its key in `_kept`): the pods of the last read, each with a
        version (`pod_claims`)."""
        self._pods_next: dict[int, tuple[Any, tuple[str, str, str]]] = {}
        self._lists: dict[str, tuple[list, list, list]] = {}
        """Kind -> (the objects listed, what they read as, their keys in `_kept`): the last
        read of each kind, reused whole while the cache hands back the very same objects."""
        self.hits = 0
        self.misses = 0
        self.allocated = ByIdentity(_allocated_key)
        """Each claim of the last wait for claims behind the pods, allocated or not
        (`_claims_behind`)."""
        self.bound_claims = ByIdentity(_bound_claims)
        """Each pod of that wait, bound or not, and the claims its status names."""
        self.stuck: frozenset[str] = frozenset()
        """The pods whose claims the cache still showed behind when the last wait for it ran
        out (`_claims_caught_up`): not waited for again, listed at once, while they are all
        that is behind."""

    def begin(self) -> None:
        self._next, self._pods_next = {}, {}

    def end(self) -> None:
        self._kept, self._next = self._next, {}
        self._pods, self._pods_next = self._pods_next, {}

    def through(self, kind: str, convert: Callable[[dict], Any]) -> Callable[[dict], Any]:
        def memoised(o: dict) -> Any:
            meta = o.get("metadata") or {}
            return self._once(
                kind, meta.get("uid"), meta.get("resourceVersion"), lambda: convert(o)
            )

        return memoised

    def each(self, kind: str, items: list[Any], convert: Callable[[dict], Any]) -> list[Any]:
        """`convert` of each of `items` (the objects listed of one kind; one not an object, or
        whose metadata, spec or status is not one, is left out and reported: `_objects`), each
        through the memo (`through`). A watch cache hands back the objects it holds, the very
        same ones while they do not change (one that changed is another object): when `items`
        are the very objects of the last read of the kind (and each of them read, with a
        version), that read's list is the answer and no object is looked at; otherwise each
        object that is the very one of that read is its model again, and only the others are
        looked at and converted. So a cycle reads again only the objects that changed."""
        last = self._lists.get(kind)
        same = last is not None and isinstance(items, list) and len(last[0]) == len(items)
        if same and all(map(_same, last[0], items)):
            try:
                for key in last[2]:
                    self._next[key] = self._kept[key]
            except KeyError:  # the last read was not ended (it failed): read afresh
                pass
            else:
                self.hits += len(items)
                return last[1]
        if last is None or not isinstance(items, list):
            out = _each(
                kind,
                _objects(kind, items, "metadata", "spec", "status"),
                self.through(kind, convert),
            )
            keys = [_key(kind, o) for o in items] if isinstance(items, list) else []
        else:
            out, keys = self._reuse(kind, items, last, convert)
        if len(out) == len(items) and all(k is not None and k in self._next for k in keys):
            self._lists[kind] = (list(items), out, keys)
        else:  # one left out (reported again at each read) or without a version: not kept
            self._lists.pop(kind, None)
        return out

    def _reuse(
        self, kind: str, items: list[Any], last: tuple[list, list, list], convert: Callable
    ) -> tuple[list[Any], list[Any]]:
        """`each` past its shortcut, with the last read of the kind (`last`: every object of
        it read, with a version): (the models, in `items`' order, their keys)."""
        before = {id(o): (o, m, k) for o, m, k in zip(*last, strict=True)}
        memoised = self.through(kind, convert)
        out, keys = [], []
        for o in items:
            hit = before.get(id(o))
            if hit is not None and hit[0] is o:
                self._next[hit[2]] = hit[1]
                self.hits += 1
                out.append(hit[1])
                keys.append(hit[2])
                continue
            got = _each(kind, _objects(kind, [o], "metadata", "spec", "status"), memoised)
            out.extend(got)
            keys.append(_key(kind, o) if got else None)
        return out, keys

    def pod_claims(self, pod: Any) -> PodClaims | None:
        """`_pod_claims(pod)` (a V1Pod), once per version of the pod (its uid and
        resourceVersion, as the pods' `WorkloadMemo` keys one); the very pod object of the last
        read (the watch cache's, while the pod does not change) without a look at its
        version."""
        hit = self._pods.get(id(pod))
        if hit is not None and hit[0] is pod and hit[1] in self._kept:
            self._next[hit[1]] = got = self._kept[hit[1]]
            self._pods_next[id(pod)] = hit
            self.hits += 1
            return got
        meta = pod.metadata
        uid, rv = getattr(meta, "uid", None), getattr(meta, "resource_version", None)
        got = self._once("Pod", uid, rv, lambda: _pod_claims(pod))
        key = _version("Pod", uid, rv)
        if key is not None:
            self._pods_next[id(pod)] = (pod, key)
        return got

    def _once(self, kind: str, uid: Any, rv: Any, make: Callable[[], Any]) -> Any:
        """`make()` once per (kind, uid, resourceVersion): every time without either."""
        key = _version(kind, uid, rv)
        if key is None:
            return make()
        got = self._kept.get(key, _UNSEEN)
        if got is _UNSEEN:
            self.misses += 1
            got = make()
        else:
            self.hits += 1
        self._next[key] = got
        return got


def _same(a: Any, b: Any) -> bool:
    return a is b


def _version(kind: str, uid: Any, rv: Any) -> tuple[str, str, str] | None:
    """The memo's key of one state of one object, (kind, uid, resourceVersion); None unless
    both are non-empty strings."""
    if not isinstance(uid, str) or not isinstance(rv, str) or not uid or not rv:
        return None
    return (kind, uid, rv)


def _key(kind: str, o: Any) -> tuple[str, str, str] | None:
    """`_version` of one listed object (a dict)."""
    meta = o.get("metadata") if isinstance(o, dict) else None
    if not isinstance(meta, dict):
        return None
    return _version(kind, meta.get("uid"), meta.get("resourceVersion"))


def read_dra(api_client: Any, raw_pods: list[Any], cache: Any = None) -> DraState | None:
    """DRA's objects, and the claims of `raw_pods` (the official client's V1Pods). `cache`:
    the controller's watch cache (`ClusterCache.dra_objects(plural)`: a resource's objects
    when its informer is synced and has seen gpupool's own last writes there, else None);
    each resource it does not answer for is listed, as without one."""
    from kubernetes import client

    api = client.CustomObjectsApi(api_client)
    from_cache = getattr(cache, "dra_objects", None)  # a cache of nodes and pods only: lists
    memo = getattr(cache, "dra_memo", None)
    if memo is None:
        memo = DraMemo()  # used once: converts everything
    listed: dict[str, list[dict]] = {}
    rules_served = True
    for kind, plural in PLURALS.items():
        cached = from_cache(plural) if from_cache is not None else None
        if cached is not None and kind == "ResourceClaim":
            again = functools.partial(from_cache, plural)
            peek = getattr(cache, "dra_object", None)
            cached = _claims_caught_up(cached, raw_pods, again, memo, peek)
        try:
            if cached is not None:
                items = cached
            else:
                items = api.list_cluster_custom_object(GROUP, VERSION, plural).get("items", [])
        except client.ApiException as exc:
            if exc.status == 404 and kind == "DeviceTaintRule":
                items = []  # resource.k8s.io/v1 without device taint rules (before 1.37)
                rules_served = False
            elif exc.status == 404:
                return None
            else:
                raise
        listed[kind] = items
    memo.begin()

    def each(kind: str, convert: Callable[[dict], Any]) -> list[Any]:
        return memo.each(kind, listed[kind], convert)

    state = DraState(
        slices=each("ResourceSlice", _slice),
        device_classes=each("DeviceClass", _device_class),
        claims=each("ResourceClaim", _claim),
        claim_templates=each("ResourceClaimTemplate", _template),
        taint_rules=each("DeviceTaintRule", _taint_rule),
        taint_rules_served=rules_served,
        pods=[p for p in _each("Pod", raw_pods, memo.pod_claims) if p is not None],
    )
    memo.end()
    return state


CLAIMS_CATCH_UP_SECONDS = 0.05
"""How long an observation waits for cached claims behind the pods (`_claims_behind`) to catch
up, reading the cache again every `CLAIMS_POLL_SECONDS`, before it lists them."""
CLAIMS_POLL_SECONDS = 0.001


def _claims_caught_up(
    cached: list[Any],
    raw_pods: list[Any],
    again: Callable[[], list[Any] | None],
    memo: DraMemo,
    peek: Callable[[str, str, str], dict | None] | None = None,
) -> list[Any] | None:
    """The cached claims once they are not behind the pods (`_claims_behind`), else None (to
    be listed). Behind, they are read again from the cache (`again`) for up to
    `CLAIMS_CATCH_UP_SECONDS`: the usual cause is kube-scheduler's allocation and binding of a
    pod a moment ago, the binding delivered by the pods' watch before the allocation by the
    claims' (milliseconds), and a list of every claim costs the API server and this process
    more than that wait. While they wait, only the claims missing are looked at, one by one
    (`peek`: the cache's copy of one object, `ClusterCache.dra_object`), then all of them
    again. Pods the last wait ran out on (`DraMemo.stuck`: a pod bound without the scheduler,
    say, whose claim no allocation will reach) are not waited for again."""
    behind = _claims_behind(cached, raw_pods, memo)
    if behind and set(behind) <= memo.stuck:
        return None
    deadline = time.monotonic() + CLAIMS_CATCH_UP_SECONDS
    while behind:
        missing = {c for claims in behind.values() for c in claims}
        while True:
            if time.monotonic() >= deadline:
                memo.stuck = frozenset(behind)
                return None  # older than the pods: listed, as without a cache
            time.sleep(CLAIMS_POLL_SECONDS)
            if peek is None:
                break
            missing = {c for c in missing if not _allocated_in(peek, c)}
            if not missing:
                break
        fresh = again()
        if fresh is None:
            return None
        cached, behind = fresh, _claims_behind(fresh, raw_pods, memo)
    return cached


def _allocated_in(peek: Callable[[str, str, str], dict | None], key: str) -> bool:
    """Whether the cache's copy of the claim `key` (namespace/name) is allocated."""
    ns, _, name = key.partition("/")
    claim = peek("ResourceClaim", ns, name) or {}
    return bool((claim.get("status") or {}).get("allocation"))


def _claims_behind(
    claims: list[Any], raw_pods: list[Any], memo: DraMemo | None = None
) -> dict[str, list[str]]:
    """The pods (namespace/name) that show cached claims older than the (cached) pods, with
    those claims (namespace/name): bound to a node, with a claim not there allocated.
    kube-scheduler allocates a pod's claims before it binds the pod, so a consistent read never
    shows that; a claims watch behind the pods watch does, and a plan from it would take the
    pod's cards for free. Listing the claims after the pods (as without a cache) cannot.
    Finished pods are left aside (their claims are deallocated). Through `memo`, each claim
    and pod is looked at once while the cache hands back the very same object
    (`DraMemo.allocated`, `DraMemo.bound_claims`)."""
    allocated_of = memo.allocated if memo is not None else ByIdentity(_allocated_key)
    bound_of = memo.bound_claims if memo is not None else ByIdentity(_bound_claims)
    allocated = {k for k in allocated_of.map(claims) if k}
    behind: dict[str, list[str]] = {}
    for pod, keys in bound_of.map(raw_pods):
        for key in keys:
            if key not in allocated:
                behind.setdefault(pod, []).append(key)
    return behind


def _allocated_key(c: Any) -> str:
    """namespace/name of a listed claim (a dict) that is allocated; "" otherwise."""
    if isinstance(c, dict) and ((c.get("status") or {}).get("allocation")):
        meta = c.get("metadata") or {}
        return f"{meta.get('namespace')}/{meta.get('name')}"
    return ""


def _bound_claims(p: Any) -> tuple[str, tuple[str, ...]]:
    """(namespace/name, the claims its status names as namespace/name) of a pod (a V1Pod)
    bound to a node and not finished; ("", ()) for any other."""
    spec, status = getattr(p, "spec", None), getattr(p, "status", None)
    if not getattr(spec, "node_name", None) or getattr(status, "phase", "") in (
        "Succeeded",
        "Failed",
    ):
        return "", ()
    ns = p.metadata.namespace
    names = [
        getattr(st, "resource_claim_name", None)
        for st in getattr(status, "resource_claim_statuses", None) or []
    ]
    return f"{ns}/{p.metadata.name}", tuple(f"{ns}/{n}" for n in names if n)


class ByIdentity:
    """`f(obj)` of each object of a list, once per object while the very same object comes
    back (a watch cache hands back the object it holds until that changes, and a changed one
    is another object): only the objects of the last `map` are kept."""

    def __init__(self, f: Callable[[Any], Any]) -> None:
        self.f = f
        self._last: dict[int, tuple[Any, Any]] = {}

    def map(self, objs: list[Any]) -> list[Any]:
        last, kept, out = self._last, {}, []
        for o in objs:
            hit = last.get(id(o))
            value = hit[1] if hit is not None and hit[0] is o else self.f(o)
            kept[id(o)] = (o, value)
            out.append(value)
        self._last = kept
        return out


def _managed_by(o: dict) -> str:
    labels = _shape((o.get("metadata") or {}).get("labels"), dict, "metadata.labels") or {}
    return str(labels.get(C.MANAGED_BY_LABEL, ""))


def _list(o: dict, key: str, field: str) -> list:
    return _shape(o.get(key), list, field) or []


def _map(o: dict, key: str, field: str) -> dict:
    return _shape(o.get(key), dict, field) or {}


def _quantities(m: dict, field: str) -> dict[str, str]:
    """{name: {value: q}} (capacities, counters) -> {name: q}."""
    return {
        str(k): str(
            _shape(
                _shape(v, dict, f"{field}.{k}", required=True).get("value"),
                str,
                f"{field}.{k}.value",
                required=True,
            )
        )
        for k, v in m.items()
    }


def _attribute(v: Any, field: str) -> bool | int | str:
    v = _shape(v, dict, field, required=True)
    for kind, want in (("string", str), ("version", str), ("int", int), ("bool", bool)):
        if kind in v:
            got = v[kind]
            if want is bool and isinstance(got, bool):
                return got
            return _shape(got, want, f"{field}.{kind}", required=True)
    raise ValueError(f"{field} has no string, version, int or bool value")


def _device(d: Any, i: int) -> DraDevice:
    at = f"spec.devices[{i}]"
    d = _shape(d, dict, at, required=True)
    return DraDevice(
        name=_shape(d.get("name"), str, f"{at}.name", required=True),
        attributes={
            str(k): _attribute(v, f"{at}.attributes.{k}")
            for k, v in _map(d, "attributes", f"{at}.attributes").items()
        },
        capacity=_quantities(_map(d, "capacity", f"{at}.capacity"), f"{at}.capacity"),
        consumes_counters=[
            CounterConsumption(
                counter_set=_shape(
                    c.get("counterSet"), str, f"{at}.consumesCounters.counterSet", required=True
                ),
                counters=_quantities(
                    _map(c, "counters", f"{at}.consumesCounters"), f"{at}.consumesCounters"
                ),
            )
            for c in (
                _shape(c, dict, f"{at}.consumesCounters[]", required=True)
                for c in _list(d, "consumesCounters", f"{at}.consumesCounters")
            )
        ],
        taints=[_taint(t, f"{at}.taints[]") for t in _list(d, "taints", f"{at}.taints")],
    )


def _taint(t: Any, at: str) -> DeviceTaint:
    t = _shape(t, dict, at, required=True)
    return DeviceTaint(
        key=_shape(t.get("key"), str, f"{at}.key", required=True),
        value=_shape(t.get("value"), str, f"{at}.value") or "",
        effect=_shape(t.get("effect"), str, f"{at}.effect") or "NoSchedule",
    )


def _taint_rule(o: dict) -> DeviceTaintRuleObject:
    """A DeviceTaintRule: its selector (driver, pool, device; resource.k8s.io/v1 has no other
    field there) and its one taint."""
    spec = o.get("spec") or {}
    sel = _map(spec, "deviceSelector", "spec.deviceSelector")
    return DeviceTaintRuleObject(
        name=o["metadata"]["name"],
        driver=_shape(sel.get("driver"), str, "spec.deviceSelector.driver") or "",
        pool=_shape(sel.get("pool"), str, "spec.deviceSelector.pool") or "",
        device=_shape(sel.get("device"), str, "spec.deviceSelector.device") or "",
        taint=_taint(spec.get("taint"), "spec.taint"),
        managed_by=_managed_by(o),
    )


def _slice(o: dict) -> ResourceSlice:
    spec = o.get("spec") or {}
    pool = _map(spec, "pool", "spec.pool")
    devices = _list(spec, "devices", "spec.devices")
    if len(devices) > MAX_DEVICES_PER_SLICE:
        raise ValueError(f"spec.devices has {len(devices)} devices, over {MAX_DEVICES_PER_SLICE}")
    return ResourceSlice(
        name=o["metadata"]["name"],
        driver=_shape(spec.get("driver"), str, "spec.driver", required=True),
        pool=_shape(pool.get("name"), str, "spec.pool.name", required=True),
        generation=_shape(pool.get("generation"), int, "spec.pool.generation") or 0,
        node=_shape(spec.get("nodeName"), str, "spec.nodeName") or "",
        devices=[_device(d, i) for i, d in enumerate(devices)],
        shared_counters=[
            CounterSet(
                name=_shape(c.get("name"), str, "spec.sharedCounters.name", required=True),
                counters=_quantities(
                    _map(c, "counters", "spec.sharedCounters"), "spec.sharedCounters"
                ),
            )
            for c in (
                _shape(c, dict, "spec.sharedCounters[]", required=True)
                for c in _list(spec, "sharedCounters", "spec.sharedCounters")
            )
        ],
    )


def _device_class(o: dict) -> DeviceClassObject:
    spec = o.get("spec") or {}
    exprs = []
    for s in _list(spec, "selectors", "spec.selectors"):
        cel = _map(_shape(s, dict, "spec.selectors[]", required=True), "cel", "spec.selectors.cel")
        exprs.append(
            _shape(cel.get("expression"), str, "spec.selectors.cel.expression", required=True)
        )
    return DeviceClassObject(
        name=o["metadata"]["name"],
        selectors=exprs,
        extended_resource_name=_shape(
            spec.get("extendedResourceName"), str, "spec.extendedResourceName"
        )
        or "",
        managed_by=_managed_by(o),
        **_partition(o),
    )


def _partition(o: dict) -> dict[str, str]:
    """The pool and MIG profile a DeviceClass of gpupool's selects (its labels and annotation);
    nothing for anyone else's class."""
    if _managed_by(o) != C.MANAGED_BY:
        return {}
    meta = o["metadata"]
    labels = _map(meta, "labels", "metadata.labels")
    annotations = _map(meta, "annotations", "metadata.annotations")
    return {
        "pool": str(labels.get(C.POOL_LABEL, "")),
        "profile": str(annotations.get(C.DRA_PROFILE_ANN, "")),
    }


def _request_classes(devices: dict, field: str) -> dict[str, int]:
    """DeviceClass -> devices a claim's (or template's) requests ask of it: an exact request's
    count (1 by default, and for `allocationMode: All`), or its first first-available
    subrequest's (the one the allocator tries first)."""
    out: dict[str, int] = {}
    for r in _list(devices, "requests", f"{field}.requests"):
        r = _shape(r, dict, f"{field}.requests[]", required=True)
        subs = [
            _shape(s, dict, f"{field}.requests.firstAvailable[]", required=True)
            for s in _list(r, "firstAvailable", f"{field}.requests.firstAvailable")
        ]
        s = subs[0] if subs else _map(r, "exactly", f"{field}.requests.exactly")
        name = _shape(s.get("deviceClassName"), str, f"{field}.requests.deviceClassName")
        count = _shape(s.get("count"), int, f"{field}.requests.count") or 1
        if not 0 < count <= C.MAX_GPUS_PER_NODE * 7:
            raise ValueError(f"{field}.requests.count {count} is out of bounds")
        if name:
            out[name] = out.get(name, 0) + count
    return out


def _claim(o: dict) -> ResourceClaimObject:
    meta, spec, status = o["metadata"], o.get("spec") or {}, o.get("status") or {}
    alloc = _shape(status.get("allocation"), dict, "status.allocation")
    results = None
    node = ""
    if alloc is not None:
        devices = _map(alloc, "devices", "status.allocation.devices")
        results = [
            DeviceResult(
                request=_shape(r.get("request"), str, "results.request", required=True),
                driver=_shape(r.get("driver"), str, "results.driver", required=True),
                pool=_shape(r.get("pool"), str, "results.pool", required=True),
                device=_shape(r.get("device"), str, "results.device", required=True),
            )
            for r in (
                _shape(r, dict, "status.allocation.devices.results[]", required=True)
                for r in _list(devices, "results", "status.allocation.devices.results")
            )
        ]
        node = _allocation_node(_map(alloc, "nodeSelector", "status.allocation.nodeSelector"))
    reserved = [
        _shape(r, dict, "status.reservedFor[]", required=True)
        for r in _list(status, "reservedFor", "status.reservedFor")
    ]
    return ResourceClaimObject(
        namespace=meta["namespace"],
        name=meta["name"],
        devices=_request_classes(_map(spec, "devices", "spec.devices"), "spec.devices"),
        allocated=results,
        node=node,
        reserved_for=sorted(
            str(r.get("name")) for r in reserved if r.get("resource") == "pods" and r.get("name")
        ),
        managed_by=_managed_by(o),
        replaces=_replaces(meta),
    )


def _replaces(meta: dict) -> list[str]:
    """The claims a pinned claim's `gpupool.io/replaces-claims` names (comma-separated)."""
    ann = _shape(meta.get("annotations"), dict, "metadata.annotations") or {}
    value = _shape(ann.get(C.DRA_REPLACES_ANN), str, f"metadata.annotations[{C.DRA_REPLACES_ANN}]")
    return [n for n in (value or "").split(",") if n]


def _allocation_node(selector: dict) -> str:
    """The node a claim's allocation is for: `metadata.name` in its node selector's first
    term (what the scheduler writes for node-local devices)."""
    for term in _list(selector, "nodeSelectorTerms", "status.allocation.nodeSelector"):
        for f in _list(
            _shape(term, dict, "nodeSelectorTerms[]", required=True), "matchFields", "matchFields"
        ):
            f = _shape(f, dict, "matchFields[]", required=True)
            values = _shape(f.get("values"), list, "matchFields.values") or []
            if f.get("key") == "metadata.name" and len(values) == 1 and isinstance(values[0], str):
                return values[0]
    return ""


def _template(o: dict) -> ClaimTemplateObject:
    spec = _map(o.get("spec") or {}, "spec", "spec.spec")
    return ClaimTemplateObject(
        namespace=o["metadata"]["namespace"],
        name=o["metadata"]["name"],
        devices=_request_classes(_map(spec, "devices", "spec.spec.devices"), "spec.spec.devices"),
        managed_by=_managed_by(o),
    )


def _pod_claims(pod: Any) -> PodClaims | None:
    """A V1Pod's claims (None for a pod with none)."""
    claims = getattr(pod.spec, "resource_claims", None) or []
    if not claims:
        return None
    made = {
        s.name: s.resource_claim_name
        for s in (getattr(pod.status, "resource_claim_statuses", None) or [])
        if s.resource_claim_name
    }
    names, templates, made_from = [], [], {}
    for c in claims:
        if c.resource_claim_name:
            names.append(c.resource_claim_name)
        elif c.name in made:
            names.append(made[c.name])
            if c.resource_claim_template_name:
                made_from[made[c.name]] = c.resource_claim_template_name
        elif c.resource_claim_template_name:
            templates.append(c.resource_claim_template_name)
    return PodClaims(
        namespace=pod.metadata.namespace,
        pod=pod.metadata.name,
        claims=sorted(names),
        templates=sorted(templates),
        made_from=made_from,
    )


# ------------------------------------------------------------------ pods as the planner sees them
# (the pure half is observe/dra_holdings.py: `observe_cluster` indexes the state once there)
