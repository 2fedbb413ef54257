"""Planner invariants, property-tested over generated clusters (hypothesis).

- never over-commit a GPU (the planner's own guard raises; every repartitioned card is drained)
- never a MIG layout that is not placeable, nor one the pool's policy does not offer
- never exceed a team cap with admitted demand
- never preempt a non-preemptible class, nor below min runtime, nor beyond the hourly budget
- deterministic, whatever order the snapshot lists things in
- the plan of a converged state is empty
"""

from __future__ import annotations

import random
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.observe.builders import gpu, hours, mig_pod, node, shared_pod, snapshot, training
from reconciler.observe.model import Allocation, Workload
from reconciler.plan.cluster import build_cluster, card_equivalents
from reconciler.plan.planner import check_no_overcommit, plan
from reconciler.plan.render import to_json
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import NOW, _objects, desired_text

A100 = "A100-SXM4-80GB"
LAYOUTS = [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], ["3g.40gb", "3g.40gb"]]
CLASSES = ["training-high", "training-low", "spot"]
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def clusters(draw, *, converged: bool = False):
    n_nodes = draw(st.integers(2, 3))  # the quotas guarantee 9 cards: at least 2 nodes
    train_min = draw(st.integers(0, 8))
    inf_min = 0 if converged else draw(st.integers(0, 3))
    text = desired_text(nodes=n_nodes, train_min=train_min, inf_min=inf_min)
    rnd = random.Random(draw(st.integers(0, 2**32 - 1)))
    nodes, work = [], []
    inference_cards = 0
    teams = ["other"] if converged else ["team-a", "team-b", "other"]
    for ni in range(n_nodes):
        name = f"a100-{ni + 1}"
        gpus = []
        for gi in range(8):
            r = rnd.random()
            idle = (
                NOW - hours(rnd.choice([0.5, 2, 5]))
                if (not converged and rnd.random() < 0.2)
                else None
            )
            if r < 0.6 or (converged and inference_cards >= 8):  # converged: maxGPUs 8 holds
                gpus.append(gpu(gi, util=1.0 if idle else 60.0, idle_since=idle))
            elif r < 0.85:
                gpus.append(gpu(gi, mig=rnd.choice(LAYOUTS), model=A100))
                inference_cards += 1
            else:
                gpus.append(gpu(gi, shared=4))
                inference_cards += 1
        nodes.append(node(name, "a100", A100, gpus))
        free_whole = [g.index for g in gpus if g.mode == "whole"]
        k = 0
        while free_whole and rnd.random() < 0.8:
            size = min(len(free_whole), rnd.choice([1, 1, 2, 4, 8]))
            idx, free_whole = free_whole[:size], free_whole[size:]
            started = NOW - hours(rnd.choice([0.05, 0.5, 3, 10]))
            work.append(
                training(
                    rnd.choice(teams),
                    f"job-{ni}-{k}",
                    name,
                    idx,
                    cls=rnd.choice(CLASSES),
                    started=started,
                    checkpoint=started + hours(0.01),
                    migratable=rnd.random() < 0.5,
                )
            )
            k += 1
        for g in gpus:
            if g.mode == "mig":
                for inst in g.mig_instances:
                    if rnd.random() < 0.5:
                        work.append(
                            mig_pod(
                                rnd.choice(teams),
                                f"mig-{ni}-{g.index}-{inst.start}",
                                name,
                                inst.profile,
                                gpu_index=g.index,
                                start=inst.start,
                                started=NOW - hours(2),
                            )
                        )
            elif g.mode == "shared":
                used = rnd.randint(0, 4)
                for s in range(used):
                    work.append(
                        shared_pod(
                            rnd.choice(teams),
                            f"sh-{ni}-{g.index}-{s}",
                            name,
                            1,
                            gpu_index=g.index,
                            started=NOW - hours(2),
                        )
                    )
    if not converged:
        for i in range(draw(st.integers(0, 6))):
            kind = rnd.choice(["whole", "mig", "shared"])
            ns = rnd.choice(teams)
            if kind == "whole":
                work.append(
                    training(
                        ns,
                        f"pending-{i}",
                        None,
                        rnd.choice([1, 2, 4, 8]),
                        cls=rnd.choice(CLASSES),
                        pool="a100",
                        created=NOW - hours(0.1),
                    )
                )
            elif kind == "mig":
                w = mig_pod(
                    ns,
                    f"pending-{i}",
                    None,
                    rnd.choice(["3g.40gb", "2g.20gb", "1g.10gb"]),
                    pool="a100",
                )
                work.append(
                    w.model_copy(
                        update={"priority_class": rnd.choice(["serving", "serving-critical"])}
                    )
                )
            else:
                work.append(shared_pod(ns, f"pending-{i}", None, rnd.choice([1, 2]), pool="a100"))
    recent = [] if converged else [NOW - hours(0.1)] * draw(st.integers(0, 5))
    return text, snapshot(NOW, nodes, work, recent_preemptions=recent, **_objects(text))


def _desired(text):
    return load([SourceFile("desired.yaml", text)])


@SETTINGS
@given(clusters())
def test_invariants(case):
    text, observed = case
    desired = _desired(text)
    p = plan(desired, observed)  # raises on over-commit
    work = {w.key: w for w in observed.workloads}
    model = desired.catalog.model(A100)
    allowed_layouts = {
        tuple(sorted(lay.profiles)) for lay in desired.pools["a100"].spec.inference.mig.layouts
    }
    evicted = set()
    pre = desired.priority.spec.preemption
    for a in p.actions:
        if a.kind == "mig-reconfigure":
            layouts = {c.gpu: c.profiles for c in a.layout}
            for layout in layouts.values():
                if layout is not None:
                    assert desired.catalog.place(model, layout) is not None
            for change in a.cards:
                if change.after.startswith("MIG"):
                    assert tuple(layouts[change.gpu]) in allowed_layouts
        if a.kind in ("preempt", "reclaim", "move"):
            w = work[a.target]
            cls = desired.priority_class(w.priority_class)
            assert cls is not None and cls.preemptible, (
                f"{a.id}: non-preemptible class {w.priority_class}"
            )
            if a.kind == "preempt" and not cls.spot:
                assert (NOW - w.started_at).total_seconds() >= pre.min_runtime.total_seconds()
            evicted.add(a.target)
    recent = sum(1 for t in observed.recent_preemptions if (NOW - t).total_seconds() < 3600)
    assert sum(1 for a in p.actions if a.kind == "preempt") <= max(0, pre.budget_per_hour - recent)
    # repartitioned cards are drained first: their running holders are evicted, and the
    # reconfiguration depends on those evictions
    ids = {a.id for a in p.actions}
    for a in p.actions:
        if a.kind in ("mig-reconfigure", "set-sharing"):
            changed = a.changed_gpus
            for w in observed.workloads:
                if (
                    w.phase == "Running"
                    and w.node == a.target
                    and {x.gpu for x in w.allocations} & changed
                ):
                    assert w.key in evicted
                    assert any(d.endswith(w.key) for d in a.depends_on)
            assert f"cordon:{a.target}" in a.depends_on and f"uncordon:{a.target}" in ids
    # team caps: what runs on after the plan plus what it admits stays under the cap
    held = {f.subject for f in p.findings if f.code.startswith("held")}
    pv = build_cluster(desired, observed).pools["a100"]
    for q in desired.quotas.values():
        mine = [w for w in observed.workloads if w.namespace in q.spec.namespaces]
        before = sum(
            (card_equivalents(w.request, pv) for w in mine if w.phase == "Running"), Fraction(0)
        )
        if before > q.spec.max_gpus:
            continue  # the cap step brings it down as far as preemption rules allow
        after = sum(
            (
                card_equivalents(w.request, pv)
                for w in mine
                if (w.phase == "Running" and w.key not in evicted)
                or (w.phase == "Pending" and w.key not in held)
            ),
            Fraction(0),
        )
        assert after <= q.spec.max_gpus


@SETTINGS
@given(clusters(), st.randoms(use_true_random=False))
def test_deterministic_and_order_independent(case, rnd):
    text, observed = case
    desired = _desired(text)
    first = to_json(plan(desired, observed))
    assert to_json(plan(desired, observed)) == first
    nodes, work = list(observed.nodes), list(observed.workloads)
    rnd.shuffle(nodes)
    rnd.shuffle(work)
    shuffled = observed.model_copy(update={"nodes": nodes, "workloads": work})
    assert to_json(plan(desired, shuffled)) == first


@SETTINGS
@given(clusters(converged=True))
def test_converged_state_plans_nothing(case):
    text, observed = case
    p = plan(_desired(text), observed)
    assert p.actions == (), [a.id for a in p.actions]


def test_guard_catches_overcommit():
    """The over-commit guard is live: a working view where the plan put two workloads on
    one whole card fails planning loudly (the cluster's own over-commit is a finding)."""
    text = desired_text()
    n = node("a100-1", "a100", A100)
    a = training("team-a", "a", "a100-1", [0], started=NOW - hours(1))
    view = build_cluster(_desired(text), snapshot(NOW, [n], [a]))
    view.pools["a100"].reserve([view.slot[("a100-1", 0)]], "team-a/b")
    view.pools["a100"].take_slices(view.slot[("a100-1", 0)], 0, "team-a/b")
    try:
        check_no_overcommit(view)
    except AssertionError as exc:
        assert "whole card held by" in str(exc)
    else:
        raise AssertionError("over-commit was not detected")


def test_cluster_overcommit_is_a_finding_not_a_crash():
    """Two pods on one whole card (drift the cluster produced): a finding, the card is
    left alone, and the rest of the plan goes on."""
    text = desired_text()
    n = node("a100-1", "a100", A100)
    a = training("team-a", "a", "a100-1", [0], started=NOW - hours(1))
    b = Workload(**{**a.model_dump(), "name": "b", "allocations": [Allocation(gpu=0)]})
    p = plan(_desired(text), snapshot(NOW, [n], [a, b]))
    assert "whole-card-shared" in {f.code for f in p.findings}
    assert not [x for x in p.actions if getattr(x, "target", "") == "a100-1"]
