"""DRA through the controller's watch cache on the real API server and kube-scheduler (issue
32): once a cycle has read DRA and the policy keeps it read, `ClusterCache.watch_dra` starts
informers on the five resource.k8s.io/v1 resources, and the next cycles read them from there
(no list of resource.k8s.io); exact admission deletes and re-creates each pod's claim, and the
next cycle plans only from a cache that has seen both (read your own writes), so the
allocations are still the plan. The DRA state read through the cache equals a fresh list's.
When the pool leaves DRA, gpupool prunes its DeviceClasses (deletes the cache must see gone)
and the informers stop. The controller's own rights (deploy/rbac.yaml `watch`) do it."""

from __future__ import annotations

import threading
import uuid

from reconciler import conventions as C
from reconciler.loop.informer import ClusterCache
from reconciler.observe.kube import observe_cluster
from tests.support.wait import wait_for

from .dra_support import (
    claim_of,
    claim_pod,
    claims_made,
    dra_nodes,
    dra_policy,
    each_allocated,
    gated,
)
from .gating import gated_namespace
from .harness import audit_mark, controller, write_policy
from .rbac_rules import CONTROLLER, audited, unused_controller_rules

G = C.DRA_GROUP


def dra_requests(kube, since: int) -> list[tuple[str, str]]:
    return [(e.verb, e.uri) for e in audited(kube, CONTROLLER, since) if f"/apis/{G}/" in e.uri]


def test_dra_through_the_watch_cache_reads_its_own_writes(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    pool, nodes = f"d{sfx}", [f"dra-w-{sfx}", f"dra-v-{sfx}"]
    ns = gated_namespace(kube)
    mark = audit_mark(kube)
    dra_nodes(kube, pool, *nodes)
    write_policy(tmp_path, dra_policy(sfx, ns))
    ctl = controller(kube, tmp_path, kube.clock)
    stop = threading.Event()
    kube.cleanup(stop.set)
    ctl.cache = ClusterCache(ctl.api, timeout_seconds=5).start(stop)
    assert ctl.cache.wait_synced(10)
    assert ctl.cache.dra_informers == {}  # not before a cycle asks for DRA

    r = ctl.cycle()  # lists DRA (the informers are not there yet), makes the classes
    assert r.error is None, r.error
    assert sorted(ctl.cache.dra_informers) == sorted(C.DRA_PLURALS.values())
    for inf in ctl.cache.dra_informers.values():
        assert inf.settled(10)
    whole = f"gpupool-{pool}-gpu"
    spec = {
        "solo": (f"{whole}-1", ""),
        "gang-0": (f"{whole}-1", "g"),
        "gang-1": (f"{whole}-1", "g"),
    }
    for name, (template, gang) in spec.items():
        claim_pod(kube, ns, name, template, f"low-{sfx}", gang=gang)
    claims_made(kube, ns, spec)
    made = [f"{ns}/{claim_of(kube, ns, p)['metadata']['name']}" for p in spec]  # type: ignore[index]
    held = ctl.cache.dra_informers["resourceclaims"]
    wait_for("the cache holds the claims", lambda: all(held.get(k) for k in made), timeout=30)
    since = audit_mark(kube)

    def admitted() -> bool:
        kube.clock.advance(30)
        r = ctl.cycle()
        assert r.error is None, r.error
        return not gated(kube, ns, spec)

    wait_for("every pod admitted", admitted, timeout=120, interval=1)
    got = each_allocated(kube, ns, spec)
    for p, (at, devices, planned) in got.items():
        assert at in nodes and planned and devices == planned, (p, devices, planned)
    assert ctl.ops.written.get("resourceclaims")  # the re-created claims' versions
    ctl.cycle()  # plans from a cache that has seen them
    # read from the watches: no list of resource.k8s.io since the informers synced
    lists = [u for v, u in dra_requests(kube, since) if v == "list"]
    assert lists == [], lists
    # exact admission took the template's claims and gpupool's classes from the cache too
    # (`peek_dra_object`): no GET of either; its writes are the claims' creates and deletes
    gets = [u for v, u in dra_requests(kube, since) if v == "get"]
    assert gets == [], gets
    # and its pods from the pods' watch (`peek_pod`): no GET of one
    pod_gets = [
        e.uri
        for e in audited(kube, CONTROLLER, since)
        if e.verb == "get" and f"/namespaces/{ns}/pods/" in e.uri
    ]
    assert pod_gets == [], pod_gets
    # the DRA state read through the cache is the listed one
    assert ctl._cache() is ctl.cache
    cached = observe_cluster(ctl.api, cache=ctl.cache).dra
    listed = observe_cluster(ctl.api).dra
    key = lambda s: sorted(map(repr, s))  # noqa: E731
    for field in ("slices", "device_classes", "claims", "claim_templates", "taint_rules"):
        assert key(getattr(cached, field)) == key(getattr(listed, field)), field

    # the watches were allowed (deploy/rbac.yaml): one list each, then events, no relist
    watching = dict(ctl.cache.dra_informers)
    assert {p: i.relists for p, i in watching.items()} == {p: 1 for p in watching}
    for plural in watching:  # a watch is audited when it ends (every 5 s here)
        kube.plane.wait_audit_event(timeout=30, user=CONTROLLER, verb="watch", resource=plural)

    # the pool leaves DRA: its classes and templates are pruned, then the watches stop
    for p in spec:
        kube.core.delete_namespaced_pod(p, ns, grace_period_seconds=0)
    write_policy(tmp_path, dra_policy(sfx, ns, backend="devicePlugin"))

    def pruned() -> bool:
        kube.clock.advance(30)
        r = ctl.cycle()
        assert r.error is None, r.error
        return ctl.cache.dra_informers == {}

    wait_for("DRA objects pruned and the watches stopped", pruned, timeout=90, interval=1)
    assert ctl.ops.deleted.get("deviceclasses")  # the prunes, seen gone by the cache

    picked, unused = unused_controller_rules(
        kube, mark, lambda label: "resource.k8s.io" in label and " watch " in label
    )
    assert picked == 5 and unused == [], unused
