"""Dynamic MIG on DRA (issue 32, "a repartition under DynamicMIG";
reconciler/plan/partition/dra_dynamic.py): a pool with `spec.dra.mig: dynamic` is served by
`DynamicMigBackend`; a whole card becomes MIG with no node action at all (no MigReconfigure, no
cordon: NVIDIA's driver makes the instance when the claim is prepared), and the Admit names the
partition by its card and profile (it has no uuid before it exists). A card's layout is what is
allocated on it, completed to an offered layout; a card with nothing allocated is whole."""

from __future__ import annotations

from reconciler.observe.builders import gpu, mig_pod, node, snapshot, training
from reconciler.plan.actions import Admit
from reconciler.plan.partition import DEFAULT_BACKENDS, DynamicMigBackend
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import NOW, _objects, ago, desired_text, dynamic_mig_devices

H100 = "H100-SXM5-80GB"


def ref(card: int, profile: str, start: int, node: str = "h-1") -> str:
    """How the plan names a DynamicMIG partition (plan/dra_admit.py `dynamic_ref`; the test
    slices' profile id is 9: tests/plan/scenarios.py `dynamic_mig_devices`)."""
    return f"gpu.nvidia.com/{node}/gpu-{card}-mig-{profile.replace('.', '')}-9-{start}"


def _text() -> str:
    return (
        desired_text(train_min=0)
        .replace("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
        .replace(
            "  gpuModel: A100-SXM4-80GB\n",
            f"  gpuModel: {H100}\n  backend: dra\n  dra: {{mig: dynamic}}\n",
            1,
        )
    )


def _plan(cards, workloads):
    text = _text()
    desired = load([SourceFile("desired.yaml", text)])
    nodes = [node("h-1", "a100", H100, cards)]
    observed = snapshot(NOW, nodes, workloads, **_objects(text))
    gated = [
        w.model_copy(update={"admission": "gpupool"}) if w.node is None else w
        for w in observed.workloads
    ]
    observed = observed.model_copy(
        update={"workloads": gated, "dra": dynamic_mig_devices("h-1", len(cards))}
    )
    plan, facts = plan_with_facts(desired, observed)
    return plan, facts


def test_a_dynamic_pool_is_served_by_the_dynamic_backend() -> None:
    assert isinstance(DEFAULT_BACKENDS[0], DynamicMigBackend)
    desired = load([SourceFile("desired.yaml", _text())])
    assert desired.pools["a100"].spec.dra.mig == "dynamic"


def test_a_whole_card_becomes_mig_with_no_node_action_and_the_admit_names_card_and_profile():
    cards = [gpu(i, model=H100) for i in range(2)]
    ranker = mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")
    plan, _ = _plan(cards, [ranker])
    kinds = sorted(a.kind for a in plan.actions)
    assert not {"mig-reconfigure", "cordon", "uncordon", "partition-change"} & set(kinds), kinds
    (admit,) = [a for a in plan.actions if isinstance(a, Admit)]
    (pod,) = admit.pods
    assert pod.node == "h-1" and pod.devices == (ref(pod.gpus[0], "3g.40gb", 4),)
    assert admit.depends_on == ()


def test_a_card_reads_as_its_allocations_completed_to_an_offered_layout() -> None:
    # the agent shows one 3g.40gb made at start 0 (the driver made it for a running pod):
    # the card is the offered two-3g layout with the second 3g.40gb free, and a second ranker
    # goes there, not onto the other (empty, whole) card
    cards = [gpu(0, mig=["3g.40gb"], model=H100), gpu(1, model=H100)]
    running = mig_pod("team-b", "ranker-0", "h-1", "3g.40gb", gpu_index=0, start=0)
    pending = mig_pod("team-b", "ranker-1", None, "3g.40gb", pool="a100")
    plan, facts = _plan(cards, [running, pending])
    (admit,) = [a for a in plan.actions if isinstance(a, Admit)]
    assert admit.pods[0].gpus == (0,) and admit.pods[0].devices == (ref(0, "3g.40gb", 4),)
    assert not [f for f in plan.findings if f.code == "partition-drift"], plan.findings


def test_a_card_with_nothing_allocated_is_whole_whatever_the_agent_shows() -> None:
    # MIG mode left on with no instance (the driver destroyed them at unprepare): a whole
    # training gang of 2 may take it without any repartition action
    cards = [gpu(0, mig=[], model=H100), gpu(1, model=H100)]
    plan, _ = _plan(cards, [])
    assert not [a for a in plan.actions if a.kind in ("mig-reconfigure", "cordon")]
    assert not [f for f in plan.findings if f.code == "partition-drift"], plan.findings


def test_never_both_on_one_node_a_mig_manager_label_on_a_dynamic_node_is_a_finding() -> None:
    text = _text()
    desired = load([SourceFile("desired.yaml", text)])
    n = node("h-1", "a100", H100, [gpu(0, model=H100)], **{"nvidia.com/mig.config": "all-1g.10gb"})
    observed = snapshot(NOW, [n], [], **_objects(text))
    observed = observed.model_copy(update={"dra": dynamic_mig_devices("h-1", 1)})
    plan, _ = plan_with_facts(desired, observed)
    found = [f for f in plan.findings if f.code == "dra-dynamic-mig-manager"]
    assert len(found) == 1 and "all-1g.10gb" in found[0].message, plan.findings
    assert not [f for f in plan.findings if f.code == "dra-slices-stale"]
    assert not [a for a in plan.actions if a.kind == "mig-reconfigure"]


def test_allocated_but_not_prepared_yet_is_no_inconsistency() -> None:
    # the allocator gave ranker-0 the 3g.40gb at start 4; the kubelet has not prepared it, so
    # the agent still shows the card whole: the card is MIG by its allocation (not fenced, no
    # unknown-mig-instance), completed to the first offered layout with 3g.40gb at 4, the
    # balanced one (2g.20gb at 0, 1g.10gb at 2 and 3), so ranker-1's 3g.40gb goes to card 0
    cards = [gpu(0, model=H100), gpu(1, model=H100)]
    running = mig_pod("team-b", "ranker-0", "h-1", "3g.40gb", gpu_index=1, start=4)
    pending = mig_pod("team-b", "ranker-1", None, "3g.40gb", pool="a100")
    text = _text()
    observed = snapshot(NOW, [node("h-1", "a100", H100, cards)], [running], **_objects(text))
    read = DynamicMigBackend().read_observed(load([SourceFile("d.yaml", text)]), observed)
    card = read.nodes[0].gpus[1]
    assert card.mig_enabled and [(i.profile, i.start) for i in card.mig_instances] == [
        ("2g.20gb", 0),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
        ("3g.40gb", 4),
    ]
    assert not read.nodes[0].gpus[0].mig_enabled
    plan, _ = _plan(cards, [running, pending])
    assert not [f for f in plan.findings if f.code == "unknown-mig-instance"], plan.findings
    (admit,) = [a for a in plan.actions if isinstance(a, Admit)]
    assert admit.pods[0].gpus == (0,) and admit.pods[0].devices == (ref(0, "3g.40gb", 4),)


def test_a_busy_card_is_drained_first_and_the_admit_waits_for_it() -> None:
    # both cards hold low-priority training; a serving MIG pod preempts it: the eviction is the
    # only step before the Admit (which waits for the stopped pod), no cordon, no MIG action
    cards = [gpu(i, model=H100) for i in range(2)]
    trainer = training(
        "team-b", "bert", "h-1", 2, cls="training-low", started=ago(6), checkpoint=ago(0.1)
    )
    ranker = mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")
    plan, _ = _plan(cards, [trainer, ranker])
    kinds = {a.kind for a in plan.actions}
    assert not {"mig-reconfigure", "cordon", "uncordon"} & kinds, kinds
    (admit,) = [a for a in plan.actions if isinstance(a, Admit)]
    assert admit.after == ("team-b/bert",), admit
    assert admit.pods[0].devices == (ref(admit.pods[0].gpus[0], "3g.40gb", 4),)
