"""Simulated kubelets (the idea of kwok, in Python) for the real control plane in
controlplane.py: nodes that exist only as API objects, whose pods "run" by status updates.

What each simulated kubelet does, through the API only:
  * registers a Node with capacity/allocatable (cpu, memory, pods and the NVIDIA extended
    resources) and the labels NVIDIA's GPU operator puts on GPU nodes; reports Ready, and
    heartbeats a Lease in kube-node-lease as the kubelet does (node-lifecycle controller reads
    the lease to decide a node is alive);
  * list+watches the pods with fieldSelector spec.nodeName=<node> and marks each newly bound pod
    Running (podIP, hostIP, conditions, containerStatuses);
  * honours deletion like the kubelet: a pod with a deletionTimestamp is "stopped" for its
    grace period (times `grace_scale`, so tests can be fast) and then deleted with
    gracePeriodSeconds=0 and a UID precondition, which is the kubelet's final delete;
  * optionally completes pods: the annotation SUCCEED_AFTER_ANNOTATION (seconds, scaled like the
    grace period) makes the containers exit 0 and the pod Succeeded (for Jobs).

Node identity: a real kubelet authenticates as system:node:<name> (group system:nodes) and the
Node authorizer plus NodeRestriction admission confine it to its own Node, Lease and bound pods.
These simulated kubelets use the ADMIN client instead, which is simpler (one credential, no CSR
flow) and permits the same writes; tests that are about the reconciler's own RBAC use
ControlPlane.service_account_client, never these clients.

Labels (who sets them, upstream):
  * nvidia.com/gpu.product, .count, .replicas, .memory (MiB), .family, .compute.major/.minor:
    gpu-feature-discovery, NVIDIA/k8s-device-plugin internal/lm/resource.go (product has spaces
    turned into '-', and gets '-SHARED' appended under time-slicing unless the resource is
    renamed, e.g. to nvidia.com/gpu.shared).
  * nvidia.com/mig.strategy and, under strategy mixed, nvidia.com/mig-<profile>.count etc.:
    internal/lm/mig-strategy.go (resource name "nvidia.com/mig-" + profile).
  * nvidia.com/mig.capable: gpu-feature-discovery (internal/lm/nvml.go).
  * nvidia.com/gpu.sharing-strategy (none | time-slicing | mps): gpu-feature-discovery.
  * nvidia.com/gpu.present=true: NVIDIA/gpu-operator (commonGPULabelKey), which deploys its
    operands only onto nodes carrying it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines

log = logging.getLogger(__name__)

SUCCEED_AFTER_ANNOTATION = "kubelets.gpupool.test/succeed-after-seconds"
KUBELET_VERSION = "v1.37.2"
MERGE = "application/merge-patch+json"
LEASE_DURATION_SECONDS = 40  # the kubelet's default nodeLeaseDurationSeconds

# (product prefix, (family, compute major, compute minor)) for the nvidia.com/gpu.family and
# .compute.* labels. The family follows GFD's getArchFamily (internal/lm/resource.go), which names
# families by compute major only: 8.x, Ada included, is "ampere"; 9 is "hopper". (The GFD version
# read maps 10 to "undefined"; "blackwell" here is an assumption.)
_FAMILY_BY_PRODUCT_PREFIX = (
    ("NVIDIA-B", ("blackwell", 10, 0)),
    ("NVIDIA-GB", ("blackwell", 10, 0)),
    ("NVIDIA-H", ("hopper", 9, 0)),
    ("NVIDIA-GH", ("hopper", 9, 0)),
    ("NVIDIA-A", ("ampere", 8, 0)),
    ("NVIDIA-L", ("ampere", 8, 9)),
    ("Tesla-T4", ("turing", 7, 5)),
    ("Tesla-V100", ("volta", 7, 0)),
)
# Data-centre parts with MIG support (A100, A30, H100, H200, GH200, B100/B200, GB200); the
# others (A10, A40, L4, L40, T4, V100) report nvidia.com/mig.capable=false.
_MIG_CAPABLE_PREFIXES = (
    "NVIDIA-A100",
    "NVIDIA-A30",
    "NVIDIA-H",
    "NVIDIA-GH",
    "NVIDIA-B",
    "NVIDIA-GB",
)


def _extended_requests(pod: dict) -> dict[str, int]:
    """Extended resources the pod's containers ask for (limits, as for device plugins), summed."""
    out: dict[str, int] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for k, v in {**(res.get("requests") or {}), **(res.get("limits") or {})}.items():
            if "/" in k and not k.startswith(("kubernetes.io/", "requests.")):
                out[k] = out.get(k, 0) + int(v)
    return out


def pod_cidr(index: int) -> str:
    """Node `index`'s pod range: a /24 of 10.244.0.0/14 (1,024 nodes, as many as a /14 split
    into /24s holds; a 10.244.<index>.0/24 scheme stopped at 256)."""
    if not 0 <= index < 1024:
        raise ValueError(f"node index {index}: the simulated kubelets give pod ranges to 1024")
    return f"10.{244 + index // 256}.{index % 256}.0/24"


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
class NodeSpec:
    """One simulated node. `gpus` whole GPUs of `gpu_product` give nvidia.com/gpu; with
    `shared_replicas` > 1 they are advertised time-sliced and renamed, as nvidia.com/gpu.shared
    (gpus * replicas) instead; `mig` maps a MIG profile ("1g.10gb") to a device count and gives
    nvidia.com/mig-<profile> (the "mixed" strategy)."""

    name: str
    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    gpus: int = 0
    gpu_product: str = "NVIDIA-H100-80GB-HBM3"
    gpu_memory_mib: int = 81559
    shared_replicas: int = 0
    mig: Mapping[str, int] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: list[dict] = field(default_factory=list)
    extra_resources: Mapping[str, str] = field(default_factory=dict)
    mig_capable: bool | None = None  # None: from the product name

    def resources(self) -> dict[str, str]:
        r = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": "1Ti",
        }
        if self.gpus and self.shared_replicas > 1:
            r["nvidia.com/gpu.shared"] = str(self.gpus * self.shared_replicas)
        elif self.gpus and not self.mig:
            r["nvidia.com/gpu"] = str(self.gpus)
        for profile, count in self.mig.items():
            r[f"nvidia.com/mig-{profile}"] = str(count)
        r.update(self.extra_resources)
        return r

    def node_labels(self) -> dict[str, str]:
        lab = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }
        if self.gpus:
            product = self.gpu_product.replace(" ", "-")
            family, major, minor = "undefined", 0, 0
            for prefix, fam in _FAMILY_BY_PRODUCT_PREFIX:
                if product.startswith(prefix):
                    family, major, minor = fam
                    break
            shared = self.shared_replicas > 1
            mig_capable = self.mig_capable
            if mig_capable is None:
                mig_capable = product.startswith(_MIG_CAPABLE_PREFIXES)
            lab.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.count": str(self.gpus),
                    "nvidia.com/gpu.memory": str(self.gpu_memory_mib),
                    "nvidia.com/gpu.replicas": str(self.shared_replicas if shared else 1),
                    "nvidia.com/gpu.sharing-strategy": "time-slicing" if shared else "none",
                    "nvidia.com/gpu.family": family,
                    "nvidia.com/gpu.compute.major": str(major),
                    "nvidia.com/gpu.compute.minor": str(minor),
                    "nvidia.com/mig.capable": str(mig_capable).lower(),
                    "nvidia.com/mig.strategy": "mixed" if self.mig else "none",
                }
            )
            for profile, count in self.mig.items():
                lab[f"nvidia.com/mig-{profile}.count"] = str(count)
                lab[f"nvidia.com/mig-{profile}.product"] = f"{product}-MIG-{profile}"
        lab.update(self.labels)
        return lab


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
    pod_ips: dict[str, str] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)
    terminating: set[str] = field(default_factory=set)
    threads: list[threading.Thread] = field(default_factory=list)
    watch: Any = None  # the open watch response, closed by stop()
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
        for target in (self._heartbeat_loop, self._pod_loop):
            t = threading.Thread(
                target=target, args=(st,), name=f"kubelet-{spec.name}", daemon=True
            )
            st.threads.append(t)
            t.start()
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
            _abort(st.watch)
        with self._lock:
            for t in list(self._timers):
                t.cancel()
        deadline = time.monotonic() + 5
        for st in self._nodes.values():
            for t in st.threads:  # daemon threads: one still in a request exits after it
                t.join(timeout=max(0.0, deadline - time.monotonic()))

    def remove_node(self, name: str, timeout: float = 30) -> None:
        """Stop this node's kubelet and delete its Node (waiting until it is gone), so a later
        test can register a node of the same name."""
        with self._lock:
            st = self._nodes.pop(name, None)
        self.device_managers.pop(name, None)
        if st is not None:
            st.stop.set()
            _abort(st.watch)
            for t in st.threads:
                t.join(timeout=5)
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

    # ---- node status and lease -------------------------------------------------------------

    def _conditions(self, st: _NodeState) -> list[dict]:
        """The node's conditions, each heartbeat now; like the kubelet, a condition's
        lastTransitionTime moves only when its status changes (gpupool's settle time reads
        Ready's)."""
        t = now()
        st.since = st.since or t
        st.ready_since = st.ready_since or t

        def cond(type_, status, reason, message):
            return {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": t,
                "lastTransitionTime": st.ready_since if type_ == "Ready" else st.since,
            }

        return [
            cond(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            cond(
                "DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"
            ),
            cond(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
            cond("Ready", "True" if st.ready else "False", st.ready_reason, st.ready_message),
        ]

    def _post_status(self, st: _NodeState, removed: list[str] = (), api=None) -> None:
        core = client.CoreV1Api(api or self._api)
        # Keep lastTransitionTime where the status did not change, as the kubelet does.
        try:
            current = core.read_node_status(st.spec.name)
            old = {c.type: c for c in (current.status.conditions or [])}
        except ApiException:
            old = {}
        conds = self._conditions(st)
        for c in conds:
            o = old.get(c["type"])
            if o is not None and o.status == c["status"] and o.last_transition_time is not None:
                c["lastTransitionTime"] = o.last_transition_time.strftime("%Y-%m-%dT%H:%M:%SZ")
        capacity: dict[str, str | None] = dict(st.capacity)
        allocatable: dict[str, str | None] = dict(st.allocatable)
        for k in removed:
            capacity.setdefault(k, None)
            allocatable.setdefault(k, None)
        status = {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conds,
            "addresses": [
                {"type": "InternalIP", "address": st.ip},
                {"type": "Hostname", "address": st.spec.name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"sim-{st.index}",
                "systemUUID": f"sim-{st.index}",
                "bootID": f"sim-{st.index}",
                "kernelVersion": "6.1.0-sim",
                "osImage": "Simulated kubelet (gpupool tests)",
                "containerRuntimeVersion": "sim://1.0",
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        }
        core.patch_node_status(st.spec.name, {"status": status}, _content_type=MERGE)

    def _renew_lease(self, st: _NodeState, api) -> None:
        coord = client.CoordinationV1Api(api)
        name = st.spec.name
        try:
            coord.patch_namespaced_lease(
                name, "kube-node-lease", {"spec": {"renewTime": now_micro()}}, _content_type=MERGE
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
            )

    def _heartbeat_loop(self, st: _NodeState) -> None:
        api = self._factory()
        last_status = time.monotonic()
        while not st.stop.wait(self.heartbeat_interval):
            if not st.alive:
                continue
            try:
                self._renew_lease(st, api)
                if time.monotonic() - last_status >= self.status_interval:
                    self._post_status(st, api=api)
                    last_status = time.monotonic()
            except Exception as e:  # the apiserver may be restarting; try again next beat
                log.debug("heartbeat %s: %r", st.spec.name, e)

    # ---- pods ------------------------------------------------------------------------------

    def _pod_loop(self, st: _NodeState) -> None:
        api = self._factory()
        core = client.CoreV1Api(api)
        selector = f"spec.nodeName={st.spec.name}"
        rv = None
        while not st.stop.is_set():
            try:
                if rv is None:
                    resp = core.list_pod_for_all_namespaces(
                        field_selector=selector, _preload_content=False
                    )
                    data = json.loads(resp.data)
                    for pod in data.get("items") or []:
                        self._on_pod(st, core, pod)
                    rv = data["metadata"]["resourceVersion"]
                resp = core.list_pod_for_all_namespaces(
                    field_selector=selector,
                    watch=True,
                    resource_version=rv,
                    allow_watch_bookmarks=True,
                    timeout_seconds=5,
                    _preload_content=False,
                    _request_timeout=(5, 15),
                )
                st.watch = resp
                try:
                    for line in iter_resp_lines(resp):
                        if st.stop.is_set():
                            break
                        ev = json.loads(line)
                        obj = ev.get("object") or {}
                        if ev.get("type") == "ERROR":
                            rv = None  # 410 Gone or similar: relist
                            break
                        new_rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if new_rv:
                            rv = new_rv
                        if ev.get("type") in ("ADDED", "MODIFIED"):
                            self._on_pod(st, core, obj)
                        elif ev.get("type") == "DELETED":
                            self._forget(st, obj)
                finally:
                    st.watch = None
                    resp.release_conn()
            except Exception as e:  # apiserver restart, timeouts: relist after a pause
                log.debug("pod watch %s: %r", st.spec.name, e)
                rv = None
                st.stop.wait(0.5)

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
                    devices.allocate(f"{meta['namespace']}/{meta['name']}", _extended_requests(pod))
                except Exception as exc:  # noqa: BLE001 - the kubelet's admission refuses the pod
                    self._mark_failed(
                        core, pod, "UnexpectedAdmissionError", f"Allocate failed: {exc}"
                    )
                    return
            self._mark_running(st, core, pod)
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

    def _mark_running(self, st: _NodeState, core: client.CoreV1Api, pod: dict) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        t = now()
        ip = self._pod_ip(st, meta["uid"], bool(spec.get("hostNetwork")))

        def cond(type_):
            return {"type": type_, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}

        status = {
            "phase": "Running",
            "hostIP": st.ip,
            "hostIPs": [{"ip": st.ip}],
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": t,
            "conditions": [
                cond("PodReadyToStartContainers"),
                cond("Initialized"),
                cond("Ready"),
                cond("ContainersReady"),
                cond("PodScheduled"),
            ],
            "initContainerStatuses": [
                self._container_status(meta["uid"], c, terminated=True, t=t)
                for c in spec.get("initContainers") or []
            ]
            or None,
            "containerStatuses": [
                self._container_status(meta["uid"], c, terminated=False, t=t)
                for c in spec.get("containers") or []
            ],
        }
        self._patch_status(core, meta, status)

    def _mark_succeeded(self, st: _NodeState, pod: dict) -> None:
        core = client.CoreV1Api(self._api)
        meta, spec = pod["metadata"], pod["spec"]
        devices = self.device_managers.get(st.spec.name)
        if devices is not None:  # exited containers hold no devices
            devices.release(f"{meta['namespace']}/{meta['name']}")
        t = now()

        def cond(type_, s):
            return {"type": type_, "status": s, "lastProbeTime": None, "lastTransitionTime": t}

        status = {
            "phase": "Succeeded",
            "conditions": [
                cond("PodReadyToStartContainers", "False"),
                cond("Initialized", "True"),
                cond("Ready", "False"),
                cond("ContainersReady", "False"),
                cond("PodScheduled", "True"),
            ],
            "containerStatuses": [
                self._container_status(meta["uid"], c, terminated=True, t=t)
                for c in spec.get("containers") or []
            ],
        }
        self._patch_status(core, meta, status)

    @staticmethod
    def _container_status(uid: str, c: dict, *, terminated: bool, t: str) -> dict:
        cid = f"sim://{uid}/{c['name']}"
        state = (
            {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": t,
                    "finishedAt": t,
                    "containerID": cid,
                }
            }
            if terminated
            else {"running": {"startedAt": t}}
        )
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": f"sim://{c.get('image', '')}",
            "containerID": cid,
            "ready": not terminated,
            "started": not terminated,
            "restartCount": 0,
            "state": state,
        }

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
