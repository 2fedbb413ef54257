"""DRA mode's objects (reconciler/plan/dra.py): the DeviceClasses and ResourceClaimTemplates
of every pool with `spec.backend: dra`, desired vs live, as for the other objects (wanted.py,
prune.py): created or updated while gpupool's (or absent), pruned when gpupool made them and
the policy no longer renders them. A template a pod still names is never pruned (its pod
could not get its claim), and nothing is pruned while the desired state has no Pool at all (an
empty or unreadable policy directory looks the same)."""

from __future__ import annotations

from typing import Any

from reconciler import conventions as C
from reconciler.conventions import MANAGED_BY, MANAGED_BY_LABEL
from reconciler.observe.model_dra import DraState
from reconciler.plan import dra as dra_render
from reconciler.plan.actions import ApplyDraObject, PruneDraObject
from reconciler.plan.objects.wanted import foreign
from reconciler.plan.run import Run

Key = dra_render.Key


def _ref(kind: str, ns: str, name: str) -> str:
    return f"{kind} {ns + '/' if ns else ''}{name}"


def _live(dra: DraState) -> dict[Key, tuple[str, dict[str, Any]]]:
    """(kind, ns, name) -> (manager, what gpupool compares: selectors / requested devices)."""
    out: dict[Key, tuple[str, dict[str, Any]]] = {}
    for c in dra.device_classes:
        out[("DeviceClass", "", c.name)] = (
            c.managed_by,
            {"selectors": c.selectors, "pool": c.pool, "profile": c.profile},
        )
    for t in dra.claim_templates:
        out[("ResourceClaimTemplate", t.namespace, t.name)] = (t.managed_by, {"devices": t.devices})
    return out


def _comparable(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    """What `_live` reads back of a rendered object."""
    if kind == "DeviceClass":
        labels = body["metadata"]["labels"]
        return {
            "selectors": [s["cel"]["expression"] for s in body["spec"]["selectors"]],
            "pool": labels.get(C.POOL_LABEL, ""),
            "profile": body["metadata"].get("annotations", {}).get(C.DRA_PROFILE_ANN, ""),
        }
    req = body["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    return {"devices": {req["deviceClassName"]: req["count"]}}


def dra_objects(run: Run) -> None:
    """Step 9: DRA's objects, where the cluster serves resource.k8s.io/v1."""
    dra = run.observed.dra
    if dra is None:
        return
    want = dra_render.desired_dra_objects(run.desired)
    have = _live(dra)
    classes: dict[str, str] = {}
    for key, body in want.items():
        kind, ns, name = key
        cur = have.get(key)
        if cur is not None and cur[0] != MANAGED_BY:
            foreign(run, kind, f"{ns}/{name}" if ns else name, cur[0], "gpupool's")
            continue
        if cur is not None and cur[1] == _comparable(kind, body):
            continue
        deps: tuple[str, ...] = ()
        if kind == "ResourceClaimTemplate":
            cls = body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"]
            deps = (classes[cls],) if cls in classes else ()
            if cur is not None:
                # a template's spec is immutable (k8s.io/kubernetes v1.37.2 pkg/apis/resource/
                # validation ValidateResourceClaimTemplateUpdate): deleted and made again
                deps = (*deps, _prune_one(run, kind, ns, name, "its spec differs and is immutable"))
                cur = None
        aid = run.add(
            ApplyDraObject(
                id=f"dra:{kind}:{f'{ns}/' if ns else ''}{name}",
                target=f"{ns}/{name}" if ns else name,
                reason=f"{'create' if cur is None else 'update'} {_ref(kind, ns, name)} for "
                f"Pool {body['metadata']['labels'][C.POOL_LABEL]} (DRA)",
                depends_on=deps,
                object_kind=kind,
                namespace=ns,
                name=name,
                verb="create" if cur is None else "update",
                labels=body["metadata"]["labels"],
                annotations=body["metadata"].get("annotations", {}),
                spec=body["spec"],
            )
        )
        if kind == "DeviceClass":
            classes[name] = aid
    _prune(run, dra, want, have)
    sweep_replaced_claims(run, dra)


def sweep_replaced_claims(run: Run, dra: DraState) -> None:
    """Delete the ResourceClaims that exact admission replaced and left: a claim a pinned one
    names in `gpupool.io/replaces-claims` (`ResourceClaimObject.replaces`) that still exists,
    is not allocated, reserved for nobody, and that no pod's status names (nor any pod
    references). Exact admission deletes them itself once the pod's gate went
    (apply/handlers/dra_admit.py `delete_replaced`); one whose delete failed still counts
    against its namespace's ResourceQuota for device requests until the pod is gone, so a
    later cycle deletes it here. The handler deletes it only while that is still so (re-read:
    apply/handlers/dra.py `sweep_claim`). Nothing is swept while a pod's status still names
    the claim: exact admission names the pinned claim before its gate goes and never names the
    old one again, so a snapshot whose pods lag its claims only sweeps later."""
    pinned = [c for c in dra.claims if c.replaces]
    if not pinned:  # nothing replaced (`dra.admission: allocate` replaces no claim)
        return
    claims = {(c.namespace, c.name): c for c in dra.claims}
    named = {(p.namespace, n) for p in dra.pods for n in p.claims}
    swept: set[tuple[str, str]] = set()
    for c in sorted(pinned, key=lambda c: (c.namespace, c.name)):
        for old in c.replaces:
            key = (c.namespace, old)
            left = claims.get(key)
            if key in swept or key in named or left is None:
                continue
            if left.allocated is not None or left.reserved_for:
                continue
            swept.add(key)
            run.add(
                PruneDraObject(
                    id=f"prune-dra:ResourceClaim:{c.namespace}/{old}",
                    target=f"{c.namespace}/{old}",
                    reason=f"delete {_ref('ResourceClaim', c.namespace, old)}: exact admission "
                    f"replaced it by the pinned claim {c.name} and its delete did not happen; "
                    "unallocated and named by no pod, it still counts against the namespace's "
                    "ResourceQuota",
                    object_kind="ResourceClaim",
                    namespace=c.namespace,
                    name=old,
                )
            )


def _prune(run: Run, dra: DraState, want: dict, have: dict) -> None:
    if not run.desired.pools:
        return  # an empty policy directory must not wipe the cluster's classes
    stale = sorted(
        (key for key, (manager, _) in have.items() if manager == MANAGED_BY and key not in want),
        key=lambda k: (-dra_render.KINDS.index(k[0]), k[1], k[2]),
    )
    if not stale:
        return
    named = {(p.namespace, t) for p in dra.pods for t in p.templates}
    pruned: list[str] = []
    for kind, ns, name in stale:
        if kind == "ResourceClaimTemplate" and (ns, name) in named:
            continue
        deps = tuple(pruned) if kind == "DeviceClass" else ()
        aid = _prune_one(
            run, kind, ns, name, "no DRA pool of the desired state renders it any more", deps
        )
        if kind == "ResourceClaimTemplate":
            pruned.append(aid)


def _prune_one(
    run: Run, kind: str, ns: str, name: str, why: str, deps: tuple[str, ...] = ()
) -> str:
    return run.add(
        PruneDraObject(
            id=f"prune-dra:{kind}:{f'{ns}/' if ns else ''}{name}",
            target=f"{ns}/{name}" if ns else name,
            reason=f"prune {_ref(kind, ns, name)}: {why} (gpupool made it: "
            f"{MANAGED_BY_LABEL}={MANAGED_BY})",
            depends_on=deps,
            object_kind=kind,
            namespace=ns,
            name=name,
        )
    )


def slices_agree(run: Run) -> None:
    """Step 9: on each node of a DRA pool, what NVIDIA's driver publishes against what the
    node agent reports: after mig-manager changed a layout the driver republishes the node's
    slices (a new pool generation); until it has, a claim may be allocated a MIG device that
    no longer exists, or miss one that does. Said as a finding (`dra-slices-stale`), naming
    both; a node the driver publishes nothing for is `dra-slices-missing`."""
    dra = run.observed.dra
    if dra is None:
        return
    pools = [pv for pv in run.cluster.pools.values() if pv.pool.spec.backend == "dra"]
    if not pools:
        return
    nodes: dict = {}
    for x in run.observed.nodes:
        nodes.setdefault(x.name, x)  # the first listing, as everywhere
    published = dra.slices_by_node()
    for pv in pools:
        for node in sorted(pv.by_node()):
            n = nodes.get(node)
            if n is None:
                continue
            slices = published.get(node, [])
            if not any(s.devices for s in slices):
                run.find(
                    "warning",
                    "dra-slices-missing",
                    f"Node {node}",
                    f"Pool/{pv.name} runs on DRA, and no ResourceSlice of {C.DRA_DRIVER} "
                    f"describes {node}: its cards cannot be claimed (is the driver running?)",
                )
                continue
            if pv.pool.spec.dynamic_mig:
                _mig_manager_beside(run, pv.name, n)
                continue  # every partition is published; the agent shows those made
            # the node's layouts kept from the last plan while its slices and its node agent's
            # report are the objects they were (most cycles: a pass over its devices saved)
            layout, agent = run.keep.group(
                "dra-layouts", lambda n=n, s=slices: _layouts(n, s), n, tuple(slices)
            )
            if layout != agent:
                run.find(
                    "warning",
                    "dra-slices-stale",
                    f"Node {node}",
                    f"the DRA driver publishes {_say(layout)} on {node}, the node agent "
                    f"reports {_say(agent)}: claims there may be allocated from an old layout "
                    "until the driver republishes its slices",
                )


def _mig_manager_beside(run: Run, pool: str, node) -> None:
    """Never both on one node: a node of a dynamic MIG pool that mig-manager is told to
    configure (its `nvidia.com/mig.config` label; gpupool never writes it there) has two
    owners of its MIG instances; NVIDIA's driver docs warn not to run mig-parted beside
    DynamicMIG."""
    config = node.labels.get(C.MIG_CONFIG_LABEL, "")
    if config:
        run.find(
            "warning",
            "dra-dynamic-mig-manager",
            f"Node {node.name}",
            f"Pool/{pool} runs NVIDIA's DRA driver with dynamic MIG, which creates and destroys "
            f"{node.name}'s MIG instances itself, and the node carries {C.MIG_CONFIG_LABEL}="
            f"{config}: mig-manager may change the same cards under the driver. gpupool "
            "writes no mig-manager label on such a node; remove it (and keep mig-manager off "
            "the node)",
        )


Layout = tuple[tuple[int, str, int], ...]


def _layouts(node, slices) -> tuple[Layout, Layout]:
    """(what the driver publishes, what the node agent reports) of `node`, each sorted."""
    devices = [d for s in slices for d in s.devices]
    return tuple(sorted(published_layout(devices))), tuple(sorted(reported_layout(node)))


def published_layout(devices) -> set[tuple[int, str, int]]:
    """(card minor, profile or 'gpu', placement start) of NVIDIA's devices by their names
    (observe/model_dra.py: `gpu-<minor>`, `gpu-<minor>-mig-<profile>-<id>-<start>`)."""
    out = set()
    for d in devices:
        parts = d.name.split("-")
        if len(parts) < 2 or not parts[1].isdigit():
            continue
        if d.type == "mig" and parts[-1].isdigit():
            out.add((int(parts[1]), str(d.attr("profile")), int(parts[-1])))
        elif d.type == "gpu":
            out.add((int(parts[1]), "gpu", 0))
    return out


def reported_layout(node) -> set[tuple[int, str, int]]:
    """The same triples for the cards the node agent reports (`published_layout` compared with
    this says whether the driver has republished the node's layout yet)."""
    out = set()
    for g in node.gpus:
        if g.mig_enabled:
            out |= {(g.index, m.profile, m.start) for m in g.mig_instances}
        else:
            out.add((g.index, "gpu", 0))
    return out


def _say(devs: Layout) -> str:
    return ", ".join(f"gpu{i}" if p == "gpu" else f"gpu{i}:{p}@{s}" for i, p, s in devs) or "none"
