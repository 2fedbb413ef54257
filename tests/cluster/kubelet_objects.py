"""What the simulated kubelets (kubelets.py) write: the Node they register (`NodeSpec`: capacity,
allocatable, the GPU labels), the node status they post, and the pod statuses (Running,
Succeeded) with which a bound pod "runs". Pure functions of their arguments but for the clock.

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

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KUBELET_VERSION = "v1.37.2"

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


def extended_requests(pod: dict) -> dict[str, int]:
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


# ---- node status ---------------------------------------------------------------------------


def node_conditions(st: Any) -> list[dict]:
    """The node's conditions (`st`: kubelets.py's node state), each heartbeat now; like the
    kubelet, a condition's lastTransitionTime moves only when its status changes (gpupool's
    settle time reads Ready's)."""
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
        cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        cond("Ready", "True" if st.ready else "False", st.ready_reason, st.ready_message),
    ]


def node_status(st: Any, conditions: list[dict], removed: Iterable[str] = ()) -> dict:
    """The Node status the kubelet posts: `st`'s capacity and allocatable (each of `removed`
    set to None, which a merge patch deletes), `conditions`, addresses and node info."""
    capacity: dict[str, str | None] = dict(st.capacity)
    allocatable: dict[str, str | None] = dict(st.allocatable)
    for k in removed:
        capacity.setdefault(k, None)
        allocatable.setdefault(k, None)
    return {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions,
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


# ---- pod status ----------------------------------------------------------------------------


def running_status(pod: dict, host_ip: str, pod_ip: str) -> dict:
    """A bound pod's status once its containers run (init containers done)."""
    meta, spec = pod["metadata"], pod["spec"]
    t = now()

    def cond(type_):
        return {"type": type_, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}

    return {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": t,
        "conditions": [
            cond("PodReadyToStartContainers"),
            cond("Initialized"),
            cond("Ready"),
            cond("ContainersReady"),
            cond("PodScheduled"),
        ],
        "initContainerStatuses": [
            container_status(meta["uid"], c, terminated=True, t=t)
            for c in spec.get("initContainers") or []
        ]
        or None,
        "containerStatuses": [
            container_status(meta["uid"], c, terminated=False, t=t)
            for c in spec.get("containers") or []
        ],
    }


def succeeded_status(pod: dict) -> dict:
    """A pod's status once all its containers exited 0."""
    meta, spec = pod["metadata"], pod["spec"]
    t = now()

    def cond(type_, s):
        return {"type": type_, "status": s, "lastProbeTime": None, "lastTransitionTime": t}

    return {
        "phase": "Succeeded",
        "conditions": [
            cond("PodReadyToStartContainers", "False"),
            cond("Initialized", "True"),
            cond("Ready", "False"),
            cond("ContainersReady", "False"),
            cond("PodScheduled", "True"),
        ],
        "containerStatuses": [
            container_status(meta["uid"], c, terminated=True, t=t)
            for c in spec.get("containers") or []
        ],
    }


def container_status(uid: str, c: dict, *, terminated: bool, t: str) -> dict:
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
