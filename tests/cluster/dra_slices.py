"""ResourceSlices as NVIDIA's DRA driver publishes them (kubernetes-sigs/dra-driver-nvidia-gpu
v0.4.1, read, not copied; the names are listed in reconciler/observe/model_dra.py): one pool per
node, named after it, driver `gpu.nvidia.com`; a card `gpu-<minor>` with attributes `type: gpu`,
`uuid`, `productName`, ... and capacity `memory`; a static MIG device
`gpu-<minor>-mig-<profile without dots>-<profile id>-<placement start>` with `type: mig`,
`parentUUID`, `profile` and capacities `memory`, `multiprocessors`, ... and one `memorySlice<i>`
per memory slice (cmd/gpu-kubelet-plugin/deviceinfo.go, mig.go, driver.go `publishResources`).

Under the driver's alpha `DynamicMIG` gate (`dynamic_slices`): per card one shared counter set
`gpu-<minor>-counter-set` with a counter per capacity (`memory`, `multiprocessors`, ...; the
driver derives the names from the capacities, camelCase to dashes) and one `memory-slice-<i>`
(value 1) per memory slice; the whole card `gpu-<minor>` consumes all of them, and every
possible MIG partition of every profile is a device `gpu-<minor>-mig-<profile>-<id>-<start>`
with `type: mig`, `parentUUID`, `profile` but no `uuid` (it does not exist before a claim on it
is prepared), consuming its capacities and its memory slices. On Kubernetes 1.35 and later the
driver splits them: one slice with all counter sets, then one slice of devices per card
(cmd/gpu-kubelet-plugin/partitions.go `PartSharedCounterSets`, `PartConsumesCounters`,
driver.go `generateSplitResourceSlices`, nvlib.go: Hopper and later offer the whole card
beside its partitions). Only `memory`, `multiprocessors` and the memory slices are counted
here; the driver counts the engines too, none of which binds before the memory slices do.

As JSON dicts (what the API server takes and returns); used by the observe tests and by the
simulated kubelets that publish them on a real API server."""

from __future__ import annotations

DRIVER = "gpu.nvidia.com"
GI = 1 << 30
MIG_PROFILE_IDS = {
    "1g.10gb": 19,
    "1g.10gb+me": 7,
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


# ------------------------------------------------------------------------------ DynamicMIG

FULL_SMS = 132  # an H100 SXM5's multiprocessors (a 7-slice instance has them all)


def _sms(compute_slices: int) -> int:
    return FULL_SMS if compute_slices >= 7 else 16 * compute_slices


def counter_set(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


def _memory_slices(start: int, size: int) -> dict:
    return {f"memory-slice-{i}": _q(1) for i in range(start, start + size)}


def dynamic_name(minor: int, profile: str, start: int) -> str:
    pid = MIG_PROFILE_IDS.get(profile, 99)
    pname = profile.replace(".", "").replace("+", "-")
    return f"gpu-{minor}-mig-{pname}-{pid}-{start}"


def dynamic_card_devices(node: str, minor: int, model) -> list[dict]:
    """Card `minor` under DynamicMIG: the whole card consuming every counter of its set, then
    every placement of every profile of `model` (a catalog GpuModel), no uuid on those."""
    card = gpu_device(node, minor, product=model.nvml_names[0])
    card["attributes"]["architecture"] = _s("Hopper")
    card["consumesCounters"] = [
        {
            "counterSet": counter_set(minor),
            "counters": {
                "memory": _q("80Gi"),
                "multiprocessors": _q(FULL_SMS),
                **_memory_slices(0, 8),
            },
        }
    ]
    out = [card]
    for name, prof in sorted(model.profiles.items()):
        memory = int(name.split(".")[1].split("gb")[0])
        for start in prof.starts:
            attrs = dict(card["attributes"])
            del attrs["uuid"], attrs["resource.kubernetes.io/pciBusID"]
            attrs.update(
                {"type": _s("mig"), "parentUUID": _s(uuid(node, minor)), "profile": _s(name)}
            )
            out.append(
                {
                    "name": dynamic_name(minor, name, start),
                    "attributes": attrs,
                    "capacity": {
                        "memory": _q(f"{memory}Gi"),
                        "multiprocessors": _q(_sms(prof.compute_slices)),
                    },
                    "consumesCounters": [
                        {
                            "counterSet": counter_set(minor),
                            "counters": {
                                "memory": _q(f"{memory}Gi"),
                                "multiprocessors": _q(_sms(prof.compute_slices)),
                                **_memory_slices(start, prof.memory_slices),
                            },
                        }
                    ],
                }
            )
    return out


def dynamic_slices(node: str, cards: int, model, generation: int = 1) -> list[dict]:
    """The node's pool under DynamicMIG: the counter sets' slice, then one slice per card."""

    def one(suffix: str, spec: dict) -> dict:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}-{suffix}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": cards + 1},
                **spec,
            },
        }

    counters = [
        {
            "name": counter_set(minor),
            "counters": {
                "memory": _q("80Gi"),
                "multiprocessors": _q(FULL_SMS),
                **_memory_slices(0, 8),
            },
        }
        for minor in range(cards)
    ]
    return [one("counters", {"sharedCounters": counters})] + [
        one(f"gpu{minor}", {"devices": dynamic_card_devices(node, minor, model)})
        for minor in range(cards)
    ]
