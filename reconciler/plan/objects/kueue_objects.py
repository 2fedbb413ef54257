"""Kueue's objects gpupool renders in kueue mode (ResourceFlavors, ClusterQueues, LocalQueues)
and prunes otherwise: desired vs live, as for the other objects (wanted.py, prune.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.conventions import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    POOL_LABEL,
)
from reconciler.observe.model import KueueObject
from reconciler.plan import kueue as kueue_render
from reconciler.plan.actions import (
    ApplyKueueObject,
    PruneKueueObject,
)
from reconciler.plan.objects.prune import refuse_prune_all
from reconciler.plan.objects.wanted import foreign
from reconciler.plan.run import Run, kueue_mode


def _kueue_ref(kind: str, ns: str, name: str) -> str:
    return f"{kind} {ns + '/' if ns else ''}{name}"


def kueue_objects(run: Run) -> None:
    """Kueue's objects: in kueue mode every Quota as a ClusterQueue, every Pool as a
    ResourceFlavor, every team namespace's LocalQueue (reconciler/plan/kueue.py); in gpupool
    mode none, so the ones gpupool made are pruned. Only objects with gpupool's managed-by
    label are changed or pruned, and pruning all of them while no Quota is left needs the
    ChangePolicy's allowDeleteAllQuotas, as for ResourceQuotas."""
    if run.observed.kueue is None:
        return  # Kueue's CRDs are not served: nothing to apply or prune
    mode = kueue_mode(run)
    want = kueue_render.desired_kueue_objects(run.desired) if mode else {}
    if mode:
        for q in sorted(run.desired.quotas.values(), key=lambda q: q.metadata.name):
            for what in kueue_render.unmapped_fields(q):
                run.find(
                    "info",
                    "kueue-unmapped-field",
                    f"Quota {q.metadata.name}",
                    f"{what} has no Kueue equivalent and is not enforced in kueue mode",
                )
    diff = _KueueDiff(run, {(o.kind, o.namespace, o.name): o for o in run.observed.kueue})
    for key, spec in want.items():
        diff.apply(key, spec)
    stale = sorted(
        (
            key
            for key, o in diff.have.items()
            if o.managed_by == MANAGED_BY and key not in want and not o.terminating
        ),
        key=lambda k: (-kueue_render.KINDS.index(k[0]), k[1], k[2]),
    )
    change = run.desired.change.spec if run.desired.change else None
    if stale and not run.desired.quotas and not (change and change.allow_delete_all_quotas):
        refuse_prune_all(
            run, "Kueue object", [_kueue_ref(*k) for k in stale], "allowDeleteAllQuotas"
        )
        return
    why = (
        "no Quota, Pool or team namespace of the desired state renders it any more"
        if mode
        else "the PriorityPolicy's admission.controller is gpupool, which renders no Kueue object"
    )
    for key in stale:
        diff.prune(key, why)


Key = tuple[str, str, str]  # (kind, namespace, name)


@dataclass
class _KueueDiff:
    """Applies and prunes Kueue objects in dependency order: flavors, then cluster queues,
    then local queues; pruning the other way round."""

    run: Run
    have: dict[Key, KueueObject]
    applied: dict[Key, str] = field(default_factory=dict)
    pruned: dict[Key, str] = field(default_factory=dict)

    def prune(self, key: Key, why: str) -> str:
        kind, ns, name = key
        ref = _kueue_ref(kind, ns, name)
        deps: list[str] = []
        if kind == "ClusterQueue":  # its local queues go first
            deps = [aid for (k, _, _), aid in self.pruned.items() if k == "LocalQueue"]
        elif kind == "ResourceFlavor":
            deps = [aid for (k, _, _), aid in self.pruned.items() if k == "ClusterQueue"]
        aid = self.run.add(
            PruneKueueObject(
                id=f"prune-kueue:{kind}:{f'{ns}/' if ns else ''}{name}",
                target=f"{ns}/{name}" if ns else name,
                reason=f"prune {ref}: {why} (gpupool made it: {MANAGED_BY_LABEL}={MANAGED_BY})",
                depends_on=tuple(sorted(deps)),
                object_kind=kind,
                namespace=ns,
                name=name,
            )
        )
        self.pruned[key] = aid
        return aid

    def _after(self, kind: str, spec: dict) -> list[str]:
        """What an object applied now waits for: a ClusterQueue its flavors, a LocalQueue its
        ClusterQueue."""
        if kind == "ClusterQueue":
            names = {f["name"] for g in spec["resourceGroups"] for f in g["flavors"]}
            return [
                aid
                for (k, _, n), aid in self.applied.items()
                if k == "ResourceFlavor" and n in names
            ]
        if kind == "LocalQueue":
            return [
                aid
                for (k, _, n), aid in self.applied.items()
                if k == "ClusterQueue" and n == spec["clusterQueue"]
            ]
        return []

    def apply(self, key: Key, spec: dict) -> None:
        kind, ns, name = key
        cur = self.have.get(key)
        if cur is not None and cur.managed_by != MANAGED_BY:
            foreign(self.run, kind, f"{ns}/{name}" if ns else name, cur.managed_by, "gpupool's")
            return
        if cur is not None and kueue_render.spec_matches(spec, cur.spec):
            return
        deps = self._after(kind, spec)
        verb = "create" if cur is None else "update"
        if (
            kind == "LocalQueue"
            and cur is not None
            and cur.spec.get("clusterQueue")
            not in (
                None,
                spec["clusterQueue"],
            )
        ):
            # spec.clusterQueue is immutable (LocalQueue CRD rule "field is immutable"):
            # the queue is deleted and made again pointing at the namespace's new quota
            deps.append(
                self.prune(
                    key,
                    f"{ns} now belongs to ClusterQueue {spec['clusterQueue']}, and a "
                    "LocalQueue's clusterQueue cannot change: it is made again",
                )
            )
            verb = "create"
        what = {
            "ResourceFlavor": f"for Pool {spec.get('nodeLabels', {}).get(POOL_LABEL, name)}",
            "ClusterQueue": f"for the Quota of namespaces {', '.join(_cq_namespaces(spec))}",
            "LocalQueue": f"of namespace {ns}, queueing into ClusterQueue "
            f"{spec.get('clusterQueue')}",
        }[kind]
        self.applied[key] = self.run.add(
            ApplyKueueObject(
                id=f"kueue:{kind}:{f'{ns}/' if ns else ''}{name}",
                target=f"{ns}/{name}" if ns else name,
                reason=f"{verb} {_kueue_ref(kind, ns, name)} {what} (kueue mode)",
                depends_on=tuple(sorted(deps)),
                object_kind=kind,
                namespace=ns,
                name=name,
                verb=verb,
                spec=kueue_render.body(spec),
            )
        )


def _cq_namespaces(spec: dict) -> list[str]:
    exprs = (spec.get("namespaceSelector") or {}).get("matchExpressions") or [{}]
    return list(exprs[0].get("values") or [])
