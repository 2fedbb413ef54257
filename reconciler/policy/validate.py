"""Semantic checks across documents: what a schema alone cannot see.

Each check yields Problems located at the offending field, so every message names file,
line, column and field path; all problems are reported, not just the first.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import dataclass
from fractions import Fraction

from reconciler.conventions import PRODUCT_LABEL
from reconciler.policy.models import LabelSelector, Pool, Quota
from reconciler.policy.positions import format_path, locate
from reconciler.policy.problems import Problem
from reconciler.policy.quantity import GI, format_bytes, quantity_bytes
from reconciler.policy.state import DesiredState, Located
from reconciler.policy.validate_dra import dra_problems


def _problem(doc: Located, path: tuple, message: str) -> Problem:
    line, col = locate(doc.node, path) if doc.node is not None else (doc.line, 1)
    kind, name = doc.key
    return Problem(doc.file, line, col, format_path(path), message, f"{kind}/{name}")


def check_semantics(
    state: DesiredState, invalid: Collection[tuple[str, str]] = ()
) -> list[Problem]:
    """Cross-document problems. `invalid`: (kind, name) of documents that failed schema
    validation; references to them are not reported again as missing (their own errors are)."""
    out: list[Problem] = []
    for check in (
        _duplicates,
        _pools,
        _mps_strategy,
        _impossible_selectors,
        _pool_overlap,
        _system_namespaces,
        _maintenance_conflicts,
    ):
        out.extend(check(state))
    ctx = _Invalid(
        pools=frozenset(n for k, n in invalid if k == "Pool"),
        priority=state.priority is None and any(k == "PriorityPolicy" for k, _ in invalid),
    )
    for ref_check in (_quotas, _scaling, _maintenance):
        out.extend(ref_check(state, ctx))
    out.extend(_priority(state))
    out.extend(_kueue(state))
    out.extend(dra_problems(state, _docs, _problem))
    return out


@dataclass(frozen=True)
class _Invalid:
    pools: frozenset[str] = frozenset()  # Pools that exist but failed schema validation
    priority: bool = False  # the PriorityPolicy exists but failed schema validation


def _duplicates(state: DesiredState) -> Iterator[Problem]:
    seen: dict[tuple[str, str], Located] = {}
    singletons: dict[str, Located] = {}
    for d in state.documents:
        if d.key in seen:
            first = seen[d.key]
            yield _problem(
                d,
                ("metadata", "name"),
                f"duplicate {d.key[0]} name {d.key[1]!r} "
                f"(first defined at {first.file}:{first.line})",
            )
            continue
        seen[d.key] = d
        if d.model.kind in ("PriorityPolicy", "ChangePolicy"):
            if d.model.kind in singletons:
                first = singletons[d.model.kind]
                yield _problem(
                    d,
                    ("kind",),
                    f"only one {d.model.kind} may exist (another is at {first.file}:{first.line})",
                )
            else:
                singletons[d.model.kind] = d


def _docs(state: DesiredState, kind: str) -> list[Located]:
    seen: set[tuple[str, str]] = set()
    out = []
    for d in state.documents:
        if d.model.kind == kind and d.key not in seen:
            seen.add(d.key)
            out.append(d)
    return out


SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease", "gpupool-system")
"""Namespaces no policy may put a quota on or scale workloads in: Kubernetes' own and gpupool's
(the controller's admission policy, deploy/controller-admission.yaml, refuses its writes there
too)."""


def _system_namespaces(state: DesiredState) -> Iterator[Problem]:
    for d in _docs(state, "Quota"):
        for i, ns in enumerate(d.model.spec.namespaces):
            if ns in SYSTEM_NAMESPACES:
                yield _problem(
                    d,
                    ("spec", "namespaces", i),
                    f"namespace {ns!r} is a system namespace; gpupool manages no quota there",
                )
    for d in _docs(state, "ScalingPolicy"):
        for i, t in enumerate(d.model.spec.targets):
            if t.namespace in SYSTEM_NAMESPACES:
                yield _problem(
                    d,
                    ("spec", "targets", i, "namespace"),
                    f"namespace {t.namespace!r} is a system namespace; gpupool scales nothing "
                    "there",
                )


def pool_gpus(pool: Pool) -> int:
    return pool.spec.capacity.nodes * pool.spec.capacity.gpus_per_node


def _pools(state: DesiredState) -> Iterator[Problem]:
    for d in _docs(state, "Pool"):
        pool: Pool = d.model
        spec = pool.spec
        model = state.catalog.model(spec.gpu_model)
        if model is None:
            yield _problem(
                d,
                ("spec", "gpuModel"),
                f"unknown GPU model {spec.gpu_model!r}; known: {', '.join(state.catalog.models)}",
            )
            continue
        total = pool_gpus(pool)
        inf = spec.inference
        if spec.training.max_gpus is not None and spec.training.max_gpus < spec.training.min_gpus:
            yield _problem(
                d,
                ("spec", "training", "maxGPUs"),
                f"maxGPUs {spec.training.max_gpus} is below minGPUs {spec.training.min_gpus}",
            )
        if inf.max_gpus is not None and inf.max_gpus < inf.min_gpus:
            yield _problem(
                d,
                ("spec", "inference", "maxGPUs"),
                f"maxGPUs {inf.max_gpus} is below minGPUs {inf.min_gpus}",
            )
        if spec.training.min_gpus + inf.min_gpus > total:
            yield _problem(
                d,
                ("spec", "training", "minGPUs"),
                f"training.minGPUs {spec.training.min_gpus} + inference.minGPUs {inf.min_gpus} "
                f"exceed the pool's {total} GPUs",
            )
        if (inf.min_gpus or inf.max_gpus) and inf.mig is None and inf.shared is None:
            yield _problem(
                d,
                ("spec", "inference"),
                "inference GPUs are requested but neither mig nor shared partitioning is given",
            )
        if inf.mig is not None:
            if not model.mig_capable:
                yield _problem(
                    d,
                    ("spec", "inference", "mig"),
                    f"{model.name} does not support MIG; use shared slices or whole cards",
                )
            else:
                names: set[str] = set()
                for i, layout in enumerate(inf.mig.layouts):
                    base = ("spec", "inference", "mig", "layouts", i)
                    if layout.name in names:
                        yield _problem(d, (*base, "name"), f"duplicate layout name {layout.name!r}")
                    names.add(layout.name)
                    unknown = [p for p in layout.profiles if p not in model.profiles]
                    for j, p in enumerate(layout.profiles):
                        if p in unknown:
                            yield _problem(
                                d,
                                (*base, "profiles", j),
                                f"{p!r} is not a MIG profile of {model.name}; "
                                f"valid: {', '.join(model.profiles)}",
                            )
                    if not unknown and state.catalog.place(model, layout.profiles) is None:
                        yield _problem(
                            d, (*base, "profiles"), _unplaceable(state, model, layout.profiles)
                        )
        if inf.shared is not None:
            per_gpu = inf.shared.slices_per_gpu * quantity_bytes(inf.shared.memory_per_slice)
            if per_gpu > model.memory_gib * GI:
                yield _problem(
                    d,
                    ("spec", "inference", "shared", "memoryPerSlice"),
                    f"{inf.shared.slices_per_gpu} slices x {inf.shared.memory_per_slice} "
                    f"= {format_bytes(per_gpu)} exceeds the {model.memory_gib}Gi memory "
                    f"of one {model.name} card",
                )


def _mps_strategy(state: DesiredState) -> Iterator[Problem]:
    """MPS where the GPU operator forces the mixed MIG strategy on every node: NVIDIA's device
    plugin refuses to start with both (k8s-device-plugin v0.19.3 cmd/nvidia-device-plugin/main.go
    `validateFlags`), and the operator's MIG_STRATEGY environment variable overrides the
    strategy gpupool writes into an MPS config (api/config/v1/config.go `NewConfig`)."""
    for d in _docs(state, "Pool"):
        spec = d.model.spec
        shared = spec.inference.shared
        if (
            shared is not None
            and shared.strategy == "mps"
            and spec.device_plugin.mig_strategy == "mixed"
        ):
            yield _problem(
                d,
                ("spec", "inference", "shared", "strategy"),
                "mps is impossible on this pool: the GPU operator sets MIG_STRATEGY=mixed on "
                "every node (spec.devicePlugin.migStrategy: mixed) and NVIDIA's device plugin "
                "refuses MPS with the mixed MIG strategy; use time-slicing, or leave the "
                "operator's mig.strategy unset (deploy/gpu-operator/values.yaml) and set "
                "migStrategy: per-node",
            )


def _unplaceable(state: DesiredState, model, profiles: list[str]) -> str:
    from collections import Counter

    counts = Counter(profiles)
    for name, n in counts.items():
        p = model.profiles[name]
        if n > p.max_count:
            return (
                f"layout cannot be placed on {model.name}: {n} x {name} "
                f"but at most {p.max_count} fit"
            )
    if len(profiles) > state.catalog.max_instances:
        return (
            f"layout cannot be placed: {len(profiles)} instances, "
            f"at most {state.catalog.max_instances} per GPU"
        )
    if sum(n for name, n in counts.items() if name.endswith("+me")) > 1:
        return "layout cannot be placed: at most one +me instance per GPU"
    slices = sum(model.profiles[p].memory_slices for p in profiles)
    return (
        f"layout cannot be placed on {model.name}: no non-overlapping start slots exist for "
        f"{' + '.join(profiles)} ({slices} of {state.catalog.memory_slices} memory slices; "
        "placement rules, not only the sum, decide)"
    )


# -- label selector overlap ------------------------------------------------------------


def _constraints(sel: LabelSelector, products: tuple[str, ...]) -> dict[str, tuple]:
    """Per key: (allowed values or None for any, forbidden values, must exist, must not exist)."""
    cons: dict[str, tuple] = {}

    def narrow(key, allowed=None, forbidden=frozenset(), exists=False, absent=False):
        a, f, e, n = cons.get(key, (None, frozenset(), False, False))
        if allowed is not None:
            a = frozenset(allowed) if a is None else a & frozenset(allowed)
        cons[key] = (a, f | frozenset(forbidden), e or exists or allowed is not None, n or absent)

    if products:
        narrow(PRODUCT_LABEL, allowed=products)
    for k, v in sel.match_labels.items():
        narrow(k, allowed={v})
    for r in sel.match_expressions:
        if r.operator == "In":
            narrow(r.key, allowed=r.values)
        elif r.operator == "NotIn":
            narrow(r.key, forbidden=r.values)
        elif r.operator == "Exists":
            narrow(r.key, exists=True)
        else:
            narrow(r.key, absent=True)
    return cons


@dataclass
class _KeyTerms:
    """What a selector's terms on one label key ask, and which terms ask it."""

    allowed: frozenset[str] | None = None  # None: any value
    forbidden: frozenset[str] = frozenset()
    needs: str = ""  # the first term that needs the label (In, matchLabels, Exists)
    absent: str = ""  # the first term that needs it absent (DoesNotExist)
    last_in: tuple = ()  # the path of the last In (or matchLabels) term
    last_not_in: tuple = ()  # the path of the last NotIn term
    terms: tuple[str, ...] = ()  # every term on the key, as written
    refused: bool = False


def _impossible_selectors(state: DesiredState) -> Iterator[Problem]:
    """Pool node selectors that no node can ever match: terms on one label key that contradict
    each other (`In [a]` with `NotIn [a]`, two disjoint `In`s, `Exists` or a value with
    `DoesNotExist`), or a GPU product label naming only products of another model than the
    pool's gpuModel (whose products are implied: `node_pool_name` never puts a node of another
    model in the pool). Reported at the term that makes it impossible."""
    for d in _docs(state, "Pool"):
        sel: LabelSelector = d.model.spec.node_selector
        base = ("spec", "nodeSelector")
        terms: list[tuple[tuple, str, str, tuple[str, ...], str]] = [
            ((*base, "matchLabels", k), k, "In", (v,), f"matchLabels {k}: {v}")
            for k, v in sel.match_labels.items()
        ]
        for i, r in enumerate(sel.match_expressions):
            shown = f"matchExpressions[{i}] ({r.key} {r.operator}"
            shown += f" [{', '.join(r.values)}])" if r.values else ")"
            terms.append(
                ((*base, "matchExpressions", i), r.key, r.operator, tuple(r.values), shown)
            )
        keys: dict[str, _KeyTerms] = {}
        for path, key, op, values, shown in terms:
            k = keys.setdefault(key, _KeyTerms())
            if k.refused:
                continue
            k.terms += (shown,)
            if op == "In":
                vals = frozenset(values)
                k.allowed = vals if k.allowed is None else k.allowed & vals
                k.last_in = path
            elif op == "NotIn":
                k.forbidden |= frozenset(values)
                k.last_not_in = path
            if op in ("In", "Exists"):
                k.needs = k.needs or shown
            elif op == "DoesNotExist":
                k.absent = k.absent or shown
            if k.needs and k.absent:
                k.refused = True
                yield _problem(
                    d,
                    path,
                    f"no node can match this selector: {k.needs} needs the label {key!r} and "
                    f"{k.absent} needs it absent",
                )
            elif k.allowed is not None and not k.allowed - k.forbidden:
                k.refused = True
                yield _problem(
                    d,
                    path,
                    f"no node can match this selector: no value of the label {key!r} satisfies "
                    f"{' and '.join(k.terms)}",
                )
        product = keys.get(PRODUCT_LABEL)
        model = state.catalog.model(d.model.spec.gpu_model)
        if product is None or product.refused or product.allowed is None or model is None:
            continue
        values = sorted(product.allowed - product.forbidden)
        if any(state.catalog.model_for_product(v) is model for v in values):
            continue
        # at the NotIn that took the model's own products out, else at the In
        own = any(state.catalog.model_for_product(v) is model for v in product.allowed)
        yield _problem(
            d,
            product.last_not_in if own else product.last_in,
            f"no node can match this pool: {PRODUCT_LABEL} {' or '.join(values)} "
            f"{'is not a product' if len(values) == 1 else 'are not products'} of its gpuModel "
            f"{model.name} (whose nodes are labelled "
            f"{', '.join(model.product_labels or (model.name,))}), and gpupool puts a node "
            "only in a pool of its own model",
        )


def selectors_overlap(a: dict, b: dict) -> bool:
    """Whether some label set can satisfy both selectors (each a `_constraints` result)."""
    none = (None, frozenset(), False, False)
    for key in set(a) | set(b):
        aa, af, ae, an = a.get(key, none)
        ba, bf, be, bn = b.get(key, none)
        if (ae or be) and (an or bn):
            return False
        allowed = aa if ba is None else (ba if aa is None else aa & ba)
        if allowed is not None and not (allowed - af - bf):
            return False
    return True


def _pool_overlap(state: DesiredState) -> Iterator[Problem]:
    docs = _docs(state, "Pool")
    cons = []
    for d in docs:
        model = state.catalog.model(d.model.spec.gpu_model)
        products = (model.name, *model.product_labels) if model else ()
        cons.append(_constraints(d.model.spec.node_selector, products))
    for i, a in enumerate(docs):
        for j in range(i):
            if selectors_overlap(cons[i], cons[j]):
                b = docs[j]
                yield _problem(
                    a,
                    ("spec", "nodeSelector"),
                    f"node selector overlaps Pool/{b.model.metadata.name} ({b.file}:{b.line}): "
                    "a node could belong to both pools",
                )


# -- quotas -------------------------------------------------------------------------------


def card_share(model, profile: str, catalog) -> Fraction:
    """A MIG instance's share of a card, by memory slices (what placement consumes)."""
    return Fraction(model.profiles[profile].memory_slices, catalog.memory_slices)


def _quotas(state: DesiredState, invalid: _Invalid = _Invalid()) -> Iterator[Problem]:
    owner: dict[str, Located] = {}
    guaranteed: dict[str, Fraction] = {}
    contributors: dict[str, list[tuple[Located, int]]] = {}
    for d in _docs(state, "Quota"):
        q: Quota = d.model
        for i, ns in enumerate(q.spec.namespaces):
            if ns in owner and owner[ns] is not d:
                o = owner[ns]
                yield _problem(
                    d,
                    ("spec", "namespaces", i),
                    f"namespace {ns!r} is already governed by "
                    f"Quota/{o.model.metadata.name} ({o.file}:{o.line})",
                )
            owner.setdefault(ns, d)
        team_total = Fraction(0)
        for i, pq in enumerate(q.spec.pools):
            base = ("spec", "pools", i)
            pool = state.pools.get(pq.pool)
            if pool is None and pq.pool in invalid.pools:
                continue  # the Pool's own errors are reported
            if pool is None:
                yield _problem(
                    d,
                    (*base, "pool"),
                    f"refers to Pool {pq.pool!r}, which does not exist; "
                    f"pools: {', '.join(state.pools) or 'none'}",
                )
                continue
            model = state.catalog.model(pool.spec.gpu_model)
            if model is None:
                continue
            share = Fraction(pq.whole.guaranteed)
            for prof, allot in pq.mig.items():
                if prof not in model.profiles:
                    yield _problem(
                        d,
                        (*base, "mig", prof),
                        f"{prof!r} is not a MIG profile of Pool/{pq.pool}'s {model.name}",
                    )
                    continue
                if pool.spec.inference.mig is None:
                    yield _problem(
                        d, (*base, "mig", prof), f"Pool/{pq.pool} offers no MIG partitioning"
                    )
                share += allot.guaranteed * card_share(model, prof, state.catalog)
            if pq.shared_memory is not None:
                sh = pool.spec.inference.shared
                if sh is None:
                    yield _problem(
                        d, (*base, "sharedMemory"), f"Pool/{pq.pool} offers no shared slices"
                    )
                else:
                    share += Fraction(
                        quantity_bytes(pq.shared_memory.guaranteed), model.memory_gib * GI
                    )
            team_total += share
            guaranteed[pq.pool] = guaranteed.get(pq.pool, Fraction(0)) + share
            contributors.setdefault(pq.pool, []).append((d, i))
        if q.spec.max_gpus is not None and team_total > q.spec.max_gpus:
            yield _problem(
                d,
                ("spec", "maxGPUs"),
                f"cap of {q.spec.max_gpus} GPUs is below the team's guarantees "
                f"({float(team_total):g} GPUs)",
            )
    for pool_name, total in guaranteed.items():
        cap = pool_gpus(state.pools[pool_name])
        if total > cap:
            d, i = contributors[pool_name][-1]
            names = ", ".join(sorted({c.model.metadata.name for c, _ in contributors[pool_name]}))
            yield _problem(
                d,
                ("spec", "pools", i),
                f"guarantees on Pool/{pool_name} add up to {float(total):g} GPUs ({names}) "
                f"but the pool has {cap}",
            )


# -- priority, scaling, maintenance ------------------------------------------------------


def _priority(state: DesiredState) -> Iterator[Problem]:
    for d in _docs(state, "PriorityPolicy"):
        spec = d.model.spec
        classes = {}
        for i, c in enumerate(spec.classes):
            if c.name in classes:
                yield _problem(
                    d, ("spec", "classes", i, "name"), f"duplicate priority class {c.name!r}"
                )
            classes.setdefault(c.name, c)
            if c.spot and not c.preemptible:
                yield _problem(
                    d, ("spec", "classes", i, "spot"), "a spot class must be preemptible"
                )
        if spec.default_class and spec.default_class not in classes:
            yield _problem(d, ("spec", "defaultClass"), f"unknown class {spec.default_class!r}")
        for i, rule in enumerate(spec.preemption.rules):
            base = ("spec", "preemption", "rules", i)
            pre = classes.get(rule.preemptor)
            if pre is None:
                yield _problem(
                    d,
                    (*base, "preemptor"),
                    f"unknown class {rule.preemptor!r}; classes: {', '.join(classes)}",
                )
            for j, v in enumerate(rule.victims):
                vc = classes.get(v)
                if vc is None:
                    yield _problem(
                        d,
                        (*base, "victims", j),
                        f"unknown class {v!r}; classes: {', '.join(classes)}",
                    )
                    continue
                if not vc.preemptible:
                    yield _problem(
                        d,
                        (*base, "victims", j),
                        f"class {v!r} is not preemptible, so no rule may name it a victim",
                    )
                if pre is not None and vc.value >= pre.value:
                    yield _problem(
                        d,
                        (*base, "victims", j),
                        f"{rule.preemptor} (value {pre.value}) cannot preempt {v} "
                        f"(value {vc.value}): a victim must have a lower priority",
                    )


def _class_names(state: DesiredState) -> set[str]:
    return {c.name for c in state.priority.spec.classes} if state.priority else set()


def _scaling(state: DesiredState, invalid: _Invalid = _Invalid()) -> Iterator[Problem]:
    classes = _class_names(state)
    for d in _docs(state, "ScalingPolicy"):
        spec = d.model.spec
        pool = state.pools.get(spec.pool)
        if pool is None and spec.pool in invalid.pools:
            pass  # the Pool's own errors are reported
        elif pool is None:
            yield _problem(
                d, ("spec", "pool"), f"refers to Pool {spec.pool!r}, which does not exist"
            )
        elif pool.spec.inference.mig is None and pool.spec.inference.shared is None:
            yield _problem(
                d, ("spec", "pool"), f"Pool/{spec.pool} has no inference partitioning to scale into"
            )
        for i, c in enumerate(spec.borrow_from):
            if invalid.priority:
                break  # classes unknown: the PriorityPolicy's own errors are reported
            if c not in classes:
                yield _problem(d, ("spec", "borrowFrom", i), f"unknown priority class {c!r}")
            elif not state.priority_class(c).preemptible:
                yield _problem(d, ("spec", "borrowFrom", i), f"class {c!r} is not preemptible")
        if spec.scale_up.queue_length_per_replica is None and spec.scale_up.pending_time is None:
            yield _problem(d, ("spec", "scaleUp"), "give queueLengthPerReplica and/or pendingTime")
        up = spec.scale_up.queue_length_per_replica
        if spec.forecast is not None and up is None:
            yield _problem(
                d,
                ("spec", "forecast"),
                "a forecast turns the queue it expects into replicas by "
                "scaleUp.queueLengthPerReplica: give one",
            )
        if up is None and spec.scale_up.mode == "proportional":
            yield _problem(
                d,
                ("spec", "scaleUp", "mode"),
                "a proportional scale-up sizes the replicas by queueLengthPerReplica: give one",
            )
        if spec.scale_down.mode == "proportional" and spec.scale_down.queue_length_per_replica == 0:
            yield _problem(
                d,
                ("spec", "scaleDown", "mode"),
                "a proportional scale-down sizes the replicas by queueLengthPerReplica, which is "
                "0 here (never calm): give one above 0, or use mode: step",
            )
        if up is not None and spec.scale_down.queue_length_per_replica >= up:
            yield _problem(
                d,
                ("spec", "scaleDown", "queueLengthPerReplica"),
                f"must be below scaleUp.queueLengthPerReplica ({up:g}) or the policy flaps",
            )


def _maintenance(state: DesiredState, invalid: _Invalid = _Invalid()) -> Iterator[Problem]:
    classes = _class_names(state)
    for d in _docs(state, "MaintenancePolicy"):
        spec = d.model.spec
        for i, p in enumerate(spec.pools):
            if p not in state.pools and p not in invalid.pools:
                yield _problem(
                    d, ("spec", "pools", i), f"refers to Pool {p!r}, which does not exist"
                )
        if spec.idle_reclaim and not invalid.priority:
            for i, c in enumerate(spec.idle_reclaim.exclude_classes):
                if c not in classes:
                    yield _problem(
                        d,
                        ("spec", "idleReclaim", "excludeClasses", i),
                        f"unknown priority class {c!r}",
                    )


_MAINTENANCE_RULES = (("defragmentation", "defragmentation"), ("idle_reclaim", "idleReclaim"))


def _maintenance_conflicts(state: DesiredState) -> Iterator[Problem]:
    """Two MaintenancePolicies that set the same rule (defragmentation, idle reclaim) for one
    pool with different settings. The planner merges nothing: defragmentation takes the first
    enabled rule of the pool's policies, idle reclaim the first that finds a workload idle, in
    the order the files are read; so one setting would be silently ignored, or which one
    applies would depend on the files' names. Reported at the later rule, naming the
    earlier."""
    docs = _docs(state, "MaintenancePolicy")
    for attr, field in _MAINTENANCE_RULES:
        for j, b in enumerate(docs):
            rb = getattr(b.model.spec, attr)
            if rb is None:
                continue
            for a in docs[:j]:
                ra = getattr(a.model.spec, attr)
                if ra is None or ra == rb or not (ra.enabled or rb.enabled):
                    continue  # the same rule twice, or neither does anything
                shared = _shared_pools(a.model.spec.pools, b.model.spec.pools)
                if shared == []:
                    continue
                where = "every pool" if shared is None else ", ".join(f"Pool/{p}" for p in shared)
                line, _ = locate(a.node, ("spec", field)) if a.node is not None else (a.line, 1)
                yield _problem(
                    b,
                    ("spec", field),
                    f"MaintenancePolicy/{a.model.metadata.name} ({a.file}:{line}) also sets "
                    f"{field} for {where}, with other settings; the planner merges none and "
                    "would ignore one of them: give each pool one "
                    f"{field} rule (narrow spec.pools, or make the rules the same)",
                )
                break


def _shared_pools(a: list[str], b: list[str]) -> list[str] | None:
    """The pools two MaintenancePolicies' `spec.pools` both cover (empty: all); None: all."""
    if not a and not b:
        return None
    if not a or not b:
        return sorted(set(a or b))
    return sorted(set(a) & set(b))


# --- Kueue mode --------------------------------------------------------------------------


def _kueue(state: DesiredState) -> Iterator[Problem]:
    """In kueue mode each Allotment becomes a ClusterQueue quota, and Kueue's ClusterQueue
    webhook refuses a lendingLimit above the nominalQuota (kubernetes-sigs/kueue v0.17.0
    pkg/webhooks/clusterqueue_webhook.go, validateLendingLimit: "must be less than or equal
    to the nominalQuota"): said here, with file and line, instead of failing at apply."""
    if state.admission_controller != "kueue":
        return
    for d in _docs(state, "Quota"):
        q: Quota = d.model
        for i, pq in enumerate(q.spec.pools):
            allots = [(("whole",), pq.whole)] + [
                (("mig", prof), a) for prof, a in sorted(pq.mig.items())
            ]
            limits = [
                (sub, a.lending_limit, a.guaranteed, a.lending_limit, a.guaranteed)
                for sub, a in allots
                if a.lending_limit is not None
            ]
            m = pq.shared_memory
            if m is not None and m.lending_limit is not None:
                lend, guaranteed = quantity_bytes(m.lending_limit), quantity_bytes(m.guaranteed)
                limits.append((("sharedMemory",), m.lending_limit, m.guaranteed, lend, guaranteed))
            for sub, lend_text, guaranteed_text, lend, guaranteed in limits:
                if lend > guaranteed:
                    yield _problem(
                        d,
                        ("spec", "pools", i, *sub, "lendingLimit"),
                        f"lendingLimit {lend_text} exceeds guaranteed {guaranteed_text}: "
                        "in kueue mode it becomes the ClusterQueue's lendingLimit, which Kueue "
                        "allows only up to the nominalQuota (the guarantee)",
                    )
