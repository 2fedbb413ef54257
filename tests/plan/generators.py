"""Hypothesis strategies for random GPU clusters AND random policies (tests/plan/test_cycles.py).

`cases()` draws one `Case`: a desired state (YAML text the loader accepts: Pools of
A100-SXM4-80GB and/or H100-SXM5-80GB cards, a PriorityPolicy, Quotas, ScalingPolicies, a
MaintenancePolicy) and an observed snapshot of 1-4 nodes of 2-8 cards that is consistent
(no card over-committed), plus the controller's period and a seed for order shuffles.

What it covers: cards whole / MIG (placeable layouts, also ones the policy does not offer) /
shared (also with a slice count the policy does not use; per node, as the device plugin
shares: every card of a node not in MIG mode with one count; time-slicing or MPS, never MPS
beside MIG cards); running training gangs of 1-8
cards, MIG and shared inference pods, inference services with their replica pods; pending
demand of every kind, including demand nothing can ever run (shared slices above
slicesPerGPU, MIG profiles no layout offers, gangs larger than any node); nodes cordoned by
somebody else or by gpupool, NotReady, tainted; idle cards; priority classes (preemptible or
not, spot), budgets 0-6, minRuntime, grace periods, preemption rules; team quotas with
guarantees, borrowing limits and caps; inference min/max; scaling policies on queue length
and pending time; idle reclaim and defragmentation. Every choice is a hypothesis draw, so
failures shrink towards small clusters and plain policies (the first option of each
`sampled_from` is the simplest).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from functools import cache, cached_property
from io import StringIO

from hypothesis import strategies as st
from ruamel.yaml import YAML

from reconciler.conventions import DEVICE_PLUGIN_CONFIG_LABEL, POOL_LABEL, PRODUCT_LABEL
from reconciler.observe.builders import PRODUCT, gpu, mig_pod, shared_pod, training
from reconciler.observe.model import (
    Autoscaler,
    InferenceService,
    Node,
    ObservedState,
    QuotaObject,
    Request,
    Taint,
    Workload,
)
from reconciler.plan.quotas import desired_priority_classes, desired_resource_quotas
from reconciler.policy.models import KINDS
from reconciler.policy.problems import InvalidDesiredState
from reconciler.policy.state import DesiredState, Located
from reconciler.policy.validate import check_semantics
from reconciler.sim.effects import sharing_config

NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
API = "gpupool.io/v1alpha1"
GROUP_LABEL = "gpupool.test/group"
"""A second node label: a pool that selects on it makes the planner label its nodes."""
MODELS = {"a100": "A100-SXM4-80GB", "h100": "H100-SXM5-80GB"}
LAYOUTS: dict[str, tuple[str, ...]] = {
    "balanced": ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
    "two-3g": ("3g.40gb", "3g.40gb"),
    "seven-1g": ("1g.10gb",) * 7,
    "full": ("7g.80gb",),
    "four-1g20": ("1g.20gb",) * 4,
    "four-three": ("4g.40gb", "3g.40gb"),
    "small": ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
}
PROFILES = ("1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
SHARED_MEMORY = {2: "40Gi", 4: "20Gi", 8: "10Gi"}
CLASS_NAMES = ("low", "serving", "high", "spot", "critical", "batch")
VALUES = (1000, 10000, 30000, 50000, 100000, 5000)
TEAMS = ("team-a", "team-b", "team-c")
NAMESPACES = (*TEAMS, "other")
TAINTS = (
    Taint(key="dedicated", value="infra", effect="NoSchedule"),
    Taint(key="maintenance", effect="NoExecute"),
    Taint(key="nvidia.com/gpu", effect="NoSchedule"),
    Taint(key="spot", effect="PreferNoSchedule"),
)
PERIODS = (timedelta(minutes=1), timedelta(seconds=30), timedelta(minutes=5))


BOOL = st.booleans()


@cache
def ints(lo: int, hi: int) -> st.SearchStrategy[int]:
    return st.integers(lo, hi)


def choice(options) -> st.SearchStrategy:
    """`st.sampled_from(options)`, built once per distinct options (building strategies for
    every draw is most of hypothesis' cost here). The first option is the simplest."""
    options = tuple(options)
    try:  # keyed with the types too: (1.0, 0.0) == (True, False)
        return _sampled(tuple((type(o), o) for o in options))
    except TypeError:  # unhashable options
        return st.sampled_from(options)


@cache
def _sampled(typed: tuple) -> st.SearchStrategy:
    return st.sampled_from([o for _, o in typed])


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


@dataclass(frozen=True)
class Case:
    """One random input: the desired state's documents (JSON text; `text` is the YAML a person
    reads), the observed snapshot, the cycle period, a seed for order shuffles."""

    documents: str
    observed: ObservedState
    period: timedelta
    seed: int = 0

    @cached_property
    def desired(self) -> DesiredState:
        return desired_of(self.documents)

    @cached_property
    def text(self) -> str:
        """desired.yaml: the documents as YAML (what `load` reads gives the same state)."""
        return _yaml(json.loads(self.documents))

    def _repr_pretty_(self, p, cycle: bool) -> None:  # how hypothesis prints a failing case
        p.text(repr(self))

    def __repr__(self) -> str:
        snap = self.observed.model_dump_json(by_alias=True, exclude_defaults=True, indent=1)
        return (
            f"Case(period={self.period!r}, seed={self.seed})\n"
            f"--- desired.yaml\n{self.text}--- observed (JSON)\n{snap}\n"
        )


_DESIRED: dict[str, DesiredState] = {}


def desired_of(documents: str) -> DesiredState:
    """The desired state of a case's documents, validated once (the properties draw the same
    examples several times)."""
    if documents not in _DESIRED:
        _DESIRED[documents] = validated(json.loads(documents))
    return _DESIRED[documents]


def validated(docs: list[dict]) -> DesiredState:
    """What `load` makes of the documents, without parsing YAML text (the slow part): each
    document validated by its model, then the same cross-document checks."""
    located = [
        Located(model=KINDS[d["kind"]].model_validate(d), file="desired.yaml", line=i + 1)
        for i, d in enumerate(docs)
    ]
    state = DesiredState.from_documents(located)
    problems = check_semantics(state)
    if problems:
        raise InvalidDesiredState(problems)
    return state


def _yaml(docs: list[dict]) -> str:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = None
    yaml.width = 100
    out = []
    for d in docs:
        buf = StringIO()
        yaml.dump(d, buf)
        out.append(buf.getvalue())
    return "---\n" + "---\n".join(out)


def _doc(kind: str, name: str, spec: dict) -> dict:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name}, "spec": spec}


# ----------------------------------------------------------------------------- policies
@dataclass
class PoolDraw:
    name: str
    model: str
    nodes: int
    layouts: list[str]
    slices: int | None
    by_group: bool
    doc: dict
    mps: bool = False  # shared by MPS: the device plugin refuses it on a node with MIG cards

    @property
    def capacity(self) -> int:
        return max(1, self.nodes) * 8

    @property
    def offered(self) -> list[str]:
        return sorted({p for lay in self.layouts for p in LAYOUTS[lay]})

    @property
    def inference(self) -> bool:
        return bool(self.layouts or self.slices)


def _pool(draw, name: str, nodes: int) -> PoolDraw:
    layouts = draw(st.lists(st.sampled_from(sorted(LAYOUTS)), max_size=3, unique=True))
    slices = draw(choice([None, 4, 2, 8]))
    total = max(1, nodes) * 8
    inf: dict = {}
    if layouts or slices:
        inf_min = draw(ints(0, 2))
        inf_max = draw(st.one_of(st.none(), st.integers(inf_min, 8)))
        inf = {"minGPUs": inf_min, "prefer": draw(choice(["mig", "shared"]))}
        if inf_max is not None:
            inf["maxGPUs"] = inf_max
        if layouts:
            inf["mig"] = {"layouts": [{"name": n, "profiles": list(LAYOUTS[n])} for n in layouts]}
        if slices:
            inf["shared"] = {"slicesPerGPU": slices, "memoryPerSlice": SHARED_MEMORY[slices]}
            if draw(choice([False, True])):
                inf["shared"]["strategy"] = "mps"
    train_min = draw(ints(0, min(4, total - inf.get("minGPUs", 0))))
    train = {"minGPUs": train_min}
    train["topology"] = draw(choice(["node", "nvlink", "numa", "none"]))
    train_max = draw(st.one_of(st.none(), st.integers(train_min, total)))
    if train_max is not None:
        train["maxGPUs"] = train_max
    by_group = draw(BOOL)
    spec = {
        "gpuModel": MODELS[name],
        "nodeSelector": {"matchLabels": {(GROUP_LABEL if by_group else POOL_LABEL): name}},
        "capacity": {"nodes": max(1, nodes), "gpusPerNode": 8},
        "training": train,
        "inference": inf,
    }
    mps = inf.get("shared", {}).get("strategy") == "mps"
    return PoolDraw(
        name, MODELS[name], nodes, layouts, slices, by_group, _doc("Pool", name, spec), mps
    )


@dataclass
class ClassDraw:
    name: str
    value: int
    preemptible: bool
    spot: bool
    preemptor: bool = False  # some rule lets it preempt
    victim: bool = False  # some rule names it a victim


def running_classes(classes: list[ClassDraw]) -> list[str | None]:
    """Classes for running work: victims of the rules twice as likely, then none / unknown."""
    return [c.name for c in classes if c.victim] + [c.name for c in classes] + [None, "unknown"]


def pending_classes(classes: list[ClassDraw]) -> list[str | None]:
    """Classes for pending work: preemptors twice as likely, then none / unknown."""
    return [c.name for c in classes if c.preemptor] + [c.name for c in classes] + [None, "unknown"]


def _priority(draw) -> tuple[list[ClassDraw], dict | None]:
    if not draw(choice([True] * 7 + [False])):
        return [], None  # no PriorityPolicy at all
    names = draw(st.lists(st.sampled_from(CLASS_NAMES), min_size=1, max_size=5, unique=True))
    values = draw(st.permutations(VALUES))
    classes = []
    for name, value in zip(names, values, strict=False):
        preemptible = draw(choice([True, True, False]))
        spot = preemptible and draw(choice([False, False, True]))
        classes.append(ClassDraw(name, value, preemptible, spot))
    spec_classes = []
    for c in classes:
        d = {"name": c.name, "value": c.value, "preemptible": c.preemptible, "spot": c.spot}
        d["workload"] = draw(choice(["any", "training", "inference"]))
        spec_classes.append(d)
    rules = []
    for pre in classes:
        victims = [v.name for v in classes if v.value < pre.value and v.preemptible]
        if not victims:
            continue
        chosen = draw(
            st.lists(st.sampled_from(victims), min_size=1, max_size=len(victims), unique=True)
            | st.just([])
        )
        if chosen:
            when = draw(choice(["noSharedCapacity", "always"]))
            rules.append({"preemptor": pre.name, "victims": chosen, "when": when})
            pre.preemptor = True
            for c in classes:
                c.victim = c.victim or c.name in chosen
    spec = {
        "classes": spec_classes,
        "preemption": {
            "checkpointGracePeriod": draw(choice(["5m", "0s", "1m"])),
            "minRuntime": draw(choice(["15m", "0s", "5m", "1h"])),
            "budgetPerHour": draw(ints(0, 6)),
            "rules": rules,
        },
    }
    default = draw(st.one_of(st.none(), st.sampled_from(names)))
    if default is not None:
        spec["defaultClass"] = default
    return classes, _doc("PriorityPolicy", "cluster", spec)


def _quotas(draw, pools: list[PoolDraw]) -> list[dict]:
    teams = draw(st.lists(st.sampled_from(TEAMS), max_size=3, unique=True))
    used = {p.name: Fraction(0) for p in pools}  # guarantees per pool so far
    docs = []
    for team in teams:
        allot = []
        total = Fraction(0)
        for p in pools:
            if not draw(BOOL):
                continue
            room = Fraction(p.capacity, 3)  # three teams' guarantees always fit the pool
            g = draw(ints(0, min(4, math.floor(room))))
            share = Fraction(g)
            pq: dict = {"pool": p.name, "whole": {"guaranteed": g}}
            borrow = draw(st.one_of(st.none(), st.integers(0, 8)))
            if borrow is not None:
                pq["whole"]["borrowingLimit"] = borrow
            mig = {}
            offered = p.offered
            profs = (
                draw(st.lists(st.sampled_from(offered), max_size=2, unique=True)) if offered else []
            )
            for prof in profs:
                slices = 8 if prof.startswith("7g") else int(prof[-4:-2]) // 10
                n = draw(ints(0, 2))
                if share + Fraction(n * slices, 8) > room:
                    n = 0
                share += Fraction(n * slices, 8)
                a: dict = {"guaranteed": n}
                lim = draw(st.one_of(st.none(), st.integers(0, 4)))
                if lim is not None:
                    a["borrowingLimit"] = lim
                mig[prof] = a
            if mig:
                pq["mig"] = mig
            if p.slices and draw(BOOL):
                gi = draw(choice([0, 10, 20]))
                if share + Fraction(gi, 80) > room:
                    gi = 0
                share += Fraction(gi, 80)
                sm: dict = {"guaranteed": f"{gi}Gi" if gi else "0"}
                if draw(BOOL):
                    sm["borrowingLimit"] = "40Gi"
                pq["sharedMemory"] = sm
            used[p.name] += share
            total += share
            allot.append(pq)
        spec: dict = {"namespaces": [team], "pools": allot}
        cap = draw(st.one_of(st.none(), st.integers(0, 16)))
        if cap is not None:
            spec["maxGPUs"] = max(cap, math.ceil(total))
        docs.append(_doc("Quota", team, spec))
    return docs


@dataclass
class TargetDraw:
    namespace: str
    name: str
    kind: str
    pool: str
    lo: int
    hi: int


def _scaling(
    draw, pools: list[PoolDraw], classes: list[ClassDraw]
) -> tuple[list[dict], list[TargetDraw]]:
    inf = [p for p in pools if p.inference]
    if not inf:
        return [], []
    docs, targets = [], []
    for i in range(draw(ints(0, 2))):
        pool = draw(choice(inf))
        tl = []
        for j in range(draw(ints(1, 2))):
            lo = draw(ints(0, 2))
            hi = draw(ints(max(lo, 1), 6))
            t = TargetDraw(
                draw(choice(NAMESPACES)),
                f"svc-{i}-{j}",
                draw(choice(["Deployment", "StatefulSet"])),
                pool.name,
                lo,
                hi,
            )
            targets.append(t)
            tl.append(
                {
                    "namespace": t.namespace,
                    "name": t.name,
                    "kind": t.kind,
                    "minReplicas": lo,
                    "maxReplicas": hi,
                }
            )
        up_q = draw(choice([5.0, None, 2.0, 10.0]))
        up: dict = {
            "step": draw(ints(1, 3)),
            "cooldown": draw(choice(["2m", "0s", "10m"])),
        }
        pending_time = draw(choice([None, "30s", "2m"]))
        if up_q is None and pending_time is None:
            pending_time = "1m"
        if up_q is not None:
            up["queueLengthPerReplica"] = up_q
        if pending_time is not None:
            up["pendingTime"] = pending_time
        down_choices = [x for x in (1.0, 0.0, 2.0) if up_q is None or x < up_q]
        down = {
            "queueLengthPerReplica": draw(choice(down_choices)),
            "step": draw(ints(1, 2)),
            "cooldown": draw(choice(["10m", "0s", "5m"])),
        }
        borrowable = [c.name for c in classes if c.preemptible]
        borrow = draw(st.lists(st.sampled_from(borrowable), unique=True)) if borrowable else []
        spec = {
            "pool": pool.name,
            "targets": tl,
            "scaleUp": up,
            "scaleDown": down,
            "borrowFrom": borrow,
        }
        docs.append(_doc("ScalingPolicy", f"scaling-{i}", spec))
    return docs, targets


def _maintenance(draw, pools: list[PoolDraw], classes: list[ClassDraw]) -> list[dict]:
    if not draw(choice([True, True, True, False])):
        return []
    spec: dict = {}
    if draw(BOOL):
        spec["pools"] = draw(st.lists(st.sampled_from([p.name for p in pools]), unique=True))
    if draw(choice([True, True, True, False])):
        when = draw(choice(["pendingDemand", "always", "window"]))
        defrag: dict = {
            "enabled": draw(choice([True, True, False])),
            "when": when,
            "maxMigrationsPerCycle": draw(ints(0, 3)),
            "onlyMigratable": draw(choice([True, False, False])),
        }
        if when == "window":
            start, end = draw(choice([("02:00", "04:00"), ("10:00", "12:00"), ("22:00", "04:00")]))
            defrag["window"] = {"start": start, "end": end}
        spec["defragmentation"] = defrag
    if draw(choice([True, True, False])):
        names = [c.name for c in classes]
        spec["idleReclaim"] = {
            "enabled": draw(choice([True, True, False])),
            "utilizationBelow": draw(choice([5, 10])),
            "idleFor": draw(choice(["1h", "10m"])),
            "action": draw(choice(["evict", "report"])),
            "excludeClasses": draw(st.lists(st.sampled_from(names), unique=True)) if names else [],
        }
    return [_doc("MaintenancePolicy", "maintenance", spec)]


# ----------------------------------------------------------------------------- cluster
@dataclass
class Free:
    """Capacity left on the generated nodes (for service replicas placed after the rest)."""

    mig: list[tuple[str, str, int, int]]  # (pool, node, gpu, start) of free instances, by profile
    mig_profile: dict[tuple[str, int, int], str]
    shared: dict[tuple[str, str, int], int]  # (pool, node, gpu) -> free slices
    fragmented: list[tuple[str, int]] = field(default_factory=list)  # (pool, cards) of nodes
    whole: dict[str, list[int]] = field(default_factory=dict)  # pool -> free whole cards by node


def _node(draw, name: str, pool: PoolDraw, classes: list[ClassDraw], work: list, free: Free):
    model = pool.model
    cards = draw(ints(2, 8))
    status = draw(choice(["ready"] * 4 + ["cordoned", "ours", "not-ready", "tainted"]))
    gpus = []
    training_node = draw(BOOL)  # only whole cards (where gangs and defragmentation live)
    # the device plugin shares per node: every card not in MIG mode is shared with one count
    node_slices = None if training_node else draw(choice([None, None, pool.slices or 4, 2, 8]))
    for i in range(cards):
        mode = "plain" if training_node else draw(choice(["plain", "mig", "plain"]))
        if node_slices and pool.mps:
            mode = "plain"  # the device plugin refuses MPS on a node with MIG cards
        if mode == "mig":
            layout = draw(choice(sorted(LAYOUTS)))
            gpus.append(gpu(i, mig=list(LAYOUTS[layout]), model=model))
        elif node_slices:
            gpus.append(gpu(i, shared=node_slices, model=model))
        else:
            gpus.append(gpu(i, model=model))
    cls_names = running_classes(classes)
    # running training gangs on whole cards; a gang's cards are idle together or not at all
    whole = [g.index for g in gpus if g.mode == "whole"]
    fragmented = training_node and draw(BOOL)
    if fragmented:  # one-card jobs on every other card: a gang needs a move to fit here
        free.fragmented.append((pool.name, cards))
        whole = [i for i in whole if i % 2 == 0] + [i for i in whole if i % 2]
    groups = []
    k = 0
    limit = (cards + 1) // 2 if fragmented else 4
    while whole and k < limit and (fragmented or draw(choice([True, True, False]))):
        size = 1 if fragmented else draw(choice([1, 1, 2, 4, 8, 3]))
        idx, whole = whole[: min(size, len(whole))], whole[min(size, len(whole)) :]
        groups.append(idx)
        started = NOW - draw(choice([timedelta(hours=3), minutes(2), minutes(20)]))
        ckpt = draw(choice([None, started + minutes(1)]))
        w = training(
            draw(choice(NAMESPACES)),
            f"job-{name}-{k}",
            name,
            idx,
            cls=draw(choice(cls_names)),
            started=started,
            checkpoint=ckpt,
            migratable=draw(choice([True, False])),
        )
        work.append(w)
        k += 1
    groups += [[i] for i in whole]
    free.whole.setdefault(pool.name, []).append(len(whole))
    for idx in groups:
        if draw(choice([False, False, True])):
            since = NOW - draw(choice([timedelta(hours=2), minutes(10), minutes(70)]))
            gpus = [
                g.model_copy(update={"utilization": 1.0, "idle_since": since})
                if g.index in idx
                else g
                for g in gpus
            ]
    labels = {PRODUCT_LABEL: PRODUCT[model], GROUP_LABEL: pool.name}
    if node_slices and any(g.shared_slices for g in gpus):
        # the device plugin's config, as the effect model names it (sim.effects.sharing_config)
        strategy = "mps" if pool.mps else "time-slicing"
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = sharing_config(strategy, node_slices)
    if not pool.by_group or draw(BOOL):
        labels[POOL_LABEL] = pool.name
    n = Node(
        name=name,
        labels=labels,
        gpus=gpus,
        unschedulable=status in ("cordoned", "ours"),
        annotations={"gpupool.io/cordoned-for": "repartition"} if status == "ours" else {},
        ready=status != "not-ready",
        taints=[draw(choice(TAINTS))] if status == "tainted" else [],
    )
    for g in gpus:
        if g.mode == "mig":
            for inst in g.mig_instances:
                if draw(BOOL):
                    work.append(
                        mig_pod(
                            draw(choice(NAMESPACES)),
                            f"mig-{name}-{g.index}-{inst.start}",
                            name,
                            inst.profile,
                            gpu_index=g.index,
                            start=inst.start,
                            cls=draw(choice(cls_names)),
                            started=NOW - draw(choice([timedelta(hours=2), minutes(3)])),
                        )
                    )
                else:
                    free.mig.append((pool.name, name, g.index, inst.start))
                    free.mig_profile[(name, g.index, inst.start)] = inst.profile
        elif g.mode == "shared":
            used = draw(ints(0, g.shared_slices))
            for s in range(used):
                work.append(
                    shared_pod(
                        draw(choice(NAMESPACES)),
                        f"sh-{name}-{g.index}-{s}",
                        name,
                        1,
                        gpu_index=g.index,
                        cls=draw(choice(cls_names)),
                        started=NOW - timedelta(hours=2),
                    )
                )
            if used < g.shared_slices:
                free.shared[(pool.name, name, g.index)] = g.shared_slices - used
    return n


def _services(
    draw, targets: list[TargetDraw], pools: dict[str, PoolDraw], classes, work, free: Free
) -> list[InferenceService]:
    out = []
    names = [c.name for c in classes] + [None]
    for t in targets:
        if not draw(BOOL) and draw(BOOL):
            continue  # a target that is not observed (a finding, nothing else)
        p = pools[t.pool]
        kinds = (["mig"] if p.layouts else []) + (["shared"] if p.slices else [])
        if draw(choice(kinds)) == "mig":
            req = Request(mig={draw(choice(p.offered)): 1})
        else:
            req = Request(shared_slices=draw(ints(1, 2)))
        cls = draw(choice(names))
        replicas = draw(ints(0, 8))
        running = 0
        for i in range(replicas):
            w = Workload(
                namespace=t.namespace,
                name=f"{t.name}-{i}",
                priority_class=cls,
                phase="Pending",
                request=req,
                pool=t.pool,
                created_at=NOW - minutes(5),
                owner_kind="ReplicaSet" if t.kind == "Deployment" else t.kind,
                owner_name=t.name,
            )
            spot = _take(req, t.pool, free)
            if spot is not None and draw(BOOL):
                running += 1
                w = w.model_copy(
                    update={
                        "phase": "Running",
                        "node": spot[0],
                        "allocations": [spot[1]],
                        "started_at": NOW - timedelta(hours=1),
                    }
                )
            elif spot is not None:
                _give_back(req, t.pool, spot, free)
            work.append(w)
        out.append(
            InferenceService(
                namespace=t.namespace,
                name=t.name,
                kind=t.kind,
                replicas=replicas,
                ready_replicas=running,
                replica_request=req,
                priority_class=cls,
                pool=t.pool,
                queue_length=draw(choice([None, 0.0, 3.0, 20.0, 100.0])),
                pending_seconds_p99=draw(choice([None, 0.0, 60.0, 600.0])),
                last_scale_at=draw(choice([None, NOW - minutes(1), NOW - minutes(30)])),
                autoscalers=_autoscalers(draw, t),
            )
        )
    return out


def _autoscalers(draw, t: TargetDraw) -> list[Autoscaler]:
    """None (most services), an HPA, a ScaledObject with the HPA KEDA made for it, or two
    HPAs (a conflict: gpupool changes neither)."""
    shape = draw(choice(["none", "none", "hpa", "keda", "two"]))
    if shape == "none":
        return []

    def one(kind: str, name: str, owner: str = "") -> Autoscaler:
        hi = draw(ints(1, 10))
        return Autoscaler(
            kind=kind,
            namespace=t.namespace,
            name=name,
            min_replicas=draw(ints(0 if kind == "ScaledObject" else 1, hi)),
            max_replicas=hi,
            owner=owner,
            last_change_at=draw(choice([None, NOW - minutes(1), NOW - minutes(30)])),
        )

    if shape == "hpa":
        return [one("HorizontalPodAutoscaler", t.name)]
    if shape == "keda":
        return [
            one("ScaledObject", t.name),
            one("HorizontalPodAutoscaler", f"keda-hpa-{t.name}", f"ScaledObject/{t.name}"),
        ]
    return [one("HorizontalPodAutoscaler", t.name), one("HorizontalPodAutoscaler", f"{t.name}-2")]


def _take(req: Request, pool: str, free: Free):
    from reconciler.observe.model import Allocation

    if req.mig:
        (prof,) = req.mig
        for i, (p, node, g, start) in enumerate(free.mig):
            if p == pool and free.mig_profile[(node, g, start)] == prof:
                del free.mig[i]
                return node, Allocation(gpu=g, mig_start=start, mig_profile=prof)
        return None
    for (p, node, g), left in sorted(free.shared.items()):
        if p == pool and left >= req.shared_slices:
            free.shared[(p, node, g)] = left - req.shared_slices
            return node, Allocation(gpu=g, slices=req.shared_slices)
    return None


def _give_back(req: Request, pool: str, spot, free: Free) -> None:
    node, a = spot
    if a.mig_start is not None:
        free.mig.append((pool, node, a.gpu, a.mig_start))
    else:
        free.shared[(pool, node, a.gpu)] += a.slices


def _pending(draw, pools: list[PoolDraw], classes: list[ClassDraw], work: list) -> None:
    names = pending_classes(classes)
    pool_names = [p.name for p in pools]
    by_name = {p.name: p for p in pools}
    for i in range(draw(ints(0, 8))):
        kind = draw(
            st.sampled_from(["whole", "mig", "shared", "too-large", "no-layout", "too-many"])
        )
        ns = draw(choice(NAMESPACES))
        cls = draw(choice(names))
        pool = draw(choice([*pool_names, None]))
        created = NOW - draw(choice([minutes(10), minutes(1), timedelta(hours=2)]))
        p = by_name.get(pool or "")
        offered = p.offered if p else sorted({x for q in pools for x in q.offered})
        if kind in ("whole", "too-large"):
            n = draw(choice([1, 2, 4, 8])) if kind == "whole" else draw(ints(9, 16))
            w = training(ns, f"pending-{i}", None, n, cls=cls, pool=pool, created=created)
        elif kind in ("mig", "no-layout"):
            choices = offered if kind == "mig" else [x for x in PROFILES if x not in offered]
            prof = draw(choice(choices or list(PROFILES)))
            w = mig_pod(ns, f"pending-{i}", None, prof, cls=cls, pool=pool)
        else:
            top = p.slices if p and p.slices else 8
            k = draw(ints(1, 2)) if kind == "shared" else top + 1
            w = shared_pod(ns, f"pending-{i}", None, k, cls=cls, pool=pool)
        if w.owner_kind == "":
            w = w.model_copy(update={"owner_kind": "ReplicaSet", "owner_name": f"pending-{i}"})
        work.append(w.model_copy(update={"created_at": created}))


def _objects(draw, desired: DesiredState) -> dict:
    mode = draw(choice(["converged", "missing", "stale"]))
    if mode == "missing":
        return {}
    quotas = [
        QuotaObject(namespace=ns, name=n, hard=h, managed_by="gpupool")
        for (ns, n), h in desired_resource_quotas(desired).items()
    ]
    classes = [*desired_priority_classes(desired).values()]
    if mode == "stale":
        quotas = quotas[1:]
        classes = [c.model_copy(update={"value": c.value + 1}) for c in classes[:1]] + classes[1:]
    return {"quotas": quotas, "priority_classes": classes}


@st.composite
def cases(draw) -> Case:
    """A random desired state and a consistent random snapshot of a cluster it governs."""
    n_nodes = draw(ints(1, 4))
    pool_names = draw(choice([("a100",), ("h100",), ("a100", "h100")]))
    node_pools = [draw(choice(pool_names)) for _ in range(n_nodes)]
    pools = [_pool(draw, name, node_pools.count(name)) for name in pool_names]
    by_name = {p.name: p for p in pools}
    classes, priority = _priority(draw)
    quotas = _quotas(draw, pools)
    scaling, targets = _scaling(draw, pools, classes)
    maintenance = _maintenance(draw, pools, classes)
    docs = [p.doc for p in pools] + ([priority] if priority else []) + quotas + scaling
    documents = json.dumps(docs + maintenance, sort_keys=True)
    desired = desired_of(documents)  # raises on invalid input: the generator makes none

    work: list[Workload] = []
    free = Free([], {}, {})
    nodes = [
        _node(draw, f"{pool}-{i + 1}", by_name[pool], classes, work, free)
        for i, pool in enumerate(node_pools)
    ]
    services = _services(draw, targets, by_name, classes, work, free)
    _pending(draw, pools, classes, work)
    for i, (pool, cards) in enumerate(free.fragmented):
        size = max(free.whole[pool]) + 1  # fits no node as it is; the fragmented one after moves
        if size <= min(cards, sum(free.whole[pool])) and draw(choice([True, True, False])):
            work.append(
                training(
                    draw(choice(NAMESPACES)),
                    f"gang-{i}",
                    None,
                    size,
                    cls=draw(choice(pending_classes(classes))),
                    pool=pool,
                    created=NOW - minutes(3),
                )
            )
    ago = [minutes(1), minutes(10), minutes(50), timedelta(hours=2)]
    recent = [NOW - t for t in draw(st.lists(st.sampled_from(ago), max_size=6))]
    observed = ObservedState(
        observed_at=NOW,
        nodes=nodes,
        workloads=work,
        services=services,
        recent_preemptions=recent,
        **_objects(draw, desired),
    )
    return Case(documents, observed, draw(choice(PERIODS)), draw(ints(0, 2**32 - 1)))
