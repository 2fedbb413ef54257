"""DRA mode's objects, the pure half: the DeviceClasses and ResourceClaimTemplates a pool with
`spec.backend: dra` implies (rendered and pruned by `objects/dra_objects.py`), and the quota
keys that count its devices (`plan/quotas.py`).

Per DRA pool: one DeviceClass for whole cards, `gpupool-<pool>-gpu`, and one per MIG profile
its layouts offer, `gpupool-<pool>-mig-<profile>` ('.' and '+' as '-'), each with a CEL
selector on NVIDIA's driver, the device `type` (`gpu` | `mig`), the `profile` and the card's
`productName` as NVML names it (the catalog's `nvml_names`); names from dra-driver-nvidia-gpu
v0.4.1 (observe/model_dra.py cites where). A CEL selector cannot see a device's node, so the
pool's nodes are kept by the pods' pool node selector (and exact admission names the devices).

In each namespace of a Quota that names the pool: ResourceClaimTemplates teams reference from
`pod.spec.resourceClaims` — `gpupool-<pool>-gpu-<n>` asking for n whole cards (1, 2, 4, ...
up to the pool's GPUs per node) and `gpupool-<pool>-mig-<profile>` for one MIG device. A
ResourceQuota counts them by class: `<class>.deviceclass.resource.k8s.io/devices`
(Kubernetes' DRA quota, KEP-4381). It has no key for counters or capacity, so under the
driver's DynamicMIG a partition's GPU memory (its `memory-slice-<i>` counters) is counted by
gpupool itself: a team's cap counts a MIG device as the memory slices it takes
(`cluster.card_equivalents`), enforced by gpupool's admission."""

from __future__ import annotations

from typing import Any

from reconciler import conventions as C
from reconciler.policy.models import Pool
from reconciler.policy.state import DesiredState

KINDS = ("DeviceClass", "ResourceClaimTemplate")
Key = tuple[str, str, str]  # (kind, namespace, name)


def dra_pools(desired: DesiredState) -> list[Pool]:
    return [p for _, p in sorted(desired.pools.items()) if p.spec.backend == "dra"]


def dns(profile: str) -> str:
    return profile.replace(".", "-").replace("+", "-")


def class_name(pool: str, profile: str = "") -> str:
    return f"gpupool-{pool}-mig-{dns(profile)}" if profile else f"gpupool-{pool}-gpu"


def quota_key(pool: str, profile: str = "") -> str:
    """The ResourceQuota key that counts a class's devices."""
    return f"{class_name(pool, profile)}.deviceclass.resource.k8s.io/devices"


def profiles(pool: Pool) -> list[str]:
    mig = pool.spec.inference.mig
    return sorted({p for lay in mig.layouts for p in lay.profiles}) if mig else []


def whole_counts(pool: Pool) -> list[int]:
    per_node = pool.spec.capacity.gpus_per_node
    counts = {1 << i for i in range(per_node.bit_length()) if 1 << i <= per_node}
    return sorted(counts | {per_node})


def _selector(desired: DesiredState, pool: Pool, profile: str) -> str:
    d = f"device.attributes['{C.DRA_DRIVER}']"
    parts = [f"device.driver == '{C.DRA_DRIVER}'"]
    parts.append(f"{d}.type == '{'mig' if profile else 'gpu'}'")
    if profile:
        parts.append(f"{d}.profile == '{profile}'")
    model = desired.catalog.model(pool.spec.gpu_model)
    names = list(model.nvml_names) if model is not None else []
    if names:
        parts.append(f"{d}.productName in [{', '.join(repr(n) for n in names)}]")
    return " && ".join(parts)


def _device_class(desired: DesiredState, pool: Pool, profile: str) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "labels": {
            C.MANAGED_BY_LABEL: C.MANAGED_BY,
            C.POOL_LABEL: pool.metadata.name,
            C.DRA_PARTITION_LABEL: f"mig-{dns(profile)}" if profile else "gpu",
        }
    }
    if profile:
        meta["annotations"] = {C.DRA_PROFILE_ANN: profile}
    return {
        "metadata": meta,
        "spec": {"selectors": [{"cel": {"expression": _selector(desired, pool, profile)}}]},
    }


def _template(pool: Pool, profile: str, count: int) -> dict[str, Any]:
    request = {"deviceClassName": class_name(pool.metadata.name, profile), "count": count}
    return {
        "metadata": {
            "labels": {C.MANAGED_BY_LABEL: C.MANAGED_BY, C.POOL_LABEL: pool.metadata.name}
        },
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


def desired_dra_objects(desired: DesiredState) -> dict[Key, dict[str, Any]]:
    """(kind, namespace, name) -> {metadata: labels/annotations, spec} of every DRA object the
    policy implies, DeviceClasses first."""
    out: dict[Key, dict[str, Any]] = {}
    teams: dict[str, set[str]] = {}
    for q in desired.quotas.values():
        for pq in q.spec.pools:
            teams.setdefault(pq.pool, set()).update(q.spec.namespaces)
    for pool in dra_pools(desired):
        name = pool.metadata.name
        for prof in ["", *profiles(pool)]:
            out[("DeviceClass", "", class_name(name, prof))] = _device_class(desired, pool, prof)
        for ns in sorted(teams.get(name, ())):
            for n in whole_counts(pool):
                out[("ResourceClaimTemplate", ns, f"{class_name(name)}-{n}")] = _template(
                    pool, "", n
                )
            for prof in profiles(pool):
                out[("ResourceClaimTemplate", ns, class_name(name, prof))] = _template(
                    pool, prof, 1
                )
    return out
