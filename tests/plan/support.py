"""What the planner's table tests share: the golden desired state with a tweak or two, a small
cluster, a time, and a `run` that plans and checks the invariants any plan keeps; the workloads,
services and autoscalers those tables are made of; Prometheus readings; a ChangePolicy
document; and `stage_run`, a run no stage has touched yet, for the stage tables of
tests/plan/stages/.

Moved here from test_steps.py, test_signals.py, test_prune.py and test_envelope.py so that no
test module imports another (tests/README.md, "Shared helpers"); the tables themselves stay in
those modules.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from reconciler.observe.builders import gpu, hours, node, snapshot, training
from reconciler.observe.model import (
    Autoscaler,
    InferenceService,
    Node,
    Request,
    SignalReading,
    SignalSample,
    Workload,
)
from reconciler.plan.actions import EVICTION_KINDS
from reconciler.plan.cluster import build_cluster
from reconciler.plan.model import Plan
from reconciler.plan.partition import DEFAULT_BACKENDS
from reconciler.plan.planner import plan
from reconciler.plan.run import Run, init_usage
from reconciler.plan.signals import render_query
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from reconciler.policy.state import DesiredState
from tests.plan.scenarios import A100, BAL, NOW, _objects, desired_text

MAINT = (
    "  defragmentation: {when: pendingDemand, maxMigrationsPerCycle: 2}\n"
    "  idleReclaim: {utilizationBelow: 5, idleFor: 1h, excludeClasses: [training-high]}\n"
)


def ago(h: float, now: datetime = NOW) -> datetime:
    return now - hours(h)


def desired(*swaps: tuple[str, str], extra: str = "") -> str:
    """The golden desired state with some of its text replaced (each `old` must be there)."""
    text = desired_text(extra=extra)
    for old, new in swaps:
        assert old in text, f"tweak does not apply: {old!r}"
        text = text.replace(old, new)
    return text


def maint(
    defrag: str = "{when: pendingDemand, maxMigrationsPerCycle: 2}",
    idle: str = "{utilizationBelow: 5, idleFor: 1h, excludeClasses: [training-high]}",
) -> tuple[str, str]:
    """A swap for the MaintenancePolicy spec; an empty string drops that part."""
    lines = "".join(
        f"  {k}: {v}\n" for k, v in (("defragmentation", defrag), ("idleReclaim", idle)) if v
    )
    return MAINT, lines or "  pools: []\n"


def two_nodes(gpus1: list | None = None, gpus2: list | None = None) -> list[Node]:
    return [node("a100-1", "a100", A100, gpus1), node("a100-2", "a100", A100, gpus2)]


def check_invariants(d: DesiredState, p: Plan) -> None:
    pos = {a.id: i for i, a in enumerate(p.actions)}
    assert len(pos) == len(p.actions), "duplicate action ids"
    stopped = set()
    for a in p.actions:
        assert a.reason.strip(), a.id
        for dep in a.depends_on:
            assert dep in pos, f"{a.id} depends on {dep}, which is not in the plan"
            assert pos[dep] < pos[a.id], f"{a.id} comes before its dependency {dep}"
        if a.kind in EVICTION_KINDS:
            stopped.add(a.target)
            cls = d.priority_class(a.priority_class)
            if not (cls and cls.spot) and not a.lost:  # a lost pod: nobody to ask
                assert f"checkpoint:{a.target}" in a.depends_on, (
                    f"{a.id} does not wait for its checkpoint"
                )
    for a in p.actions:
        if a.kind == "checkpoint":
            assert a.target in stopped, f"{a.id} checkpoints a workload the plan does not stop"


def run(text: str, nodes: list[Node], work: list[Workload], now: datetime = NOW, **kw) -> Plan:
    d = load([SourceFile("desired.yaml", text)])
    p = plan(d, snapshot(now, nodes, work, **_objects(text), **kw))
    check_invariants(d, p)
    return p


def repartition(n: str, kind: str = "mig-reconfigure") -> set[str]:
    return {f"cordon:{n}", f"{kind}:{n}", f"uncordon:{n}"}


def evicted(kind: str, *keys: str, spot: bool = False) -> set[str]:
    return {f"{kind}:{k}" for k in keys} | (set() if spot else {f"checkpoint:{k}" for k in keys})


# =========================================================================== admission

HIGH, LOW = "training-high", "training-low"


def pend(
    ns: str, name: str, n: int, cls: str = LOW, pool: str | None = "a100", created: float = 0.2
) -> Workload:
    return training(ns, name, None, n, cls=cls, pool=pool, created=ago(created))


def run_a(ns: str, name: str, node_name: str, gpus: list[int] | int, cls: str = HIGH) -> Workload:
    return training(ns, name, node_name, gpus, cls=cls, started=ago(5), checkpoint=ago(0.2))


# =========================================================================== scaling


def scaling(lo: int = 1, hi: int = 6, down_step: int = 1, target: str = "chat") -> str:
    return f"""\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {{name: chat}}
spec:
  pool: a100
  targets:
    - {{namespace: team-b, name: {target}, minReplicas: {lo}, maxReplicas: {hi}}}
  scaleUp: {{queueLengthPerReplica: 10, pendingTime: 30s, step: 2, cooldown: 2m}}
  scaleDown: {{queueLengthPerReplica: 1, step: {down_step}, cooldown: 10m}}
"""


def svc(
    replicas: int,
    queue: float | None = None,
    p99: float | None = None,
    last: float | None = 60,
    name: str = "chat",
) -> InferenceService:
    """`last`: minutes since the last scale change (None: never scaled)."""
    return InferenceService(
        namespace="team-b",
        name=name,
        replicas=replicas,
        priority_class="serving",
        replica_request=Request(shared_slices=1),
        pool="a100",
        queue_length=queue,
        pending_seconds_p99=p99,
        last_scale_at=None if last is None else NOW - timedelta(minutes=last),
    )


# 8 free slices on a100-1: its two plain cards are shared (the device plugin shares a node's
# plain cards together), the rest are empty MIG cards of the policy's layout
SHARED_CARD = [gpu(i, shared=4) for i in range(2)] + [
    gpu(i, mig=BAL, model=A100) for i in range(2, 8)
]


HPA, SO = "HorizontalPodAutoscaler", "ScaledObject"


def hpa(
    lo: int,
    hi: int,
    *,
    kind: str = HPA,
    name: str = "chat",
    owner: str = "",
    last=None,
    idle: int | None = None,
):
    """`last`: minutes since gpupool last changed the envelope (None: never); `idle`: a
    ScaledObject's idleReplicaCount."""
    return Autoscaler(
        kind=kind,
        namespace="team-b",
        name=name,
        min_replicas=lo,
        max_replicas=hi,
        idle_replicas=idle,
        owner=owner,
        last_change_at=None if last is None else NOW - timedelta(minutes=last),
    )


def scaled(s: InferenceService, *autoscalers: Autoscaler) -> InferenceService:
    return s.model_copy(update={"autoscalers": list(autoscalers)})


# =========================================================================== team caps


def job(
    ns: str,
    name: str,
    node_name: str,
    gpus: list[int] | int,
    cls: str = LOW,
    started: float = 5,
    ckpt: float = 0.2,
) -> Workload:
    return training(ns, name, node_name, gpus, cls=cls, started=ago(started), checkpoint=ago(ckpt))


# =========================================================================== idle reclaim


def idle_gpus(util: float = 1.0, idle: float | None = 3, **kw) -> list:
    return [
        gpu(i, util=util, idle_since=None if idle is None else ago(idle), **kw) for i in range(8)
    ]


FORGOTTEN = job("team-b", "forgotten", "a100-1", [0, 1], ckpt=3)
IDLE = "{utilizationBelow: 5, idleFor: 1h, excludeClasses: [training-high]}"


# =========================================================================== Prometheus readings

QUEUE_Q = 'sum(vllm:num_requests_waiting{namespace="team-b",pod=~"chat-.*"})'
QUEUE_ID = "scaling/chat/Deployment/team-b/chat/queueLength"
WAIT_ID = "scaling/chat/Deployment/team-b/chat/waitTime"


def prom_scaling(extra: str = "{source: prometheus}", **kw) -> str:
    return scaling(**kw) + f"  signals: {extra}\n"


def wait_query(text: str) -> str:
    d = load([SourceFile("d.yaml", desired(extra=text))])
    return render_query(
        d.scaling["chat"].spec.signals.wait_time, {"namespace": "team-b", "name": "chat"}
    )


def ok(qid: str, query: str, *values: float, labels: dict | None = None) -> SignalReading:
    return SignalReading(
        id=qid,
        query=query,
        samples=[
            SignalSample(labels=labels or {"pod": f"chat-{i}"}, value=v)
            for i, v in enumerate(values)
        ],
    )


WQ = wait_query(prom_scaling())


# =========================================================================== a ChangePolicy

CHANGE = """
---
apiVersion: gpupool.io/v1alpha1
kind: ChangePolicy
metadata: {{name: default}}
spec: {{{spec}}}
"""


def without(text: str, kind: str) -> str:
    return "---".join(d for d in text.split("---") if f"kind: {kind}\n" not in d)


# =========================================================================== stage runs


def stage_run(
    text: str,
    nodes: list[Node],
    work: list[Workload] = (),
    now: datetime = NOW,
    *,
    ledger: bool = True,
    **kw,
) -> Run:
    """A planner run for one stage's table (tests/plan/stages/): the desired state `text`, a
    snapshot of `nodes` and `work` with the quotas and classes of a converged cluster (`kw`,
    the snapshot's other fields, may replace them), the working view, the default partition
    backend, and with `ledger` the usage ledger and the hourly budget (`init_usage`). No stage
    has run: the snapshot is not checked (`open_run`'s consistency check) and the fences are
    not reported."""
    d = load([SourceFile("desired.yaml", text)])
    observed = snapshot(now, nodes, list(work), **{**_objects(text), **kw})
    r = Run(d, observed, now, build_cluster(d, observed), backends=DEFAULT_BACKENDS)
    if ledger:
        init_usage(r)
    return r


def action_ids(r: Run) -> set[str]:
    return set(r.actions)


def findings_of(r: Run) -> set[tuple[str, str]]:
    """(code, subject) of each finding the run has emitted."""
    return {(f.code, f.subject) for f in r.findings}


def changed_cards(r: Run) -> dict[str, str]:
    """Card -> "before -> after" for every card the working view repartitions."""
    return {
        g.key: f"{g.describe()} -> {g.describe(target=True)}"
        for pv in r.cluster.pools.values()
        for g in pv.gpus
        if g.changes
    }
