"""ResourceSlices as NVIDIA's DRA driver publishes them (kubernetes-sigs/dra-driver-nvidia-gpu
v0.4.1, read, not copied; the names are listed in reconciler/observe/model_dra.py): one pool per
node, named after it, driver `gpu.nvidia.com`; a card `gpu-<minor>` with attributes `type: gpu`,
`uuid`, `productName`, ... and capacity `memory`; a static MIG device
`gpu-<minor>-mig-<profile without dots>-<profile id>-<placement start>` with `type: mig`,
`parentUUID`, `profile` and capacities `memory`, `multiprocessors`, ... and one `memorySlice<i>`
per memory slice (cmd/gpu-kubelet-plugin/deviceinfo.go, mig.go, driver.go `publishResources`).

As JSON dicts (what the API server takes and returns); used by the observe tests and by the
simulated kubelets that publish them on a real API server."""

from __future__ import annotations

DRIVER = "gpu.nvidia.com"
GI = 1 << 30
MIG_PROFILE_IDS = {
    "1g.10gb": 19,
    "1g.20gb": 15,
    "2g.20gb": 14,
    "3g.40gb": 9,
    "4g.40gb": 5,
    "7g.80gb": 0,
}
"""NVML's GPU-instance profile ids of the A100/H100 80GB profiles (nvml.h
NVML_GPU_INSTANCE_PROFILE_*: 1 slice 0, 2 slices 1, 3 slices 2, 4 slices 3, 7 slices 4 ... as
the ids the driver puts in the name); only the names matter here."""


def _s(v: str) -> dict:
    return {"string": v}


def _q(v: int | str) -> dict:
    return {"value": str(v)}


def uuid(node: str, minor: int) -> str:
    return f"GPU-{node}-{minor}"


def gpu_device(
    node: str, minor: int, product: str = "NVIDIA A100-SXM4-80GB", memory_gib: int = 80
) -> dict:
    return {
        "name": f"gpu-{minor}",
        "attributes": {
            "type": _s("gpu"),
            "uuid": _s(uuid(node, minor)),
            "productName": _s(product),
            "brand": _s("Nvidia"),
            "architecture": _s("Ampere"),
            "cudaComputeCapability": {"version": "8.0.0"},
            "driverVersion": {"version": "570.0.0"},
            "cudaDriverVersion": {"version": "12.8.0"},
            "resource.kubernetes.io/pciBusID": _s(f"0000:{minor + 7:02x}:00.0"),
        },
        "capacity": {"memory": _q(f"{memory_gib}Gi")},
    }


def mig_name(minor: int, profile: str, start: int) -> str:
    pid = MIG_PROFILE_IDS.get(profile, 99)
    return f"gpu-{minor}-mig-{profile.replace('.', '')}-{pid}-{start}"


def mig_device(
    node: str,
    minor: int,
    profile: str,
    start: int,
    size: int,
    product: str = "NVIDIA A100-SXM4-80GB",
) -> dict:
    slices = int(profile.split("g.")[0]) if profile[0].isdigit() else 1
    memory = int(profile.split(".")[1].rstrip("gb"))
    capacity = {
        "memory": _q(f"{memory}Gi"),
        "multiprocessors": _q(14 * slices),
        "copyEngines": _q(slices),
        "decoders": _q(slices),
        "encoders": _q(0),
        "jpegEngines": _q(0),
        "ofaEngines": _q(0),
    }
    capacity.update({f"memorySlice{i}": _q(1) for i in range(start, start + size)})
    return {
        "name": mig_name(minor, profile, start),
        "attributes": {
            "type": _s("mig"),
            "uuid": _s(f"MIG-{node}-{minor}-{start}"),
            "parentUUID": _s(uuid(node, minor)),
            "profile": _s(profile),
            "productName": _s(product),
            "brand": _s("Nvidia"),
            "architecture": _s("Ampere"),
            "cudaComputeCapability": {"version": "8.0.0"},
            "driverVersion": {"version": "570.0.0"},
            "cudaDriverVersion": {"version": "12.8.0"},
        },
        "capacity": capacity,
    }


def node_slice(node: str, devices: list[dict], generation: int = 1) -> dict:
    """The one slice of `node`'s pool (static MIG: the driver publishes all devices in one)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": devices,
        },
    }
