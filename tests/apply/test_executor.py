"""The executor over the in-memory cluster: dependencies, transient errors, events, the
pre-eviction hook, and that every kind of action has a handler."""

from __future__ import annotations

import inspect
import threading
import typing

import pytest

from reconciler import conventions as C
from reconciler.apply.configs import attempt_name
from reconciler.apply.executor import TRANSIENT, ApplyResult, Executor, _batches
from reconciler.apply.handlers import HANDLERS, ApplyConfig
from reconciler.apply.kube import KubeOps
from reconciler.apply.port import ApiError, ClusterOps
from reconciler.plan.actions import Action, ActionBase, Admit, Hold, PodAdmission, Preempt
from reconciler.plan.model import Plan
from tests.apply.memory import MUTATING, MemoryCluster
from tests.apply.rows import (
    CHECKPOINT,
    CORDON,
    CORDONED,
    GRACE,
    LABEL,
    MIG,
    MIG_NAME,
    MOVE,
    OWNED_BY_TRAIN,
    PREEMPT,
    PREEMPT_JOB_NOW,
    PREEMPT_NOW,
    PROPAGATING,
    QUOTA,
    RECLAIM,
    RESUME,
    ROWS,
    TABLES,
    TRAIN,
    UNCORDON,
    job,
    jobs_pod,
    mig_node,
)
from tests.apply.table import NODE, NOW, NS, Job, Row, ago, seed_memory
from tests.apply.table import Node as NodeSeed
from tests.apply.table import Pod as PodSeed


def plan(*actions: ActionBase) -> Plan:
    return Plan(observed_at=NOW.isoformat(), actions=actions)


def cluster(*seed) -> MemoryCluster:
    return seed_memory(Row("executor", CORDON, tuple(seed)))


def executor(c: MemoryCluster, **cfg) -> Executor:
    return Executor(c, ApplyConfig(mig_config_namespace=NS, **cfg), clock=lambda: NOW)


def statuses(result: ApplyResult) -> dict[str, tuple[str, str]]:
    return {o.action: (o.status, o.message) for o in result.outcomes}


# ---------------------------------------------------------------------- every kind is handled
def action_types() -> list[type]:
    union = typing.get_args(Action)[0]  # Annotated[Union[...], Field(discriminator=...)]
    return list(typing.get_args(union))


def test_action_union_is_read_right():
    kinds = {t.model_fields["kind"].default for t in action_types()}
    assert {"cordon", "mig-reconfigure", "preempt", "priority-class"} <= kinds
    assert len(kinds) == len(action_types()) >= 12


@pytest.mark.parametrize("kind", action_types(), ids=lambda t: t.model_fields["kind"].default)
def test_every_action_type_has_a_handler(kind: type):
    assert kind in HANDLERS, (
        f"no handler for {kind.__name__}: add one in a module of reconciler/apply/handlers/"
    )


def test_every_handler_is_for_an_action_type():
    assert set(HANDLERS) <= set(action_types())


def test_every_kind_has_table_rows():
    covered = {type(r.action) for rows in TABLES.values() for r in rows}
    assert covered == set(action_types())


# ---------------------------------------------------------------------- the port
def protocol_members() -> list[str]:
    return sorted(
        n for n, v in vars(ClusterOps).items() if inspect.isfunction(v) and not n.startswith("_")
    )


@pytest.mark.parametrize("impl", [MemoryCluster, KubeOps], ids=lambda c: c.__name__)
def test_implements_the_port(impl: type):
    for name in protocol_members():
        want = inspect.signature(getattr(ClusterOps, name)).parameters
        got = inspect.signature(getattr(impl, name)).parameters
        assert [(p.name, p.kind, p.default) for p in got.values()] == [
            (p.name, p.kind, p.default) for p in want.values()
        ], name


def test_memory_knows_which_operations_write():
    readers = {
        "read_node",
        "read_node_state",
        "read_pod",
        "pods_on_node",
        "read_job",
        "read_workload",
        "read_autoscaler",
        "read_config_map",
        "namespace_exists",
        "read_priority_class",
        "quota_manager",
        "kueue_manager",
        "dra_manager",
        "read_dra_object",
        "peek_dra_object",
        "peek_pod",
    }
    assert MUTATING | readers == set(protocol_members())
    assert not MUTATING & readers


# ---------------------------------------------------------------------- dependencies
def test_dependants_of_a_waiting_step_are_skipped():
    c = cluster(NodeSeed())
    r = executor(c).apply(plan(CORDON, MIG, UNCORDON))
    assert statuses(r) == {
        CORDON.id: ("done", "cordoned"),
        MIG.id: ("waiting", PROPAGATING),
        UNCORDON.id: ("skipped", f"waits for {MIG.id}"),
    }
    assert [op for op in c.write_ops() if op != "create_event"] == [
        "patch_node",
        "write_config_map",
        "patch_node",
    ]
    assert c.nodes[NODE].unschedulable  # the uncordon did not run
    assert not r.converged and not r.failed


def test_skipping_carries_down_a_chain_and_blocked_holds_back_too():
    c = cluster(
        NodeSeed()
    )  # not cordoned: the repartition is blocked (its cordon is not in this plan)
    after = UNCORDON.model_copy(update={"id": "label-after", "depends_on": (UNCORDON.id,)})
    r = executor(c).apply(plan(MIG, UNCORDON, after))
    assert [o.status for o in r.outcomes] == ["blocked", "skipped", "skipped"]
    assert r.outcomes[2].message == f"waits for {UNCORDON.id}"
    assert c.write_ops() == []


def test_a_dependency_outside_the_plan_counts_as_done():
    c = cluster(job())
    r = executor(c).apply(plan(PREEMPT))  # depends on a checkpoint no longer planned
    assert statuses(r) == {PREEMPT.id: ("done", "evicted")}


def test_a_failed_dependency_holds_back_its_dependants():
    c = cluster(mig_node("failed", label=attempt_name(MIG_NAME, 2)))  # the last retry failed
    r = executor(c).apply(plan(MIG, UNCORDON))
    assert [o.status for o in r.outcomes] == ["failed", "skipped"]
    assert r.failed and c.write_ops() == []


def test_checkpoint_grace_comes_from_the_plan():
    c = cluster(job())
    ex = executor(c)
    first = statuses(ex.apply(plan(CHECKPOINT, PREEMPT)))
    assert first == {
        CHECKPOINT.id: ("done", "checkpoint requested"),
        PREEMPT.id: ("waiting", f"checkpoint grace period: {GRACE}s left"),
    }
    later = Executor(c, ex.cfg, clock=lambda: NOW.replace(minute=5, second=1))
    assert statuses(later.apply(plan(CHECKPOINT, PREEMPT)))[PREEMPT.id] == ("done", "evicted")


def test_nothing_more_is_applied_once_it_may_not_continue():
    c = cluster(NodeSeed(), job())
    answers = iter([True, False])
    r = executor(c).apply(
        plan(CORDON, PREEMPT_NOW, LABEL), may_continue=lambda: next(answers, False)
    )
    assert [o.status for o in r.outcomes] == ["done", "skipped", "skipped"]
    assert "leadership lost" in r.outcomes[1].message
    assert [op for op in c.write_ops() if op != "create_event"] == [
        "patch_node"
    ] and c.evictions == []


# ---------------------------------------------------------------------- admissions at once
def one_pod_admission(k: int, **kw) -> Admit:
    return Admit(
        id=f"admit:{NS}/p-{k}",
        target=f"{NS}/p-{k}",
        reason="fits",
        namespace=NS,
        pods=(PodAdmission(name=f"p-{k}", node=NODE, gpus=(k,)),),
        **kw,
    )


def held(k: int) -> Hold:
    return Hold(
        id=f"hold:{NS}/p-{k}",
        target=f"{NS}/p-{k}",
        reason="cap",
        code="held-cap",
        message="over the cap",
    )


def test_admissions_and_holds_go_out_in_runs_that_respect_dependencies():
    a0, a1, h2 = one_pod_admission(0), one_pod_admission(1), held(2)
    a3 = one_pod_admission(3, depends_on=(UNCORDON.id,))
    a4 = one_pod_admission(4, depends_on=(a3.id,))
    ids = [[a.id for a in b] for b in _batches((a0, a1, h2, UNCORDON, a3, a4), 8)]
    assert ids == [[a0.id, a1.id, h2.id], [UNCORDON.id], [a3.id], [a4.id]]
    assert [len(b) for b in _batches((a0, a1, h2), 2)] == [2, 1]
    assert [len(b) for b in _batches((a0, a1, h2), 1)] == [1, 1, 1]


class Rendezvous(MemoryCluster):
    """Every admission's first read waits for the others': it returns only if the steps run
    at once (one by one, the first read would wait alone and time out)."""

    def __init__(self, parties: int, **kw):
        super().__init__(**kw)
        self.barrier = threading.Barrier(parties, timeout=5)

    def read_pod(self, namespace: str, name: str):
        self.barrier.wait()
        return super().read_pod(namespace, name)


@pytest.mark.parametrize("width", [1, 4])
def test_independent_admissions_run_at_once_and_report_in_plan_order(width: int):
    c = Rendezvous(4, namespaces={NS})
    for k in range(4):
        c.add_pod(NS, f"p-{k}", node=None, gates=(C.ADMISSION_GATE,), gpu_resources={})
    steps = [one_pod_admission(k) for k in range(4)]
    ex = executor(c, parallel_steps=width)
    if width == 1:  # one by one: the first read waits alone and the barrier breaks
        with pytest.raises(threading.BrokenBarrierError):
            ex.apply(plan(*steps))
        return
    r = ex.apply(plan(*steps))
    assert [o.action for o in r.outcomes] == [a.id for a in steps]
    assert [o.status for o in r.outcomes] == ["done"] * 4
    assert all(not c.pods[(NS, f"p-{k}")].gates for k in range(4))


# ---------------------------------------------------------------------- errors
@pytest.mark.parametrize("status", sorted(TRANSIENT))
def test_transient_errors_wait_for_the_next_cycle(status: int):
    c = cluster(NodeSeed())
    c.fail["patch_node"] = ApiError(status, "Busy", "try again")
    r = executor(c).apply(plan(CORDON, UNCORDON.model_copy(update={"depends_on": (CORDON.id,)})))
    assert statuses(r) == {
        CORDON.id: ("waiting", f"API {status} Busy: retried next cycle"),
        UNCORDON.id: ("skipped", f"waits for {CORDON.id}"),
    }
    assert not r.failed and not c.events


def test_transient_statuses_are_the_retryable_ones():
    assert {409, 429, 500, 503, 504} <= TRANSIENT
    assert not {400, 401, 403, 404, 422} & TRANSIENT


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_other_errors_fail_the_step(status: int):
    c = cluster(NodeSeed())
    c.fail["read_node"] = ApiError(status, "Nope", "no")
    r = executor(c).apply(plan(CORDON, LABEL))
    assert statuses(r)[CORDON.id] == ("failed", f"API {status}: Nope")
    assert r.failed


def test_a_read_error_is_an_outcome_too():
    c = cluster(NodeSeed(cordoned=True))
    c.fail["pods_on_node"] = ApiError(503, "Service Unavailable")
    assert statuses(executor(c).apply(plan(MIG)))[MIG.id][0] == "waiting"


# ---------------------------------------------------------------------- events
def events(c: MemoryCluster) -> list[tuple[str, str, str, str, str]]:
    return [
        (ns, e["reason"], e["type"], e["involvedObject"]["kind"], e["involvedObject"]["name"])
        for ns, e in c.events
    ]


@pytest.mark.parametrize(
    ("seed", "action", "expected"),
    [
        pytest.param(
            (NodeSeed(),),
            CORDON,
            [("default", "GpuPoolCordon", "Warning", "Node", NODE)],
            id="cordon",
        ),
        pytest.param((NodeSeed(cordoned=True),), CORDON, [], id="cordon-unchanged"),
        pytest.param(
            ROWS["mig/propagated"].seed,
            MIG,
            [("default", "GpuPoolMigReconfigure", "Warning", "Node", NODE)],
            id="mig-reconfigure",
        ),
        pytest.param((CORDONED, job()), MIG, [], id="mig-reconfigure-waiting"),
        pytest.param(
            (job(),),
            CHECKPOINT,
            [(NS, "GpuPoolCheckpoint", "Warning", "Pod", "job")],
            id="checkpoint",
        ),
        pytest.param(
            (job(annotations={C.CHECKPOINT_REQUESTED_ANN: ago(5)}),),
            CHECKPOINT,
            [],
            id="checkpoint-unchanged",
        ),
        pytest.param(
            (job(),), PREEMPT_NOW, [(NS, "GpuPoolPreempt", "Warning", "Pod", "job")], id="preempt"
        ),
        pytest.param(
            (job(),), RECLAIM, [(NS, "GpuPoolReclaim", "Warning", "Pod", "job")], id="reclaim"
        ),
        pytest.param((job(pdb=True),), PREEMPT_NOW, [], id="preempt-blocked"),
        pytest.param(
            (job(annotations={C.CHECKPOINT_REQUESTED_ANN: ago(GRACE + 1)}, pdb=True),),
            MOVE,
            [],
            id="move-annotated-but-blocked",
        ),
        pytest.param((CORDONED,), UNCORDON, [], id="uncordon-is-not-disruptive"),
        pytest.param((NodeSeed(),), LABEL, [], id="label-node-is-not-disruptive"),
        pytest.param((), QUOTA, [], id="quota-is-not-disruptive"),
    ],
)
def test_events_only_for_disruptive_steps_that_changed_something(seed, action, expected):
    c = cluster(*seed)
    executor(c).apply(plan(action))
    assert events(c) == expected


def test_event_body():
    c = cluster(job())
    executor(c).apply(plan(PREEMPT_NOW))
    [(ns, e)] = c.events
    assert (
        ns == NS
        and e["metadata"]["namespace"] == NS
        and e["metadata"]["name"].startswith("gpupool.")
    )
    assert e["involvedObject"] == {"kind": "Pod", "name": "job", "namespace": NS}
    assert e["message"] == f"{PREEMPT_NOW.reason} (evicted)"
    assert e["source"] == {"component": "gpupool"} and e["count"] == 1
    assert e["firstTimestamp"] == e["lastTimestamp"] == NOW.isoformat()


def test_node_event_body():
    """An Event about a Node lives in "default" (the API server and MemoryCluster refuse others)."""
    c = cluster(NodeSeed())
    executor(c).apply(plan(CORDON))
    [(ns, e)] = c.events
    assert ns == e["metadata"]["namespace"] == "default"
    assert e["involvedObject"] == {"kind": "Node", "name": NODE, "namespace": None}
    assert e["reason"] == "GpuPoolCordon" and e["message"] == f"{CORDON.reason} (cordoned)"


def test_no_events_when_turned_off():
    c = cluster(NodeSeed())
    executor(c, emit_events=False).apply(plan(CORDON))
    assert c.write_ops() == ["patch_node"] and c.events == []


def test_a_failing_event_does_not_fail_the_step():
    c = cluster(NodeSeed())
    c.fail["create_event"] = ApiError(403, "Forbidden")
    r = executor(c).apply(plan(CORDON))
    assert statuses(r) == {CORDON.id: ("done", "cordoned")} and c.events == []


# ---------------------------------------------------------------------- the pre-eviction hook
def hooked(
    c: MemoryCluster, *actions: ActionBase
) -> tuple[ApplyResult, list[tuple[str, list[str]]], list]:
    calls: list[tuple[str, list[str]]] = []
    seen: list = []
    r = executor(c).apply(
        plan(*actions),
        before_preempt=lambda a, _pod: calls.append((a.id, list(c.evictions))),
        on_outcome=lambda a, o: seen.append((a.id, o.status)),
    )
    return r, calls, seen


def test_before_preempt_runs_before_the_eviction():
    c = cluster(job())
    r, calls, seen = hooked(c, PREEMPT_NOW)
    assert calls == [(PREEMPT_NOW.id, [])]  # nothing evicted yet when it ran
    assert c.evictions == [f"{NS}/job"]
    assert statuses(r) == {
        PREEMPT_NOW.id: ("done", "evicted")
    }  # the controller keeps the count on exactly this
    assert seen == [(PREEMPT_NOW.id, "done")]


@pytest.mark.parametrize(
    "action", [RECLAIM, MOVE.model_copy(update={"depends_on": ()})], ids=["reclaim", "move"]
)
def test_before_preempt_runs_for_every_eviction_kind(action):
    """Reclaims and moves spend the hourly budget too (the planner's one eviction gate)."""
    c = cluster(job())
    r, calls, _ = hooked(c, action)
    assert calls == [(action.id, [])] and r.outcomes[0].message == "evicted"


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        pytest.param(
            job(annotations={C.CHECKPOINT_REQUESTED_ANN: ago(5)}),
            "checkpoint grace period",
            id="grace-left",
        ),
        pytest.param(job(deleting=True), "pod is terminating", id="terminating"),
    ],
)
def test_before_preempt_is_not_called_when_nothing_is_sent(seed, message):
    c = cluster(seed)
    r, calls, _ = hooked(c, CHECKPOINT, PREEMPT)
    assert calls == [] and message in r.outcomes[1].message


def test_a_refused_preemption_reports_something_other_than_evicted():
    """The hook ran (write-ahead); the outcome tells the controller to take the count back."""
    c = cluster(job(pdb=True))
    r, calls, _ = hooked(c, PREEMPT_NOW)
    assert calls == [(PREEMPT_NOW.id, [])]
    assert r.outcomes[0].status == "blocked" and r.outcomes[0].message != "evicted"


def test_before_preempt_runs_before_the_suspension():
    """Write-ahead for a suspension too: the Job is not suspended yet when the hook runs; the
    outcome says the pod was stopped (the entry stays), and the Event is on the pod."""
    c = cluster(TRAIN, jobs_pod())
    seen: list[tuple[str, bool | None]] = []
    r = executor(c).apply(
        plan(PREEMPT_JOB_NOW),
        before_preempt=lambda a, _pod: seen.append((a.id, c.job_suspended(NS, "train"))),
    )
    assert seen == [(PREEMPT_JOB_NOW.id, False)]
    assert c.job_suspended(NS, "train") and c.evictions == []
    [out] = r.outcomes
    assert (out.status, out.changed, out.stopped) == ("done", True, True)
    assert c.write_ops() == ["set_job_suspend", "create_event"]
    assert c.events[0][1]["involvedObject"] == {"kind": "Pod", "name": "job", "namespace": NS}


def test_a_jobs_gang_is_suspended_once_and_every_pod_counted():
    """One Preempt per pod of the gang: the first suspends the Job, the others find it
    suspended by gpupool; each is one entry of the budget (one pod stopped), one write in all."""
    c = cluster(TRAIN, PodSeed("p-0", owners=OWNED_BY_TRAIN), PodSeed("p-1", owners=OWNED_BY_TRAIN))
    gang = [
        PREEMPT_JOB_NOW.model_copy(update={"id": f"preempt:{NS}/{p}", "target": f"{NS}/{p}"})
        for p in ("p-0", "p-1")
    ]
    r, calls, _ = hooked(c, *gang)
    assert [i for i, _ in calls] == [a.id for a in gang]
    assert [(o.status, o.changed, o.stopped) for o in r.outcomes] == [
        ("done", True, True),
        ("done", False, True),
    ]
    assert [op for op in c.write_ops() if op != "create_event"] == ["set_job_suspend"]


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        pytest.param((TRAIN,), "pod is gone", id="gone"),
        pytest.param((TRAIN, jobs_pod(deleting=True)), "pod is terminating", id="terminating"),
    ],
)
def test_before_preempt_is_not_called_for_a_gang_already_stopped(seed, message):
    c = cluster(*seed)
    r, calls, _ = hooked(c, PREEMPT_JOB_NOW)
    assert calls == [] and r.outcomes[0].message == message
    assert not r.outcomes[0].stopped and c.job_suspended(NS, "train") is False


def test_a_job_suspended_by_someone_else_is_not_a_stop_of_ours():
    """The hook ran (write-ahead, before the Job was read); the outcome says gpupool stopped
    nothing, so the controller can take the entry back."""
    c = cluster(Job("train", suspended=True), jobs_pod())
    r, calls, _ = hooked(c, PREEMPT_JOB_NOW)
    assert calls == [(PREEMPT_JOB_NOW.id, [])]
    [out] = r.outcomes
    assert (out.status, out.changed, out.stopped) == ("done", False, False)
    assert c.write_ops() == []


def test_resume_is_not_disruptive_and_makes_no_event():
    c = cluster(Job("train", annotations={C.SUSPENDED_BY_ANN: ago(60)}, suspended=True))
    r = executor(c).apply(plan(RESUME))
    assert statuses(r)[RESUME.id][0] == "done" and c.job_suspended(NS, "train") is False
    assert c.write_ops() == ["set_job_suspend"] and c.events == []


def test_preempt_type_is_the_only_one_with_the_hook():
    assert [t for t in action_types() if issubclass(t, Preempt)] == [Preempt]
