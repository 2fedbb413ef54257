"""Set-up shared by the DRA integration tests on the real API server and scheduler
(tests/integration/test_dra*.py): DRA nodes with NVIDIA's simulated kubelet plugin publishing
their slices, and the cleanup of the cluster-scoped objects gpupool makes for them
(`dra_nodes`); the policy documents the tests write (`pool_doc`, `priority_doc`, `quota_doc`,
joined by `documents`; `dra_policy`: the static-MIG A100 pool most of them use); a pod on one
of gpupool's ResourceClaimTemplates, its claim and what the allocator gave it. Left behind, a
DeviceClass or DeviceTaintRule of gpupool's would be pruned by the next test's controller,
which would count writes that test never caused (test_faults.py counts them)."""

from __future__ import annotations

import contextlib
from typing import NamedTuple

from kubernetes import client

from reconciler import conventions as C
from reconciler.policy.catalog import default_catalog
from tests.cluster.dra_kubelet import DraPlugin
from tests.cluster.kubelets import NodeSpec
from tests.support.wait import wait_for

from .gating import gate_names
from .harness import A100, H100, add_gpu_node, drop_device_classes
from .world import GpuNodeSim

G, V = C.DRA_GROUP, C.DRA_VERSION


class DraNode(NamedTuple):
    sim: GpuNodeSim | None
    """The node's NVIDIA stand-ins and node agent; None with `agent=False`."""
    plugin: DraPlugin


def dra_nodes(
    kube,
    pool: str,
    *names: str,
    model: str = A100,
    cards: int = 4,
    mig: dict[str, dict[int, list[tuple[str, int]]]] | None = None,
    labels: dict[str, dict[str, str]] | None = None,
    dynamic: bool = False,
    agent: bool = True,
) -> dict[str, DraNode]:
    """Nodes `names` of DRA pool `pool`, each with `cards` GPUs of `model` and NVIDIA's DRA
    kubelet plugin (tests/cluster/dra_kubelet.py) publishing its slices: `mig` node -> card ->
    [(profile, placement start)] in static MIG mode, `dynamic` under the driver's DynamicMIG,
    `labels` node -> extra node labels; `agent=False`: a bare kubelet node, no GPU stand-ins
    or node agent. Registers the cleanup: the slices and bare nodes go, and so do gpupool's
    DeviceClasses of `pool` and its DeviceTaintRules on these nodes (cluster-scoped)."""
    out: dict[str, DraNode] = {}
    model_of = default_catalog().model(model) if dynamic else None
    for name in names:
        layout = (mig or {}).get(name, {})
        sim = None
        if agent:
            profiles = {i: [p for p, _ in v] for i, v in layout.items()}
            extra = (labels or {}).get(name)
            sim = add_gpu_node(
                kube, name, pool=pool, model=model, count=cards, mig=profiles, labels=extra
            )
        else:
            extra = {C.POOL_LABEL: pool, **(labels or {}).get(name, {})}
            kube.kubelets.add_node(NodeSpec(name=name, labels=extra))
            kube.cleanup(lambda name=name: kube.kubelets.remove_node(name))
        plugin = DraPlugin(kube.custom, name, cards=cards, mig=layout, dynamic=model_of)
        plugin.publish()
        kube.cleanup(plugin.remove)
        kube.cleanup(lambda name=name: drop_taint_rules(kube, name))
        out[name] = DraNode(sim, plugin)
    kube.cleanup(lambda: drop_device_classes(kube, pool))
    return out


def documents(*docs: str) -> str:
    """Policy documents as one file (harness.write_policy's text)."""
    return "---\n".join(docs)


def pool_doc(
    name: str,
    *,
    model: str = A100,
    backend: str = "dra",
    dynamic: bool = False,
    nodes: int = 1,
    gpus_per_node: int = 4,
    layout: str = "two-3g",
    profiles: tuple[str, ...] = ("3g.40gb", "3g.40gb"),
    guard: bool = True,
    admission: str = "pin",
) -> str:
    """Pool `name` of `nodes` nodes labelled `gpupool.io/pool: <name>` with `gpus_per_node`
    cards of `model`, on `backend` (`dynamic`: under the driver's DynamicMIG; `guard` False:
    `dra.guard: false`, for tests whose pods bypass gpupool; `admission`: its
    `dra.admission`), no training floor, and one inference MIG layout `layout` of `profiles`."""
    fields = [
        *(["mig: dynamic"] if dynamic else []),
        *([] if guard else ["guard: false"]),
        *([] if admission == "pin" else [f"admission: {admission}"]),
    ]
    dra = f"  dra: {{{', '.join(fields)}}}\n" if fields else ""
    return f"""\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: {name}}}
spec:
  gpuModel: {model}
  backend: {backend}
{dra}  nodeSelector: {{matchLabels: {{gpupool.io/pool: {name}}}}}
  capacity: {{nodes: {nodes}, gpusPerNode: {gpus_per_node}}}
  training: {{minGPUs: 0}}
  inference:
    mig: {{layouts: [{{name: {layout}, profiles: [{", ".join(profiles)}]}}]}}
"""


CLASSES = {"low": (10000, "training"), "serve": (20000, "inference"), "high": (50000, "training")}
"""The priority classes the DRA tests use, `<name>-<sfx>`: value and workload."""


def priority_doc(sfx: str, *classes: str, preemption: tuple[str, str] | None = None) -> str:
    """The cluster's PriorityPolicy with `classes` (names in CLASSES) suffixed `-<sfx>`;
    `preemption` (preemptor, victim): the one rule, with a 30 s checkpoint grace, a 1 min
    minimum runtime and 4 preemptions an hour."""
    lines = [
        f"    - {{name: {c}-{sfx}, value: {CLASSES[c][0]}, workload: {CLASSES[c][1]}}}\n"
        for c in classes
    ]
    if preemption:
        by, victim = preemption
        lines.append(
            "  preemption:\n"
            "    {checkpointGracePeriod: 30s, minRuntime: 1m, budgetPerHour: 4, rules: "
            f"[{{preemptor: {by}-{sfx}, victims: [{victim}-{sfx}]}}]}}\n"
        )
    head = "apiVersion: gpupool.io/v1alpha1\nkind: PriorityPolicy\nmetadata: {name: cluster}\n"
    return head + "spec:\n  classes:\n" + "".join(lines)


def guaranteed(n: int, **limits: int) -> dict[str, int]:
    """A quota's limits for whole cards or one MIG profile: `n` guaranteed, and `limits`
    (borrowingLimit, lendingLimit)."""
    return {"guaranteed": n, **limits}


def _flow(value) -> str:
    """`value` in YAML flow style, keys in their order."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    return str(value)


def quota_doc(
    name: str,
    ns: str,
    pool: str,
    *,
    whole: dict[str, int] | None = None,
    mig: dict[str, dict[str, int]] | None = None,
    max_gpus: int | None = None,
    flow: bool = False,
) -> str:
    """Quota `name` for namespace `ns` on `pool`: `whole` cards' and `mig` (profile -> limits)
    limits (see `guaranteed`), `max_gpus` the team's cap; the pool's entry written in block
    style, or in flow style on one line (`flow`)."""
    entry = {"pool": pool, **({"whole": whole} if whole else {}), **({"mig": mig} if mig else {})}
    if flow:
        pools = f"  pools: [{_flow(entry)}]\n"
    else:
        first, *rest = (f"{k}: {_flow(v)}" for k, v in entry.items())
        pools = f"  pools:\n    - {first}\n" + "".join(f"      {r}\n" for r in rest)
    cap = f"  maxGPUs: {max_gpus}\n" if max_gpus is not None else ""
    return f"""\
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {{name: {name}}}
spec:
  namespaces: [{ns}]
{cap}{pools}"""


def dra_policy(
    sfx: str,
    ns: str,
    *,
    nodes: int = 2,
    whole: int = 6,
    mig: int = 2,
    gpus_per_node: int = 4,
    backend: str = "dra",
    classes: tuple[str, ...] = ("low", "serve"),
    preemption: tuple[str, str] | None = None,
    guard: bool = True,
    admission: str = "pin",
) -> str:
    """Pool d<sfx> (`pool_doc`: A100, the `two-3g` MIG layout) on `backend` (`guard`,
    `admission`: as `pool_doc`'s), the priority classes `classes` (`priority_doc`), and a Quota
    for `ns` of `whole` cards and `mig` 3g.40gb instances, borrowing nothing."""
    pool = f"d{sfx}"
    return documents(
        pool_doc(
            pool,
            backend=backend,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            guard=guard,
            admission=admission,
        ),
        priority_doc(sfx, *classes, preemption=preemption),
        quota_doc(
            f"q{sfx}",
            ns,
            pool,
            whole=guaranteed(whole, borrowingLimit=0),
            mig={"3g.40gb": guaranteed(mig, borrowingLimit=0)},
        ),
    )


def pod_on_claim(
    name: str, claim: dict, spec: dict | None = None, meta: dict | None = None
) -> dict:
    """A pod `name` whose one container uses its one claim `gpus`, `claim` naming where it
    comes from (`resourceClaimTemplateName` or `resourceClaimName`); `spec`: the rest of the
    pod's spec, `meta`: of its metadata."""
    return {
        "metadata": {"name": name, **(meta or {})},
        "spec": {
            **(spec or {}),
            "resourceClaims": [{"name": "gpus", **claim}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/work:1",
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def resource_claim(name: str, cls: str, **exactly) -> dict:
    """A ResourceClaim `name` of one request `gpu` for DeviceClass `cls`; `exactly`: the
    request's other fields (count, selectors, tolerations)."""
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": cls, **exactly}}]
            }
        },
    }


def claim_pod(
    kube, ns: str, name: str, template: str, cls: str, gang: str = "", size: int = 2
) -> None:
    """A pod whose one claim (`gpus`) is made from `template`; `gang`: an explicit gang of
    `size`."""
    meta = {"annotations": {C.GANG_ANN: gang, C.GANG_SIZE_ANN: str(size)}} if gang else None
    source = {"resourceClaimTemplateName": template}
    kube.core.create_namespaced_pod(
        ns, pod_on_claim(name, source, {"priorityClassName": cls}, meta)
    )


def claims_made(kube, ns: str, pods) -> None:
    """Wait (60 s) until the resourceclaim controller has made each of `pods`' claims."""
    wait_for("claims made", lambda: all(claim_of(kube, ns, p) for p in pods), timeout=60)


def gated(kube, ns: str, pods) -> list[str]:
    """Those of `pods` still gated (a scheduling gate left)."""
    return [p for p in pods if kube.core.read_namespaced_pod(p, ns).spec.scheduling_gates]


def each_allocated(kube, ns: str, pods, read=None, timeout: float = 60) -> dict:
    """pod -> `read(kube, ns, pod)` (default `allocated`), waited for until it is there, one
    pod after the other."""
    read = read or allocated
    return {
        p: wait_for(f"{p} allocated", lambda p=p: read(kube, ns, p), timeout=timeout) for p in pods
    }


def claims_in(kube, ns: str) -> list[dict]:
    """The ResourceClaims in namespace `ns`."""
    return kube.custom.list_namespaced_custom_object(G, V, ns, "resourceclaims")["items"]


def claims_gone(kube, ns: str, what: str = "the claims gone") -> None:
    """Wait (90 s) until no ResourceClaim is left in `ns`."""
    wait_for(what, lambda: not claims_in(kube, ns), timeout=90)


def claim_of(kube, ns: str, pod: str, entry: str = "gpus") -> dict | None:
    """The ResourceClaim made for the pod's claim `entry`, None while not made."""
    p = kube.core.read_namespaced_pod(pod, ns)
    made = {s.name: s.resource_claim_name for s in (p.status.resource_claim_statuses or [])}
    if not made.get(entry):
        return None
    return kube.custom.get_namespaced_custom_object(G, V, ns, "resourceclaims", made[entry])


def allocated_devices(claim: dict | None) -> list[tuple[str, str]] | None:
    """(pool, device) of a claim's allocation, None while not allocated."""
    alloc = ((claim or {}).get("status") or {}).get("allocation")
    if not alloc:
        return None
    return sorted((r["pool"], r["device"]) for r in alloc["devices"]["results"])


def allocated(kube, ns: str, pod: str) -> tuple[str, list[str], list[str]] | None:
    """(node, allocated devices, planned devices by name) once the pod is bound and its claim
    allocated; the planned ones are the uuids gpupool wrote on the claim, named from the slice
    (or, written as an allocation's `driver/pool/device`, the device of its node's pool)."""
    p = kube.core.read_namespaced_pod(pod, ns)
    claim = claim_of(kube, ns, pod)
    alloc = ((claim or {}).get("status") or {}).get("allocation")
    if not p.spec.node_name or not alloc:
        return None
    node = p.spec.node_name
    got = sorted(r["device"] for r in alloc["devices"]["results"] if r["pool"] == node) + sorted(
        f"{r['pool']}/{r['device']}" for r in alloc["devices"]["results"] if r["pool"] != node
    )
    planned = (claim["metadata"].get("annotations") or {}).get(C.DRA_PLANNED_ANN, "")
    slc = kube.custom.get_cluster_custom_object(G, V, "resourceslices", f"{node}-{C.DRA_DRIVER}")
    by_uuid = {d["attributes"]["uuid"]["string"]: d["name"] for d in slc["spec"]["devices"]}
    named = sorted(
        u.rsplit("/", 1)[1] if u.startswith(f"{C.DRA_DRIVER}/{node}/") else by_uuid.get(u, f"?{u}")
        for u in planned.split(",")
        if u
    )
    return node, got, named


def taint_cycle(kube, ctl) -> dict[str, str]:
    """One controller cycle 30 s of the test clock later; its outcomes, action -> 'status:
    message' (printed: shown when a wait times out)."""
    kube.clock.advance(30)
    r = ctl.cycle()
    assert r.error is None, r.error
    out = {o.action: f"{o.status}: {o.message}" for o in (r.applied.outcomes if r.applied else [])}
    print("OUTCOMES", out)
    return out


def taint_rule(kube, name: str) -> dict | None:
    """The DeviceTaintRule `name`, None when there is none."""
    try:
        return kube.custom.get_cluster_custom_object(G, V, "devicetaintrules", name)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


FOUR_TWO_ONE = ("4g.40gb", "2g.20gb", "1g.10gb")


def four_two_one_policy(pool: str, sfx: str, ns: str) -> str:
    """Pool `pool` of one node with one H100 under the driver's DynamicMIG, offering the
    `four-two-one` layout (`FOUR_TWO_ONE`), the class serve-<sfx>, and a Quota for `ns` on it
    with no limits."""
    return documents(
        pool_doc(
            pool,
            model=H100,
            dynamic=True,
            gpus_per_node=1,
            layout="four-two-one",
            profiles=FOUR_TWO_ONE,
        ),
        priority_doc(sfx, "serve"),
        quota_doc(f"q{sfx}", ns, pool, flow=True),
    )


def drop_taint_rules(kube, node: str) -> None:
    """Delete the DeviceTaintRules gpupool made for `node`'s devices, drains and reservations
    (cluster-scoped: left behind, the next test's controller prunes them and counts a write
    that test never caused)."""
    listed = kube.custom.list_cluster_custom_object(G, V, "devicetaintrules")
    for item in listed.get("items", []):
        name = item["metadata"]["name"]
        if name.startswith((f"gpupool-drain-{node}-", f"gpupool-reserve-{node}-")):
            with contextlib.suppress(Exception):  # gone already
                kube.custom.delete_cluster_custom_object(G, V, "devicetaintrules", name)


def admit_round(
    kube, ctl, ns: str, sfx: str, spec: dict[str, tuple[str, str]], lose: str = "", before=None
):
    """Create the pods (name -> (template, gang)), check they are gated, (`lose`: delete that
    pod's claim, as someone else might; `before`: called once the claims are made), cycle
    the controller until every one is admitted;
    -> ({pod: (node, allocated, planned)}, outcomes by action)."""
    for name, (template, gang) in spec.items():
        cls = f"serve-{sfx}" if "-mig-" in template else f"low-{sfx}"
        claim_pod(kube, ns, name, template, cls, gang=gang)
        # the gate covers pods on gpupool's templates
        assert C.ADMISSION_GATE in gate_names(kube.core.read_namespaced_pod(name, ns))
    claims_made(kube, ns, spec)
    if lose:
        name = claim_of(kube, ns, lose)["metadata"]["name"]
        kube.custom.delete_namespaced_custom_object(G, V, ns, "resourceclaims", name)
    if before is not None:
        before()
    results = cycle_until_admitted(kube, ctl, ns, list(spec), timeout=120, interval=1)
    return each_allocated(kube, ns, spec), results


def cycle_until_admitted(
    kube, ctl, ns: str, pods: list[str], timeout: float, interval: float
) -> dict[str, list[tuple[str, str]]]:
    """Cycle the controller, 30 s of the test clock apart, until none of `pods` is gated;
    -> the outcomes by action."""
    results: dict[str, list[tuple[str, str]]] = {}

    def admitted() -> bool:
        kube.clock.advance(30)
        r = ctl.cycle()
        assert r.error is None, r.error
        for o in r.applied.outcomes if r.applied else []:
            results.setdefault(o.action, []).append((o.status, o.message))
            print("OUTCOME", o.action, o.status, o.message)  # shown when the round times out
        return not gated(kube, ns, pods)

    wait_for("every pod admitted", admitted, timeout=timeout, interval=interval)
    return results
