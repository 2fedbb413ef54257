"""The controller's watch-fed cache (reconciler/loop/informer.py, ClusterCache) on the real API
server, as the controller's ServiceAccount: it lists, follows the watch, resumes a watch that
ends from the last resourceVersion (no relist), relists on 410 Gone and after an API server
restart, and the observed state read through it equals the listed one. Bookmarks advance the
cache's resourceVersion without a relist, and the controller plans from the cache only once it
has seen gpupool's own last writes (read your own writes), listing afresh otherwise.

The 410 is injected by the FaultProxy (a real server answers 410 to a watch from a compacted
resourceVersion, and compaction cannot be asked for); everything else is the server's own.
"""

from __future__ import annotations

import threading
import time

import pytest

from reconciler import conventions as C
from reconciler.loop import metrics
from reconciler.loop.informer import ABSENT_CONFIRMED, ClusterCache
from reconciler.observe.kube import CardMemo, WorkloadMemo, observe_cluster
from tests.faultproxy.proxy import FaultProxy
from tests.support.wait import wait_for

from .harness import CONTROLLER_SA, NS, Clock, add_gpu_node, controller, create_pod

PODS = r"^/api/v1/pods$"


def names(items) -> set[str]:
    return {f"{o.metadata.namespace or ''}/{o.metadata.name}" for o in items or []}


def listed_pods(kube) -> set[str]:
    return names(kube.core.list_pod_for_all_namespaces().items)


def pod(kube, ns: str, name: str) -> None:
    """A pod the cache sees come and go (no GPU, never scheduled: nothing else touches it)."""
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": name},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "c", "image": "x"}]},
        },
    )


@pytest.fixture
def proxy(kube):
    pki = kube.plane.cert_dir
    with FaultProxy(kube.plane.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key") as p:
        yield p


@pytest.fixture
def stop(kube):
    ev = threading.Event()
    kube.cleanup(ev.set)
    return ev


def test_cache_lists_follows_resumes_and_relists_on_410(kube, proxy, stop):
    ns = kube.new_namespace()
    add_gpu_node(kube, "informer-1", pool="informer", state=False)
    pod(kube, ns, "before")
    token = kube.plane.service_account_token(NS, CONTROLLER_SA, create=False)
    api = proxy.api_client(token)
    kube.cleanup(api.close)
    # watches end every second (resumed each time); an error would cost a 30 s back-off
    cache = ClusterCache(api, timeout_seconds=1, backoff_seconds=30).start(stop)
    assert cache.wait_synced(10)
    informer = cache.pod_informer
    assert f"{ns}/before" in names(cache.pods()) and "/informer-1" in names(cache.nodes())

    pod(kube, ns, "added")
    wait_for(
        "an added pod", lambda: f"{ns}/added" in names(cache.pods()), timeout=10, interval=0.05
    )
    kube.core.delete_namespaced_pod("before", ns, grace_period_seconds=0)
    wait_for(
        "a deleted pod",
        lambda: f"{ns}/before" not in names(cache.pods()),
        timeout=10,
        interval=0.05,
    )
    kube.core.patch_node("informer-1", {"metadata": {"labels": {"x": "1"}}})
    wait_for(
        "a node change",
        lambda: any((n.metadata.labels or {}).get("x") == "1" for n in cache.nodes()),
        timeout=10,
        interval=0.05,
    )

    # a watch that ends is resumed from the last resourceVersion: no second list
    def finished_watches() -> list:
        # (finished ones: the one in flight may not have its answer's status logged yet)
        return [
            r
            for r in proxy.requests("GET", PODS)
            if "watch=true" in r.query and r.duration is not None
        ]

    # each resumed from where the last one got to (watches that ended before the changes
    # above, on a slow machine, resume from the list's: wait for one after them)
    wait_for(
        "a pod watch resumed from a later resourceVersion",
        lambda: len({w.query for w in finished_watches()}) > 1,
        timeout=10,
        interval=0.05,
    )
    lists = [r for r in proxy.requests("GET", PODS) if "watch=true" not in r.query]
    watches = finished_watches()
    assert len(lists) == 1 and informer.relists == 1
    assert len(watches) >= 2
    assert all("resourceVersion=" in w.query and w.status == 200 for w in watches)

    # history compacted past the cache's resourceVersion while things changed: the next watch
    # gets 410 Gone; the cache must relist (at once), not resume, to lose the deletion
    def compacted(req) -> bool:
        kube.core.delete_namespaced_pod("added", ns, grace_period_seconds=0)
        pod(kube, ns, "while-compacted")
        return True

    gone = proxy.fail(
        410,
        "GET",
        PODS,
        times=1,
        when=lambda r: r.is_watch and compacted(r),
        reason="Expired",
        message="too old resource version",
    )
    assert gone.wait(5)
    wait_for("a relist after 410", lambda: informer.relists == 2, timeout=5, interval=0.05)
    wait_for(
        "the cache matching a list",
        lambda: names(cache.pods()) == listed_pods(kube),
        timeout=5,
        interval=0.05,
    )
    assert f"{ns}/while-compacted" in names(cache.pods()) and f"{ns}/added" not in names(
        cache.pods()
    )
    after = [
        r
        for r in proxy.requests("GET", PODS)
        if r.started > proxy.requests(fault="fail")[0].started
    ]
    assert "watch=true" not in after[0].query  # the very next request is the list
    assert cache.node_informer.relists == 1  # the node watch was not touched


def test_cache_relists_after_an_apiserver_restart(kube, stop):
    ns = kube.new_namespace()
    pod(kube, ns, "before")
    cache = ClusterCache(kube.controller_client(), timeout_seconds=5, backoff_seconds=0.2).start(
        stop
    )
    assert cache.wait_synced(10)
    relists = (cache.pod_informer.relists, cache.node_informer.relists)
    kube.plane.stop_apiserver()
    time.sleep(1.0)  # the watches break; the relists meet a closed port
    kube.plane.start_apiserver()
    wait_for(
        "relists after the restart",
        lambda: (
            cache.pod_informer.relists > relists[0] and cache.node_informer.relists > relists[1]
        ),
        timeout=20,
        interval=0.05,
    )
    pod(kube, ns, "after")
    kube.core.delete_namespaced_pod("before", ns, grace_period_seconds=0)
    wait_for(
        "changes after the restart",
        lambda: f"{ns}/after" in names(cache.pods()) and f"{ns}/before" not in names(cache.pods()),
        timeout=10,
        interval=0.05,
    )
    wait_for(
        "the cache matching a list",
        lambda: names(cache.pods()) == listed_pods(kube),
        timeout=10,
        interval=0.05,
    )
    assert names(cache.nodes()) == names(kube.core.list_node().items)


def test_observed_state_from_the_cache_equals_the_listed_one(kube, stop):
    ns = kube.new_namespace()
    # a pool of this test's own: a node of another test (same pool label, 8 free cards) that the
    # scheduler's cache still holds after its deletion must not take `waiting`, which the pod
    # garbage collector then removes with that node
    pool = f"informer-{ns}"
    add_gpu_node(kube, "informer-2", pool=pool)
    create_pod(kube, ns, "job", node="informer-2", gpus=2, cls=None, pool=pool)
    create_pod(kube, ns, "waiting", gpus=8, cls=None, pool=pool)  # does not fit: Pending
    kube.settle()
    api = kube.controller_client()
    cache = ClusterCache(api, timeout_seconds=5).start(stop)
    assert cache.wait_synced(10)
    wait_for(
        "the cache matching a list",
        lambda: names(cache.pods()) == listed_pods(kube),
        timeout=10,
        interval=0.05,
    )
    listed_states = kube.custom.list_cluster_custom_object(C.GROUP, C.VERSION, C.NODE_STATE_PLURAL)[
        "items"
    ]
    wait_for(
        "the GpuNodeStates in the cache",
        lambda: (
            {s["metadata"]["name"] for s in cache.node_states() or []}
            >= {s["metadata"]["name"] for s in listed_states}
        ),
        timeout=10,
        interval=0.05,
    )
    assert cache.node_state_informer.relists == 1
    listed = observe_cluster(api)
    memo, cards = WorkloadMemo(), CardMemo()
    cached = observe_cluster(api, cache=cache, now=listed.observed_at, cards=cards, workloads=memo)
    assert cached == listed
    # observed again through the memos: a pod of this test whose version is the same in the
    # cache is the same Workload object (nothing it is read with changed here), and so is a
    # node whose Node and GpuNodeState kept theirs
    versions = {
        f"{o.metadata.namespace}/{o.metadata.name}": o.metadata.resource_version
        for o in cache.pods() or []
    }
    node_versions = _node_versions(cache)
    again = observe_cluster(api, cache=cache, now=listed.observed_at, cards=cards, workloads=memo)
    same_nodes = node_versions.items() & _node_versions(cache).items()
    assert same_nodes and cards.node_hits >= 1
    first_nodes = {n.name: n for n in cached.nodes}
    for n in again.nodes:
        if (n.name, node_versions.get(n.name)) in same_nodes:
            assert n is first_nodes[n.name], n.name
    now = {
        f"{o.metadata.namespace}/{o.metadata.name}": o.metadata.resource_version
        for o in cache.pods() or []
    }
    before = {w.key: w for w in cached.workloads}
    for w in again.workloads:
        if w.namespace == ns and versions.get(w.key) == now.get(w.key):
            assert w is before[w.key], w.key
    # the second read went through the memo's PodDelta (DRA is read here: since issue 32 the
    # delta follows the pods' claims too), which hands an unchanged pod's Workload back
    # without asking the memo's steps again
    assert memo.delta is not None and memo.delta.dra is not None
    assert "informer-2" in {n.name for n in cached.nodes}
    work = {w.key: w for w in cached.workloads if w.namespace == ns}
    assert sorted(work) == [f"{ns}/job", f"{ns}/waiting"]
    assert work[f"{ns}/job"].phase == "Running" and sorted(
        a.gpu for a in work[f"{ns}/job"].allocations
    ) == [0, 1]
    assert work[f"{ns}/waiting"].phase == "Pending"


def _node_versions(cache: ClusterCache) -> dict[str, tuple[str, str]]:
    """Node name -> the resourceVersions of its Node and its GpuNodeState in the cache."""
    states = {
        s["metadata"]["name"]: s["metadata"].get("resourceVersion", "")
        for s in cache.node_states() or []
    }
    return {
        n.metadata.name: (n.metadata.resource_version, states.get(n.metadata.name, "-"))
        for n in cache.nodes() or []
    }


def test_bookmarks_advance_the_cache_without_a_relist(kube, stop):
    """The API server sends a BOOKMARK about 2 s before a watch's timeout (and about once a
    minute) when its watch cache is newer than what the watch sent; the client hands it over
    undecoded (a dict). It moves the cache's resourceVersion on; it must not break the watch
    into a relist."""
    ns = kube.new_namespace()
    cache = ClusterCache(kube.controller_client(), timeout_seconds=6).start(stop)
    assert cache.wait_synced(10)
    informer = cache.pod_informer
    listed = informer.rv
    assert listed is not None
    # something other than a pod changes, and a consistent pod list makes the API server's
    # pod watch cache catch up with etcd (a progress request): the pod watch learns the newer
    # resourceVersion only through a bookmark
    kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "nudge"}})
    kube.core.list_pod_for_all_namespaces(limit=1)
    wait_for(
        "a bookmark's resourceVersion", lambda: informer.rv > listed, timeout=20, interval=0.05
    )
    assert informer.relists == 1 and cache.node_informer.relists == 1


def test_the_controller_plans_from_the_cache_only_once_it_saw_its_own_writes(
    kube, proxy, stop, tmp_path
):
    ns = kube.new_namespace()
    pod(kube, ns, "p")
    api = proxy.api_client(kube.plane.service_account_token(NS, CONTROLLER_SA, create=False))
    kube.cleanup(api.close)
    ctl = controller(kube, tmp_path, Clock(), api_client=api, cache_wait_seconds=0.5)
    ctl.cache = ClusterCache(api, timeout_seconds=2).start(stop)
    assert ctl.cache.wait_synced(10)
    assert ctl._cache() is ctl.cache  # gpupool has written nothing yet

    def cached_annotations() -> dict:
        [p] = [o for o in ctl.cache.pods() if o.metadata.name == "p" and o.metadata.namespace == ns]
        return dict(p.metadata.annotations or {})

    # the pod watch stops delivering (a lagging API server); gpupool writes the pod
    hang = proxy.hang_watch("GET", PODS)
    assert hang.wait(10)
    ctl.ops.annotate_pod(ns, "p", {"gpupool.io/test-written": "1"})
    assert ctl.ops.written["pods"] > ctl.cache.pod_informer.rv
    behind = metrics.CACHE_BEHIND._value.get()
    assert ctl._cache() is None  # list afresh: the cache would show the pod as before
    assert metrics.CACHE_BEHIND._value.get() == behind + 1
    assert "gpupool.io/test-written" not in cached_annotations()

    proxy.remove(hang)
    wait_for("the cache catching up", lambda: ctl._cache() is ctl.cache, timeout=20, interval=0.05)
    assert cached_annotations()["gpupool.io/test-written"] == "1"


def test_the_controller_waits_for_the_newest_gpunodestate_it_read(kube, proxy, stop, tmp_path):
    """gpupool writes no GpuNodeState, but the MIG step reads one (an agent's new layout): the
    next plan must not see an older one from the cache, so the read counts as a write."""
    add_gpu_node(kube, "informer-ns", pool="informer-ns")
    api = proxy.api_client(kube.plane.service_account_token(NS, CONTROLLER_SA, create=False))
    kube.cleanup(api.close)
    ctl = controller(kube, tmp_path, Clock(), api_client=api, cache_wait_seconds=0.5)
    ctl.cache = ClusterCache(api, timeout_seconds=2).start(stop)
    assert ctl.cache.wait_synced(10)
    informer = ctl.cache.node_state_informer
    assert "informer-ns" in {s["metadata"]["name"] for s in ctl.cache.node_states()}

    # the GpuNodeState watch stops delivering; the agent republishes; gpupool reads it
    hang = proxy.hang_watch("GET", rf"^/apis/{C.GROUP}/{C.VERSION}/{C.NODE_STATE_PLURAL}$")
    assert hang.wait(10)
    state = kube.custom.get_cluster_custom_object(
        C.GROUP, C.VERSION, C.NODE_STATE_PLURAL, "informer-ns"
    )
    status = {**state["status"], "updatedAt": "2026-12-05T03:00:00Z"}
    kube.custom.patch_cluster_custom_object_status(
        C.GROUP, C.VERSION, C.NODE_STATE_PLURAL, "informer-ns", {"status": status}
    )
    assert ctl.ops.read_node_state("informer-ns")["status"]["updatedAt"] == status["updatedAt"]
    assert ctl.ops.written["nodestates"] > informer.rv
    assert ctl._cache() is None  # list afresh: the cache holds the older state

    proxy.remove(hang)
    wait_for("the cache catching up", lambda: ctl._cache() is ctl.cache, timeout=20, interval=0.05)
    [cached] = [s for s in ctl.cache.node_states() if s["metadata"]["name"] == "informer-ns"]
    assert cached["status"]["updatedAt"] == status["updatedAt"]


def _unsettled(cache: ClusterCache) -> list[str]:
    """The object informers neither synced nor sure their resource is not served."""
    return [
        n
        for n, i in cache.object_informers.items()
        if not (i.synced.is_set() or (i.absent and i.refusals >= ABSENT_CONFIRMED))
    ]


def test_the_other_resources_come_from_the_cache_once_it_saw_gpupools_writes(
    kube, proxy, stop, tmp_path
):
    """Jobs, quotas, priority classes and the rest are read through their watches, with no
    list per cycle; a resource whose watch has not delivered gpupool's own last write there is
    listed afresh, alone (the rest still come from the cache), and a deleted object counts as
    written once the cache no longer holds it."""
    ns = kube.new_namespace()
    api = proxy.api_client(kube.plane.service_account_token(NS, CONTROLLER_SA, create=False))
    kube.cleanup(api.close)
    ctl = controller(kube, tmp_path, Clock(), api_client=api, cache_wait_seconds=0.5)
    ctl.cache = ClusterCache(api, timeout_seconds=2, backoff_seconds=0.1).start(stop)
    assert ctl.cache.wait_synced(10)
    wait_for(
        "the object informers", lambda: _unsettled(ctl.cache), timeout=20, until=lambda u: not u
    )

    # a Job made by someone else reaches the observation through the Job watch
    kube.batch.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "j"},
            "spec": {
                "suspend": True,
                "parallelism": 3,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "x"}],
                    }
                },
            },
        },
    )
    wait_for(
        "the Job in the cache",
        lambda: any(j.metadata.name == "j" for j in ctl.cache.listed(C.JOBS) or []),
        timeout=20,
        interval=0.05,
    )
    proxy.clear_log()
    observed = observe_cluster(api, cache=ctl._cache(), dra=False)
    lists = [r.path for r in proxy.requests("GET") if "watch" not in r.query]
    assert lists == [], lists  # nothing listed: each resource came from a watch (or is absent)
    assert observed.priority_classes  # the API server's own classes, from the cache

    def quotas_cached() -> bool:
        return ctl._cache() is ctl.cache and ctl.cache.listed(C.RESOURCE_QUOTAS) is not None

    # gpupool writes a quota while the quota watch stalls: quotas alone are listed afresh
    hang = proxy.hang_watch("GET", r"^/api/v1/resourcequotas$")
    assert hang.wait(10)
    body = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "gpupool-cache-test",
            "namespace": ns,
            "labels": {C.MANAGED_BY_LABEL: "gpupool"},
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": "4"}},
    }
    ctl.ops.server_side_apply(body)
    assert ctl.ops.written[C.RESOURCE_QUOTAS] > ctl.cache.object_informers[C.RESOURCE_QUOTAS].rv
    assert ctl._cache() is ctl.cache  # nodes and pods are current: the cache still serves
    assert ctl.cache.listed(C.RESOURCE_QUOTAS) is None
    assert ctl.cache.listed(C.JOBS) is not None
    proxy.clear_log()
    observed = observe_cluster(api, cache=ctl.cache, dra=False)
    assert (ns, "gpupool-cache-test") in {(q.namespace, q.name) for q in observed.quotas}
    lists = [r.path for r in proxy.requests("GET") if "watch" not in r.query]
    assert lists == ["/api/v1/resourcequotas"], lists

    proxy.remove(hang)
    wait_for("the quota watch catching up", quotas_cached, timeout=20, interval=0.05)
    # a delete: the cache serves quotas again only once it no longer holds the quota
    hang = proxy.hang_watch("GET", r"^/api/v1/resourcequotas$")
    assert hang.wait(10)
    ctl.ops.delete_resource_quota(ns, "gpupool-cache-test")
    assert f"{ns}/gpupool-cache-test" in ctl.ops.deleted[C.RESOURCE_QUOTAS]
    assert ctl._cache() is ctl.cache and ctl.cache.listed(C.RESOURCE_QUOTAS) is None
    proxy.remove(hang)
    wait_for("the delete seen", quotas_cached, timeout=20, interval=0.05)
    assert "gpupool-cache-test" not in {
        q.metadata.name for q in ctl.cache.listed(C.RESOURCE_QUOTAS) if q.metadata.namespace == ns
    }
