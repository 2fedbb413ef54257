"""Simulated kubelets (the idea of kwok, in Python) for the real control plane in
controlplane.py: nodes that exist only as API objects, whose pods "run" by status updates.

What each simulated kubelet does, through the API only:
  * registers a Node with capacity/allocatable (cpu, memory, pods and the NVIDIA extended
    resources) and the labels NVIDIA's GPU operator puts on GPU nodes (kubelet_objects.py, with
    the labels' upstream sources); reports Ready, and heartbeats a Lease in kube-node-lease as
    the kubelet does (node-lifecycle controller reads the lease to decide a node is alive);
  * sees the pods bound to it and marks each newly bound pod Running (podIP, hostIP,
    conditions, containerStatuses);
  * honours deletion like the kubelet: a pod with a deletionTimestamp is "stopped" for its
    grace period (times `grace_scale`, so tests can be fast) and then deleted with
    gracePeriodSeconds=0 and a UID precondition, which is the kubelet's final delete;
  * optionally completes pods: the annotation SUCCEED_AFTER_ANNOTATION (seconds, scaled like the
    grace period) makes the containers exit 0 and the pod Succeeded (for Jobs).

Cost: a thousand nodes in one Python process. Each real kubelet has its own pod watch
(fieldSelector spec.nodeName=<node>) and its own heartbeat; here ONE list+watch of every bound
pod (fieldSelector `spec.nodeName!=`) serves all nodes, dispatching each event to a few pod
workers by node (a node's events stay in order, one node's slow request does not hold up the
others), and a few heartbeat threads share one schedule of every node's next Lease renewal
(each node's beat offset within the period, so they spread) and status post. A node added
lists its own pods once, as a kubelet's first sync does. The threads start with the first node.

Node identity: a real kubelet authenticates as system:node:<name> (group system:nodes) and the
Node authorizer plus NodeRestriction admission confine it to its own Node, Lease and bound pods.
These simulated kubelets use the ADMIN client instead, which is simpler (one credential, no CSR
flow) and permits the same writes; tests that are about the reconciler's own RBAC use
ControlPlane.service_account_client, never these clients.
"""

from __future__ import annotations

import contextlib
import heapq
import ipaddress
import itertools
import json
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

from tests.cluster.kubelet_objects import (
    KUBELET_VERSION,
    NodeSpec,
    extended_requests,
    node_conditions,
    node_status,
    now,
    now_micro,
    pod_cidr,
    running_status,
    succeeded_status,
)

__all__ = [
    "KUBELET_VERSION",
    "LEASE_DURATION_SECONDS",
    "SUCCEED_AFTER_ANNOTATION",
    "NodeSpec",
    "SimulatedKubelets",
    "now",
    "now_micro",
    "pod_cidr",
]

log = logging.getLogger(__name__)

SUCCEED_AFTER_ANNOTATION = "kubelets.gpupool.test/succeed-after-seconds"
MERGE = "application/merge-patch+json"
LEASE_DURATION_SECONDS = 40  # the kubelet's default nodeLeaseDurationSeconds
BOUND = "spec.nodeName!="  # every pod bound to some node
POD_WORKERS = 4
BEAT_WORKERS = 3
TIMEOUT = (5, 15)  # (connect, read) s for the heartbeats' requests: a hung one delays the rest
GOLDEN = 0.6180339887  # spreads the nodes' beats over the period, whatever their number


def _abort(resp) -> None:
    """Wake a thread blocked reading a watch response: shut its socket down (closing the
    response from another thread does not interrupt a blocked read)."""
    if resp is None:
        return
    sock = getattr(getattr(resp, "connection", None), "sock", None)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        resp.close()


@dataclass
class _NodeState:
    spec: NodeSpec
    index: int
    ip: str
    capacity: dict[str, str]
    allocatable: dict[str, str]
    ready: bool = True
    ready_reason: str = "KubeletReady"
    ready_message: str = "kubelet is posting ready status"
    alive: bool = True  # False: the "kubelet" is gone; no heartbeats, no pod handling
    ready_since: str = ""  # the Ready condition's lastTransitionTime (kept until it changes)
    since: str = ""  # the other conditions' lastTransitionTime (since registration)
    uid: str = ""
    next_ip: int = 2
    last_status: float = 0.0  # time.monotonic() of the last status post
    pod_ips: dict[str, str] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    terminating: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)


class SimulatedKubelets:
    """Kubelets for any number of nodes. `client_factory()` must return a new admin
    `kubernetes.client.ApiClient` (one per thread).

    grace_scale: a terminating pod is deleted after deletionGracePeriodSeconds * grace_scale
    seconds (0 deletes at once; 1 is the real kubelet's timing).
    """

    def __init__(
        self,
        client_factory: Callable[[], client.ApiClient],
        *,
        grace_scale: float = 0.02,
        heartbeat_interval: float = 2.0,
        status_interval: float = 30.0,
    ):
        self._factory = client_factory
        self.grace_scale = grace_scale
        self.heartbeat_interval = heartbeat_interval
        self.status_interval = status_interval
        self._api = client_factory()
        self._core = client.CoreV1Api(self._api)
        self._nodes: dict[str, _NodeState] = {}
        self._lock = threading.RLock()
        self._timers: set[threading.Timer] = set()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._queues: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(POD_WORKERS)]
        self._beats: list[tuple[float, int, _NodeState]] = []  # (due, seq, node): a heap
        self._seq = itertools.count()
        self._beat_cv = threading.Condition()
        self._watch: Any = None  # the open watch response, closed by stop()
        self.errors: list[str] = []
        self.device_managers: dict[str, Any] = {}
        """Node -> its device manager (tests/nvidia/gpunode.py): `allocate(pod_key, requests)`
        when a pod is admitted (raises when the devices are not there) and `release(pod_key)`
        when it is gone. Without one, extended resources are not checked at admission."""

    # ---- nodes ---------------------------------------------------------------------------

    def add_node(self, spec: NodeSpec | str, *, wait: bool = True, **kw: Any) -> str:
        """Register and start a node; with wait, return once the node-lifecycle controller has
        lifted the not-ready taint that admission puts on every new Node (so it is schedulable)."""
        if isinstance(spec, str):
            spec = NodeSpec(name=spec, **kw)
        with self._lock:
            self._start()
            index = len(self._nodes) + 1
            res = spec.resources()
            st = _NodeState(
                spec=spec,
                index=index,
                ip=str(ipaddress.ip_address("172.30.0.0") + index),
                capacity=dict(res),
                allocatable=dict(res),
            )
            self._nodes[spec.name] = st
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": spec.name, "labels": spec.node_labels()},
            "spec": {"podCIDR": pod_cidr(index), "podCIDRs": [pod_cidr(index)]},
        }
        if spec.taints:
            body["spec"]["taints"] = list(spec.taints)
        created = self._core.create_node(body)
        st.uid = created.metadata.uid
        self._post_status(st)
        self._renew_lease(st, self._api)
        first = self.heartbeat_interval * (0.5 + 0.5 * ((index * GOLDEN) % 1.0))
        self._schedule(st, time.monotonic() + first)
        self._sync_node(st)
        if wait:
            self.wait_schedulable(spec.name)
        return spec.name

    def wait_schedulable(self, name: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            node = self._core.read_node(name)
            keys = {t.key for t in node.spec.taints or []}
            if not keys & {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {name} still tainted {sorted(keys)} after {timeout}s")
            time.sleep(0.2)

    def node_names(self) -> list[str]:
        return list(self._nodes)

    def set_not_ready(
        self, name: str, reason: str = "KubeletNotReady", message: str = "simulated"
    ) -> None:
        """Report the node's Ready condition False (the kubelet is up and says so; the lease
        keeps being renewed). The node-lifecycle controller then taints it
        node.kubernetes.io/not-ready:NoExecute."""
        st = self._nodes[name]
        if st.ready:
            st.ready_since = now()
        st.ready, st.ready_reason, st.ready_message = False, reason, message
        self._post_status(st)

    def set_ready(self, name: str) -> None:
        st = self._nodes[name]
        was_dead = not st.alive
        if not (st.ready and st.alive):  # back: Ready from now (Unknown while it was dead)
            st.ready_since = now()
        st.ready, st.ready_reason = True, "KubeletReady"
        st.ready_message = "kubelet is posting ready status"
        st.alive = True
        self._post_status(st)
        if was_dead:  # a restarted kubelet syncs its pods: it ends those deleted meanwhile
            core = client.CoreV1Api(self._api)
            selector = f"spec.nodeName={name}"
            for pod in core.list_pod_for_all_namespaces(field_selector=selector).items:
                self._on_pod(st, core, self._api.sanitize_for_serialization(pod))

    def kill(self, name: str) -> None:
        """The kubelet dies: no more lease renewals or status posts, pods are left as they are
        (deleted pods stay Terminating). After node-monitor-grace-period the node-lifecycle
        controller sets Ready=Unknown and taints the node unreachable."""
        self._nodes[name].alive = False

    def set_resources(
        self,
        name: str,
        allocatable: Mapping[str, str | None],
        capacity: Mapping[str, str | None] | None = None,
    ) -> None:
        """Change what the node advertises (a value of None removes the resource), as the
        kubelet does when a device plugin's device count changes. `capacity` defaults to the
        same changes as `allocatable`."""
        st = self._nodes[name]
        capacity = allocatable if capacity is None else capacity
        for target, changes in ((st.allocatable, allocatable), (st.capacity, capacity)):
            for k, v in changes.items():
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = str(v)
        self._post_status(st, removed=[k for k, v in allocatable.items() if v is None])

    def stop(self) -> None:
        self._stopped.set()
        for st in self._nodes.values():
            st.stop.set()
        _abort(self._watch)
        with self._lock:
            for t in list(self._timers):
                t.cancel()
        for q in self._queues:
            q.put(None)
        with self._beat_cv:
            self._beat_cv.notify_all()
        deadline = time.monotonic() + 5
        for t in self._threads:  # daemon threads: one still in a request exits after it
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def remove_node(self, name: str, timeout: float = 30) -> None:
        """Stop this node's kubelet and delete its Node (waiting until it is gone), so a later
        test can register a node of the same name."""
        with self._lock:
            st = self._nodes.pop(name, None)
        self.device_managers.pop(name, None)
        if st is not None:
            st.stop.set()
            self._drain(st)
        with contextlib.suppress(ApiException):
            self._core.delete_node(name)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self._core.read_node(name)
            except ApiException as e:
                if e.status == 404:
                    return
                raise
            time.sleep(0.1)
        raise TimeoutError(f"node {name} not deleted after {timeout}s")

    def delete_nodes(self) -> None:
        self.stop()
        for name in self._nodes:
            with contextlib.suppress(ApiException):
                self._core.delete_node(name)

    # ---- the shared threads ----------------------------------------------------------------

    def _start(self) -> None:
        """The pod watch, the pod workers and the heartbeat threads (once, under the lock)."""
        if self._threads or self._stopped.is_set():
            return
        targets: list[tuple[Callable, tuple, str]] = [(self._watch_loop, (), "kubelets-watch")]
        for i, q in enumerate(self._queues):
            targets.append((self._pod_worker, (q,), f"kubelets-pods-{i}"))
        targets += [(self._beat_loop, (), f"kubelets-beat-{i}") for i in range(BEAT_WORKERS)]
        for target, args, name in targets:
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            self._threads.append(t)
            t.start()

    def _queue(self, st: _NodeState) -> queue.SimpleQueue:
        return self._queues[st.index % len(self._queues)]

    def _dispatch(self, kind: str, pod: dict) -> None:
        """Hand a pod event to its node's worker; pods of nodes not (or no longer) simulated
        here are none of these kubelets' business."""
        st = self._nodes.get((pod.get("spec") or {}).get("nodeName") or "")
        if st is not None:
            self._queue(st).put((st, kind, pod))

    def _drain(self, st: _NodeState, timeout: float = 5) -> None:
        """Wait until `st`'s worker has handled what was queued for it before now."""
        done = threading.Event()
        self._queue(st).put((st, "FLUSH", done))
        done.wait(timeout)

    def _pod_worker(self, q: queue.SimpleQueue) -> None:
        core = client.CoreV1Api(self._factory())
        while (item := q.get()) is not None:
            st, kind, pod = item
            if kind == "FLUSH":
                pod.set()
            elif st.stop.is_set():
                continue
            elif kind == "DELETED":
                self._forget(st, pod)
            else:
                self._on_pod(st, core, pod)

    def _sync_node(self, st: _NodeState) -> None:
        """A node's first sync: the pods already bound to it (the shared watch saw them before
        the node was ours)."""
        resp = self._core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={st.spec.name}", _preload_content=False
        )
        for pod in json.loads(resp.data).get("items") or []:
            self._queue(st).put((st, "SYNC", pod))

    def _watch_loop(self) -> None:
        core = client.CoreV1Api(self._factory())
        rv = None
        while not self._stopped.is_set():
            try:
                if rv is None:
                    resp = core.list_pod_for_all_namespaces(
                        field_selector=BOUND, _preload_content=False, _request_timeout=(5, 60)
                    )
                    data = json.loads(resp.data)
                    for pod in data.get("items") or []:
                        self._dispatch("SYNC", pod)
                    rv = data["metadata"]["resourceVersion"]
                rv = self._watch_once(core, rv)
            except Exception as e:  # apiserver restart, timeouts: relist after a pause
                log.debug("pod watch: %r", e)
                rv = None
                self._stopped.wait(0.5)

    def _watch_once(self, core: client.CoreV1Api, rv: str) -> str | None:
        """One watch request from `rv`; the resourceVersion to go on from (None: relist)."""
        resp = core.list_pod_for_all_namespaces(
            field_selector=BOUND,
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=5,
            _preload_content=False,
            _request_timeout=(5, 15),
        )
        self._watch = resp
        try:
            for line in iter_resp_lines(resp):
                if self._stopped.is_set():
                    break
                ev = json.loads(line)
                obj = ev.get("object") or {}
                if ev.get("type") == "ERROR":
                    return None  # 410 Gone or similar: relist
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if ev.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                    self._dispatch(ev["type"], obj)
        finally:
            self._watch = None
            resp.release_conn()
        return rv

    # ---- node status and lease -------------------------------------------------------------

    def _schedule(self, st: _NodeState, due: float) -> None:
        with self._beat_cv:
            heapq.heappush(self._beats, (due, next(self._seq), st))
            self._beat_cv.notify()

    def _beat_loop(self) -> None:
        """Take the next node due, renew its Lease (and post its status when that is due),
        schedule its next beat; a few of these share the one schedule."""
        api = self._factory()
        while not self._stopped.is_set():
            with self._beat_cv:
                wait = self._beats[0][0] - time.monotonic() if self._beats else 1.0
                if wait > 0:
                    self._beat_cv.wait(min(wait, 1.0))
                    continue
                due, _, st = heapq.heappop(self._beats)
            if st.stop.is_set() or self._nodes.get(st.spec.name) is not st:
                continue  # removed: its beats end
            if st.alive:
                try:
                    self._renew_lease(st, api)
                    if time.monotonic() - st.last_status >= self.status_interval:
                        self._post_status(st, api=api)
                except Exception as e:  # the apiserver may be restarting; try again next beat
                    log.debug("heartbeat %s: %r", st.spec.name, e)
            self._schedule(st, max(due + self.heartbeat_interval, time.monotonic()))

    def _post_status(self, st: _NodeState, removed: list[str] = (), api=None) -> None:
        core = client.CoreV1Api(api or self._api)
        # Keep lastTransitionTime where the status did not change, as the kubelet does.
        try:
            current = core.read_node_status(st.spec.name, _request_timeout=TIMEOUT)
            old = {c.type: c for c in (current.status.conditions or [])}
        except ApiException:
            old = {}
        conds = node_conditions(st)
        for c in conds:
            o = old.get(c["type"])
            if o is not None and o.status == c["status"] and o.last_transition_time is not None:
                c["lastTransitionTime"] = o.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        status = node_status(st, conds, removed)
        core.patch_node_status(
            st.spec.name, {"status": status}, _content_type=MERGE, _request_timeout=TIMEOUT
        )
        st.last_status = time.monotonic()

    def _renew_lease(self, st: _NodeState, api) -> None:
        coord = client.CoordinationV1Api(api)
        name = st.spec.name
        try:
            coord.patch_namespaced_lease(
                name,
                "kube-node-lease",
                {"spec": {"renewTime": now_micro()}},
                _content_type=MERGE,
                _request_timeout=TIMEOUT,
            )
        except ApiException as e:
            if e.status != 404:
                raise
            coord.create_namespaced_lease(
                "kube-node-lease",
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {
                        "name": name,
                        "namespace": "kube-node-lease",
                        "ownerReferences": [
                            {"apiVersion": "v1", "kind": "Node", "name": name, "uid": st.uid}
                        ],
                    },
                    "spec": {
                        "holderIdentity": name,
                        "leaseDurationSeconds": LEASE_DURATION_SECONDS,
                        "renewTime": now_micro(),
                    },
                },
                _request_timeout=TIMEOUT,
            )

    # ---- pods ------------------------------------------------------------------------------

    def _forget(self, st: _NodeState, pod: dict) -> None:
        uid = pod["metadata"]["uid"]
        with self._lock:
            st.started.discard(uid)
            st.terminating.discard(uid)
            st.pod_ips.pop(uid, None)

    def _on_pod(self, st: _NodeState, core: client.CoreV1Api, pod: dict) -> None:
        if not st.alive:
            return
        meta, status = pod["metadata"], pod.get("status") or {}
        uid = meta["uid"]
        try:
            if meta.get("deletionTimestamp"):
                with self._lock:
                    if uid in st.terminating:
                        return
                    st.terminating.add(uid)
                grace = meta.get("deletionGracePeriodSeconds") or 0
                self._after(grace * self.grace_scale, self._final_delete, st, pod)
                return
            if status.get("phase") in ("Succeeded", "Failed"):
                return
            with self._lock:
                if uid in st.started:
                    return
                st.started.add(uid)
            devices = self.device_managers.get(st.spec.name)
            if devices is not None:
                try:
                    devices.allocate(f"{meta['namespace']}/{meta['name']}", extended_requests(pod))
                except Exception as exc:  # noqa: BLE001 - the kubelet's admission refuses the pod
                    self._mark_failed(
                        core, pod, "UnexpectedAdmissionError", f"Allocate failed: {exc}"
                    )
                    return
            ip = self._pod_ip(st, uid, bool(pod["spec"].get("hostNetwork")))
            self._patch_status(core, meta, running_status(pod, st.ip, ip))
            after = (meta.get("annotations") or {}).get(SUCCEED_AFTER_ANNOTATION)
            if after is not None:
                self._after(float(after) * self.grace_scale, self._mark_succeeded, st, pod)
        except Exception as e:
            self._error(f"{st.spec.name}: pod {meta.get('namespace')}/{meta.get('name')}: {e!r}")

    def _after(self, delay: float, fn, *args) -> None:
        def run():
            with self._lock:
                self._timers.discard(timer)
            if self._stopped.is_set():
                return
            try:
                fn(*args)
            except Exception as e:
                self._error(f"{fn.__name__}: {e!r}")

        timer = threading.Timer(max(0.0, delay), run)
        timer.daemon = True
        with self._lock:
            self._timers.add(timer)
        timer.start()

    def _error(self, msg: str) -> None:
        log.warning("simulated kubelet: %s", msg)
        self.errors.append(msg)

    def _pod_ip(self, st: _NodeState, uid: str, host_network: bool) -> str:
        if host_network:
            return st.ip
        with self._lock:
            if uid not in st.pod_ips:
                st.pod_ips[uid] = pod_cidr(st.index).replace(".0/24", f".{st.next_ip}")
                st.next_ip = st.next_ip + 1 if st.next_ip < 254 else 2
            return st.pod_ips[uid]

    def _mark_succeeded(self, st: _NodeState, pod: dict) -> None:
        meta = pod["metadata"]
        devices = self.device_managers.get(st.spec.name)
        if devices is not None:  # exited containers hold no devices
            devices.release(f"{meta['namespace']}/{meta['name']}")
        self._patch_status(client.CoreV1Api(self._api), meta, succeeded_status(pod))

    def _patch_status(self, core: client.CoreV1Api, meta: dict, status: dict) -> None:
        status = {k: v for k, v in status.items() if v is not None}
        try:
            core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": status}, _content_type=MERGE
            )
        except ApiException as e:
            if e.status != 404:  # deleted meanwhile
                raise

    def _mark_failed(self, core: client.CoreV1Api, pod: dict, reason: str, message: str) -> None:
        """What the kubelet does with a pod its admission refuses: phase Failed, never run."""
        self._patch_status(
            core, pod["metadata"], {"phase": "Failed", "reason": reason, "message": message}
        )

    def _final_delete(self, st: _NodeState, pod: dict) -> None:
        """The kubelet's last word on a terminated pod: delete with grace 0, guarded by UID;
        its devices go back to the device manager."""
        meta = pod["metadata"]
        devices = self.device_managers.get(st.spec.name)
        if devices is not None:
            devices.release(f"{meta['namespace']}/{meta['name']}")
        core = client.CoreV1Api(self._api)
        try:
            core.delete_namespaced_pod(
                meta["name"],
                meta["namespace"],
                body=client.V1DeleteOptions(
                    grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
                ),
            )
        except ApiException as e:
            if e.status not in (404, 409):
                self._retry_later(st, pod)
                raise
        except Exception:  # no answer (the apiserver is down): the next watch event retries
            self._retry_later(st, pod)
            raise

    def _retry_later(self, st: _NodeState, pod: dict) -> None:
        """A final delete that did not go through: forget that it started, so the pod's next
        watch event (the relist after a reconnect) starts it again, as the kubelet's sync loop
        would; otherwise the pod would stay Terminating for good."""
        with self._lock:
            st.terminating.discard(pod["metadata"]["uid"])
