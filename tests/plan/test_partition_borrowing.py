"""Per-profile MIG and shared-slice borrowing limits enforced by gpupool's admission, on a DRA
pool and on the device plugin (plan/stages/admission.py, `_partitions_held` and `_borrowing`).
gpupool keeps no ResourceQuota in the namespaces it gates, and on DRA Kubernetes' quota counts
a class's devices per namespace only, so admission holds a team to its `guaranteed +
borrowingLimit` per MIG profile (and for shared memory, in the pool's slices, rounded up as
the rendered quota counts it) itself, with the same `held-borrowing` finding as for whole
cards, naming the team, what it would hold and the limit."""

from __future__ import annotations

import pytest

from reconciler.observe.builders import gpu, mig_pod, node, shared_pod, snapshot
from reconciler.observe.model_dra import DraState
from reconciler.plan.actions import Admit, Hold
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.plan.scenarios import (
    A100,
    NOW,
    _objects,
    desired_text,
    dynamic_mig_devices,
    published_slices,
)

H100 = "H100-SXM5-80GB"
NO_SHARED = ("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
TEAM_B_MIG = "mig: {3g.40gb: {guaranteed: 2, borrowingLimit: 6}}"
TEAM_A_WHOLE = "whole: {guaranteed: 4, borrowingLimit: 4}"


def _lender(text: str, allotment: str) -> str:
    """team-a, the lender, with `allotment` (e.g. a MIG or sharedMemory allotment) beside its
    whole cards."""
    assert TEAM_A_WHOLE in text
    return text.replace(TEAM_A_WHOLE, f"{TEAM_A_WHOLE}, {allotment}") if allotment else text


def _text(dynamic: bool, allotments: str, dra: bool = True, lender: str = "") -> str:
    backend = ("  backend: dra\n" if dra else "") + ("  dra: {mig: dynamic}\n" if dynamic else "")
    model = H100 if dynamic else A100
    text = desired_text(train_min=0).replace(*NO_SHARED)
    text = text.replace("  gpuModel: A100-SXM4-80GB\n", f"  gpuModel: {model}\n{backend}", 1)
    assert TEAM_B_MIG in text
    return _lender(text.replace(TEAM_B_MIG, f"mig: {{{allotments}}}"), lender)


def _plan(
    dynamic: bool,
    allotments: str,
    running: int,
    pending: int,
    profile: str = "3g.40gb",
    dra: bool = True,
    lender: str = "",
):
    """team-b with `running` MIG pods of `profile` on one node and `pending` more, gated; on
    the device plugin with `dra=False`; team-a with the MIG allotment `lender`."""
    text = _text(dynamic, allotments, dra, lender)
    model = H100 if dynamic else A100
    if dynamic:
        cards = [gpu(i, model=model) for i in range(4)]
    else:
        cards = [gpu(i, mig=["3g.40gb", "3g.40gb"], model=model) for i in range(4)]
    starts = [(i // 2, 4 * (i % 2)) for i in range(8)]
    pods = [
        mig_pod("team-b", f"ranker-{i}", "n-1", profile, gpu_index=g, start=s)
        for i, (g, s) in enumerate(starts[:running])
    ]
    pods += [
        mig_pod("team-b", f"ranker-{running + i}", None, profile, pool="a100")
        for i in range(pending)
    ]
    nodes = [node("n-1", "a100", model, cards)]
    observed = snapshot(NOW, nodes, pods, **_objects(text))
    gated = [w.model_copy(update={"admission": "gpupool"}) if w.node is None else w for w in pods]
    state = (dynamic_mig_devices("n-1", 4) if dynamic else _static(nodes)) if dra else None
    observed = observed.model_copy(update={"workloads": gated, "dra": state})
    plan, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    return plan


def _static(nodes) -> DraState:
    """The driver's slices for static MIG, each instance with its own `uuid` (as the driver
    publishes a MIG device that exists), which exact admission names."""
    slices = [
        s.model_copy(
            update={
                "devices": [
                    d.model_copy(update={"attributes": {**d.attributes, "uuid": f"MIG-{d.name}"}})
                    for d in s.devices
                ]
            }
        )
        for s in published_slices(nodes)
    ]
    return DraState(slices=slices)


def _admitted(plan) -> list[str]:
    return sorted(a.target for a in plan.actions if isinstance(a, Admit))


def _held(plan) -> dict[str, str]:
    return {f.subject: f.message for f in plan.findings if f.code == "held-borrowing"}


@pytest.mark.parametrize("dynamic", [False, True], ids=["static-mig", "dynamic-mig"])
def test_a_team_is_held_to_guarantee_plus_borrowing_per_profile(dynamic: bool) -> None:
    # 3g.40gb: 2 guaranteed + 1 borrowing = 3. One runs, three wait: the first two pending
    # (oldest first) are admitted, counted as they are, and the third would be the 4th
    plan = _plan(dynamic, "3g.40gb: {guaranteed: 2, borrowingLimit: 1}", running=1, pending=3)
    assert _admitted(plan) == ["team-b/ranker-1", "team-b/ranker-2"], plan.actions
    assert _held(plan) == {
        "team-b/ranker-3": (
            "held: team team-b would hold 4 3g.40gb MIG devices in a100, "
            "over guarantee + borrowing (3)"
        )
    }
    (hold,) = [a for a in plan.actions if isinstance(a, Hold)]
    assert hold.target == "team-b/ranker-3" and hold.code == "held-borrowing"


@pytest.mark.parametrize("dynamic", [False, True], ids=["static-mig", "dynamic-mig"])
def test_within_the_limit_all_are_admitted(dynamic: bool) -> None:
    plan = _plan(dynamic, "3g.40gb: {guaranteed: 2, borrowingLimit: 2}", running=1, pending=3)
    assert len(_admitted(plan)) == 3 and not _held(plan), plan.findings


@pytest.mark.parametrize(
    "allotments",
    [
        pytest.param("3g.40gb: {guaranteed: 2}", id="no-borrowing-limit"),
        pytest.param("1g.10gb: {guaranteed: 0, borrowingLimit: 0}", id="other-profile-limited"),
    ],
)
def test_a_profile_without_a_borrowing_limit_is_not_held(allotments: str) -> None:
    plan = _plan(True, allotments, running=2, pending=3)
    assert len(_admitted(plan)) == 3 and not _held(plan), plan.findings


def test_on_the_device_plugin_a_gated_team_is_held_the_same_way() -> None:
    # gpupool renders no ResourceQuota in the namespaces it gates, so there too its admission
    # is what holds a team to the profile's guarantee + borrowing
    plan = _plan(False, "3g.40gb: {guaranteed: 2, borrowingLimit: 1}", 1, 3, dra=False)
    assert _admitted(plan) == ["team-b/ranker-1", "team-b/ranker-2"], plan.actions
    assert list(_held(plan)) == ["team-b/ranker-3"]


def test_a_borrowing_limit_of_zero_holds_at_the_guarantee() -> None:
    plan = _plan(True, "3g.40gb: {guaranteed: 2, borrowingLimit: 0}", running=2, pending=1)
    assert _admitted(plan) == [] and "over guarantee + borrowing (2)" in str(_held(plan))


def _shared_plan(allotment: str, running: int, pending: int, lender: str = ""):
    """team-b on the device plugin with `running` 1-slice shared pods on four cards shared x4
    (filled in order) and `pending` more, gated; `allotment` its sharedMemory (the pool's
    slices are 20Gi); team-a with the sharedMemory `lender`."""
    text = desired_text(train_min=0).replace(TEAM_B_MIG, f"{TEAM_B_MIG}, sharedMemory: {allotment}")
    text = _lender(text, f"sharedMemory: {lender}" if lender else "")
    cards = [gpu(i, shared=4, model=A100) for i in range(4)]
    pods = [shared_pod("team-b", f"embed-{i}", "n-1", 1, gpu_index=i // 4) for i in range(running)]
    pods += [
        shared_pod("team-b", f"embed-{running + i}", None, 1, pool="a100").model_copy(
            update={"admission": "gpupool"}
        )
        for i in range(pending)
    ]
    observed = snapshot(NOW, [node("n-1", "a100", A100, cards)], pods, **_objects(text))
    plan, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    return plan


def test_shared_slices_are_held_to_guarantee_plus_borrowing() -> None:
    # 20Gi guaranteed + 20Gi borrowing = 2 slices of 20Gi; one runs, so one more is admitted
    plan = _shared_plan("{guaranteed: 20Gi, borrowingLimit: 20Gi}", running=1, pending=2)
    assert _admitted(plan) == ["team-b/embed-1"], plan.actions
    assert _held(plan) == {
        "team-b/embed-2": (
            "held: team team-b would hold 3 shared slices in a100, over guarantee + borrowing (2)"
        )
    }


def test_shared_slices_without_a_borrowing_limit_are_not_held() -> None:
    plan = _shared_plan("{guaranteed: 20Gi}", running=1, pending=2)
    assert len(_admitted(plan)) == 2 and not _held(plan), plan.findings


# --- lendingLimit: a borrower is held when the free room left is other teams' unlent guarantees


def _lending_held(plan) -> dict[str, str]:
    return {f.subject: f.message for f in plan.findings if f.code == "held-lending"}


BACKENDS = [
    pytest.param(False, False, id="device-plugin"),
    pytest.param(False, True, id="dra-static-mig"),
    pytest.param(True, True, id="dra-dynamic-mig"),
]


@pytest.mark.parametrize(("dynamic", "dra"), BACKENDS)
def test_a_borrower_is_held_when_only_the_lenders_unlent_devices_are_left(dynamic, dra) -> None:
    # 8 3g.40gb in the pool (four cards of two; on dynamic MIG two cards hold them and two free
    # cards are what the counters still allow, two each), team-b runs 4 and has no guarantee;
    # team-a's 2 unused guaranteed are not lent: the 3rd pending would leave 1 free, under 2
    plan = _plan(
        dynamic,
        "3g.40gb: {guaranteed: 0}",
        running=4,
        pending=3,
        dra=dra,
        lender="mig: {3g.40gb: {guaranteed: 2, lendingLimit: 0}}",
    )
    assert _admitted(plan) == ["team-b/ranker-4", "team-b/ranker-5"], plan.actions
    assert _lending_held(plan) == {
        "team-b/ranker-6": (
            "held: team team-b would borrow beyond its guarantee in a100, and the free "
            "3g.40gb MIG devices are other teams' guarantees they do not lend (2)"
        )
    }
    (hold,) = [a for a in plan.actions if isinstance(a, Hold)]
    assert hold.target == "team-b/ranker-6" and hold.code == "held-lending"


@pytest.mark.parametrize(("dynamic", "dra"), BACKENDS)
@pytest.mark.parametrize(
    "lender",
    [
        pytest.param("3g.40gb: {guaranteed: 2, lendingLimit: 1}", id="lends-enough"),
        pytest.param("3g.40gb: {guaranteed: 2}", id="lends-all"),
        pytest.param("1g.10gb: {guaranteed: 2, lendingLimit: 0}", id="keeps-another-profile"),
    ],
)
def test_a_borrower_is_admitted_when_the_lender_lends(dynamic, dra, lender) -> None:
    plan = _plan(dynamic, "3g.40gb: {guaranteed: 0}", 4, 3, dra=dra, lender=f"mig: {{{lender}}}")
    assert len(_admitted(plan)) == 3 and not _lending_held(plan), plan.findings


@pytest.mark.parametrize(("dynamic", "dra"), BACKENDS)
def test_within_its_own_guarantee_a_team_is_not_held_by_anothers_lending_limit(
    dynamic, dra
) -> None:
    lender = "mig: {3g.40gb: {guaranteed: 2, lendingLimit: 0}}"
    plan = _plan(dynamic, "3g.40gb: {guaranteed: 7}", 4, 3, dra=dra, lender=lender)
    assert len(_admitted(plan)) == 3 and not _lending_held(plan), plan.findings


def test_the_lenders_own_use_shrinks_what_it_keeps() -> None:
    # team-a runs one of its two guaranteed 3g.40gb: one stays kept, so all three borrow
    text = _text(
        False, "3g.40gb: {guaranteed: 0}", lender="mig: {3g.40gb: {guaranteed: 2, lendingLimit: 0}}"
    )
    cards = [gpu(i, mig=["3g.40gb", "3g.40gb"], model=A100) for i in range(4)]
    pods = [mig_pod("team-a", "own", "n-1", "3g.40gb", gpu_index=3, start=4)]
    pods += [
        mig_pod("team-b", f"r-{i}", "n-1", "3g.40gb", gpu_index=i // 2, start=4 * (i % 2))
        for i in range(4)
    ]
    pods += [
        mig_pod("team-b", f"r-{4 + i}", None, "3g.40gb", pool="a100").model_copy(
            update={"admission": "gpupool"}
        )
        for i in range(3)
    ]
    nodes = [node("n-1", "a100", A100, cards)]
    observed = snapshot(NOW, nodes, pods, **_objects(text))
    observed = observed.model_copy(update={"dra": _static(nodes)})
    plan, _ = plan_with_facts(load([SourceFile("desired.yaml", text)]), observed)
    # 3 free: two admitted leave 1, the one team-a keeps; the third would take it
    assert _admitted(plan) == ["team-b/r-4", "team-b/r-5"], plan.actions
    assert "(1)" in _lending_held(plan)["team-b/r-6"]


def test_shared_slices_are_held_when_only_the_lenders_unlent_slices_are_left() -> None:
    # 16 slices, 12 held by team-b (no guarantee); team-a keeps 40Gi = 2 slices
    plan = _shared_plan("{guaranteed: 0Gi}", 12, 3, lender="{guaranteed: 40Gi, lendingLimit: 0Gi}")
    assert _admitted(plan) == ["team-b/embed-12", "team-b/embed-13"], plan.actions
    assert _lending_held(plan) == {
        "team-b/embed-14": (
            "held: team team-b would borrow beyond its guarantee in a100, and the free "
            "shared slices are other teams' guarantees they do not lend (2)"
        )
    }


def test_shared_slices_are_admitted_when_the_lender_lends() -> None:
    # 30Gi lent of 40Gi: 2 slices rounded up, nothing kept
    plan = _shared_plan("{guaranteed: 0Gi}", 12, 3, lender="{guaranteed: 40Gi, lendingLimit: 30Gi}")
    assert len(_admitted(plan)) == 3 and not _lending_held(plan), plan.findings
