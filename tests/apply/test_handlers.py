"""Table tests of apply's handlers against the in-memory cluster: each row of rows.py is a
starting state and an action, and what must come of it (status, message, writes, the state
after); one test per handler's table, then checks across the tables and the cases a row cannot
express.

The rows are also run against an API server by test_handlers_api.py.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from datetime import datetime, timedelta
from typing import Any

import pytest

from reconciler import conventions as C
from reconciler.apply.handlers import (
    HANDLERS,
    STALE_CHECKPOINT_SECONDS,
    ApplyConfig,
    Context,
    Outcome,
    condition_reason,
)
from reconciler.apply.handlers.base import (
    CACHE_POLL_SECONDS,
    CLAIM_POLL_SECONDS,
    GONE_POLL_SECONDS,
)
from reconciler.apply.port import ApiError
from reconciler.plan.actions import Admit, Hold, PruneDraObject
from tests.apply.memory import MemoryCluster
from tests.apply.rows import (
    ADMIT,
    ADMIT_AFTER,
    ADMIT_ROWS,
    ADMITTED_MSG,
    AGENT_NEW,
    AGENT_OLD,
    CHECKPOINT,
    CHECKPOINT_ROWS,
    CORDON_ROWS,
    DRA_OWN_ROWS,
    DRA_ROWS,
    ENVELOPE_ROWS,
    EVICT_ROWS,
    GRACE,
    GRACE_BY_ID,
    HOLD,
    HOLD_ROWS,
    KUEUE_ROWS,
    LABEL_ROWS,
    LABELLED,
    MIG_CM,
    MIG_NAME,
    MIG_ROWS,
    PARTITION_CHANGE_ROWS,
    PREEMPT,
    PREEMPT_JOB_NOW,
    PRIORITY_CLASS_ROWS,
    PRUNE_ROWS,
    QUOTA_ROWS,
    RESERVED_GANG,
    RESUME_ROWS,
    ROWS,
    SCALE_ROWS,
    SERVER_SIDE_APPLY,
    SHARING_ROWS,
    UNCORDON_ROWS,
    WRITES_CONFIG,
    asked,
    config_marked,
    gang_admitted,
    gated,
    held_cond,
    job,
)
from tests.apply.rows_dra import ADMITS_NEXT_RUN, CLAIM, DRA_ADMIT, DYN_PINNED, PINNED
from tests.apply.rows_dra_own import PLANNED
from tests.apply.table import (
    NODE,
    NOW,
    NS,
    MemoryProbe,
    Pod,
    Row,
    assert_result,
    memory_config,
    run,
    run_memory,
    seed_memory,
)


def params(rows: list[Row]) -> list:
    return [
        pytest.param(
            r,
            id=r.id,
            marks=[pytest.mark.xfail(strict=True, reason=f"BUG: {r.bug}")] if r.bug else [],
        )
        for r in rows
    ]


def check_row(row: Row) -> None:
    got, cluster = run_memory(row)
    assert_result(row, got)
    if row.check is not None:
        row.check(MemoryProbe(cluster, NS, memory_config()))


CHECKED: set[str] = set()
"""The ids of the rows a test below runs through `check_row` (see test_every_row_is_checked)."""


def table(rows: list[Row]) -> pytest.MarkDecorator:
    """Parametrize a handler's test with its table's rows, and count them as checked."""
    CHECKED.update(r.id for r in rows)
    return pytest.mark.parametrize("row", params(rows))


# ---------------------------------------------------------------------- one test per handler
@table(CORDON_ROWS)
def test_cordon(row: Row):
    check_row(row)


@table(UNCORDON_ROWS)
def test_uncordon(row: Row):
    check_row(row)


@table(PARTITION_CHANGE_ROWS)
def test_partition_change(row: Row):
    check_row(row)


@table(LABEL_ROWS)
def test_label_node(row: Row):
    check_row(row)


@table(MIG_ROWS)
def test_mig_reconfigure(row: Row):
    check_row(row)


@table(SHARING_ROWS)
def test_set_sharing(row: Row):
    check_row(row)


@table(CHECKPOINT_ROWS)
def test_checkpoint(row: Row):
    check_row(row)


@table(EVICT_ROWS)
def test_evict(row: Row):
    check_row(row)


@table(RESUME_ROWS)
def test_resume(row: Row):
    check_row(row)


@table(SCALE_ROWS)
def test_scale(row: Row):
    check_row(row)


@table(ENVELOPE_ROWS)
def test_scale_envelope(row: Row):
    check_row(row)


@table(ADMIT_ROWS)
def test_admit(row: Row):
    check_row(row)


@table(HOLD_ROWS)
def test_hold(row: Row):
    check_row(row)


@table(QUOTA_ROWS)
def test_quota(row: Row):
    check_row(row)


@table(PRIORITY_CLASS_ROWS)
def test_priority_class(row: Row):
    check_row(row)


@table(PRUNE_ROWS)
def test_prune(row: Row):
    check_row(row)


@table(KUEUE_ROWS)
def test_kueue(row: Row):
    check_row(row)


@table(DRA_ROWS)
def test_dra(row: Row):
    check_row(row)


@table(DRA_OWN_ROWS)
def test_dra_own(row: Row):
    check_row(row)


# ---------------------------------------------------------------------- across the tables
@pytest.mark.parametrize(
    "row",
    params(
        [
            r
            for r in ROWS.values()
            if r.writes
            and not r.fail
            and not r.bug
            and not isinstance(r.action, SERVER_SIDE_APPLY)
            and r.id not in ADMITS_NEXT_RUN
        ]
    ),
)
def test_second_apply_writes_nothing(row: Row):
    """Level-triggered: run again on the state the first run left, a handler writes nothing."""
    _, cluster = run_memory(row)
    before = len(cluster.writes)
    second = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert second.status != "error", second.message
    assert cluster.write_ops()[before:] == []
    assert not second.changed


def _admit_after(victim: Pod, cfg: ApplyConfig, gone_after: int | None) -> tuple[Outcome, int]:
    """ADMIT_AFTER on the reserved gang with `victim` the pod it frees cards from; the victim
    is gone after `gone_after` waits of the step (None: never). -> the outcome, the waits."""
    cluster = seed_memory(
        dataclasses.replace(ROWS["admit/after-pod-gone"], seed=(*RESERVED_GANG, victim))
    )
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == gone_after:
            del cluster.pods[(NS, victim.name)]

    ctx = Context(cluster, cfg, clock=lambda: NOW, sleep=sleep, wall=lambda: NOW)
    return HANDLERS[Admit](ADMIT_AFTER, ctx), len(waits)


def test_admit_waits_a_moment_for_a_pod_going_now():
    """A pod whose deletion was asked for a moment ago is read again within the step: once it
    is gone the gang is admitted then, not a cycle later."""
    going = Pod("victim", deleting=True, delete_asked=NOW - timedelta(seconds=0.2))
    out, waits = _admit_after(going, memory_config(), gone_after=3)
    assert (out.status, waits) == ("done", 3), out.message
    assert ADMITTED_MSG in out.message


def test_admit_waits_for_a_going_pod_at_most_gone_wait_seconds():
    """A pod still there after `gone_wait_seconds` leaves the step waiting, as without the
    wait; `gone_wait_seconds` 0 never waits."""
    going = Pod("victim", deleting=True, delete_asked=NOW)
    out, waits = _admit_after(going, memory_config(), gone_after=None)
    assert out.status == "waiting" and waits == round(0.1 / GONE_POLL_SECONDS), out.message
    assert "victim (terminating) to be gone" in out.message
    off = dataclasses.replace(memory_config(), gone_wait_seconds=0)
    out, waits = _admit_after(going, off, gone_after=1)
    assert (out.status, waits) == ("waiting", 0), out.message


@pytest.mark.parametrize(
    "victim",
    [
        # terminating for longer than GONE_WAIT_RECENT_SECONDS: a graceful stop under way
        Pod("victim", deleting=True, delete_asked=NOW - timedelta(seconds=5)),
        # when its deletion was asked for is not on record
        Pod("victim", deleting=True),
        # not evicted yet: nothing takes it away
        Pod("victim"),
    ],
    ids=["terminating-a-while", "asked-unknown", "not-evicted"],
)
def test_admit_does_not_wait_for_a_pod_not_going_now(victim: Pod):
    out, waits = _admit_after(victim, memory_config(), gone_after=1)
    assert (out.status, waits) == ("waiting", 0), out.message


VICTIM_CLAIM = ("ResourceClaim", NS, "victim-gpu")


ALLOCATED = {"allocation": {"devices": {"results": [{"device": "gpu-0"}]}}}


def _admit_after_claim(
    victim: Pod | None,
    gone_after: int | None,
    freed_after: int | None,
    status: dict | None = ALLOCATED,
    cached: bool = False,
) -> tuple[Outcome, int, list[str]]:
    """ADMIT_AFTER with the victim's ResourceClaim (`after_claims`; `status` its status, None:
    no such claim): the victim (None: gone already) is gone after `gone_after` waits, the claim
    deallocated after `freed_after` (None: never); `cached`: a watch cache that holds what
    the server holds. -> the outcome, the waits, the reads of the claim."""
    seed = (*RESERVED_GANG, victim) if victim is not None else RESERVED_GANG
    cluster = seed_memory(dataclasses.replace(ROWS["admit/after-pod-gone"], seed=seed))
    if status is not None:
        cluster.dra[VICTIM_CLAIM] = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": VICTIM_CLAIM[2], "namespace": NS},
            "status": copy.deepcopy(status),
        }
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == gone_after and victim is not None:
            del cluster.pods[(NS, victim.name)]
        if len(waits) == freed_after:
            cluster.dra[VICTIM_CLAIM]["status"] = {"reservedFor": []}

    if cached:
        cluster.dra_cache = cluster.dra  # the watch delivers each change at once
    ctx = Context(cluster, memory_config(), clock=lambda: NOW, sleep=sleep, wall=lambda: NOW)
    action = ADMIT_AFTER.model_copy(update={"after_claims": (f"{NS}/{VICTIM_CLAIM[2]}",)})
    out = HANDLERS[Admit](action, ctx)
    reads = [c.args["name"] for c in cluster.calls if c.op == "read_dra_object"]
    return out, len(waits), reads


def test_admit_on_dra_waits_for_the_claims_of_the_pods_gone():
    """Issue 32: the pod terminating on the planned cards goes, then Kubernetes deallocates its
    claim a moment later; the step admits once both are so (its claim is not read while the
    pod is still there). Deleted counts as deallocated."""
    going = Pod("victim", deleting=True, delete_asked=NOW - timedelta(seconds=0.2))
    out, waits, reads = _admit_after_claim(going, gone_after=2, freed_after=4)
    assert (out.status, waits) == ("done", 4), out.message
    assert reads == [VICTIM_CLAIM[2]] * 3  # after the pod went: waits 2, 3, 4
    out, waits, _ = _admit_after_claim(None, gone_after=None, freed_after=None)
    # the claims read every CLAIM_POLL_SECONDS, within the same 0.1 s
    assert out.status == "waiting" and waits == math.ceil(0.1 / CLAIM_POLL_SECONDS), out.message
    assert (
        f"ResourceClaim {NS}/{VICTIM_CLAIM[2]} (still allocated) to be deallocated" in out.message
    )
    assert "allocator still counts its devices" in out.message


def test_admit_on_dra_looks_for_the_claims_deallocation_in_the_watch_cache():
    """Issue 32: with a watch cache that holds the departing pod's claim, the step looks at
    the cache's copy every CACHE_POLL_SECONDS (no request) until it shows the claim
    deallocated; a claim the cache does not hold (deleted) is read."""
    going = Pod("victim", deleting=True, delete_asked=NOW - timedelta(seconds=0.2))
    out, waits, reads = _admit_after_claim(going, gone_after=2, freed_after=4, cached=True)
    assert (out.status, waits, reads) == ("done", 4, []), out.message
    out, waits, reads = _admit_after_claim(None, None, None, cached=True)
    assert out.status == "waiting" and waits == math.ceil(0.1 / CACHE_POLL_SECONDS), out.message
    assert reads == []
    out, waits, reads = _admit_after_claim(None, None, None, None, cached=True)
    assert (out.status, waits, reads) == ("done", 0, [VICTIM_CLAIM[2]]), out.message


@pytest.mark.parametrize("status", [{"reservedFor": []}, None], ids=["deallocated", "deleted"])
def test_admit_on_dra_does_not_wait_for_a_claim_released_or_gone(status: dict | None):
    out, waits, reads = _admit_after_claim(None, None, None, status)
    assert (out.status, waits, reads) == ("done", 0, [VICTIM_CLAIM[2]]), out.message


def _dra_admit_after(
    gone_after: int | None,
    asked: float = 0.2,
    rid: str = "dra-admit/claim-replaced-then-admitted",
    cluster: Any = None,
) -> tuple[Outcome, list[str], list[str]]:
    """Row `rid`'s DRA admission (the claim-replaced one: pinning), waiting for a victim whose
    deletion was asked for `asked` s ago, gone after `gone_after` waits (None: never), on
    `cluster` (None: the row's, seeded with the victim). -> the outcome, the writes before the
    first wait (all of them if it never waits), the writes after it."""
    row = ROWS[rid]
    going = Pod("victim", deleting=True, delete_asked=NOW - timedelta(seconds=asked))
    cluster = cluster or seed_memory(dataclasses.replace(row, seed=(*row.seed, going)))
    done = len(cluster.write_ops())
    waits: list[int] = []

    def sleep(seconds: float) -> None:
        waits.append(len(cluster.write_ops()))
        if len(waits) == gone_after:
            cluster.pods.pop((NS, "victim"), None)

    ctx = Context(cluster, memory_config(), clock=lambda: NOW, sleep=sleep, wall=lambda: NOW)
    action = row.action.model_copy(update={"after": (f"{NS}/victim",)})
    out = HANDLERS[Admit](action, ctx)
    ops = cluster.write_ops()
    first = waits[0] if waits else len(ops)
    return out, ops[done:first], ops[first:]


def test_dra_admit_pins_its_claims_while_the_pods_it_waits_for_go():
    """Issue 32: a DRA admission onto cards a pod going now still holds writes its pinned
    claims (selectors only: nothing is allocated) before it waits, so only the gate's release
    is left once the pod is gone; if it is not gone in time, the claims stay pinned (a later
    run with the same plan writes them no more: the row `dra-admit/claim-pinned-already`)."""
    out, before, after = _dra_admit_after(gone_after=2)
    assert out.status == "done", out.message
    assert before == ["create_dra_object", "set_pod_claim"]
    assert after == ["admit_pod", "delete_dra_object"]
    out, before, after = _dra_admit_after(gone_after=None)
    assert out.status == "waiting" and before == ["create_dra_object", "set_pod_claim"]
    assert after == ["annotate_pod"]  # the reservation, as any admission that waits
    # a pod terminating for seconds already (a graceful stop): no wait, no claims written (the
    # template's and the pinned claim would both count against the quota meanwhile)
    out, before, after = _dra_admit_after(gone_after=None, asked=5)
    assert (out.status, before, after) == ("waiting", ["annotate_pod"], []), out.message


def test_dra_admit_by_allocation_marks_its_claim_while_the_pods_it_waits_for_go():
    """Issue 32: by allocation (`refs`), the pod's own claim gets the plan and Kubernetes'
    finalizer before the step waits for the pod going now on its cards, so once that pod is
    gone only the allocation and the gate are left; never the allocation before (its devices
    are the going pod's until then). Not gone in time: the claim stays marked, unallocated,
    and the next run with the same plan allocates it without marking it again. No wait (a
    graceful stop under way): nothing written ahead."""
    rid = "dra-own/allocated-then-admitted"
    out, before, after = _dra_admit_after(gone_after=2, rid=rid)
    assert out.status == "done", out.message
    assert (before, after) == (["patch_dra_object"], ["replace_dra_status", "admit_pod"])
    row = ROWS[rid]
    going = Pod("victim", deleting=True, delete_asked=NOW - timedelta(seconds=0.2))
    cluster = seed_memory(dataclasses.replace(row, seed=(*row.seed, going)))
    out, before, after = _dra_admit_after(gone_after=None, rid=rid, cluster=cluster)
    assert out.status == "waiting" and before == ["patch_dra_object"], out.message
    assert after == ["annotate_pod"]  # the reservation, as any admission that waits
    claim = cluster.dra[("ResourceClaim", NS, CLAIM)]
    assert claim["metadata"]["annotations"][C.DRA_PLANNED_ANN] == PLANNED
    assert C.DRA_DELETE_PROTECTION in claim["metadata"]["finalizers"]
    assert not (claim.get("status") or {}).get("allocation")
    out, before, after = _dra_admit_after(gone_after=1, rid=rid, cluster=cluster)
    assert out.status == "done", out.message
    assert (before, after) == ([], ["replace_dra_status", "admit_pod"])
    out, before, after = _dra_admit_after(gone_after=None, asked=5, rid=rid)
    assert (out.status, before, after) == ("waiting", ["annotate_pod"], []), out.message


def _admit_unnamed(created: datetime, named_after: int | None) -> tuple[Outcome, int, list]:
    """The by-allocation row's admission of a pod whose status does not name its claim yet,
    created at `created`; Kubernetes names it after `named_after` waits of the step (None:
    never). -> the outcome, the waits, the writes."""
    row = ROWS["dra-own/allocated-then-admitted"]
    cluster = seed_memory(row)
    pod = cluster.pods[(NS, "p-0")]
    pod.claims, pod.created = [("gpus", "")], created
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == named_after:
            pod.claims = [("gpus", CLAIM)]

    ctx = Context(cluster, memory_config(), clock=lambda: NOW, sleep=sleep, wall=lambda: NOW)
    return HANDLERS[Admit](row.action, ctx), len(waits), cluster.write_ops()


def test_admit_on_dra_looks_for_a_new_pods_claim_in_the_watch_cache():
    """Issue 32: with a watch cache that holds the pod, the step looks for its claim's name
    in the cache's copy every CACHE_POLL_SECONDS (no request: the name comes with the
    watch), and writes the claim once it is there."""
    row = ROWS["dra-own/allocated-then-admitted"]
    cluster = seed_memory(row)
    pod = cluster.pods[(NS, "p-0")]
    pod.claims, pod.created = [("gpus", "")], NOW
    cluster.cache_pods()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 3:  # kube-controller-manager names it; the watch delivers it
            pod.claims = [("gpus", CLAIM)]
            cluster.cache_pods()

    ctx = Context(cluster, memory_config(), clock=lambda: NOW, sleep=sleep, wall=lambda: NOW)
    out = HANDLERS[Admit](row.action, ctx)
    assert (out.status, waits) == ("done", [CACHE_POLL_SECONDS] * 3), out.message
    assert cluster.write_ops() == ["patch_dra_object", "replace_dra_status", "admit_pod"]
    assert [c for c in cluster.calls if c.op == "read_pod"] == []


def test_admit_on_dra_waits_a_moment_for_the_claims_of_a_pod_just_created():
    """Issue 32: Kubernetes' resourceclaim controller names a new pod's claim in its status
    tens of ms after the pod's creation, which a fast cycle can beat; the step reads the pod
    again every GONE_POLL_SECONDS, within `gone_wait_seconds`, and writes its claim once it is
    named, not a cycle later. Not named in time, or a pod created seconds ago: `waiting`, as
    without the wait, nothing written."""
    out, waits, writes = _admit_unnamed(NOW, named_after=2)
    assert (out.status, waits) == ("done", 2), out.message
    assert writes == ["patch_dra_object", "replace_dra_status", "admit_pod"]
    out, waits, writes = _admit_unnamed(NOW, named_after=None)
    assert out.status == "waiting" and "claim gpus is not made yet" in out.message
    assert (waits, writes) == (round(0.1 / GONE_POLL_SECONDS), [])
    out, waits, writes = _admit_unnamed(NOW - timedelta(seconds=5), named_after=1)
    assert (out.status, waits, writes) == ("waiting", 0, []), out.message


def test_dra_gone_claim_admits_on_the_next_run():
    """A claim made again pinned (its predecessor gone) waits a run; the next run admits the
    pod on it without writing a claim, and the one after writes nothing."""
    for rid in sorted(ADMITS_NEXT_RUN):
        row = ROWS[rid]
        _, cluster = run_memory(row)
        before = len(cluster.writes)
        second = run(row, cluster, memory_config(), writes=cluster.write_ops)
        assert second.status == "done", second.message
        assert cluster.write_ops()[before:] == ["admit_pod"]
        third = run(row, cluster, memory_config(), writes=cluster.write_ops)
        assert third.status == "done" and not third.changed


def test_dra_leftover_claim_deleted_after_the_gate_next_run():
    """A run that named the pinned claim and stopped before the gate went (the admission
    patch failed) leaves the template's claim; the next run finds it through the pinned
    claim's `gpupool.io/replaces-claims`, admits, then deletes it; the run after writes
    nothing."""
    row = ROWS[REPLACED]
    cluster = seed_memory(row)
    cluster.fail["admit_pod"] = ApiError(500, "Internal Server Error", "etcd")
    first = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert first.status == "error"
    assert cluster.write_ops() == ["create_dra_object", "set_pod_claim"]
    assert cluster.dra.get(("ResourceClaim", NS, CLAIM)) is not None
    cluster.fail.clear()
    before = len(cluster.writes)
    second = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert second.status == "done", second.message
    assert cluster.write_ops()[before:] == ["admit_pod", "delete_dra_object"]
    assert cluster.dra.get(("ResourceClaim", NS, CLAIM)) is None
    pod = cluster.read_pod(NS, "p-0")
    assert pod is not None and pod.claims == (("gpus", PINNED),) and pod.gates == ()
    third = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert third.status == "done" and not third.changed


def _sweep(name: str = CLAIM) -> PruneDraObject:
    return PruneDraObject(
        id=f"prune-dra:ResourceClaim:{NS}/{name}",
        target=f"{NS}/{name}",
        reason=f"replaced by {PINNED}",
        object_kind="ResourceClaim",
        namespace=NS,
        name=name,
    )


def _run_sweep(cluster):
    return run(ROWS[REPLACED], cluster, memory_config(), _sweep(), writes=cluster.write_ops)


def test_dra_leftover_claim_swept():
    """The claim whose delete failed after the gate went (row `delete-fails-after-gate`) is
    deleted by the sweep's PruneDraObject (planned by plan/objects/dra_objects.py): it is
    unallocated, unreserved, and its pod's status names the pinned claim. Again: gone."""
    _, cluster = run_memory(ROWS["dra-admit/delete-fails-after-gate"])
    cluster.fail.clear()
    before = len(cluster.writes)
    got = _run_sweep(cluster)
    assert (got.status, got.changed) == ("done", True), got.message
    assert cluster.write_ops()[before:] == ["delete_dra_object"]
    assert cluster.dra.get(("ResourceClaim", NS, CLAIM)) is None
    again = _run_sweep(cluster)
    assert (again.status, again.changed, again.message) == ("done", False, "already gone")


def test_dra_sweep_keeps_a_claim_its_pod_names_or_that_is_allocated():
    """The sweep's delete re-reads the claim: one its owning pod's status names again, or one
    allocated or reserved since the plan, is left alone (nothing written)."""
    _, cluster = run_memory(ROWS["dra-admit/delete-fails-after-gate"])
    cluster.fail.clear()
    cluster.set_pod_claim(NS, "p-0", "gpus", CLAIM)
    before = len(cluster.writes)
    named = _run_sweep(cluster)
    assert named.status == "skipped" and "names it" in named.message, named.message
    cluster.set_pod_claim(NS, "p-0", "gpus", PINNED)
    obj = cluster.dra[("ResourceClaim", NS, CLAIM)]
    obj["status"] = {"reservedFor": [{"resource": "pods", "name": "x", "uid": "u"}]}
    held = _run_sweep(cluster)
    assert held.status == "skipped" and "allocated or reserved" in held.message, held.message
    assert "delete_dra_object" not in cluster.write_ops()[before:]
    assert cluster.dra.get(("ResourceClaim", NS, CLAIM)) is not None


REPLACED = "dra-admit/claim-replaced-then-admitted"
GONE = "dra-admit/claim-gone-made-from-the-template"


def _reads(cluster) -> list[str]:
    return [c.op for c in cluster.calls if c.op in ("read_dra_object", "dra_manager")]


def test_dra_admit_takes_claim_and_class_from_the_watch_cache():
    """With the watch cache holding the template's claim and gpupool's DeviceClass, exact
    admission reads neither from the server: the same writes, the same pinned claim."""
    row = ROWS[REPLACED]
    cluster = seed_memory(row)
    cluster.dra_cache = copy.deepcopy(cluster.dra)
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert_result(row, got)
    row.check(MemoryProbe(cluster, NS, memory_config()))  # type: ignore[misc]
    assert _reads(cluster) == []


def test_dra_admit_stale_cached_claim_admits_on_the_pinned_claim():
    """The cache still holds the template's claim, which someone deleted: the pinned claim is
    made and named, the gate goes, and the delete after it answers 404; the pod's status,
    read again, names the pinned claim: nothing lost, the Admit is done."""
    cluster = seed_memory(ROWS[GONE])
    held = seed_memory(ROWS[REPLACED]).dra
    cluster.dra_cache = copy.deepcopy(held)
    got = run(ROWS[GONE], cluster, memory_config(), writes=cluster.write_ops)
    assert got.status == "done" and got.message == "admitted 1 pod(s): p-0 -> node-a", got
    assert cluster.write_ops() == ["create_dra_object", "set_pod_claim", "admit_pod"]
    pod = cluster.read_pod(NS, "p-0")
    assert pod is not None and pod.claims == (("gpus", PINNED),) and pod.gates == ()


def test_dra_admit_replaced_gone_and_the_status_names_another_claim():
    """The 404 after the gate, and the pod's status names a claim the resourceclaim
    controller made from the template for the same gap (its status write landed after
    gpupool's): the gate cannot come back; the outcome says the allocation may not be the
    plan."""
    cluster = seed_memory(ROWS[REPLACED])
    deleted = cluster.delete_dra_object

    def delete(kind: str, namespace: str, name: str) -> None:
        deleted(kind, namespace, name)
        cluster.set_pod_claim(NS, "p-0", "gpus", "p-0-gpus-zzzzz")
        raise ApiError(404, "Not Found", name)

    cluster.delete_dra_object = delete  # type: ignore[method-assign]
    got = run(ROWS[REPLACED], cluster, memory_config(), writes=cluster.write_ops)
    assert got.status == "done", got
    assert (
        f"claim {CLAIM} was gone before its delete and the pod's status names p-0-gpus-zzzzz, "
        f"not the pinned {PINNED}: its allocation may not be the plan"
    ) in got.message


def test_dra_admit_reads_a_pinned_claim_from_the_server():
    """A pinned claim (gpupool's annotation) in the cache is not trusted to be there: read
    from the server, found gone, made again from the template; the gate waits a run."""
    row = ROWS[GONE]
    cluster = seed_memory(row)
    held = copy.deepcopy(seed_memory(ROWS[REPLACED]).dra)
    claim = held[("ResourceClaim", NS, CLAIM)]
    claim["metadata"].setdefault("annotations", {})[C.DRA_PLANNED_ANN] = "GPU-a,GPU-b"
    cluster.dra_cache = held
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert_result(row, got)
    assert "read_dra_object" in _reads(cluster)


def test_dra_admit_dynamic_allocation_through_the_watch_cache():
    """DynamicMIG with the watch cache holding the template's claim and gpupool's MIG class:
    the class's profile and the claim come from the cache; the one server read is the
    allocation write's, of the pinned claim it just made (by its own name)."""
    row = ROWS["dra-admit/dynamic-partition-allocated-by-name"]
    cluster = seed_memory(row)
    cluster.dra_cache = copy.deepcopy(cluster.dra)
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert_result(row, got)
    row.check(MemoryProbe(cluster, NS, memory_config()))  # type: ignore[misc]
    assert _reads(cluster) == ["read_dra_object"]
    (read,) = [c for c in cluster.calls if c.op == "read_dra_object"]
    assert read.args["name"] == DYN_PINNED


def test_dra_admit_dynamic_claim_gone_before_its_allocation_keeps_the_gate():
    """The pinned claim made this run is gone when its allocation is about to be written
    (deleted by someone in between): no allocation, the gate stays, the Admit waits."""
    row = ROWS["dra-admit/dynamic-partition-allocated-by-name"]
    cluster = seed_memory(row)
    server_read = cluster.read_dra_object

    def read(kind: str, namespace: str, name: str):
        return None if name == DYN_PINNED else server_read(kind, namespace, name)

    cluster.read_dra_object = read  # type: ignore[method-assign]
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert got.status == "waiting" and "went before its allocation" in got.message, got
    pod = MemoryProbe(cluster, NS, memory_config()).pod("p-0")
    assert pod is not None and pod.gates != ()


def test_every_row_is_checked():
    """Every row of every table is run by its handler's test above, its outcome and `check`
    asserted (ENVELOPE_ROWS sat in TABLES with no test: only the second-run test ran two of
    them, and it asserts nothing of the first run)."""
    assert sorted(set(ROWS) - CHECKED) == []


def test_mig_reconfigure_through_mig_manager():
    """free -> config written, then (once mounted copies have it) the label -> pending ->
    success, agent publishes -> done; written once, labelled once."""
    row = ROWS["mig/free"]
    _, cluster = run_memory(row)
    cluster.set_node_state(NODE, {"status": {"gpus": list(AGENT_OLD.gpus)}})
    cfg = memory_config()

    def step(after: float) -> str:
        later = dataclasses.replace(row, now=NOW + timedelta(seconds=after))
        got = run(later, cluster, cfg, writes=cluster.write_ops)
        return f"{got.status}: {got.message}"

    assert step(cfg.config_propagation_seconds - 1).endswith(
        "1s before " + f"{C.MIG_CONFIG_LABEL} may name it"
    )
    assert step(cfg.config_propagation_seconds + 1) == f"waiting: {LABELLED}"
    assert cluster.write_ops() == ["write_config_map", "patch_node", "patch_node"]
    for state in ("pending", "success"):
        cluster.nodes[NODE].labels[C.MIG_STATE_LABEL] = state
        assert step(200).startswith(
            "waiting"
        )  # success: the node agent has not published the new layout yet
    cluster.set_node_state(NODE, {"status": {"gpus": list(AGENT_NEW.gpus)}})
    assert step(300) == f"done: mig-manager applied {MIG_NAME}"
    assert cluster.write_ops() == ["write_config_map", "patch_node", "patch_node"]


def test_two_nodes_share_one_mig_config_entry_without_losing_either_write():
    """Another writer edits the ConfigMap between our read and write: 409; the retry keeps both."""
    row = ROWS["mig/keeps-other-entries"]
    cluster = seed_memory(row)

    def other_writer():
        cluster.after.clear()
        cm = cluster.config_maps[(NS, MIG_CM)]
        cluster.add_config_map(NS, MIG_CM, {**cm.body["data"], "note": "someone else"})

    cluster.after["read_config_map"] = other_writer
    first = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert (first.status, first.message.split()[0]) == ("error", "409")
    assert cluster.write_ops() == []
    second = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert second.status == "waiting" and cluster.write_ops() == ["write_config_map", "patch_node"]
    assert cluster.config_maps[(NS, MIG_CM)].body["data"]["note"] == "someone else"
    config_marked("gpupool-000000000000")(MemoryProbe(cluster, NS, memory_config()))


def test_scale_is_guarded_by_the_version_it_read():
    row = ROWS["scale/up"]
    cluster = seed_memory(row)
    rv = cluster.workload("Deployment", NS, "serve")["resource_version"]

    def hpa_scales():  # someone else writes the Deployment between our read and our patch
        cluster.after.clear()
        cluster.add_workload("Deployment", NS, "serve", replicas=2, annotations={"touched": "yes"})

    cluster.after["read_workload"] = hpa_scales
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert got.status == "error" and got.message.startswith("409")
    assert [c.args["resource_version"] for c in cluster.calls if c.op == "scale_workload"] == [rv]
    assert cluster.workload("Deployment", NS, "serve")["replicas"] == 2


def test_a_step_that_wrote_says_so():
    got, cluster = run_memory(ROWS["mig/free"])
    assert cluster.write_ops() == list(WRITES_CONFIG)
    assert got.changed


def test_terminating_pod_is_removed_when_the_kubelet_finishes():
    row = ROWS["evict/no-checkpoint"]
    _, cluster = run_memory(row)
    assert cluster.pods[(NS, "job")].deleting and cluster.evictions == [f"{NS}/job"]
    assert cluster.finish_deletion(NS, "job")
    assert run(row, cluster, memory_config(), writes=cluster.write_ops).message == "pod is gone"


def test_renewed_checkpoint_request_is_not_satisfied_by_an_old_checkpoint_done():
    """A stale request is asked again "and the grace waited again" (handlers.checkpoint): an old
    `checkpoint-done` answer to the abandoned request must not count for the new one."""
    stale = asked(GRACE + STALE_CHECKPOINT_SECONDS + 60, **{C.CHECKPOINT_DONE_ANN: "true"})
    cluster = seed_memory(Row("x", CHECKPOINT, (job(annotations=stale),)))
    ck = run(Row("x", CHECKPOINT), cluster, memory_config(), writes=cluster.write_ops)
    assert ck.message == "checkpoint requested"
    ev = run(
        Row("y", PREEMPT, grace=GRACE_BY_ID), cluster, memory_config(), writes=cluster.write_ops
    )
    assert ev.status == "waiting", ev.message


def test_condition_reasons_are_camel_case():
    assert condition_reason("held-cap") == "HeldCap"
    assert condition_reason("held-training-max") == "HeldTrainingMax"
    assert condition_reason("no-pool") == "NoPool"


def test_admission_waits_for_the_evicted_pod_then_admits_the_gang():
    """Reservation first (while the victim still runs), then waiting while it terminates, then
    the admission once the kubelet has let it go; each write once."""
    row = ROWS["admit/after-pod-running"]
    _, cluster = run_memory(row)
    assert cluster.write_ops() == ["annotate_pod", "annotate_pod"]
    cluster.evict_pod(NS, "victim")
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert (got.status, got.changed) == ("waiting", False)
    assert "(terminating)" in got.message
    assert cluster.finish_deletion(NS, "victim")
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert (got.status, got.message, got.changed) == ("done", ADMITTED_MSG, True)
    assert cluster.write_ops()[2:] == ["evict_pod", "admit_pod", "admit_pod"]
    gang_admitted(MemoryProbe(cluster, NS, memory_config()))


def test_an_ungated_pod_is_refused_affinity_as_the_server_does():
    cluster = seed_memory(Row("x", ADMIT, (Pod("p-0", node=None),)))
    with pytest.raises(ApiError) as exc:
        cluster.admit_pod(NS, "p-0", node="node-a", annotations={C.ADMITTED_ANN: "node-a"})
    assert exc.value.status == 422
    assert cluster.pods[(NS, "p-0")].annotations == {}


@pytest.mark.parametrize(
    ("row_id", "stopped"),
    [
        ("evict/no-checkpoint", True),
        ("move/reserves-the-jobs-next-pod", True),
        ("suspend/suspends-the-job", True),
        ("suspend/already-suspended-by-gpupool", True),
        ("suspend/job-gone", True),
        ("evict/pdb", False),
        ("evict/gone-at-eviction", False),
        ("suspend/suspended-by-someone-else", False),
        ("suspend/job-gone-pdb", False),
        ("suspend/pod-gone", False),
        ("suspend/grace-left", False),
        ("resume/ours", False),
    ],
)
def test_an_outcome_says_whether_gpupool_stopped_the_pod(row_id: str, stopped: bool):
    """`Outcome.stopped`: the write-ahead budget entry of `before_preempt` should stay (the pod
    was evicted, or its Job is suspended by gpupool), or be taken back."""
    got, _ = run_memory(ROWS[row_id])
    assert got.stopped is stopped, got.message


def test_a_suspension_is_written_once_and_counted_once_per_run():
    """Level-triggered: the second run finds the Job suspended by gpupool and writes nothing;
    each run that reaches the stop records it once (the pod still runs: no Job controller here)."""
    row = ROWS["suspend/suspends-the-job"]
    first, cluster = run_memory(row)
    second = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert cluster.write_ops() == ["set_job_suspend"]
    assert (first.budget, second.budget) == ([PREEMPT_JOB_NOW.id], [PREEMPT_JOB_NOW.id])
    assert (second.status, second.changed) == ("done", False)
    assert second.message.startswith(f"Job train already suspended by gpupool at {NOW.isoformat()}")
    cluster.pods[(NS, "job")].deleting = True  # the Job controller deletes it
    third = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert (third.message, third.budget) == ("pod is terminating", [])


def test_dra_admit_makes_the_scheduler_s_writes_in_its_own():
    """The pinned claim is made with the finalizer kube-scheduler would add before writing its
    allocation, and the pod's status names the plan's node as `nominatedNodeName` in the same
    patch that names the claim: the scheduler's PreBind then writes the claim's status alone."""
    row = ROWS[REPLACED]
    cluster = seed_memory(row)
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert got.status == "done", got.message
    made = cluster.dra[("ResourceClaim", NS, PINNED)]
    assert made["metadata"]["finalizers"] == [C.DRA_DELETE_PROTECTION]
    named = next(c for c in cluster.calls if c.op == "set_pod_claim")
    assert named.args["node"] == DRA_ADMIT.pods[0].node
    pod = cluster.read_pod(NS, "p-0")
    assert pod is not None and pod.nominated == DRA_ADMIT.pods[0].node


def _hold_nominated(others: tuple[str, ...], held_already: bool) -> tuple[Outcome, Any]:
    """HOLD on a gated pod (`others`: other systems' gates beside gpupool's) whose status names
    a node. -> the outcome, the cluster."""
    conditions = (held_cond(),) if held_already else ()
    row = dataclasses.replace(
        ROWS["hold/set"], seed=(gated("p-0", *others, conditions=conditions),)
    )
    cluster = seed_memory(row)
    cluster.pods[(NS, "p-0")].nominated = "node-a"
    return HANDLERS[Hold](HOLD, Context(cluster, memory_config(), clock=lambda: NOW)), cluster


@pytest.mark.parametrize("held_already", [False, True])
def test_hold_takes_back_a_node_named_for_an_admission_that_did_not_go(held_already: bool):
    """A pod only gpupool's gate holds, whose status names a node (exact admission on DRA wrote
    it and the gate stayed): the Hold removes it in its condition's patch, also when the
    condition says so already."""
    got, cluster = _hold_nominated((), held_already)
    assert (got.status, got.changed) == ("done", True), got.message
    write = next(c for c in cluster.calls if c.op == "set_pod_condition")
    assert write.args["clear_nominated"] is True
    pod = cluster.read_pod(NS, "p-0")
    assert pod is not None and pod.nominated == ""


def test_hold_leaves_the_node_of_a_pod_another_gate_holds():
    got, cluster = _hold_nominated(("example.com/other",), held_already=True)
    assert (got.status, got.changed) == ("done", False), got.message
    pod = cluster.read_pod(NS, "p-0")
    assert pod is not None and pod.nominated == "node-a"


# ---------------------------------------------------------------------- pods from the watch cache
def _errors(f: ApiError | list[ApiError]) -> list[ApiError]:
    return f if isinstance(f, list) else [f]


def _without_conflicts(rows: list[Row]) -> list:
    """The rows none of whose failures is a 409 (on a cache, a 409 is the copy's lag)."""
    return params(
        [r for r in rows if not any(e.status == 409 for f in r.fail.values() for e in _errors(f))]
    )


def _as_on_reads(row: Row) -> tuple[Any, MemoryCluster]:
    """The row's step on a watch cache as current as the server (`cache_pods`): it ends as
    on reads, with the same writes. -> its result and the cluster, calls recorded."""
    on_reads, _ = run_memory(row)
    cluster = seed_memory(row)
    cluster.cache_pods()
    got = run(row, cluster, memory_config(), writes=cluster.write_ops)
    assert (got.status, got.message, got.writes) == (
        on_reads.status,
        on_reads.message,
        on_reads.writes,
    )
    return got, cluster


@pytest.mark.parametrize("row", _without_conflicts([*ADMIT_ROWS, *DRA_OWN_ROWS]))
def test_admit_on_the_watch_caches_pods_as_on_reads(row: Row):
    """An Admit step takes its pods from the watch cache the cycle observed through
    (`peek_pod`) instead of reading them: with a cache as current as the server, every row of
    the admission tables ends as it does on reads, with the same writes, and reads no pod
    that it did not read before for another reason (a pod it waits for, a claim not named)."""
    got, cluster = _as_on_reads(row)
    # a pod the cache does not hold is read; a step that fails on the cache's copies runs
    # again on reads (the failure may be the copy's lag)
    cached = {(NS, p.name) for p in getattr(row.action, "pods", ())} & set(cluster.pod_cache or {})
    read = [c for c in cluster.calls if c.op == "read_pod"]
    if got.status != "failed":
        assert not [c for c in read if (c.args["namespace"], c.args["name"]) in cached]
    if row.check is not None:
        row.check(MemoryProbe(cluster, NS, memory_config()))


def _cached_then(row_id: str, change: Any) -> tuple[Outcome, MemoryCluster]:
    """The row's Admit on a watch cache taken before `change(cluster)`: the cache is behind."""
    row = ROWS[row_id]
    cluster = seed_memory(row)
    for o in cluster.dra.values():  # versions, as the API server gives every object
        o.setdefault("metadata", {})["resourceVersion"] = "1"
    cluster.cache_pods()
    cluster.dra_cache = copy.deepcopy(cluster.dra)
    change(cluster)
    ctx = Context(cluster, memory_config(), clock=lambda: NOW, wall=lambda: NOW)
    return HANDLERS[Admit](row.action, ctx), cluster


def test_admit_on_a_cached_pod_that_changed_since_reads_it_and_decides_again():
    """The cache's copy is behind the server: the admission patch, conditional on that copy,
    is refused (409) and the step reads the pod and runs again. Annotated by someone else
    meanwhile, the pod is admitted on the second run; ungated by someone else, it is left
    alone, as on a read."""

    def annotated(c: MemoryCluster) -> None:
        c.pods[(NS, "p-0")].annotate({"team.example/note": "x"})

    out, cluster = _cached_then("admit/keeps-the-pods-own-affinity", annotated)
    assert out.status == "done" and "admitted 1 pod(s): p-0 -> node-a" in out.message
    tries = [c for c in cluster.calls if c.op == "admit_pod" and c.args["name"] == "p-0"]
    assert [c.error.status if c.error else None for c in tries] == [409, None]
    assert [c.args["name"] for c in cluster.calls if c.op == "read_pod"][:1] == ["p-0"]

    def ungated(c: MemoryCluster) -> None:
        c.pods[(NS, "p-0")].gates = []

    out, cluster = _cached_then("admit/fresh-gang", ungated)
    assert out.status == "skipped" and "p-0 was ungated by someone else" in out.message
    # the reservations of the first run (a gang's, before its pods are admitted one by one)
    # stay: the next plan reads them back, as after any step that stops midway
    assert out.changed and cluster.write_ops() == ["annotate_pod", "annotate_pod"]


@pytest.mark.parametrize("row", _without_conflicts(HOLD_ROWS))
def test_hold_on_the_watch_caches_pods_as_on_reads(row: Row):
    """A Hold step decides on the watch cache's copy of its pod (`peek_pod`) as an Admit does:
    with a cache as current as the server, every row of the hold table ends as on reads, with
    the same writes, and reads the pod only where the cache does not hold it (gone); its
    condition's write is conditional on the copy's version."""
    _, cluster = _as_on_reads(row)
    cached = bool(cluster.pod_cache and (NS, "p-0") in cluster.pod_cache)
    assert bool([c for c in cluster.calls if c.op == "read_pod"]) == (not cached)
    sets = [c for c in cluster.calls if c.op == "set_pod_condition"]
    assert all(c.args.get("resource_version") for c in sets) == cached or not sets
    if row.check is not None:
        row.check(MemoryProbe(cluster, NS, memory_config()))


def _held_after(change: Any) -> tuple[Outcome, MemoryCluster]:
    """The hold table's first row (a gated pod, no condition yet) on a watch cache taken
    before `change(cluster)`: the cache is behind."""
    row = ROWS["hold/set"]
    cluster = seed_memory(row)
    cluster.cache_pods()
    change(cluster)
    ctx = Context(cluster, memory_config(), clock=lambda: NOW, wall=lambda: NOW)
    return HANDLERS[Hold](row.action, ctx), cluster


def test_hold_on_a_cached_pod_that_changed_since_reads_it_and_decides_again():
    """The cache's copy is behind: the condition's write, conditional on the copy, is refused
    (409), and the step reads the pod and decides again. Ungated by someone else meanwhile,
    the pod is left alone (no "held" on a pod on its way to a node); annotated by someone else,
    it is held on the second try."""

    def ungated(c: MemoryCluster) -> None:
        c.pods[(NS, "p-0")].gates = []

    out, cluster = _held_after(ungated)
    assert (out.status, out.message) == ("done", "admitted meanwhile (no longer gated)")
    sets = [c for c in cluster.calls if c.op == "set_pod_condition"]
    assert [c.error.status if c.error else None for c in sets] == [409]
    assert not cluster.pods[(NS, "p-0")].conditions

    def annotated(c: MemoryCluster) -> None:
        c.pods[(NS, "p-0")].annotate({"team.example/note": "x"})

    out, cluster = _held_after(annotated)
    assert out.status == "done" and out.changed and out.message.startswith("held: ")
    sets = [c for c in cluster.calls if c.op == "set_pod_condition"]
    assert [c.error.status if c.error else None for c in sets] == [409, None]
    assert [c.op for c in cluster.calls].count("read_pod") == 1


def test_dra_admit_by_allocation_on_a_cached_pod_someone_else_released():
    """Issue 32, by allocation: the cache still shows the pod gated and its claim
    unallocated, but someone else removed the gate and kube-scheduler allocated the claim: the
    claim's write, conditional on the cached copy, is refused, the claim read again is
    allocated, and the step runs again on the pod read from the server: left alone (ungated by
    someone else), the scheduler's allocation kept."""

    def released(c: MemoryCluster) -> None:
        c.pods[(NS, "p-0")].gates = []
        claim = c.dra[("ResourceClaim", NS, CLAIM)]
        claim["status"] = {"allocation": {"devices": {"results": [{"device": "gpu-5"}]}}}
        claim["metadata"]["resourceVersion"] = "9999"

    out, cluster = _cached_then("dra-own/allocated-then-admitted", released)
    assert out.status == "skipped" and "p-0 was ungated by someone else" in out.message
    claim = cluster.dra[("ResourceClaim", NS, CLAIM)]
    assert claim["status"]["allocation"]["devices"]["results"] == [{"device": "gpu-5"}]
    assert "replace_dra_status" not in cluster.write_ops()
