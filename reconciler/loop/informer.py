"""Watch-fed caches of nodes, pods, the node agents' GpuNodeStates and every other resource an
observation reads (Jobs, PodGroups, inference Deployments and StatefulSets, HPAs and
ScaledObjects, ResourceQuotas, PriorityClasses, the gated namespaces, Kueue's objects: list,
then watch from the list's resourceVersion), and, while the controller reads DRA, of the five
resource.k8s.io/v1 resources (`ClusterCache.watch_dra`).

The controller reads its observed state from these instead of listing every pod (and every
node's GpuNodeState, and thirteen other resources over the whole cluster) each cycle. An
informer takes typed lists (the client's models) and custom objects' lists
(`CustomObjectsApi`: dicts) alike. A list answered 404 (the CRD is not installed) leaves the
informer `absent`, one answered 403 `forbidden`, retried at growing intervals up to
`ABSENT_RETRY_SECONDS`: readers list for themselves meanwhile, as before the first list.
A watch that ends is resumed from the last resourceVersion seen (bookmarks included); a 410
Gone (the server compacted past it) or any error relists, and so does a watch silent for
longer than the server's own timeout plus a grace (`Informer.read_timeout`). `synced` is set
after the first list; until then readers get None and fall back to a list of their own.

Read your own writes: a cache lags the server, so right after gpupool admits a pod the next
cycle could still see it gated and its cards free, and admit a second pod onto them. Each
informer keeps the newest resourceVersion it has processed (lists, events and bookmarks);
`ClusterCache.caught_up` waits until that reaches the resourceVersion the server returned
for gpupool's own last write of that kind, and the controller lists afresh when it does not
in time. Resource versions of one resource are comparable as integers since Kubernetes 1.35
(KEP-5504, Comparable Resource Version, stable in v1.35); kube-controller-manager's own
controllers do the same since v1.36 (KEP-5647, Stale Controller Handling: they compare their
writes with the informer store's `LastStoreSyncResourceVersion` and wait).
DRA writes are gpupool's claims (exact admission makes a pinned claim and deletes the old one),
DeviceClasses, ResourceClaimTemplates and DeviceTaintRules: their resourceVersions count the
same way, and a delete (answered with a Status, no resourceVersion) by the uid it removed,
which the cache must no longer hold. A DRA informer behind at the deadline does not drop the
whole cache: that resource alone is listed (`dra_objects` answers None). The other resources
gpupool writes (Jobs it suspends or annotates, the workloads and autoscalers it scales,
ResourceQuotas, PriorityClasses, Kueue's objects) are recorded and read the same way
(`ClusterCache.listed`), by their `resource.group` names (conventions: C.JOBS, ...).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from reconciler import conventions as C
from reconciler.conventions import raw_resource_version, resource_version
from reconciler.observe.kube_dra import DraMemo

log = logging.getLogger("gpupool.informer")
CONNECT_TIMEOUT = 5.0
ABSENT_RETRY_SECONDS = 30.0
"""How often an informer whose list is answered 404 (a CRD not installed) or 403 tries again."""
ABSENT_CONFIRMED = 4
"""404s in a row (over `backoff_seconds` x 7, 7 s by default) after which the cache answers
404 for a resource without a request (`ClusterCache.listed`)."""
WATCH_CONNECTIONS = 32
"""The connection pool of the watches' own client (`_watch_client`): one per informer (three,
thirteen object resources, five of DRA), and room for their relists."""


class Informer:
    def __init__(
        self,
        list_fn: Callable[..., Any],
        *,
        name: str,
        timeout_seconds: int = 60,
        read_grace_seconds: float = 15.0,
        backoff_seconds: float = 1.0,
        on_event: Callable[[str, Any], None] | None = None,
    ):
        self.list_fn = list_fn
        self.on_event = on_event
        """Called with (ADDED | MODIFIED | DELETED, object) after the cache took each event."""
        self.name = name
        self.timeout_seconds = timeout_seconds
        self.read_timeout = timeout_seconds + read_grace_seconds
        """Client-side bound on a list, and on the silence of a watch: the server ends a watch
        after `timeout_seconds` (and sends bookmarks meanwhile), so a watch that says nothing for
        longer is hung (a proxy or load balancer that keeps the connection and forwards
        nothing): urllib3's read timeout breaks it and the informer relists."""
        self.backoff_seconds = backoff_seconds
        self.synced = threading.Event()
        self.relists = 0
        self.rv: int | None = None
        """The newest resourceVersion processed (list, event or bookmark)."""
        self.absent = False
        """The last list was answered 404 (a CRD not installed): nothing to wait for."""
        self.forbidden = False
        """The last list was answered 403 (gpupool's role does not grant it): not synced, the
        readers list for themselves (and meet the 403 there); tried again like `absent`."""
        self.refusals = 0
        """Lists answered 403 or 404 in a row: each waits twice as long as the one before
        (`backoff_seconds` first, `ABSENT_RETRY_SECONDS` at most)."""
        self._items: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._advanced = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None

    @staticmethod
    def _key(obj: Any) -> str:
        if isinstance(obj, dict):  # a custom object (CustomObjectsApi answers JSON)
            meta = obj.get("metadata") or {}
            return f"{meta.get('namespace') or ''}/{meta.get('name')}"
        return f"{obj.metadata.namespace or ''}/{obj.metadata.name}"

    def items(self) -> list[Any] | None:
        if not self.synced.is_set():
            return None
        with self._lock:
            return list(self._items.values())

    def get(self, key: str) -> Any | None:
        """One cached object by "namespace/name" ("/name" cluster-scoped); None when not held
        or not synced."""
        if not self.synced.is_set():
            return None
        with self._lock:
            return self._items.get(key)

    def settled(self, timeout: float) -> bool:
        """Wait until the first list is in, or was answered 404 (`absent`)."""
        deadline = time.monotonic() + timeout
        while not self.synced.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
            if self.absent:
                return True
            if time.monotonic() >= deadline:
                return False
        return True

    def caught_up(self, rv: int | None, timeout: float, gone: dict[str, str] | None = None) -> bool:
        """Wait until this cache has processed resourceVersion `rv` (or a later one), and no
        longer holds the objects of `gone` (key -> the uid deleted; another object made since
        under that name is not the one deleted)."""
        with self._advanced:
            return self._advanced.wait_for(lambda: self._fresh(rv, gone), timeout=timeout)

    def fresh(self, rv: int | None, gone: dict[str, str] | None = None) -> bool:
        """`caught_up` without waiting."""
        with self._lock:
            return self._fresh(rv, gone)

    def _fresh(self, rv: int | None, gone: dict[str, str] | None) -> bool:
        if rv is not None and (self.rv is None or self.rv < rv):
            return False
        for key, uid in (gone or {}).items():
            held = self._items.get(key)
            if held is not None and _uid(held) in (uid, ""):
                return False
        return True

    def _seen(self, value: Any) -> None:
        rv = resource_version(value)
        if rv is not None and (self.rv is None or rv > self.rv):
            self.rv = rv
            self._advanced.notify_all()

    def start(self, stop: threading.Event) -> Informer:
        self._thread = threading.Thread(
            target=self._run, args=(stop,), name=f"informer-{self.name}", daemon=True
        )
        self._thread.start()
        return self

    def _relist(self) -> str:
        result = self.list_fn(_request_timeout=(CONNECT_TIMEOUT, self.read_timeout))
        if isinstance(result, dict):  # a custom objects' list: JSON
            items = result.get("items") or []
            rv = (result.get("metadata") or {}).get("resourceVersion")
        else:
            items, rv = result.items, result.metadata.resource_version
        with self._lock:
            self._items = {self._key(o): o for o in items}
            self._seen(rv)
        self.relists += 1
        self.absent = self.forbidden = False
        self.refusals = 0
        self.synced.set()
        return rv

    def _run(self, stop: threading.Event) -> None:
        from kubernetes import client, watch

        rv = None
        while not stop.is_set():
            try:
                if rv is None:
                    rv = self._relist()
                w = watch.Watch()
                for event in w.stream(
                    self.list_fn,
                    resource_version=rv,
                    timeout_seconds=self.timeout_seconds,
                    allow_watch_bookmarks=True,
                    _request_timeout=(CONNECT_TIMEOUT, self.read_timeout),
                ):
                    if stop.is_set():
                        w.stop()
                        break
                    obj = event["object"]
                    kind = event["type"]
                    rv = raw_resource_version(obj) or rv
                    with self._lock:
                        if kind == "DELETED":
                            self._items.pop(self._key(obj), None)
                        elif kind != "BOOKMARK":
                            self._items[self._key(obj)] = obj
                        self._seen(rv)
                        self._advanced.notify_all()  # a deletion `caught_up` waits for
                    if self.on_event is not None and kind != "BOOKMARK":
                        self.on_event(kind, obj)
            except client.ApiException as exc:
                if exc.status in (403, 404):
                    # 404: the CRD is not (or no longer) installed; 403: gpupool may not list
                    # it. Either can also be a moment's answer of an API server starting (its
                    # CRD handlers and authorizer not synced yet): tried again soon, then less
                    # and less often, up to every ABSENT_RETRY_SECONDS
                    if not self.refusals:
                        log.info("%s: answered %s; readers list meanwhile", self.name, exc.status)
                    self.synced.clear()  # nothing stale is served: readers list (and meet it)
                    self.absent, self.forbidden = exc.status == 404, exc.status == 403
                    self.refusals += 1
                    rv = None
                    stop.wait(
                        min(
                            max(self.backoff_seconds, ABSENT_RETRY_SECONDS),
                            self.backoff_seconds * 2 ** (self.refusals - 1),
                        )
                    )
                    continue
                if exc.status == 410:
                    log.info("%s: resourceVersion %s is gone; relisting", self.name, rv)
                else:
                    log.warning("%s: watch failed (%s); relisting", self.name, exc.status)
                rv = None
                stop.wait(self.backoff_seconds if exc.status != 410 else 0)
            except Exception as exc:  # noqa: BLE001 - connection drops, apiserver restarts
                log.warning("%s: watch broke (%s); relisting", self.name, type(exc).__name__)
                rv = None
                stop.wait(self.backoff_seconds)


class _ClaimReleases:
    """Calls `release()` when a ResourceClaim seen allocated (in a watch event: one allocated
    before the informer's list counts once an event shows it) loses its allocation or is
    deleted. Claims never allocated (the resourceclaim controller's, gpupool's pinned ones
    before the scheduler allocates them, the template's claim exact admission deletes) do not
    call it. `owns(pod uid)`: whether such a claim, still allocated, is owned by that pod."""

    def __init__(self, release: Callable[[], None]):
        self.release = release
        self.held: dict[str, tuple[str, ...]] = {}  # claim uid -> its owners' uids
        self._lock = threading.Lock()

    def event(self, kind: str, claim: Any) -> None:
        uid = _uid(claim)
        allocated = bool(
            ((claim.get("status") or {}) if isinstance(claim, dict) else {}).get("allocation")
        )
        with self._lock:
            if kind != "DELETED" and allocated:
                owners = (claim.get("metadata") or {}).get("ownerReferences") or []
                self.held[uid] = tuple(str(o.get("uid") or "") for o in owners)
                return
            released = self.held.pop(uid, None) is not None
        if released:
            self.release()

    def owns(self, pod_uid: str) -> bool:
        with self._lock:
            return bool(pod_uid) and any(pod_uid in owners for owners in self.held.values())

    def clear(self) -> None:
        with self._lock:
            self.held.clear()


def _uid(obj: Any) -> str:
    if isinstance(obj, dict):
        return str((obj.get("metadata") or {}).get("uid") or "")
    return str(getattr(getattr(obj, "metadata", None), "uid", None) or "")


class _Either:
    """A stop that is set when either of two events is (the process's, or the DRA watches')."""

    def __init__(self, a: threading.Event, b: threading.Event):
        self.a, self.b = a, b

    def is_set(self) -> bool:
        return self.a.is_set() or self.b.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = 0.2 if deadline is None else min(0.2, deadline - time.monotonic())
            if left <= 0:
                break
            self.b.wait(left)
        return self.is_set()


def _selected(list_fn: Callable[..., Any], selector: str) -> Callable[..., Any]:
    """`list_fn` with a label selector, with its signature: the client's watch reads the type
    to decode events into from the return annotation (`kubernetes.watch.Watch.get_return_type`;
    without it the events would come as dicts, unlike the list's objects)."""

    @functools.wraps(list_fn)
    def listed(*args: Any, **kw: Any) -> Any:
        return list_fn(*args, label_selector=selector, **kw)

    return listed


def _listers(api_client: Any) -> dict[str, Callable[..., Any]]:
    """How to list each resource an observation reads besides nodes, pods, GpuNodeStates and
    DRA, by `resource.group`: the same requests, selectors included, as the readers in
    reconciler/observe make without a cache."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api_client)
    apps = client.AppsV1Api(api_client)
    autoscaling = client.AutoscalingV2Api(api_client)

    def crd(group: str, version: str, plural: str) -> Callable[..., Any]:
        return functools.partial(custom.list_cluster_custom_object, group, version, plural)

    return {
        C.JOBS: client.BatchV1Api(api_client).list_job_for_all_namespaces,
        C.COSCHEDULING_POD_GROUPS: crd(C.POD_GROUP_GROUP, C.POD_GROUP_VERSION, C.POD_GROUP_PLURAL),
        C.WORKLOAD_POD_GROUPS: crd(
            C.WORKLOAD_API_GROUP, C.WORKLOAD_API_VERSION, C.WORKLOAD_POD_GROUP_PLURAL
        ),
        C.DEPLOYMENTS: _selected(apps.list_deployment_for_all_namespaces, C.INFERENCE_SELECTOR),
        C.STATEFUL_SETS: _selected(apps.list_stateful_set_for_all_namespaces, C.INFERENCE_SELECTOR),
        C.HPAS: autoscaling.list_horizontal_pod_autoscaler_for_all_namespaces,
        C.SCALED_OBJECTS: crd(C.KEDA_GROUP, C.KEDA_VERSION, C.SCALED_OBJECT_PLURAL),
        C.RESOURCE_QUOTAS: client.CoreV1Api(api_client).list_resource_quota_for_all_namespaces,
        C.PRIORITY_CLASSES: client.SchedulingV1Api(api_client).list_priority_class,
        C.GATED_NAMESPACES: _selected(
            client.CoreV1Api(api_client).list_namespace, C.GATED_NAMESPACE_SELECTOR
        ),
        **{
            C.KUEUE_RESOURCES[kind]: crd(C.KUEUE_GROUP, C.KUEUE_VERSION, plural)
            for kind, plural in C.KUEUE_PLURALS.items()
        },
    }


def _watch_client(api_client: Any) -> Any:
    """A client of the watches' own, to the same server with the same credentials: a watch
    holds its connection while it lasts, and twenty of them in the controller's pool (ten
    connections by default, the CPUs x 5) would leave each request of a cycle a new connection
    (urllib3: "Connection pool is full, discarding connection")."""
    import copy

    from kubernetes import client

    cfg = copy.copy(api_client.configuration)
    cfg.connection_pool_maxsize = WATCH_CONNECTIONS
    return client.ApiClient(cfg)


class ClusterCache:
    """The informers the controller observes through: nodes, pods, GpuNodeStates, every other
    resource an observation reads (`object_informers`, `listed`) and, while DRA is read,
    resource.k8s.io's (`watch_dra`). gpupool never writes a GpuNodeState (the node agents do);
    what `caught_up` waits for there is the newest one gpupool read
    (`ops.written["nodestates"]`: the MIG step's wait for an agent's new layout), so that the
    next plan does not see an older one. The watches go through a client of their own
    (`_watch_client`), not `api_client`'s connection pool."""

    def __init__(
        self,
        api_client: Any,
        *,
        on_pod_event: Callable[[str, Any], None] | None = None,
        on_claim_release: Callable[[], None] | None = None,
        **kw: Any,
    ):
        """`on_pod_event`: called with each pod event; `on_claim_release`: called when a
        ResourceClaim the DRA informer saw allocated loses its allocation or is deleted (while
        DRA is watched): the cards the planner fenced for it (`dra-claim-unreleased`) are free
        now, and no pod event says so (the pod went before)."""
        from kubernetes import client

        api_client = _watch_client(api_client)
        core = client.CoreV1Api(api_client)
        self.node_informer = Informer(core.list_node, name="nodes", **kw)
        self.pod_informer = Informer(
            core.list_pod_for_all_namespaces, name="pods", on_event=on_pod_event, **kw
        )
        custom = client.CustomObjectsApi(api_client)
        self.node_state_informer = Informer(
            functools.partial(
                custom.list_cluster_custom_object, C.GROUP, C.VERSION, C.NODE_STATE_PLURAL
            ),
            name="gpunodestates",
            **kw,
        )
        self.object_informers = {
            resource: Informer(list_fn, name=resource, **kw)
            for resource, list_fn in _listers(api_client).items()
        }
        """`resource.group` (conventions: C.JOBS, ...) -> its informer: everything else an
        observation reads (`listed`). They cost a watch each and no request per cycle, where
        thirteen lists went out every cycle before (and each of them over the whole cluster)."""
        self.informers = (
            self.node_informer,
            self.pod_informer,
            self.node_state_informer,
            *self.object_informers.values(),
        )
        self._custom, self._kw = custom, kw
        self._stop = threading.Event()
        self.dra_informers: dict[str, Informer] = {}
        """resource.k8s.io/v1 plural -> its informer, while DRA is watched (`watch_dra`)."""
        self._dra_stop = threading.Event()
        self._floor: dict[str, tuple[int | None, dict[str, str]]] = {}
        """Per DRA plural or object resource: gpupool's last write there and what it deleted
        (`caught_up`), which its informer must have seen before a reader takes its objects."""
        self.dra_memo: DraMemo | None = None
        """The DRA objects converted once per version (`read_dra` reads it here), while DRA is
        watched: without it a cycle reads DRA exactly as without a cache."""
        self._releases = _ClaimReleases(on_claim_release) if on_claim_release else None

    def on_object_event(self, resource: str, listener: Callable[[str, Any], None]) -> Informer:
        """Call `listener` with each event (ADDED | MODIFIED | DELETED, object) of one object
        resource's informer (`resource.group`, as in `object_informers`), after the cache took
        it, and return that informer: a listener reads the cache's watch instead of starting a
        second one (the signal wake: the inference Deployments and StatefulSets). A list calls
        no listener (read `items()` once synced), and neither does a relist. Listeners of one
        resource are called in the order they were added; the pod and node informers have none
        of these."""
        inf = self.object_informers[resource]
        before = inf.on_event
        if before is None:
            inf.on_event = listener
        else:

            def both(kind: str, obj: Any) -> None:
                before(kind, obj)
                listener(kind, obj)

            inf.on_event = both
        return inf

    def start(self, stop: threading.Event) -> ClusterCache:
        self._stop = stop
        for informer in self.informers:
            informer.start(stop)
        return self

    # -- DRA: resource.k8s.io/v1, watched only while the controller reads it
    def watch_dra(self, on: bool) -> None:
        """Start the DRA informers (ResourceSlices, DeviceClasses, ResourceClaims,
        ResourceClaimTemplates, DeviceTaintRules) if `on` and not started, stop them if not
        `on`: the controller reads DRA only while a pool is on it or gpupool's objects there
        are left to prune, and a cluster without a DRA pool keeps no watch of it. A stopped
        informer's thread ends at its watch's next event or timeout; a new start is a new
        informer (a fresh list)."""
        if on and not self.dra_informers:
            if self._releases is not None:  # what a stopped watch saw is not known to hold
                self._releases.clear()
            self.dra_memo = DraMemo()
            self._dra_stop = threading.Event()
            stop = _Either(self._stop, self._dra_stop)
            for plural in C.DRA_PLURALS.values():
                list_fn = functools.partial(
                    self._custom.list_cluster_custom_object, C.DRA_GROUP, C.DRA_VERSION, plural
                )
                claims = plural == C.DRA_PLURALS["ResourceClaim"] and self._releases
                on_event = self._releases.event if claims else None  # type: ignore[union-attr]
                inf = Informer(list_fn, name=plural, on_event=on_event, **self._kw)
                self.dra_informers[plural] = inf.start(stop)  # type: ignore[arg-type]
        elif not on and self.dra_informers:
            self._dra_stop.set()
            self.dra_informers = {}
            for plural in C.DRA_PLURALS.values():
                self._floor.pop(plural, None)
            self.dra_memo = None

    def dra_objects(self, plural: str) -> list[dict] | None:
        """The cached objects of one DRA resource (dicts, as listed), if its informer is synced
        and has seen gpupool's own last writes of it (`caught_up`); else None: the reader lists.
        DeviceTaintRules not served (404: resource.k8s.io/v1 before 1.37) are none."""
        inf = self.dra_informers.get(plural)
        if inf is None:
            return None
        if inf.absent and plural == C.DRA_PLURALS["DeviceTaintRule"]:
            return []
        if not self._saw_own_writes(inf):
            return None
        return inf.items()

    def dra_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """One cached DRA object (`kind` as in `C.DRA_PLURALS`), as `dra_objects` would list
        it: None when its informer is not running, not synced, or has not seen gpupool's own
        last writes of it (the floor `caught_up` set at this cycle's observation), or does
        not hold the object. Read-only: the informer's own copy (exact admission's
        `peek_dra_object`)."""
        inf = self.dra_informers.get(C.DRA_PLURALS.get(kind, ""))
        if inf is None:
            return None
        if not self._saw_own_writes(inf):
            return None
        return inf.get(f"{namespace or ''}/{name}")

    def listed(self, resource: str) -> list[Any] | None:
        """The cached objects of one resource an observation reads (`resource.group`, as in
        conventions: C.JOBS, ...; `observe.kube_common.listed` asks here first), if its
        informer is synced and has seen gpupool's own last writes there (the floor `caught_up`
        set); else None: the reader lists. A resource whose lists were answered 404
        `ABSENT_CONFIRMED` times in a row (a CRD not installed: Kueue, KEDA, the coscheduling
        or Workload API PodGroups) raises that 404, as the reader's own list would, without
        the request; a CRD installed later is seen within `ABSENT_RETRY_SECONDS`. One 404
        alone is not believed: an API server that has just started answers 404 for CRDs for a
        moment, and a reader that took Kueue or KEDA for absent would plan without them."""
        from kubernetes import client

        inf = self.object_informers.get(resource)
        if inf is None:
            return None
        if inf.absent and inf.refusals >= ABSENT_CONFIRMED:
            raise client.ApiException(status=404, reason=f"{resource} is not served")
        if not self._saw_own_writes(inf):
            return None
        return inf.items()

    def _saw_own_writes(self, inf: Informer) -> bool:
        """Whether `inf` (a DRA or object informer, named by its resource) has seen
        gpupool's last write there and no longer holds what gpupool deleted there (the floor
        `caught_up` set at this cycle's observation)."""
        rv, gone = self._floor.get(inf.name, (None, {}))
        return inf.fresh(rv, gone)

    def claims_held_by(self, pod: Any) -> bool:
        """Whether a ResourceClaim the DRA watch saw allocated, and not released since, is
        owned by `pod` (a model object): the cards of such a pod are freed when that claim is
        released (`on_claim_release`), not when the pod goes. False without that watch."""
        uid = getattr(getattr(pod, "metadata", None), "uid", None) or ""
        return self._releases is not None and bool(self.dra_informers) and self._releases.owns(uid)

    def nodes(self) -> list[Any] | None:
        return self.node_informer.items()

    def pods(self) -> list[Any] | None:
        return self.pod_informer.items()

    def pod(self, namespace: str, name: str) -> Any | None:
        """One cached pod (the informer's own model object, read-only: exact admission's
        `peek_pod`); None when not held or not synced. The pods' cache has seen gpupool's own
        pod writes up to this cycle's observation (`caught_up` waited for them), and newer
        ones as they come."""
        return self.pod_informer.get(f"{namespace}/{name}")

    def node_states(self) -> list[dict] | None:
        """The GpuNodeStates (dicts, as listed); None until synced, or while not served."""
        return self.node_state_informer.items()

    def wait_synced(self, timeout: float) -> bool:
        """The first lists are in (GpuNodeStates: or answered 404), waiting up to `timeout`
        seconds for each."""
        return (
            self.node_informer.synced.wait(timeout)
            and self.pod_informer.synced.wait(timeout)
            and self.node_state_informer.settled(timeout)
        )

    def caught_up(
        self,
        written: dict[str, int],
        timeout: float,
        deleted: dict[str, dict[str, str]] | None = None,
    ) -> bool:
        """Each cache has processed gpupool's own last write of its kind (`written`: "nodes" /
        "pods" / a DRA plural -> the resourceVersion the server returned for it; "nodestates":
        the newest GpuNodeState gpupool read) and no longer holds what gpupool deleted there
        (`deleted`: DRA plural -> {"namespace/name": uid}), waiting up to `timeout` seconds in
        all. A DRA informer not synced yet is not waited for, and one still behind at the
        deadline does not fail the rest: `dra_objects` checks the same again when read and
        answers None (that resource is listed afresh) until it is fresh."""
        deadline = time.monotonic() + timeout
        for kind, informer in (
            ("nodes", self.node_informer),
            ("pods", self.pod_informer),
            ("nodestates", self.node_state_informer),
        ):
            rv = written.get(kind)
            if rv is not None and not informer.caught_up(rv, max(0.0, deadline - time.monotonic())):
                return False
        deleted = deleted or {}
        self._floor = {
            p: (written.get(p), dict(deleted.get(p) or {}))
            for p in (*C.DRA_PLURALS.values(), *self.object_informers)
        }
        for name, inf in [*self.dra_informers.items(), *self.object_informers.items()]:
            rv, gone = self._floor[name]
            if not inf.synced.is_set() or (rv is None and not gone):
                continue
            if not inf.caught_up(rv, max(0.0, deadline - time.monotonic()), gone):
                log.info("%s: has not seen gpupool's last write; listed afresh", name)
        return True
