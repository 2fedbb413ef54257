"""The DRA half of bench/admission_openb.py's cluster (issue 32, item 7): the same nodes publish
their cards as ResourceSlices the way NVIDIA's DRA driver does (tests/cluster/dra_kubelet.py's
`DraPlugin`, the card's `productName` as NVML names the pool's model), the policy turns the pool
to `spec.backend: dra` with a Quota naming the DRA runs' namespaces (gpupool renders its
DeviceClass and ResourceClaimTemplates `gpupool-<pool>-gpu-<n>` there), and the claims are read
back: the devices they hold per node (the cards in use) and, per pod, whether the allocated
devices are the ones gpupool planned (the claim's `gpupool.io/planned-devices`).

The dynamic-MIG runs (`dra-dynmig-*`): the nodes republish their cards as the driver does with
its alpha `DynamicMIG` gate (kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1: every possible
partition of each card beside the whole card, all consuming the card's shared counters,
cmd/gpu-kubelet-plugin/partitions.go; the simulated slices: tests/cluster/dra_slices.py
`dynamic_slices`), the pool says `dra: {mig: dynamic}` with the MIG layouts `DYNMIG_LAYOUTS`,
and the slice's fractional pods ask for one MIG partition each (`mig_workload`): gpupool
renders a DeviceClass and a ResourceClaimTemplate `gpupool-<pool>-mig-<profile>` per profile.
A partition is counted as the memory slices it consumes of its card's 8 (the driver's
`memory-slice-<i>` counters; gpupool's cap counts it so too, `card_equivalents`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tests.cluster.dra_kubelet import DraPlugin
from tests.cluster.dra_slices import gpu_device, uuid


@dataclass
class DraNode(DraPlugin):
    """A node's DRA plugin whose cards carry `product` (DraPlugin's are A100s)."""

    product: str = ""

    def devices(self) -> list[dict]:
        return [gpu_device(self.node, m, product=self.product) for m in range(self.cards)]


def publish_slices(
    custom: Any, nodes: list[tuple[str, int]], model: str, dynamic: bool = False
) -> list[DraNode]:
    """Every (node, cards) publishes its slice, cards of catalog model `model`; `dynamic`:
    under DynamicMIG (the counters' slice and one slice per card), replacing the static
    slice a node published before (the driver is restarted with the gate: one pool, new
    slices)."""
    from reconciler.policy.catalog import default_catalog

    found = default_catalog().model(model)
    product = found.nvml_names[0] if found and found.nvml_names else model
    plugins = [DraNode(custom, n, cards=c, product=product) for n, c in nodes]
    for p in plugins:
        if dynamic:
            p.remove()  # the static slice, if any
            p.dynamic = found
        p.publish()
    return plugins


DYNMIG_LAYOUTS = (
    ("whole-7g", ["7g.80gb"]),
    ("four-three", ["4g.40gb", "3g.40gb"]),
    ("two-3g", ["3g.40gb", "3g.40gb"]),
    ("four-two-one", ["4g.40gb", "2g.20gb", "1g.10gb"]),
    ("balanced", ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]),
    ("three-2g", ["2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"]),
    ("seven-1g", ["1g.10gb"] * 7),
)
"""The MIG layouts the dynamic pool offers (H100 80GB; gpupool completes a card's allocated
partitions to the first one containing them): every profile `profile_for` asks for."""
COMPUTE_PROFILES = {1: "1g.10gb", 2: "2g.20gb", 3: "3g.40gb", 4: "4g.40gb", 7: "7g.80gb"}


def profile_for(gpu_milli: int) -> str:
    """The MIG profile a fractional pod of the trace asks for: the smallest whose compute
    slices (of 7) cover its share of the card (`gpu_milli` of 1,000): 110 -> 1g.10gb, 230 ->
    2g.20gb, 320 -> 3g.40gb, 470 -> 4g.40gb, 590 and more -> 7g.80gb."""
    need = -(-gpu_milli * 7 // 1000)
    return COMPUTE_PROFILES[min(c for c in COMPUTE_PROFILES if c >= need)]


def profile_share(model: str, profile: str) -> float:
    """What one partition of `profile` counts of its card: its memory slices of 8."""
    from reconciler.policy.catalog import default_catalog

    found = default_catalog().model(model)
    return found.profiles[profile].memory_slices / 8 if found else 1.0


def mig_workload(wl: Any, pods: list[Any], model: str, load: float, window: float, tail: float):
    """The dynamic-MIG runs' workload: the slice's whole-card pods (`wl.jobs`) and the trace's
    fractional pods created in the same trace window (one card, `gpu_milli` under 1,000), each
    of those asking for one partition of `profile_for` its share; the arrivals packed, as
    `build_workload` packs the whole-card slice, to offer `load` x the cards (a partition
    counted as its `profile_share`) over `window` wall seconds, then `tail`. -> (workload,
    pod -> MIG profile); a fractional pod's job asks for 0 whole cards."""
    from bench.openb_baselines import GPU_MILLI, Job, Workload

    names = {j.name for j in wl.jobs}
    frac = sorted(
        (
            p
            for p in pods
            if p.req.num_gpu == 1
            and 0 < p.req.gpu_milli < GPU_MILLI
            and p.creation_time is not None
            and p.deletion_time is not None
            and wl.trace_from <= p.creation_time <= wl.trace_to
            and p.name not in names
        ),
        key=lambda p: (p.creation_time, p.name),
    )
    profiles = {p.name: profile_for(p.req.gpu_milli) for p in frac}
    # (name, cards, profile, creation, work): the whole-card jobs' creations from their arrivals
    raw = [
        (j.name, j.gpus, "", wl.trace_from + j.arrival * wl.density, j.work) for j in wl.jobs
    ] + [
        (
            p.name,
            0,
            profiles[p.name],
            p.creation_time,
            float(max(1, p.deletion_time - p.creation_time)),
        )
        for p in frac
    ]
    raw.sort(key=lambda r: (r[3], r[0]))
    share = {n: c or profile_share(model, prof) for n, c, prof, _, _ in raw}
    span0 = raw[-1][3] - raw[0][3]

    def offered(density: float) -> float:
        span = span0 / density
        busy = sum(
            share[n] * max(0.0, min(work, span - (t - raw[0][3]) / density))
            for n, _, _, t, work in raw
        )
        return busy / span / wl.capacity if span > 0 else float("inf")

    lo, hi = 1e-3, 1e7
    for _ in range(80):  # offered load grows with the density: bisect in log space
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if offered(mid) < load else (lo, mid)
    jobs = [
        Job(i, n, cards, (t - raw[0][3]) / hi, work) for i, (n, cards, _, t, work) in enumerate(raw)
    ]
    t_last = jobs[-1].arrival
    speed = t_last / window
    out = Workload(
        jobs=jobs,
        nodes=wl.nodes,
        density=hi,
        speed=speed,
        t_last=t_last,
        t_end=t_last + tail * speed,
        offered=offered(hi),
        trace_from=wl.trace_from,
        trace_to=wl.trace_to,
    )
    return out, profiles


def dynmig_pool_spec(admission: str = "pin") -> str:
    """The lines a Pool's `spec` gains for the dynamic-MIG runs (indented two spaces; the
    pool's `dra.admission` `admission`)."""
    layouts = "".join(
        f"        - {{name: {n}, profiles: [{', '.join(p)}]}}\n" for n, p in DYNMIG_LAYOUTS
    )
    dra = "{mig: dynamic}" if admission == "pin" else f"{{mig: dynamic, admission: {admission}}}"
    return f"  backend: dra\n  dra: {dra}\n  inference:\n    mig:\n      layouts:\n" + layouts


def quota_doc(name: str, pool: str, namespaces: list[str], cards: int) -> str:
    """A Quota `name` (after a `---`) guaranteeing `pool`'s `cards` in `namespaces`, borrowing
    unbounded (so its ResourceQuota never refuses a queued pod's claim)."""
    return (
        "---\napiVersion: gpupool.io/v1alpha1\nkind: Quota\n"
        f"metadata: {{name: {name}}}\nspec:\n  namespaces: [{', '.join(namespaces)}]\n"
        f"  pools:\n    - pool: {pool}\n      whole: {{guaranteed: {cards}}}\n"
    )


def template(pool: str, cards: int, profile: str = "") -> str:
    """gpupool's ResourceClaimTemplate for `cards` whole cards, or for one MIG partition of
    `profile` (reconciler/plan/dra.py)."""
    from reconciler.plan.dra import class_name

    return class_name(pool, profile) if profile else f"{class_name(pool)}-{cards}"


def claim_pod_spec(pool: str, cards: int, profile: str = "") -> dict:
    """The pod spec fields that ask for `cards` whole cards of DRA pool `pool`, or one MIG
    partition of `profile` (one claim from gpupool's template, as
    tests/integration/test_dra_admit.py's pods do)."""
    name = template(pool, cards, profile)
    return {
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": name}],
        "resources": {"claims": [{"name": "gpus"}]},  # the container's
    }


def device_use(node: str, device: str, shares: dict[str, float]) -> tuple[int, str, float]:
    """An allocated device of the simulated driver as (card, how gpupool's plan names it, what
    it counts of the card): a whole card `gpu-<minor>` by its uuid, 1; a dynamic partition
    `gpu-<minor>-mig-<profile>-<id>-<start>` by `gpu.nvidia.com/<node>/<device>`, placement
    included (how exact admission names a partition that has no uuid yet, plan/dra_admit.py),
    its share."""
    parts = device.split("-")
    minor = int(parts[1])
    if "mig" not in parts:
        return minor, uuid(node, minor), 1.0
    short = parts[parts.index("mig") + 1]
    profile = next((p for p in shares if p.replace(".", "").replace("+", "-") == short), short)
    return minor, f"gpu.nvidia.com/{node}/{device}", shares.get(profile, 1.0)


@dataclass
class Claims:
    """The claims of one namespace as its watch delivers them (`seen`, `listed`: the replay's
    `ClaimWatch` forwards every event): devices held per node, and per pod (first seen
    allocated) whether its allocated devices are the planned ones. Kept from the watch, not
    listed at each sample: a list of every claim four times a second loaded the API server and
    this process (the simulated kubelets') in the DRA runs only, where the device plugin's
    cards are read from the kubelets in memory."""

    checked: dict[str, bool] = field(default_factory=dict)  # pod -> allocated == planned
    unplanned: set[str] = field(default_factory=set)  # allocated pods without a plan annotation
    mismatches: list[str] = field(default_factory=list)
    shares: dict[str, float] = field(default_factory=dict)  # MIG profile -> share of a card
    planned_key: str = ""
    _allocated: dict[str, list[tuple[str, int, float]]] = field(default_factory=dict)
    """Claim uid -> (node, card, share) of each device of its allocation."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def held(self) -> dict[str, int]:
        """Node -> cards with a device allocated."""
        cards: dict[str, set[int]] = {}
        with self._lock:
            for devices in self._allocated.values():
                for node, minor, _ in devices:
                    cards.setdefault(node, set()).add(minor)
        return {n: len(c) for n, c in cards.items()}

    @property
    def used(self) -> dict[str, float]:
        """Node -> cards' worth allocated."""
        out: dict[str, float] = {}
        with self._lock:
            for devices in self._allocated.values():
                for node, _, share in devices:
                    out[node] = out.get(node, 0.0) + share
        return out

    def listed(self, items: list[dict]) -> None:
        """A (re)list: what it holds replaces what was kept."""
        with self._lock:
            self._allocated.clear()
        for claim in items:
            self.seen("ADDED", claim)

    def seen(self, kind: str, claim: dict) -> None:
        meta = claim["metadata"]
        alloc = (claim.get("status") or {}).get("allocation") or {}
        results = (alloc.get("devices") or {}).get("results") or []
        if kind == "DELETED" or not results:
            with self._lock:
                self._allocated.pop(meta.get("uid", ""), None)
            return
        devices, got, refs = [], [], []
        for r in results:
            minor, named, share = device_use(r["pool"], r["device"], self.shares)
            devices.append((r["pool"], minor, share))
            got.append(named)
            refs.append(f"{r['driver']}/{r['pool']}/{r['device']}")
        with self._lock:
            self._allocated[meta.get("uid", "")] = devices
        owners = [o["name"] for o in meta.get("ownerReferences") or [] if o["kind"] == "Pod"]
        pod = owners[0] if owners else meta["name"]
        if pod in self.checked or pod in self.unplanned:
            return
        planned = (meta.get("annotations") or {}).get(self.planned_key)
        if planned is None:
            self.unplanned.add(pod)
            return
        got.sort()
        want = sorted(u for u in planned.split(",") if u)
        # planned as pinned (uuids) or as allocated (`dra.admission: allocate`: every device
        # by driver/pool/device)
        self.checked[pod] = want in (got, sorted(refs))
        if not self.checked[pod] and len(self.mismatches) < 5:
            self.mismatches.append(f"{pod}: allocated {got}, planned {want}")
