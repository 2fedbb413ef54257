"""Preemption for a gang of several pods in a pool with NVLink domains
(plan/stages/training.py, `_choices`): victims are chosen within one
`nvidia.com/gpu.clique` domain that can then hold every pod (the domain whose victims cost
least), and across the pool only when no domain can (with the `gang-spans-nvlink-domains`
finding). Without the label, or with `topology: none`, the pool-wide choice is as before.

Four nodes of 4 cards, two domains: cluster.0 = a100-1, a100-2 and cluster.1 = a100-3,
a100-4. The gang: 2 pods x 4 cards of training-high, which preempts spot (`when: always`)."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.observe.builders import node, training
from reconciler.observe.model import Workload
from reconciler.plan.actions import Admit, Preempt
from reconciler.plan.model import Plan
from tests.plan.scenarios import A100, desired_text
from tests.plan.support import HIGH, ago, pend, run

NODES = ("a100-1", "a100-2", "a100-3", "a100-4")
DOMAINS = {
    "a100-1": "cluster.0",
    "a100-2": "cluster.0",
    "a100-3": "cluster.1",
    "a100-4": "cluster.1",
}
SPANS = "gang-spans-nvlink-domains"


def gang() -> list[Workload]:
    return [
        pend("team-a", f"job-{i}", 4, HIGH).model_copy(
            update={"owner_name": "job", "gang_size": 2, "admission": "gpupool"}
        )
        for i in range(2)
    ]


def spot(name: str, on: str, since_checkpoint: float) -> Workload:
    """A spot job holding all 4 cards of `on`; `since_checkpoint` hours of work to lose."""
    return training(
        "team-b",
        name,
        on,
        [0, 1, 2, 3],
        cls="spot",
        started=ago(5),
        checkpoint=ago(since_checkpoint),
    )


def pinned(name: str, on: str) -> Workload:
    """Work nothing here may preempt (training-high is not preemptible)."""
    return training("team-b", name, on, [0, 1, 2, 3], cls=HIGH, started=ago(5), checkpoint=ago(1))


def _plan(work: list[Workload], domains: dict[str, str] | None = None, topology: str = "") -> Plan:
    labels = DOMAINS if domains is None else domains
    nodes = [
        node(n, "a100", A100, None, 4, **({C.GPU_CLIQUE_LABEL: labels[n]} if n in labels else {}))
        for n in NODES
    ]
    text = desired_text(nodes=4).replace("topology: node", f"topology: {topology or 'node'}")
    return run(text, nodes, [*gang(), *work])


def placed(p: Plan) -> set[str]:
    return {pa.node for a in p.actions if isinstance(a, Admit) for pa in a.pods}


def preempted(p: Plan) -> set[str]:
    return {a.target for a in p.actions if isinstance(a, Preempt)}


def spans(p: Plan) -> list:
    return [f for f in p.findings if f.code == SPANS]


def _room_in_one_cheap_victims_in_other() -> list[Workload]:
    # cluster.0: two cheap victims; cluster.1: a free node and one dearer victim
    return [
        spot("cheap-1", "a100-1", 0.1),
        spot("cheap-2", "a100-2", 0.1),
        spot("dear", "a100-4", 3),
    ]


def test_the_domain_with_room_is_freed_not_the_cheapest_node_of_the_pool() -> None:
    p = _plan(_room_in_one_cheap_victims_in_other())
    # one preemption in cluster.1 holds the gang there; cluster.0 would need two
    assert preempted(p) == {"team-b/dear"}
    assert placed(p) == {"a100-3", "a100-4"}
    assert not spans(p)


def test_without_domains_the_cheapest_node_of_the_pool_is_freed_as_before() -> None:
    for p in (
        _plan(_room_in_one_cheap_victims_in_other(), domains={}),
        _plan(_room_in_one_cheap_victims_in_other(), topology="none"),
    ):
        assert preempted(p) == {"team-b/cheap-1"}
        assert placed(p) == {"a100-1", "a100-3"}
    # a lone pod in a pool with domains: the pool-wide choice too
    lone = pend("team-a", "solo", 4, HIGH)
    work = [lone, *_room_in_one_cheap_victims_in_other(), spot("more", "a100-3", 0.1)]
    nodes = [node(n, "a100", A100, None, 4, **{C.GPU_CLIQUE_LABEL: DOMAINS[n]}) for n in NODES]
    p = run(desired_text(nodes=4), nodes, work)
    assert preempted(p) == {"team-b/cheap-1"}


def test_the_domain_whose_victims_cost_least_wins() -> None:
    # every node must be freed; cluster.0's victims lose 0.1 h + 3 h of work, cluster.1's
    # 1 h + 1 h: the pool's two cheapest nodes (a100-1, then a100-3 or a100-4) span domains
    work = [
        spot("a", "a100-1", 0.1),
        spot("b", "a100-2", 3),
        spot("c", "a100-3", 1),
        spot("d", "a100-4", 1),
    ]
    p = _plan(work)
    assert preempted(p) == {"team-b/c", "team-b/d"}
    assert placed(p) == {"a100-3", "a100-4"}
    assert not spans(p)
    # equal costs: the domain named first (both have no free card)
    work = [spot(x, n, 1) for x, n in zip("abcd", NODES, strict=True)]
    p = _plan(work)
    assert preempted(p) == {"team-b/a", "team-b/b"}
    assert placed(p) == {"a100-1", "a100-2"}


def test_no_domain_can_hold_it_then_the_pool_wide_choice_and_the_finding() -> None:
    work = [
        spot("a", "a100-1", 0.5),
        pinned("b", "a100-2"),
        spot("c", "a100-3", 0.5),
        pinned("d", "a100-4"),
    ]
    p = _plan(work)
    assert preempted(p) == {"team-b/a", "team-b/c"}
    assert placed(p) == {"a100-1", "a100-3"}
    (f,) = spans(p)
    assert f.subject == "team-a/job-0"


def test_a_domain_over_the_budget_gives_way_to_the_next_but_not_to_the_pool() -> None:
    swaps = (
        ("budgetPerHour: 4", "budgetPerHour: 3"),
        ("victims: [spot], when: always", "victims: [training-low, spot], when: always"),
    )
    text = desired_text(nodes=4)
    for old, new in swaps:
        text = text.replace(old, new)
    nodes = [node(n, "a100", A100, None, 4, **{C.GPU_CLIQUE_LABEL: DOMAINS[n]}) for n in NODES]

    def halves(on: str) -> list[Workload]:  # two spot jobs of 2 cards: two preemptions
        return [
            training("team-b", f"{on}-{i}", on, [2 * i, 2 * i + 1], cls="spot", started=ago(5))
            for i in range(2)
        ]

    def low(name: str, on: str) -> Workload:
        return training("team-b", name, on, [0, 1, 2, 3], started=ago(5), checkpoint=ago(1))

    # cluster.0 costs less (spot) but needs four preemptions; the budget has three: cluster.1
    work = [*halves("a100-1"), *halves("a100-2"), low("c", "a100-3"), low("d", "a100-4")]
    p = run(text, nodes, [*gang(), *work])
    assert preempted(p) == {"team-b/c", "team-b/d"}
    assert placed(p) == {"a100-3", "a100-4"}
    # only cluster.0 can hold it: the gang waits for the budget, though spreading it (a100-1
    # and a100-3: three preemptions) would fit the budget now
    work = [*halves("a100-1"), *halves("a100-2"), low("c", "a100-3"), pinned("d", "a100-4")]
    p = run(text, nodes, [*gang(), *work])
    assert not preempted(p) and not placed(p)
    waits = [f.message for f in p.findings if f.subject == "team-a/job-0"]
    assert any("needs 4 preemption(s)" in m for m in waits), waits
