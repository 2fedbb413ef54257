"""The watch cache's DRA informers (reconciler/loop/informer.py, `ClusterCache.watch_dra`,
`dra_objects`), without an API server: started only when asked, stopped again; a resource
whose informer is synced is read from it (`read_dra` lists only the others); DeviceTaintRules
not served are none; and read your own writes: a resource whose informer has not seen
gpupool's last write there (a resourceVersion, or a deleted object still held) is listed
afresh. The record of those writes is `KubeOps._wrote_object`. On the real API server:
tests/integration/test_dra_informer.py."""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.apply.kube import KubeOps
from reconciler.loop.informer import ClusterCache
from reconciler.observe import kube_dra
from reconciler.observe.kube_common import _UNREADABLE
from reconciler.observe.kube_dra import ByIdentity, DraMemo, read_dra

PLURALS = list(C.DRA_PLURALS.values())


def obj(name: str, rv: str, uid: str = "", ns: str = "") -> dict:
    meta = {"name": name, "resourceVersion": rv, "uid": uid or f"uid-{name}"}
    if ns:
        meta["namespace"] = ns
    return {"metadata": meta, "spec": {}}


class FakeCustom:
    """`list_cluster_custom_object` of resource.k8s.io/v1 from `objects`; a watch (or a list
    of a plural in `missing`) is refused, so an informer lists once and backs off."""

    def __init__(self, objects: dict[str, list[dict]], missing: tuple[str, ...] = ()):
        self.objects, self.missing, self.lists = objects, missing, []

    def list_cluster_custom_object(self, group, version, plural, watch=False, **_):
        if plural in self.missing:
            raise client.ApiException(status=404, reason="Not Found")
        if watch:
            raise client.ApiException(status=500, reason="no watch here")
        self.lists.append(plural)
        return {"items": list(self.objects.get(plural, [])), "metadata": {"resourceVersion": "10"}}


@pytest.fixture
def stop():
    ev = threading.Event()
    yield ev
    ev.set()


def cache_of(custom: FakeCustom, stop: threading.Event) -> ClusterCache:
    cache = ClusterCache(
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")), backoff_seconds=60
    )
    cache._custom = custom
    cache._stop = stop  # the node and pod informers are not started here
    return cache


def synced(cache: ClusterCache) -> None:
    for inf in cache.dra_informers.values():
        assert inf.settled(5)


def test_dra_informers_run_only_while_asked(stop):
    custom = FakeCustom({"deviceclasses": [obj("gpupool-a100-gpu", "7")]})
    cache = cache_of(custom, stop)
    assert cache.dra_informers == {} and cache.dra_objects("deviceclasses") is None
    assert cache.dra_memo is None  # DRA read as without a cache
    cache.watch_dra(False)
    assert custom.lists == []  # no DRA pool: nothing listed, nothing watched
    cache.watch_dra(True)
    synced(cache)
    assert sorted(cache.dra_informers) == sorted(PLURALS)
    assert [o["metadata"]["name"] for o in cache.dra_objects("deviceclasses")] == [
        "gpupool-a100-gpu"
    ]
    assert cache.dra_objects("resourceslices") == []
    first = dict(cache.dra_informers)
    cache.watch_dra(True)  # already watching: the same informers
    assert cache.dra_informers == first
    stopped = cache._dra_stop
    cache.watch_dra(False)
    assert stopped.is_set() and cache.dra_informers == {} and cache.dra_memo is None
    assert cache.dra_objects("deviceclasses") is None


def test_device_taint_rules_not_served_are_none_and_other_404s_list(stop):
    cache = cache_of(FakeCustom({}, missing=("devicetaintrules",)), stop)
    cache.watch_dra(True)
    synced(cache)
    assert cache.dra_informers["devicetaintrules"].absent
    assert cache.dra_objects("devicetaintrules") == []
    gone = cache_of(FakeCustom({}, missing=("resourceclaims",)), stop)
    gone.watch_dra(True)
    synced(gone)
    assert gone.dra_objects("resourceclaims") is None  # the reader lists: 404, DRA not served


def event(cache: ClusterCache, plural: str, kind: str, o: dict) -> None:
    """What the informer's watch does with one event."""
    inf = cache.dra_informers[plural]
    with inf._lock:
        key = inf._key(o)
        if kind == "DELETED":
            inf._items.pop(key, None)
        else:
            inf._items[key] = o
        inf._seen(o["metadata"]["resourceVersion"])
        inf._advanced.notify_all()


def test_a_resource_not_caught_up_with_gpupools_write_is_listed_afresh(stop):
    cache = cache_of(FakeCustom({"deviceclasses": [obj("c", "8", uid="u1")]}), stop)
    cache.watch_dra(True)
    synced(cache)
    # gpupool patched a claim (the server answered resourceVersion 12): the claims' informer
    # is at 10, so claims are listed; the other resources still come from the cache
    assert cache.caught_up({"resourceclaims": 12}, 0.1)  # nodes and pods: nothing to wait for
    assert cache.dra_objects("resourceclaims") is None
    assert cache.dra_objects("deviceclasses") is not None
    event(cache, "resourceclaims", "MODIFIED", obj("claim", "12", ns="team-a"))
    assert len(cache.dra_objects("resourceclaims")) == 1
    # gpupool deleted DeviceClass c (a Status with its uid): held until the DELETED event
    assert cache.caught_up({}, 0.1, {"deviceclasses": {"/c": "u1"}})
    assert cache.dra_objects("deviceclasses") is None
    waiter = threading.Thread(
        target=event, args=(cache, "deviceclasses", "DELETED", obj("c", "13"))
    )
    threading.Timer(0.1, waiter.start).start()
    assert cache.caught_up({}, 5, {"deviceclasses": {"/c": "u1"}})  # waits for the event
    assert cache.dra_objects("deviceclasses") == []
    # someone made another c since (another uid): not the object gpupool deleted
    event(cache, "deviceclasses", "ADDED", obj("c", "14", uid="u2"))
    assert cache.dra_objects("deviceclasses") is not None


def test_one_object_is_peeked_only_from_a_caught_up_informer(stop):
    """`dra_object` (exact admission's `peek_dra_object`): one object by kind and name, None
    when not watched, not held, or the informer has not seen gpupool's last write there."""
    cache = cache_of(FakeCustom({"resourceclaims": [obj("claim", "9", ns="team-a")]}), stop)
    assert cache.dra_object("ResourceClaim", "team-a", "claim") is None  # not watched
    cache.watch_dra(True)
    synced(cache)
    assert cache.dra_object("ResourceClaim", "team-a", "claim")["metadata"]["name"] == "claim"
    assert cache.dra_object("ResourceClaim", "team-b", "claim") is None
    assert cache.dra_object("DeviceClass", "", "claim") is None
    assert cache.caught_up({"resourceclaims": 12}, 0.1)  # gpupool's write at 12: behind
    assert cache.dra_object("ResourceClaim", "team-a", "claim") is None
    event(cache, "resourceclaims", "ADDED", obj("other", "12", ns="team-a"))
    assert cache.dra_object("ResourceClaim", "team-a", "claim") is not None


def test_read_dra_takes_the_cached_resources_and_lists_the_rest(monkeypatch):
    listed: list[str] = []

    class Custom:
        def __init__(self, _api=None):
            pass

        def list_cluster_custom_object(self, group, version, plural, **_):
            listed.append(plural)
            return {"items": []}

    class Cache:
        def dra_objects(self, plural):
            if plural == "resourceclaims":
                return None  # behind gpupool's own write: listed
            if plural == "deviceclasses":
                return [obj("gpupool-a100-gpu", "3")]
            return []

    monkeypatch.setattr(client, "CustomObjectsApi", Custom)
    state = read_dra(object(), [], Cache())
    assert listed == ["resourceclaims"]
    assert [c.name for c in state.device_classes] == ["gpupool-a100-gpu"]
    listed.clear()
    read_dra(object(), [], object())  # a cache of nodes and pods only: every resource listed
    assert sorted(listed) == sorted(PLURALS)


def test_gpupools_dra_writes_are_recorded_for_the_cache():
    ops = KubeOps(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    status = {"kind": "Status", "status": "Success", "details": {"name": "c", "uid": "u1"}}
    ops._wrote_object("deviceclasses", "/c", status)
    ops._wrote_object("resourceclaims", "ns/p-gpus", status | {"details": {"uid": "u2"}})
    assert ops.deleted == {"deviceclasses": {"/c": "u1"}, "resourceclaims": {"ns/p-gpus": "u2"}}
    assert "resourceclaims" not in ops.written
    # an object made again under a deleted one's name: its resourceVersion, not the delete
    ops._wrote_object("resourceclaims", "ns/p-gpus", obj("p-gpus", "41", ns="ns"))
    assert ops.written["resourceclaims"] == 41 and ops.deleted["resourceclaims"] == {}
    ops._wrote_object("resourceclaims", "ns/q", obj("q", "40", ns="ns"))
    assert ops.written["resourceclaims"] == 41  # the newest stays
    # a delete answered with the object: gone unless a finalizer holds it (then its version)
    ops._wrote_object("devicetaintrules", "/t", obj("t", "50", uid="u3"), delete=True)
    assert ops.deleted["devicetaintrules"] == {"/t": "u3"}
    held = obj("h", "52")
    held["metadata"]["deletionTimestamp"] = "2026-12-05T06:00:00Z"
    ops._wrote_object("devicetaintrules", "/h", held, delete=True)
    assert ops.written["devicetaintrules"] == 52 and "/h" not in ops.deleted["devicetaintrules"]
    ops._wrote_object("deviceclasses", "/d", None)  # no answer: nothing to wait for
    assert ops.written.get("deviceclasses") is None


def test_dra_objects_are_converted_once_per_version(monkeypatch):
    objects = {
        "deviceclasses": [obj("gpupool-a100-gpu", "3"), obj("vendor", "4")],
        "resourceclaimtemplates": [obj("t", "5", ns="team-a")],
    }
    objects["resourceclaimtemplates"][0]["spec"] = {"spec": "not an object"}  # left out

    class Custom:
        def __init__(self, _api=None):
            pass

        def list_cluster_custom_object(self, group, version, plural, **_):
            return {"items": objects.get(plural, [])}

    class Cache:
        dra_memo = DraMemo()

        def dra_objects(self, plural):
            return None

    monkeypatch.setattr(client, "CustomObjectsApi", Custom)
    cache = Cache()
    first = read_dra(object(), [], cache)
    assert (cache.dra_memo.misses, cache.dra_memo.hits) == (3, 0)
    again = read_dra(object(), [], cache)  # the bad template is tried again
    assert (cache.dra_memo.misses, cache.dra_memo.hits) == (4, 2)
    assert again == first == read_dra(object(), [], None)  # the same state as without the memo
    assert again.device_classes[0] is first.device_classes[0]
    assert again.claim_templates == []  # converted (and reported) each time, never kept
    objects["deviceclasses"][1] = obj("vendor", "9")  # a new version: converted again
    read_dra(object(), [], cache)
    assert (cache.dra_memo.misses, cache.dra_memo.hits) == (6, 3)
    objects["deviceclasses"] = []
    read_dra(object(), [], cache)
    assert cache.dra_memo._kept == {}  # only the last read's objects are kept


def test_a_kind_whose_objects_are_the_same_ones_is_not_read_again():
    """`DraMemo.each`: the very objects of the last read (a watch cache hands back the ones it
    holds) give that read's list, converting nothing; another object of the kind reads the
    kind again, through the per-object memo (only the new object converted)."""
    memo, converted = DraMemo(), []

    def convert(o):
        converted.append(o["metadata"]["name"])
        return o["metadata"]["name"].upper()

    a, b = obj("a", "1"), obj("b", "2")
    memo.begin()
    first = memo.each("DeviceClass", [a, b], convert)
    memo.end()
    memo.begin()
    again = memo.each("DeviceClass", [a, b], convert)
    memo.end()
    assert again is first and converted == ["a", "b"]
    b2 = obj("b", "3")
    memo.begin()
    assert memo.each("DeviceClass", [a, b2], convert) == ["A", "B"]
    memo.end()
    assert converted == ["a", "b", "b"] and memo._kept.keys() == {
        ("DeviceClass", "uid-a", "1"),
        ("DeviceClass", "uid-b", "3"),
    }
    b3 = obj("b", "4")
    memo.begin()  # a read that converts b3, then fails before its end
    memo.each("DeviceClass", [a, b3], convert)
    memo.begin()  # the next one: b3 is the very object that read converted, its model again
    assert memo.each("DeviceClass", [a, b3], convert) == ["A", "B"]
    memo.end()
    assert converted == ["a", "b", "b", "b"] and memo._kept.keys() == {
        ("DeviceClass", "uid-a", "1"),
        ("DeviceClass", "uid-b", "4"),
    }
    memo.begin()  # and it is kept from there: nothing converted
    assert memo.each("DeviceClass", [a, b3], convert) == ["A", "B"]
    memo.end()
    assert converted == ["a", "b", "b", "b"]


def test_only_the_objects_that_changed_are_looked_at_again():
    """`DraMemo.each` when the kind changed (the shortcut does not hold): the very objects of
    the last read give their models again without a look (not even the shape check or the
    version key), in the order listed; a new or changed object is converted; one left out is
    reported at each read; and the models equal a read without the memo."""
    memo, converted = DraMemo(), []

    def convert(o):
        converted.append(o["metadata"]["name"])
        return o["metadata"]["name"].upper()

    a, b, c = obj("a", "1"), obj("b", "2"), obj("c", "3")
    memo.begin()
    first = memo.each("DeviceClass", [a, b, c], convert)
    memo.end()
    d, b2 = obj("d", "4"), obj("b", "5")
    memo.begin()
    again = memo.each("DeviceClass", [c, b2, a, d], convert)
    memo.end()
    assert again == ["C", "B", "A", "D"] and converted == ["a", "b", "c", "b", "d"]
    assert again[0] is first[2] and again[2] is first[0]
    assert memo.hits == 2 and memo._kept.keys() == {
        ("DeviceClass", "uid-c", "3"),
        ("DeviceClass", "uid-b", "5"),
        ("DeviceClass", "uid-a", "1"),
        ("DeviceClass", "uid-d", "4"),
    }
    bad = obj("e", "6")
    bad["spec"] = "not an object"
    found: list = []
    token = _UNREADABLE.set(found)
    try:
        for _ in range(2):  # left out and reported each time, never kept
            memo.begin()
            assert memo.each("DeviceClass", [a, bad, d], convert) == ["A", "D"]
            memo.end()
    finally:
        _UNREADABLE.reset(token)
    assert [u.name for u in found] == ["e", "e"] and "DeviceClass" not in memo._lists
    assert converted == ["a", "b", "c", "b", "d"]  # a and d: the very objects, each time


def test_cached_claims_older_than_the_pods_are_listed(monkeypatch):
    """kube-scheduler allocates a pod's claim before it binds the pod: cached claims that show
    a bound pod's claim unallocated are behind the pods, and are listed instead."""
    from types import SimpleNamespace as NS

    listed: list[str] = []
    allocated = obj("p-gpus", "20", ns="team-a")
    allocated["status"] = {"allocation": {"devices": {"results": []}}}

    class Custom:
        def __init__(self, _api=None):
            pass

        def list_cluster_custom_object(self, group, version, plural, **_):
            listed.append(plural)
            return {"items": [allocated] if plural == "resourceclaims" else []}

    stale = obj("p-gpus", "19", ns="team-a")  # the claim before the scheduler allocated it

    class Cache:
        def dra_objects(self, plural):
            return [stale] if plural == "resourceclaims" else []

    def pod(node: str, phase: str = "Running") -> NS:
        return NS(
            metadata=NS(namespace="team-a", name="p"),
            spec=NS(node_name=node, resource_claims=[]),
            status=NS(
                phase=phase,
                resource_claim_statuses=[NS(name="gpus", resource_claim_name="p-gpus")],
            ),
        )

    monkeypatch.setattr(client, "CustomObjectsApi", Custom)
    monkeypatch.setattr(kube_dra, "CLAIMS_CATCH_UP_SECONDS", 0.01)
    state = read_dra(object(), [pod("node-a")], Cache())
    assert listed == ["resourceclaims"] and state.claims[0].allocated == []
    listed.clear()
    read_dra(object(), [pod("")], Cache())  # not bound yet: the cache is consistent
    read_dra(object(), [pod("node-a", "Succeeded")], Cache())  # finished: deallocated
    assert listed == []

    # the claims' watch catches up within the wait: no list; the allocation is the cache's
    class Catching(Cache):
        reads = 0

        def __init__(self):
            self.dra_memo = DraMemo()

        def dra_objects(self, plural):
            if plural != "resourceclaims":
                return []
            self.reads += 1
            return [stale] if self.reads < 3 else [allocated]

    monkeypatch.setattr(kube_dra, "CLAIMS_CATCH_UP_SECONDS", 5.0)
    catching = Catching()
    state = read_dra(object(), [pod("node-a")], catching)
    assert listed == [] and catching.reads == 3 and len(state.claims) == 1

    # with a cache that answers for one object, only the missing claim is read while waiting,
    # then the claims once more
    class Peeking(Catching):
        peeks = 0

        def dra_object(self, kind, namespace, name):
            assert (kind, namespace, name) == ("ResourceClaim", "team-a", "p-gpus")
            self.peeks += 1
            return stale if self.peeks < 3 else allocated

        def dra_objects(self, plural):
            if plural != "resourceclaims":
                return []
            self.reads += 1
            return [stale] if self.reads < 2 else [allocated]

    peeking = Peeking()
    read_dra(object(), [pod("node-a")], peeking)
    assert listed == [] and (peeking.reads, peeking.peeks) == (2, 3)

    # a pod the last wait ran out on is not waited for again: listed at once
    memo = DraMemo()
    memo.stuck = frozenset({"team-a/p"})
    stuck = Cache()
    stuck.dra_memo = memo  # type: ignore[attr-defined]
    t0 = time.monotonic()
    read_dra(object(), [pod("node-a")], stuck)
    assert listed == ["resourceclaims"] and time.monotonic() - t0 < 1.0


def test_a_claim_that_stops_holding_devices_wakes_the_loop(stop):
    """A claim seen allocated that loses its allocation or is deleted calls `on_claim_release`
    (the cards its ended pod left fenced are free now, and no pod event says so); claims never
    allocated (the template's, a pinned one before the scheduler allocates it) do not."""
    released = []
    cache = ClusterCache(
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")),
        backoff_seconds=60,
        on_claim_release=lambda: released.append(1),
    )
    cache._custom, cache._stop = FakeCustom({}), stop
    cache.watch_dra(True)
    event = cache.dra_informers["resourceclaims"].on_event
    assert event is not None
    assert all(cache.dra_informers[p].on_event is None for p in PLURALS if p != "resourceclaims")
    made, pinned = obj("p-gpu-x", "11", ns="t"), obj("p-gpu-abc", "12", ns="t")
    event("ADDED", made)
    event("ADDED", pinned)
    event("DELETED", made)  # exact admission deletes the template's claim: never allocated
    assert released == []
    pod = client.V1Pod(metadata=client.V1ObjectMeta(name="p", namespace="t", uid="pod-1"))
    pinned["metadata"]["ownerReferences"] = [{"kind": "Pod", "name": "p", "uid": "pod-1"}]
    allocated = {**pinned, "status": {"allocation": {"devices": {"results": []}}}}
    assert not cache.claims_held_by(pod)
    event("MODIFIED", allocated)
    assert cache.claims_held_by(pod)  # its pod's own events do not wake the loop now
    event("MODIFIED", {**allocated, "status": {**allocated["status"], "reservedFor": []}})
    assert released == [] and cache.claims_held_by(pod)
    event("MODIFIED", pinned)  # deallocated
    event("DELETED", pinned)
    assert released == [1] and not cache.claims_held_by(pod)
    event("MODIFIED", allocated)
    event("DELETED", allocated)  # deleted while still allocated
    assert released == [1, 1]


def test_the_wait_for_claims_behind_looks_at_each_object_once_while_it_is_the_same():
    """`_claims_behind` runs every cycle over every cached claim and pod: through the memo
    (`ByIdentity`) an object the cache hands back unchanged (the very same object) is not
    looked at again, a changed one (another object) is, and only the last read's are kept;
    the answer is the one made without the memo."""
    from types import SimpleNamespace as NS

    looked: list[int] = []
    by = ByIdentity(lambda o: looked.append(o["n"]) or o["n"])
    a, b = {"n": 1}, {"n": 2}
    assert by.map([a, b]) == [1, 2] and by.map([a, b]) == [1, 2] and looked == [1, 2]
    assert by.map([{"n": 2}]) == [2] and looked == [1, 2, 2]  # b changed: another object
    assert by.map([a]) == [1] and looked == [1, 2, 2, 1]  # not in the last read any more

    def pod(name: str, node: str) -> NS:
        return NS(
            metadata=NS(namespace="team-a", name=name),
            spec=NS(node_name=node),
            status=NS(
                phase="Running",
                resource_claim_statuses=[NS(name="gpus", resource_claim_name=f"{name}-gpus")],
            ),
        )

    done = obj("p-gpus", "20", ns="team-a")
    done["status"] = {"allocation": {"devices": {"results": []}}}
    claims = [done, obj("q-gpus", "21", ns="team-a"), obj("r-gpus", "22", ns="team-a")]
    pods = [pod("p", "node-a"), pod("q", "node-a"), pod("r", "")]
    memo = DraMemo()
    for _ in range(2):
        got = kube_dra._claims_behind(claims, pods, memo)
        assert got == kube_dra._claims_behind(claims, pods) == {"team-a/q": ["team-a/q-gpus"]}
