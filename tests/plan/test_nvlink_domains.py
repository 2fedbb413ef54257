"""A gang of several pods on one multi-node NVLink domain (plan/stages/whole_cards.py): nodes
carry GPU feature discovery's `nvidia.com/gpu.clique`; a gang goes within one domain with room
for all of it (the fullest such first), else anywhere with a finding. Without the label,
placement is as before. The same for both backends: DRA's exact admission then pins it."""

from __future__ import annotations

from reconciler import conventions as C
from reconciler.observe.builders import node
from reconciler.observe.model import Workload
from reconciler.plan.actions import Admit
from reconciler.plan.model import Plan
from tests.plan.scenarios import A100, desired_text
from tests.plan.support import HIGH, pend, run

NODES = ("a100-1", "a100-2", "a100-3")
SPLIT = {"a100-2": "cluster.0", "a100-1": "cluster.1", "a100-3": "cluster.1"}


def gang(size: int = 2, n: int = 4) -> list[Workload]:
    return [
        pend("team-a", f"job-{i}", n, HIGH).model_copy(
            update={"owner_name": "job", "gang_size": size, "admission": "gpupool"}
        )
        for i in range(size)
    ]


def nodes(cliques: dict[str, str]):
    return [
        node(n, "a100", A100, None, 4, **({C.GPU_CLIQUE_LABEL: cliques[n]} if n in cliques else {}))
        for n in NODES
    ]


def placed(p: Plan) -> set[str]:
    return {pa.node for a in p.actions if isinstance(a, Admit) for pa in a.pods}


def _plan(cliques: dict[str, str], work=None, topology: str = "") -> Plan:
    text = desired_text(nodes=3).replace("topology: node", f"topology: {topology or 'node'}")
    return run(text, nodes(cliques), work if work is not None else gang())


def test_a_gang_lands_within_one_nvlink_domain() -> None:
    # without labels the placement policy puts the gang on a100-2 and a100-3
    assert placed(_plan({})) == {"a100-2", "a100-3"}
    # a100-2 alone in its domain: the gang goes where one domain holds both pods
    p = _plan(SPLIT)
    assert placed(p) == {"a100-1", "a100-3"}
    assert not [f for f in p.findings if f.code == "gang-spans-nvlink-domains"]


def test_no_domain_with_room_places_it_anywhere_and_says_so() -> None:
    apart = {"a100-1": "cluster.0", "a100-2": "cluster.1", "a100-3": "cluster.2"}
    p = _plan(apart)
    assert len(placed(p)) == 2
    (f,) = [f for f in p.findings if f.code == "gang-spans-nvlink-domains"]
    assert f.subject == "team-a/job-0" and "2 pods" in f.message


def test_a_lone_pod_and_topology_none_ignore_domains() -> None:
    assert len(placed(_plan(SPLIT, gang(size=1)))) == 1
    assert placed(_plan(SPLIT, topology="none")) == {"a100-2", "a100-3"}
