"""Exact admission on DynamicMIG, the executor's allocation write (called by
`dra_admit.pin_claims`): a planned partition is named `<driver>/<pool>/<device>`
(plan/dra_admit.py `dynamic_ref`), and no CEL selector can pick one placement of a profile
(NVIDIA's driver v0.4.1 publishes every placement with the same attributes and capacities,
cmd/gpu-kubelet-plugin/partitions.go `MigSpec.Capacities`; CEL sees no device name). So gpupool
writes the pod's claim's `status.allocation` itself, naming the planned devices, while the pod
is gated and the claim unallocated and reserved for nobody. kube-scheduler then only reserves
the claim and binds the pod where the allocation's node selector says, and its allocator counts
the devices (and the counters they consume) as taken for every other claim.

What the write carries, as kube-scheduler v1.37.2 would write it: one result per device
(`request`: the request's name, `<request>/<subrequest>` for a first-available one; driver,
pool, device), the node selector `metadata.name In [node]`, and `allocationTimestamp` (with
`DRADeviceBindingConditions` the scheduler stamps an allocation that lacks one when it reserves
the claim; an allocation is immutable once set, so without it the reservation fails). Checked on
the real API server and scheduler: tests/integration/test_dra_dynamic_placement.py."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from reconciler import conventions as C
from reconciler.apply.handlers.base import Context

KIND = "ResourceClaim"


def refs_of(devices: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """The planned devices named `<driver>/<pool>/<device>` as (driver, pool, device)."""
    out = []
    for d in devices:
        parts = d.split("/")
        if len(parts) == 3 and all(parts):
            out.append((parts[0], parts[1], parts[2]))
    return out


def short_profile(profile: str) -> str:
    """A profile as NVIDIA's driver spells it in a partition's name (`4g.40gb` -> `4g40gb`,
    `1g.10gb+me` -> `1g10gb-me`: cmd/gpu-kubelet-plugin/mig.go `ToCanonicalName`)."""
    return profile.replace(".", "").replace("+", "-")


def _of_profile(device: str, profile: str) -> bool:
    """Whether a partition's name (`gpu-<minor>-mig-<profile>-<id>-<start>`) is of `profile`."""
    head, _, rest = device.partition("-mig-")
    return bool(head) and rest.rsplit("-", 2)[0] == short_profile(profile)


def _named_requests(spec: dict) -> list[tuple[str, dict]]:
    """(name an allocation result gives it, request body) for each request: `exactly` by its
    name, a first-available request by `<name>/<subrequest>` for each subrequest."""
    out = []
    for r in (spec.get("devices") or {}).get("requests") or []:
        name = str(r.get("name", ""))
        if isinstance(r.get("exactly"), dict):
            out.append((name, r["exactly"]))
        out += [
            (f"{name}/{s.get('name', '')}", s)
            for s in r.get("firstAvailable") or []
            if isinstance(s, dict)
        ]
    return out


def results_for(
    spec: dict, profile_of: dict[str, str], left: list[tuple[str, str, str]]
) -> list[dict] | None:
    """The allocation results that give each of the claim's requests on gpupool's MIG classes
    (`profile_of`: class -> profile) its planned partitions, taken from `left` (removed there);
    [] when the claim asks none of gpupool's MIG classes, None when a request cannot be given
    the planned devices (too few of its profile planned)."""
    results: list[dict] = []
    done: set[str] = set()
    for rname, body in _named_requests(spec):
        main = rname.split("/", 1)[0]
        profile = profile_of.get(str(body.get("deviceClassName", "")))
        if profile is None or main in done:
            continue
        count = int(body.get("count") or 1)
        mine = [r for r in left if _of_profile(r[2], profile)][:count]
        if len(mine) < count:
            if "/" in rname:
                continue  # another subrequest of a first-available request may fit
            return None
        for r in mine:
            left.remove(r)
            results.append({"request": rname, "driver": r[0], "pool": r[1], "device": r[2]})
        done.add(main)
    return results


def allocate(
    ctx: Context,
    ns: str,
    name: str,
    node: str,
    results: list[dict],
    claim: dict | None = None,
    reserve: tuple[str, str] | None = None,
) -> bool:
    """Write the claim's allocation (on `claim`, the server's answer to a write just made,
    else read again: the claim was just made), and with `reserve` (the pod's name and uid: the
    claim's controlling owner) its reservation for that pod in the same write, as
    kube-scheduler's PreBind writes both (`bindClaim`); False when the claim is gone since (the
    gate must stay: the pod is planned again next cycle)."""
    claim = claim or ctx.ops.read_dra_object(KIND, ns, name)
    if claim is None:
        return False
    at = ctx.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    held = [{"resource": "pods", "name": reserve[0], "uid": reserve[1]}] if reserve else []
    claim["status"] = {
        **(claim.get("status") or {}),
        **({"reservedFor": held} if held else {}),
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
            "allocationTimestamp": at,
        },
    }
    ctx.ops.replace_dra_status(KIND, ns, name, claim)
    return True


def deallocate(ctx: Context, ns: str, claim: dict) -> None:
    """Remove an allocation gpupool wrote for another plan (`stale_allocation`), and its
    reservation for the gated pod if it wrote one, so the claim may be replaced."""
    body: dict[str, Any] = dict(claim)
    body["status"] = {
        k: v
        for k, v in (claim.get("status") or {}).items()
        if k not in ("allocation", "reservedFor")
    }
    ctx.ops.replace_dra_status(KIND, ns, claim["metadata"]["name"], body)


def stale_allocation(claim: dict, gated: str = "") -> bool:
    """An allocation gpupool wrote (the claim carries its planned devices) that no running pod
    holds: reserved for nobody, or only for the pod of uid `gated`, which the caller knows is
    still behind gpupool's gate (`spec.dra.admission: allocate` reserves the claim for its pod
    with the allocation). The pod stayed gated: a run failed between the write and the gate's
    release, or the pod is admitted to another plan now."""
    status = claim.get("status") or {}
    ann = (claim.get("metadata") or {}).get("annotations") or {}
    holders = status.get("reservedFor") or []
    return (
        bool(status.get("allocation"))
        and all(bool(gated) and r.get("uid") == gated for r in holders)
        and (C.DRA_PLANNED_ANN in ann)
    )
