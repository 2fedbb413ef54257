"""Where a pod goes: node and GPU placement policies for a shared GPU pool.

Pure: no I/O, no clock, no global random state. Callers describe the nodes
(`NodeState`) and the pod (`PodDemand`); `choose` returns a `Placement` or None.
Randomness (tie-breaking, the Random-fit policy) comes from `ctx.rng`.

The planner places pending pods with this module, and the trace simulator
(`reconciler.sim`) replays workloads through the very same functions, so the
numbers the simulator reports are the numbers of the planner's placement.

Policies (names in `POLICIES`):

* ``random``     — Random-fit: any node that fits, uniformly.
* ``bestfit``    — the node with the least resources left after placing the pod
  (weighted sum of CPU and GPU leftovers, normalised by the largest node spec).
* ``dotprod``    — Tetris-style alignment: the node whose free (CPU, GPU)
  vector has the smallest dot product with the pod's demand.
* ``packing``    — GPU Packing: prefer GPUs that are already shared, then free
  GPUs on busy nodes, then idle nodes.
* ``clustering`` — GPU Clustering: keep pods of the same GPU class (sharing,
  1-GPU, 2-GPU, ...) together on the same nodes.
* ``fgd``        — Fragmentation Gradient Descent (Weng et al., ATC '23): the
  node and GPU whose choice grows the expected GPU fragmentation the least,
  measured against the target workload distribution in ``ctx.target``.
* ``ours``       — what the planner uses: FGD's gradient plus a look-ahead
  term — the free GPU capacity a node's remaining CPU could no longer feed at
  the target workload's GPU:CPU ratio — so CPU-heavy pods do not strand GPUs.
  `choose_with_migration` adds one-pod migration when nothing fits.

The baselines' scores follow the papers' descriptions and are discretised to
the integer 0..100 range a Kubernetes score plugin returns, ties broken at
random, as the FGD paper's baselines ran. FGD and ours use the exact
fragmentation gradient; among equal gradients they take the node with less free
GPU (the gradient is flat between an empty node and a busy one, and packing
there keeps whole nodes free for multi-GPU pods).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

GPU_MILLI = 1000  # one whole card
# Normalisation constants: the largest node spec the baselines assume.
MAX_SPEC_CPU_MILLI = 128_000
MAX_SPEC_GPU_MILLI = 8_000

POLICIES: tuple[str, ...] = ("random", "bestfit", "dotprod", "packing", "clustering", "fgd", "ours")


@dataclass(frozen=True)
class PodDemand:
    """One pod's demand."""

    num_gpu: int  # 0..8; 1 with gpu_milli < 1000 = sharing pod
    gpu_milli: int  # per-GPU share, 1000 = whole card
    cpu_milli: int = 0
    memory_mib: int = 0
    gpu_models: frozenset[str] | None = None  # allowed models; None = any

    @property
    def sharing(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < GPU_MILLI

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def gpu_class(self) -> str | None:
        """'share', 'N-gpu', or None for CPU-only pods (used by GPU Clustering)."""
        if self.num_gpu == 0 or self.gpu_milli == 0:
            return None
        return "share" if self.sharing else f"{self.num_gpu}-gpu"


class NodeState:
    """A node's free resources. Mutable for speed; change it through `allocate`/`release`
    (or call `touch()` after editing the fields by hand, so cached scores are dropped)."""

    __slots__ = (
        "name",
        "model",
        "cpu_free_milli",
        "memory_free_mib",
        "gpu_free_milli",
        "cpu_capacity_milli",
        "memory_capacity_mib",
        "gpu_classes",
        "version",
    )

    def __init__(
        self,
        name: str,
        model: str,
        cpu_free_milli: int,
        memory_free_mib: int,
        gpu_free_milli: list[int],
        cpu_capacity_milli: int | None = None,
        memory_capacity_mib: int | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.cpu_free_milli = cpu_free_milli
        self.memory_free_mib = memory_free_mib
        self.gpu_free_milli = list(gpu_free_milli)
        self.cpu_capacity_milli = (
            cpu_free_milli if cpu_capacity_milli is None else cpu_capacity_milli
        )
        self.memory_capacity_mib = (
            memory_free_mib if memory_capacity_mib is None else memory_capacity_mib
        )
        self.gpu_classes: Counter[str] = Counter()  # GPU classes of the pods placed here
        self.version = 0

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_free_milli)

    @property
    def gpu_free_total(self) -> int:
        return sum(self.gpu_free_milli)

    def touch(self) -> None:
        self.version += 1

    def copy(self) -> NodeState:
        n = NodeState(
            self.name,
            self.model,
            self.cpu_free_milli,
            self.memory_free_mib,
            list(self.gpu_free_milli),
            self.cpu_capacity_milli,
            self.memory_capacity_mib,
        )
        n.gpu_classes = Counter(self.gpu_classes)
        return n

    def __repr__(self) -> str:
        return (
            f"NodeState({self.name!r}, {self.model!r}, cpu={self.cpu_free_milli}, "
            f"mem={self.memory_free_mib}, gpus={self.gpu_free_milli})"
        )


@dataclass(frozen=True)
class Placement:
    node: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class TargetPod:
    """One task type of the target workload and its popularity (FGD's distribution)."""

    cpu_milli: int
    num_gpu: int
    gpu_milli: int
    gpu_models: frozenset[str] | None
    weight: float


@dataclass
class PlacementContext:
    """What a policy needs besides the nodes and the pod.

    target: the workload distribution FGD measures fragmentation against
        (see `typical_workload`); the planner computes it from observed workloads.
    rng: the only source of randomness (tie-breaking, Random-fit).
    memo: cache per-node scores between calls, keyed by `NodeState.version`.
        Only for callers that change nodes through `allocate`/`release`/`touch`
        (the simulator); off by default.
    """

    target: tuple[TargetPod, ...] = ()
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    memo: bool = False
    lookahead_weight: float = 1.0
    _scores: dict = field(default_factory=dict, repr=False, compare=False)
    _frag: dict = field(default_factory=dict, repr=False, compare=False)
    _groups: tuple | None = field(default=None, repr=False, compare=False)
    _ratio: float | None = field(default=None, repr=False, compare=False)

    def gpu_per_cpu(self) -> float:
        """GPU milli per CPU milli of the target's GPU tasks (0 when unknown)."""
        if self._ratio is None:
            gpu = sum(t.weight * t.num_gpu * t.gpu_milli for t in self.target)
            cpu = sum(t.weight * t.cpu_milli for t in self.target if t.num_gpu > 0)
            self._ratio = gpu / cpu if cpu > 0 else 0.0
        return self._ratio

    def target_groups(self) -> tuple:
        """Target types grouped by per-GPU demand, precomputed once."""
        if self._groups is None:
            cpu_weight = 0.0
            by_milli: dict[int, list[tuple[int, int, frozenset[str] | None, float]]] = {}
            models_matter = False
            for t in self.target:
                if t.num_gpu == 0 or t.gpu_milli == 0:
                    cpu_weight += t.weight
                    continue
                by_milli.setdefault(t.gpu_milli, []).append(
                    (t.cpu_milli, t.num_gpu, t.gpu_models, t.weight)
                )
                models_matter = models_matter or t.gpu_models is not None
            groups = tuple((m, tuple(v)) for m, v in sorted(by_milli.items()))
            self._groups = (cpu_weight, groups, models_matter)
        return self._groups


# --------------------------------------------------------------------------- feasibility


def model_ok(node: NodeState, req: PodDemand) -> bool:
    return req.num_gpu == 0 or req.gpu_models is None or node.model in req.gpu_models


def fits(node: NodeState, req: PodDemand) -> bool:
    """Can `req` run on `node` now: model, CPU, memory, and GPUs (a sharing pod needs one GPU
    with gpu_milli free; a multi-GPU pod needs num_gpu GPUs with gpu_milli free, i.e. whole
    free cards when gpu_milli is 1000)."""
    if node.cpu_free_milli < req.cpu_milli or node.memory_free_mib < req.memory_mib:
        return False
    if req.num_gpu == 0:
        return True
    if req.gpu_models is not None and node.model not in req.gpu_models:
        return False
    need, milli = req.num_gpu, req.gpu_milli
    for f in node.gpu_free_milli:
        if f >= milli:
            need -= 1
            if need == 0:
                return True
    return False


def _exclusive_gpus(gpus: list[int], req: PodDemand) -> tuple[int, ...]:
    """The first num_gpu GPUs with gpu_milli free (whole free cards for whole-card pods)."""
    out = []
    for i, f in enumerate(gpus):
        if f >= req.gpu_milli:
            out.append(i)
            if len(out) == req.num_gpu:
                break
    return tuple(out)


def _tightest_gpu(gpus: list[int], milli: int) -> tuple[int, ...]:
    best = -1
    for i, f in enumerate(gpus):
        if f >= milli and (best < 0 or f < gpus[best]):
            best = i
    return (best,)


def default_gpus(node: NodeState, req: PodDemand) -> tuple[int, ...]:
    """Best-fit GPU choice: a sharing pod takes the tightest GPU it fits on, whole-card pods
    the lowest-numbered free cards."""
    if req.num_gpu == 0:
        return ()
    if req.sharing:
        return _tightest_gpu(node.gpu_free_milli, req.gpu_milli)
    return _exclusive_gpus(node.gpu_free_milli, req)


# --------------------------------------------------------------------------- state changes


def allocate(node: NodeState, req: PodDemand, placement: Placement) -> None:
    """Take `req`'s resources on `node` at `placement.gpus` (raises ValueError if they are
    not there)."""
    if placement.node != node.name:
        raise ValueError(f"placement is for {placement.node}, not {node.name}")
    if len(placement.gpus) != (req.num_gpu if req.gpu_milli > 0 else 0):
        raise ValueError(f"{req} needs {req.num_gpu} GPUs, placement has {placement.gpus}")
    if node.cpu_free_milli < req.cpu_milli or node.memory_free_mib < req.memory_mib:
        raise ValueError(f"{node.name} lacks CPU or memory for {req}")
    for g in placement.gpus:
        if node.gpu_free_milli[g] < req.gpu_milli:
            raise ValueError(f"{node.name} GPU {g} has {node.gpu_free_milli[g]} milli free")
    node.cpu_free_milli -= req.cpu_milli
    node.memory_free_mib -= req.memory_mib
    for g in placement.gpus:
        node.gpu_free_milli[g] -= req.gpu_milli
    cls = req.gpu_class
    if cls is not None:
        node.gpu_classes[cls] += 1
    node.version += 1


def release(node: NodeState, req: PodDemand, placement: Placement) -> None:
    """Give back what `allocate` took."""
    node.cpu_free_milli += req.cpu_milli
    node.memory_free_mib += req.memory_mib
    for g in placement.gpus:
        node.gpu_free_milli[g] += req.gpu_milli
        if node.gpu_free_milli[g] > GPU_MILLI:
            raise ValueError(f"{node.name} GPU {g} released above capacity")
    cls = req.gpu_class
    if cls is not None:
        node.gpu_classes[cls] -= 1
        if node.gpu_classes[cls] <= 0:
            del node.gpu_classes[cls]
    node.version += 1


# --------------------------------------------------------------------------- target workload


def typical_workload(requests: Iterable[PodDemand], coverage: float = 1.0) -> tuple[TargetPod, ...]:
    """FGD's target workload: the most popular task types (CPU, GPU count, per-GPU share,
    allowed models) that together cover `coverage` of the tasks, with their popularity
    renormalised to sum to 1. CPU-only tasks are included: GPU capacity is fragmented for
    them by definition, which FGD accounts for."""
    counts: Counter[TaskType] = Counter()
    for r in requests:
        counts[task_type(r)] += 1
    return typical_of(counts, coverage)


TaskType = tuple[int, int, int, frozenset[str] | None]
"""(CPU milli, GPU count, per-GPU share, allowed models): what `typical_workload` counts."""


def task_type(r: PodDemand) -> TaskType:
    g = r.gpu_milli if r.num_gpu > 0 else 0
    n = r.num_gpu if g > 0 else 0
    return (r.cpu_milli, n, g, r.gpu_models if n else None)


def typical_of(counts: Mapping[TaskType, int], coverage: float = 1.0) -> tuple[TargetPod, ...]:
    """`typical_workload` of the tasks counted per `task_type`."""
    total = sum(counts.values())
    if total == 0:
        return ()

    def order(item: tuple) -> tuple:
        (cpu, n, g, models), cnt = item
        return (-cnt, -cpu, -g, -n, tuple(sorted(models)) if models else ())

    ranked = sorted(counts.items(), key=order)
    chosen, cum = [], 0
    for key, cnt in ranked:
        if cum >= coverage * total:
            break
        chosen.append((key, cnt))
        cum += cnt
    return tuple(TargetPod(cpu, n, g, models, cnt / cum) for (cpu, n, g, models), cnt in chosen)


# --------------------------------------------------------------------------- fragmentation


def _frag_value(cpu: int, gpus: Sequence[int], model: str, groups: tuple) -> float:
    total = 0
    for f in gpus:
        total += f
    if total == 0:
        return 0.0
    cpu_weight, by_milli, _ = groups
    frag = cpu_weight * total
    for milli, entries in by_milli:
        cnt = 0
        part = 0
        for f in gpus:
            if f >= milli:
                cnt += 1
            else:
                part += f
        for c, n, models, w in entries:
            if (models is None or model in models) and cpu >= c and cnt >= n:
                frag += w * part
            else:
                frag += w * total
    return frag


def _frag_cached(ctx: PlacementContext, cpu: int, gpus: Sequence[int], model: str) -> float:
    groups = ctx.target_groups()
    key = (cpu, tuple(sorted(gpus)), model if groups[2] else None)
    v = ctx._frag.get(key)
    if v is None:
        v = _frag_value(cpu, key[1], model, groups)
        if len(ctx._frag) > 500_000:
            ctx._frag.clear()
        ctx._frag[key] = v
    return v


def node_fragmentation(node: NodeState, ctx: PlacementContext) -> float:
    """Expected GPU milli on `node` that a task drawn from `ctx.target` could not use
    (FGD's F_n(M)): for each task type, the free GPU capacity it cannot use — every free
    milli when the task cannot run on the node at all, otherwise the GPUs with less free
    than its per-GPU share — weighted by the type's popularity."""
    return _frag_cached(ctx, node.cpu_free_milli, node.gpu_free_milli, node.model)


def cluster_fragmentation(nodes: Iterable[NodeState], ctx: PlacementContext) -> tuple[float, int]:
    """(fragmented GPU milli, free GPU milli) over the cluster."""
    frag, free = 0.0, 0
    for n in nodes:
        frag += node_fragmentation(n, ctx)
        free += n.gpu_free_total
    return frag, free


def _fgd_delta(
    node: NodeState, req: PodDemand, ctx: PlacementContext
) -> tuple[float, tuple[int, ...]]:
    """(fragmentation growth, GPUs) of the best GPU choice for `req` on `node`."""
    gpus = node.gpu_free_milli
    cpu_after = node.cpu_free_milli - req.cpu_milli
    before = _frag_cached(ctx, node.cpu_free_milli, gpus, node.model)
    if req.num_gpu == 0 or req.gpu_milli == 0:
        return _frag_cached(ctx, cpu_after, gpus, node.model) - before, ()
    if req.sharing:
        best, best_i, seen = math.inf, -1, set()
        after = list(gpus)
        for i, f in enumerate(gpus):
            if f < req.gpu_milli or f in seen:
                continue
            seen.add(f)
            after[i] = f - req.gpu_milli
            v = _frag_cached(ctx, cpu_after, after, node.model)
            after[i] = f
            if v < best:
                best, best_i = v, i
        return best - before, (best_i,)
    chosen = _exclusive_gpus(gpus, req)
    after = list(gpus)
    for i in chosen:
        after[i] -= req.gpu_milli
    return _frag_cached(ctx, cpu_after, after, node.model) - before, chosen


# --------------------------------------------------------------------------- scores
# Each scorer returns (score, gpus) for a node that fits; higher score is better.
# gpus None means "choose after the node is picked" (see `choose`).


def _score_random(node: NodeState, req: PodDemand, ctx: PlacementContext):
    return 0, None


def _bestfit_leftover(node: NodeState, req: PodDemand) -> float:
    """Weighted CPU+GPU leftover after placing req, normalised by the max node spec (0..1)."""
    cpu_left = (node.cpu_free_milli - req.cpu_milli) / MAX_SPEC_CPU_MILLI
    gpu_left = (sum(node.gpu_free_milli) - req.total_gpu_milli) / MAX_SPEC_GPU_MILLI
    return 0.5 * cpu_left + 0.5 * gpu_left


def _score_bestfit(node: NodeState, req: PodDemand, ctx: PlacementContext):
    return int((1.0 - _bestfit_leftover(node, req)) * 100), default_gpus(node, req)


def _score_dotprod(node: NodeState, req: PodDemand, ctx: PlacementContext):
    dot = (
        (node.cpu_free_milli / MAX_SPEC_CPU_MILLI) * (req.cpu_milli / MAX_SPEC_CPU_MILLI)
        + (sum(node.gpu_free_milli) / MAX_SPEC_GPU_MILLI)
        * (req.total_gpu_milli / MAX_SPEC_GPU_MILLI)
    ) / 2
    return int((1.0 - dot) * 100), default_gpus(node, req)


def _score_packing(node: NodeState, req: PodDemand, ctx: PlacementContext):
    if req.total_gpu_milli <= 0:
        return 0, ()
    gpus = node.gpu_free_milli
    n_free = sum(1 for f in gpus if f >= GPU_MILLI)
    chosen = default_gpus(node, req)
    if n_free == len(gpus):  # idle node: lowest tier, fewer GPUs a little better
        return max(33 - n_free, n_free), chosen
    # walk GPUs tightest first, as a packer would fill them
    order = sorted(range(len(gpus)), key=lambda i: gpus[i])
    need, whole_used, used = req.num_gpu, 0, []
    for i in order:
        if need == 0:
            break
        if gpus[i] >= req.gpu_milli:
            need -= 1
            used.append(i)
            if gpus[i] >= GPU_MILLI:
                whole_used += 1
    if whole_used > 0:  # free cards on a node that is already in use
        return max(50 - whole_used, 33), chosen
    free_pct = sum(gpus[i] * 100 // GPU_MILLI for i in used)  # shares an occupied GPU
    return max(100 - free_pct // 10, 50), chosen


def _score_clustering(node: NodeState, req: PodDemand, ctx: PlacementContext):
    cls = req.gpu_class
    if cls is None:
        return 0, ()
    used = 25 * (MAX_SPEC_GPU_MILLI - sum(node.gpu_free_milli)) // MAX_SPEC_GPU_MILLI
    classes = node.gpu_classes
    if classes.get(cls, 0) > 0:
        tier = 75 if len(classes) == 1 else 50
    else:
        tier = 25 if not classes else 0
    return tier + used, default_gpus(node, req)


def _score_fgd(node: NodeState, req: PodDemand, ctx: PlacementContext):
    delta, chosen = _fgd_delta(node, req, ctx)
    # the exact gradient as the paper states it (rounded so float noise does not split
    # ties); among equal gradients, the node with less free GPU (descend, then pack)
    return (-round(delta, 3), -sum(node.gpu_free_milli)), chosen


def _stranded(cpu_free: int, gpu_free: int, gpu_per_cpu: float) -> float:
    """Free GPU milli that the CPU left on the node cannot feed, at the target workload's
    typical GPU-to-CPU ratio (a look-ahead over several future tasks, where FGD's
    fragmentation looks at one task at a time)."""
    return max(0.0, gpu_free - cpu_free * gpu_per_cpu)


def _score_ours(node: NodeState, req: PodDemand, ctx: PlacementContext):
    delta, chosen = _fgd_delta(node, req, ctx)
    ratio = ctx.gpu_per_cpu()
    if ratio > 0:
        gpu_free = sum(node.gpu_free_milli)
        before = _stranded(node.cpu_free_milli, gpu_free, ratio)
        after = _stranded(
            node.cpu_free_milli - req.cpu_milli, gpu_free - req.total_gpu_milli, ratio
        )
        delta += ctx.lookahead_weight * (after - before)
    return (-round(delta, 3), -sum(node.gpu_free_milli)), chosen


_SCORERS = {
    "random": _score_random,
    "bestfit": _score_bestfit,
    "dotprod": _score_dotprod,
    "packing": _score_packing,
    "clustering": _score_clustering,
    "fgd": _score_fgd,
    "ours": _score_ours,
}


def _random_gpus(node: NodeState, req: PodDemand, rng: random.Random) -> tuple[int, ...]:
    if req.sharing:
        ok = [i for i, f in enumerate(node.gpu_free_milli) if f >= req.gpu_milli]
        return (rng.choice(ok),)
    return default_gpus(node, req)


def choose(
    policy: str, nodes: Sequence[NodeState], req: PodDemand, ctx: PlacementContext
) -> Placement | None:
    """The node (and GPUs) `policy` puts `req` on, or None when no node fits.

    Among equally scored nodes the choice is uniform via `ctx.rng`."""
    try:
        scorer = _SCORERS[policy]
    except KeyError:
        raise ValueError(
            f"unknown placement policy {policy!r}; known: {', '.join(POLICIES)}"
        ) from None
    memo = ctx._scores.setdefault((policy, req), {}) if ctx.memo else None
    best = None
    ties: list[tuple[NodeState, tuple[int, ...] | None]] = []
    for node in nodes:
        if memo is not None:
            hit = memo.get(node.name)
            if hit is not None and hit[0] == node.version:
                res = hit[1]
            else:
                res = scorer(node, req, ctx) if fits(node, req) else None
                memo[node.name] = (node.version, res)
        else:
            res = scorer(node, req, ctx) if fits(node, req) else None
        if res is None:
            continue
        s = res[0]
        if best is None or s > best:
            best = s
            ties = [(node, res[1])]
        elif s == best:
            ties.append((node, res[1]))
    if not ties:
        return None
    node, gpus = ties[0] if len(ties) == 1 else ties[ctx.rng.randrange(len(ties))]
    if gpus is None:
        gpus = _random_gpus(node, req, ctx.rng)
    return Placement(node.name, gpus)


# --------------------------------------------------------------------------- defragmentation


@dataclass(frozen=True)
class Resident:
    """A pod already running on a node, which defragmentation may move."""

    key: str
    req: PodDemand
    placement: Placement
    movable: bool = True


@dataclass(frozen=True)
class Migration:
    """Move running pod `key` from `source` to `target` (evict it; it restarts there)."""

    key: str
    req: PodDemand
    source: Placement
    target: Placement


def _fits_without(node: NodeState, gone: Sequence[Resident], req: PodDemand) -> bool:
    """Would `req` fit on `node` once every resident in `gone` has left it?"""
    if node.cpu_free_milli + sum(r.req.cpu_milli for r in gone) < req.cpu_milli:
        return False
    if node.memory_free_mib + sum(r.req.memory_mib for r in gone) < req.memory_mib:
        return False
    if req.num_gpu == 0:
        return True
    gpus = list(node.gpu_free_milli)
    for r in gone:
        for g in r.placement.gpus:
            gpus[g] += r.req.gpu_milli
    return sum(1 for f in gpus if f >= req.gpu_milli) >= req.num_gpu


def _size(r: Resident) -> tuple[int, int]:
    return (r.req.total_gpu_milli, r.req.cpu_milli)


def defragment(
    nodes: Sequence[NodeState],
    req: PodDemand,
    residents: dict[str, Sequence[Resident]],
    place_elsewhere: Callable[[PodDemand, list[NodeState]], Placement | None],
    choose_on: Callable[[NodeState, PodDemand], Placement],
    *,
    max_moves: int = 1,
    max_candidates: int = 32,
) -> tuple[Placement, tuple[Migration, ...]] | None:
    """The one defragmenter (the planner's and the simulator's): make room for `req`, which
    fits nowhere, by moving the fewest small movable residents (one GPU or less each) off
    one node, each re-placed on another node by `place_elsewhere`.

    Fewest moves first; among as many moves, the smallest residents (GPU, then CPU), then
    the node's order, then the residents' order. With one move any single resident whose
    departure makes room is a candidate; with k > 1, a node's k smallest movable residents.
    At most `max_candidates` candidate sets are tried per move count. Nodes are not modified:
    the caller applies the migrations, then the placement (`choose_on` picks it on a trial
    copy of the node)."""
    if req.num_gpu == 0:
        return None  # CPU-only pods are not worth a migration
    for k in range(1, max(0, min(max_moves, sum(len(v) for v in residents.values()))) + 1):
        found: list[tuple[tuple, int, NodeState, tuple[Resident, ...]]] = []
        for idx, node in enumerate(nodes):
            if not model_ok(node, req):
                continue
            movers = sorted(
                (r for r in residents.get(node.name, ()) if r.movable and r.req.num_gpu <= 1),
                key=_size,
            )
            sets = (
                [(r,) for r in movers]
                if k == 1
                else ([tuple(movers[:k])] if len(movers) >= k else [])
            )
            for gone in sets:
                if _fits_without(node, gone, req):
                    found.append(
                        (
                            tuple(sum(x) for x in zip(*(_size(r) for r in gone), strict=True)),
                            idx,
                            node,
                            gone,
                        )
                    )
            if len(found) >= max_candidates:
                break
        found.sort(key=lambda t: (t[0], t[1]))
        for _, _, node, gone in found:
            # several moves are placed one after another: a node that takes one is copied
            others = [n for n in nodes if n is not node]
            moves = []
            for r in gone:
                target = place_elsewhere(r.req, others)
                if target is None:
                    break
                if len(gone) > 1:
                    at = next(i for i, n in enumerate(others) if n.name == target.node)
                    others[at] = others[at].copy()
                    allocate(others[at], r.req, target)
                moves.append(Migration(r.key, r.req, r.placement, target))
            if len(moves) < len(gone):
                continue
            trial = node.copy()
            for r in gone:
                release(trial, r.req, r.placement)
            return choose_on(trial, req), tuple(moves)
    return None


def choose_with_migration(
    policy: str,
    nodes: Sequence[NodeState],
    req: PodDemand,
    ctx: PlacementContext,
    residents: dict[str, Sequence[Resident]],
    max_candidates: int = 32,
) -> tuple[Placement, tuple[Migration, ...]] | None:
    """`choose`, and when nothing fits, `defragment` with one migration placed by the same
    policy (the simulator's `--migrate`)."""
    placement = choose(policy, nodes, req, ctx)
    if placement is not None:
        return placement, ()

    def on(trial: NodeState, r: PodDemand) -> Placement:
        res = _SCORERS[policy](trial, r, ctx)
        return Placement(trial.name, res[1] if res[1] is not None else default_gpus(trial, r))

    return defragment(
        nodes,
        req,
        residents,
        lambda r, others: choose(policy, others, r, ctx),
        on,
        max_moves=1,
        max_candidates=max_candidates,
    )
