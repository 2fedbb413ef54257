"""Hostile cluster objects through the Kubernetes adapter and the planner (issue "Tenant-proof",
item 5): tests/test_hostile_input.py's promise for what `observe_cluster` reads.

The cluster is tests/observe/fake_cluster.py's `base()` (nodes and their agents'
GpuNodeStates, pods bound, gated and admitted, Jobs, a PodGroup, inference services with an HPA
and a ScaledObject, quotas, classes, namespaces), each object as the API server's JSON, mutated
by one class of edit, answered as an API server would (a built-in object the client cannot
deserialize, a custom object whose metadata is no ObjectMeta and a second object of one name are
not in the answer), then `observe_cluster` and `plan_with_facts` on what it read. Whatever the
edit:

- no exception escapes, and both end within `LIMIT_S` (a forked child with a time and an
  address-space limit: `tests/support/hostile.py`, `bounded`);
- nothing is lost silently: every node, GPU workload, inference service, autoscaler, suspended
  Job, quota, class and gated namespace the base cluster reads is read again, or its object is
  an unreadable entry (and so an `unreadable-object` finding), or the edit changed what decides
  whether it is one (its name, its GPU request, its phase, its label...); one object's problem
  never takes another object with it;
- each class's own promise (a forged gpupool annotation is a `forged-state` report, a loose
  shape an unreadable entry naming the object, ...).

Classes: `fuzz` (tests/policy/fuzzing.py's `mutate`/`VALUES` on the dict forms), `huge` (sizes
of 10^9, "1E", 10^4 cards), `forged` (gpupool's annotations written by someone else), `empty`
(a running pod whose cards the agent lists as none), `times` (year 1, 9999), `loose` (a value
of another JSON type where a looser CRD lets it through). Seeded (`derandomize`) and bounded as
tests/test_hostile_input.py is. Sub-cases that fail on this branch for a bound or a check
another change adds were xfail until it landed (the reasons stay in the tables).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from kubernetes import client

from reconciler import conventions as C
from reconciler.observe.kube import observe_cluster
from reconciler.observe.model import ObservedState
from reconciler.plan.model import Plan
from reconciler.plan.planner import plan_with_facts
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load
from tests.observe.fake_cluster import NOW, Cluster, as_model, base, card, managed, serving
from tests.plan.support import desired
from tests.policy.fuzzing import VALUES, mutate
from tests.support.hostile import HOSTILE, Outcome, bounded

DESIRED = load([SourceFile("desired.yaml", desired())])
LIMIT_S = 5
"""Seconds one example's observation and plan may take (they take a few milliseconds)."""
EXAMPLE = settings(HOSTILE, deadline=None)  # the child's own limit is the deadline

KINDS = {
    "nodes": "Node",
    "pods": "Pod",
    "node_states": C.NODE_STATE_KIND,
    "jobs": "Job",
    "pod_groups": "PodGroup",
    "deployments": "Deployment",
    "stateful_sets": "StatefulSet",
    "hpas": C.HPA_KIND,
    "scaled_objects": C.SCALED_OBJECT_KIND,
    "quotas": "ResourceQuota",
    "priority_classes": "PriorityClass",
    "namespaces": "Namespace",
}
FIELDS = sorted(KINDS)
Source = tuple[str, int]
"""(field of `Cluster`, index): one object of the cluster."""
Path = tuple


# --------------------------------------------------------------------------- what is read


def ident(obj) -> tuple[str | None, str | None]:
    """(namespace, name) of a dict form or model object, when they are strings."""
    if isinstance(obj, dict):
        meta = obj.get("metadata")
        ns, name = (meta.get("namespace"), meta.get("name")) if isinstance(meta, dict) else (0, 0)
    else:
        meta = getattr(obj, "metadata", None)
        ns, name = getattr(meta, "namespace", None), getattr(meta, "name", None)
    return (ns if isinstance(ns, str) else None, name if isinstance(name, str) else None)


def key_of(fld: str, obj) -> str | None:
    """What object `obj` of list `fld` is read as, by name (whether or not it is)."""
    ns, name = ident(obj)
    if not name:
        return None
    return {
        "nodes": f"node:{name}",
        "pods": f"workload:{ns}/{name}",
        "deployments": f"service:Deployment:{ns}/{name}",
        "stateful_sets": f"service:StatefulSet:{ns}/{name}",
        "hpas": f"scaler:{C.HPA_KIND}:{ns}/{name}",
        "scaled_objects": f"scaler:{C.SCALED_OBJECT_KIND}:{ns}/{name}",
        "jobs": f"suspended:{ns}/{name}",
        "quotas": f"quota:{ns}/{name}",
        "priority_classes": f"class:{name}",
        "namespaces": f"gated:{name}",
    }.get(fld)


def read(o: ObservedState) -> set[str]:
    return (
        {f"node:{n.name}" for n in o.nodes}
        | {f"workload:{w.namespace}/{w.name}" for w in o.workloads}
        | {f"service:{s.kind}:{s.namespace}/{s.name}" for s in o.services}
        | {f"scaler:{a.kind}:{a.namespace}/{a.name}" for s in o.services for a in s.autoscalers}
        | {f"suspended:{j.namespace}/{j.name}" for j in o.suspended_jobs}
        | {f"quota:{q.namespace}/{q.name}" for q in o.quotas}
        | {f"class:{c.name}" for c in o.priority_classes}
        | {f"gated:{n}" for n in o.gated_namespaces or []}
    )


def observe_and_plan(c: Cluster, recent=None) -> tuple[ObservedState, Plan, list]:
    with serving(c):
        observed = observe_cluster(object(), now=NOW, recent_preemptions=recent)
    plan, _ = plan_with_facts(DESIRED, observed, now=NOW)
    return observed, plan, list(c.refused)


BASE = base()
BASE_OBSERVED, _, _ = observe_and_plan(copy.deepcopy(BASE))
BASE_READ = read(BASE_OBSERVED)
EXPECTED: dict[Source, str] = {
    (f, i): key_of(f, o)
    for f in FIELDS
    for i, o in enumerate(getattr(BASE, f) or [])
    if key_of(f, o) in BASE_READ
}
"""What each object of the base cluster is read as."""
TARGET: dict[Source, Source] = {
    (sf, si): next(
        (f, i)
        for f in ("deployments", "stateful_sets")
        for i, o in enumerate(getattr(BASE, f))
        if key_of(f, o)
        == f"service:{s.kind}:{s.namespace}/{s.name}"  # the service the autoscaler scales
    )
    for s in BASE_OBSERVED.services
    for a in s.autoscalers
    for sf, si in [
        next(
            (f, i)
            for f in ("hpas", "scaled_objects")
            for i, o in enumerate(getattr(BASE, f) or [])
            if key_of(f, o) == f"scaler:{a.kind}:{a.namespace}/{a.name}"
        )
    ]
}
"""Autoscaler -> the service it is read with."""
RELEVANT: dict[str, list[Path]] = {
    "nodes": [],
    "pods": [("spec", "containers"), ("status", "phase"), ("metadata", "deletionTimestamp")],
    "deployments": [("metadata", "labels")],
    "stateful_sets": [("metadata", "labels")],
    "hpas": [("spec", "scaleTargetRef")],
    "scaled_objects": [("spec", "scaleTargetRef")],
    "jobs": [
        ("spec", "suspend"),
        ("spec", "parallelism"),
        ("spec", "managedBy"),
        ("metadata", "annotations"),
        ("metadata", "managedFields"),
    ],
    "quotas": [],
    "priority_classes": [],
    "namespaces": [("metadata", "labels")],
}
"""What decides whether an object is read as one (besides its name and namespace)."""


def changed_paths(a, b, at: Path = ()) -> Iterator[Path]:
    """Where `b` differs from `a`: the deepest path each change is under."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() | b.keys():
            if k not in a or k not in b:
                yield (*at, k)
            elif a[k] != b[k] or type(a[k]) is not type(b[k]):
                yield from changed_paths(a[k], b[k], (*at, k))
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y or type(x) is not type(y):
                yield from changed_paths(x, y, (*at, i))
    else:
        yield at


def relevant(fld: str, path: Path) -> bool:
    decisive = [*RELEVANT[fld], ("metadata", "name"), ("metadata", "namespace")]
    return any(path[: len(q)] == q or q[: len(path)] == path for q in decisive)


# --------------------------------------------------------------------------- one example


@dataclass
class Edit:
    """What one class of edit did to the base cluster, and what it promises besides."""

    cluster: Cluster
    changed: dict[Source, list[Path]] = field(default_factory=dict)
    checks: list[Callable[[ObservedState, Plan], None]] = field(default_factory=list)
    recent: list | None = None

    def set(self, src: Source, path: Path, value) -> None:
        """`value` at `path` of object `src` (dict form), made where missing."""
        obj = getattr(self.cluster, src[0])[src[1]]
        for k in path[:-1]:
            obj = obj.setdefault(k, {}) if isinstance(obj, dict) else obj[k]
        obj[path[-1]] = value
        self.changed.setdefault(src, []).append(path)

    def reported(self, ref: str, *says: str) -> None:
        """Promise: an unreadable entry for object `ref` whose message says each of `says`."""

        def check(o: ObservedState, _: Plan) -> None:
            found = [(u.ref, u.message) for u in o.unreadable]
            assert any(r == ref and all(x in m for x in says) for r, m in found), (ref, says, found)

        self.checks.append(check)


def run(edit: Edit) -> None:
    """The example: observe and plan the edited cluster in a bounded child; judge here."""
    out: Outcome = bounded(lambda: observe_and_plan(edit.cluster, edit.recent), LIMIT_S)
    if out.error:
        pytest.fail(out.error, pytrace=False)
    observed, plan, refused = out.value
    # every unreadable entry is a finding of the plan
    findings = {(f.code, f.subject) for f in plan.findings}
    assert {("unreadable-object", u.ref) for u in observed.unreadable} <= findings
    # nothing is lost silently, and no object takes another with it
    got = read(observed)
    reports = {(u.kind, u.name) for u in observed.unreadable}
    not_answered = {(f, i) for f, i, _ in refused}
    for src in edit.changed:
        event(f"{src[0]} {'not answered' if src in not_answered else 'answered'}")
    changed_services = {s for s in edit.changed if s[0] in ("deployments", "stateful_sets")}
    for (fld, i), key in EXPECTED.items():
        if key in got or (fld, i) in not_answered:
            continue
        now = getattr(edit.cluster, fld)[i]
        if key_of(fld, now) in got:
            continue  # read under its new name
        kind, name = KINDS[fld], ident(now)[1]
        if (kind, name or "?") in reports or (kind, "?") in reports:
            continue
        if any(relevant(fld, p) for p in edit.changed.get((fld, i), [])):
            continue
        target = TARGET.get((fld, i))
        if target is not None and (target in changed_services or target in not_answered):
            continue  # an autoscaler is read with its service
        raise AssertionError(
            f"{key} ({fld}[{i}]) was lost without a report; edits: {edit.changed}; "
            f"unreadable: {[(u.ref, u.message) for u in observed.unreadable]}"
        )
    for check in edit.checks:
        check(observed, plan)


def obj(edit: Edit, src: Source):
    return getattr(edit.cluster, src[0])[src[1]]


# --------------------------------------------------------------------------- fuzz


@settings(EXAMPLE, max_examples=100)
@given(st.data())
def test_fuzzed_cluster_objects_are_read_or_reported(data):
    """One to three objects, each with one to three values dropped, replaced by any
    YAML-shaped value or added to (`mutate`)."""
    edit = Edit(base())
    for _ in range(data.draw(st.integers(1, 3), label="objects")):
        fld = data.draw(st.sampled_from([f for f in FIELDS if getattr(edit.cluster, f)]))
        src = (fld, data.draw(st.integers(0, len(getattr(edit.cluster, fld)) - 1), label="i"))
        before = obj(edit, src)
        after = mutate(before, data)
        getattr(edit.cluster, src[0])[src[1]] = after
        edit.changed.setdefault(src, []).extend(changed_paths(before, after))
    run(edit)


# --------------------------------------------------------------------------- huge sizes

QUANTITIES = ["1E", "1000000000", "999999999999999999999999", "1e9", "8Ei"]
COUNTS = [10**9, 2**31 - 1, 2**53]


def _capacity(edit: Edit, data) -> None:
    q = data.draw(st.sampled_from(QUANTITIES), label="quantity")
    for part in ("capacity", "allocatable"):
        edit.set(("nodes", 1), ("status", part, C.GPU_RESOURCE), q)  # a100-2: no agent


def _shared(edit: Edit, data) -> None:
    q = data.draw(st.sampled_from(QUANTITIES), label="quantity")
    edit.set(("nodes", 1), ("status", "allocatable", C.SHARED_RESOURCE), q)


def _card_count(edit: Edit, data) -> None:
    n = data.draw(st.sampled_from([33, 1_000, 10_000]), label="cards")
    edit.set(("node_states", 0), ("status", "gpus"), [card(i) for i in range(n)])


def _card_fields(edit: Edit, data) -> None:
    where = data.draw(
        st.sampled_from(
            [
                ("index",),
                ("memoryMib",),
                ("memoryUsedMib",),
                ("numaNode",),
                ("migInstances", 0, "start"),
            ]
        ),
        label="field",
    )
    n = data.draw(st.sampled_from(COUNTS), label="value")
    edit.set(("node_states", 0), ("status", "gpus", 0, *where), n)


def _request(edit: Edit, data) -> None:
    q = data.draw(st.sampled_from(QUANTITIES), label="quantity")
    pod, res = data.draw(
        st.sampled_from([(3, C.GPU_RESOURCE), (0, C.GPU_RESOURCE), (1, C.mig_resource("3g.40gb"))]),
        label="pod",
    )
    edit.set(("pods", pod), ("spec", "containers", 0, "resources", "limits", res), q)


def _allocation(edit: Edit, data) -> None:
    key = data.draw(st.sampled_from(["gpu", "slices", "migStart"]), label="field")
    n = data.draw(st.sampled_from(COUNTS), label="value")
    edit.set(("node_states", 0), ("status", "pods", 0, "allocations", 0, key), n)


def _parallelism(edit: Edit, data) -> None:
    job = data.draw(st.sampled_from([0, 1]), label="job")  # running, suspended by gpupool
    edit.set(("jobs", job), ("spec", "parallelism"), data.draw(st.sampled_from(COUNTS)))


def _gang_size(edit: Edit, data) -> None:
    n = data.draw(st.sampled_from(COUNTS), label="size")
    if data.draw(st.booleans(), label="pod group"):
        edit.set(("pod_groups", 0), ("spec", "minMember"), n)
    else:
        edit.set(("pods", 3), ("metadata", "annotations", C.GANG_ANN), "big")
        edit.set(("pods", 3), ("metadata", "annotations", C.GANG_SIZE_ANN), str(n))


def _replicas(edit: Edit, data) -> None:
    n = data.draw(st.sampled_from(COUNTS), label="replicas")
    where = data.draw(
        st.sampled_from(
            [
                (("deployments", 0), ("spec", "replicas")),
                (("hpas", 0), ("spec", "maxReplicas")),
                (("scaled_objects", 0), ("spec", "maxReplicaCount")),
            ]
        ),
        label="field",
    )
    edit.set(*where, n)


def _quota(edit: Edit, data) -> None:
    q = data.draw(st.sampled_from(QUANTITIES), label="quantity")
    edit.set(("quotas", 0), ("spec", "hard", f"requests.{C.GPU_RESOURCE}"), q)


def _signal(edit: Edit, data) -> None:
    v = data.draw(st.sampled_from(["1e308", "1e400", "9" * 400, "-1e308"]), label="value")
    ann = data.draw(st.sampled_from([C.QUEUE_LENGTH_ANN, C.PENDING_P99_ANN]), label="key")
    edit.set(("deployments", 0), ("metadata", "annotations", ann), v)


def _long_annotation(edit: Edit, data) -> None:
    n = data.draw(st.sampled_from([10_000, 100_000]), label="cards listed")
    ann = data.draw(st.sampled_from([C.GPUS_ANN, C.INTENDED_GPUS_ANN]), label="key")
    edit.set(("pods", 2), ("metadata", "annotations", ann), ",".join(["0"] * n))


BOUND = "bound not on this branch (the change adding size bounds adds it): "
HUGE = {
    "node-capacity": (_capacity, f"{BOUND}MAX_GPUS_PER_NODE: one card is made per unit"),
    "shared-slices": (_shared, f"{BOUND}MAX_SHARED_SLICES_PER_GPU: slices are counted one by one"),
    "agent-card-count": (_card_count, None),
    "agent-card-fields": (_card_fields, None),
    "pod-request": (_request, None),
    "allocation": (_allocation, None),
    "job-parallelism": (_parallelism, f"{BOUND}MAX_GANG_SIZE: one unit of demand per pod"),
    "gang-size": (_gang_size, None),
    "replicas": (_replicas, None),
    "quota": (_quota, None),
    "demand-signal": (_signal, None),
    "long-annotation": (_long_annotation, None),
}


def _cases(table: dict) -> list:
    return [pytest.param(name, marks=()) for name, (_, why) in sorted(table.items())]


@pytest.mark.parametrize("case", _cases(HUGE))
@settings(EXAMPLE, max_examples=6)
@given(data=st.data())
def test_huge_sizes_are_read_or_reported_in_seconds(case, data):
    edit = Edit(base())
    HUGE[case][0](edit, data)
    run(edit)


# --------------------------------------------------------------------------- forged state

UNBOUND = {"waiting": 3, "reserved": 4, "admitted": 5, "gang-0": 6}
"""Unbound pods of the base cluster (name -> index in `Cluster.pods`)."""


@settings(EXAMPLE, max_examples=30)
@given(st.data())
def test_forged_gpupool_state_is_a_forged_state_report(data):
    """gpupool's annotations on a pending pod, a Move's reservation on a Job, or the cards a
    bound pod holds (`gpupool.io/gpus`, on a node whose agent publishes no pods), written by
    someone else (no record, another field manager, gpupool's controller for the cards):
    ignored, one `forged-state` report naming the object."""
    edit = Edit(base())
    by = data.draw(st.sampled_from(["no record", "kubectl-annotate", "tenant"]), label="writer")
    target = data.draw(st.integers(0, 5), label="target")
    if target == 1:
        src, ref, key = ("pods", 2), "Pod team-a/on-two", C.GPUS_ANN
        edit.set(src, ("metadata", "annotations", key), data.draw(st.sampled_from(["0", "7"])))
        by = data.draw(st.sampled_from([by, C.FIELD_MANAGER]), label="cards writer")
    elif target == 0:
        text = data.draw(
            st.sampled_from(["a100-1:0,1@2026-12-03T05:59:00Z", "a100-9:0@2026-12-03T05:59:00Z"])
        )
        src, ref = ("jobs", 0), "Job team-a/train"
        edit.set(src, ("metadata", "annotations", C.NEXT_POD_RESERVED_ANN), text)
        key = C.NEXT_POD_RESERVED_ANN
    else:
        name = data.draw(st.sampled_from(sorted(UNBOUND)), label="pod")
        src, ref = ("pods", UNBOUND[name]), f"Pod {ident(BASE.pods[UNBOUND[name]])[0]}/{name}"
        key = data.draw(
            st.sampled_from([C.ADMITTED_ANN, C.RESERVED_ANN, C.INTENDED_GPUS_ANN]), label="key"
        )
        value = {
            C.ADMITTED_ANN: st.sampled_from(["a100-1", "a100-2", "a100-9"]),
            C.RESERVED_ANN: st.sampled_from(["a100-1:0,1", "a100-2:0-7", "x"]),
            C.INTENDED_GPUS_ANN: st.sampled_from(["0,1", "6,7", "999"]),
        }[key]
        if key == C.INTENDED_GPUS_ANN:  # read only beside an admission gpupool wrote
            edit.set(src, ("metadata", "annotations", C.ADMITTED_ANN), "a100-2")
            edit.set(src, ("metadata", "managedFields"), [managed(C.ADMITTED_ANN)])
        edit.set(src, ("metadata", "annotations", key), data.draw(value, label="value"))
    event(f"{src[0]} {key}")
    fields = [f for f in obj(edit, src)["metadata"].get("managedFields") or []]
    for f in fields:  # gpupool's record of the key, if any, is gone
        f["fieldsV1"]["f:metadata"]["f:annotations"].pop(f"f:{key}", None)
    if by != "no record":
        fields.append(managed(key, manager=by))
    obj(edit, src)["metadata"]["managedFields"] = fields
    edit.reported(ref, "forged-state: ", f"{key} ")
    run(edit)


# --------------------------------------------------------------------------- empty allocations


@settings(EXAMPLE, max_examples=20)
@given(st.data())
def test_a_running_pod_listed_with_no_cards_is_a_finding(data):
    """The node agent lists a running GPU pod with no allocations (an empty list, null, no
    key), or its `gpupool.io/gpus` annotation names none: its cards are not known, which the
    plan says."""
    edit = Edit(base())
    how = data.draw(st.sampled_from(["[]", "null", "no key", "annotation"]), label="how")
    event(how)
    if how == "annotation":
        pod = "team-a/on-two"  # on a100-2, whose agent publishes no pods
        edit.set(("pods", 2), ("metadata", "annotations", C.GPUS_ANN), ",")
    else:
        i = data.draw(st.sampled_from([0, 1]), label="entry")
        entry = BASE.node_states[0]["status"]["pods"][i]
        pod = f"{entry['namespace']}/{entry['name']}"
        if how == "no key":
            del obj(edit, ("node_states", 0))["status"]["pods"][i]["allocations"]
            edit.changed[("node_states", 0)] = [("status", "pods", i, "allocations")]
        else:
            edit.set(
                ("node_states", 0),
                ("status", "pods", i, "allocations"),
                [] if how == "[]" else None,
            )

    def said(o: ObservedState, p: Plan) -> None:
        subjects = {f.subject for f in p.findings} | {u.ref for u in o.unreadable}
        assert any(pod in s for s in subjects) or any(
            f.code == "allocation-unknown" for f in p.findings
        ), (pod, sorted((f.code, f.subject) for f in p.findings))

    edit.checks.append(said)
    run(edit)


# --------------------------------------------------------------------------- extreme times

TIMES = [
    "0001-01-01T00:00:00Z",
    "9999-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z",
    "2262-04-12T00:00:00Z",
]


def _pod_time(edit: Edit, data, t: str) -> None:
    pod = data.draw(st.sampled_from([0, 1, 2, 3, 5]), label="pod")
    where = data.draw(
        st.sampled_from(
            [
                ("metadata", "creationTimestamp"),
                ("status", "startTime"),
                ("metadata", "annotations", C.LAST_CHECKPOINT_ANN),
            ]
        ),
        label="field",
    )
    edit.set(("pods", pod), where, t)


def _annotation_time(edit: Edit, data, t: str) -> None:
    which = data.draw(st.sampled_from(["last-scale", "suspended-at", "next-pod"]), label="field")
    if which == "last-scale":
        edit.set(("deployments", 0), ("metadata", "annotations", C.LAST_SCALE_ANN), t)
    elif which == "suspended-at":
        edit.set(("jobs", 1), ("metadata", "annotations", C.SUSPENDED_BY_ANN), t)
    else:
        edit.set(("jobs", 0), ("metadata", "annotations", C.NEXT_POD_RESERVED_ANN), f"a100-1:6@{t}")


def _agent_time(edit: Edit, data, t: str) -> None:
    where = data.draw(
        st.sampled_from([("idleSince",), ("belowSince", "5"), ("belowSince", "10")]),
        label="field",
    )
    edit.set(("node_states", 0), ("status", "gpus", 1, *where), t)


def _preemption_time(edit: Edit, data, t: str) -> None:
    edit.recent = [t, NOW.isoformat()]


TIMED = {
    "pod-times": (_pod_time, None),
    "annotation-times": (_annotation_time, None),
    "agent-times": (_agent_time, None),
    "recent-preemptions": (_preemption_time, None),
}


@pytest.mark.parametrize("case", _cases(TIMED))
@settings(EXAMPLE, max_examples=12)
@given(data=st.data())
def test_extreme_times_are_read_or_reported(case, data):
    edit = Edit(base())
    TIMED[case][0](edit, data, data.draw(st.sampled_from(TIMES), label="time"))
    run(edit)


# --------------------------------------------------------------------------- loose shapes


def _paths(node, at: Path = ()) -> Iterator[Path]:
    yield at
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*at, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*at, i))


def _other_type(value) -> st.SearchStrategy:
    """A value of another JSON type than `value` that no lax reading turns into one of its type
    (a number is no time: pydantic reads an int as a Unix time; "3" is a number to it): for a
    scalar, a list or an object; for a list or an object, anything but one of its kind or null.
    A few plain ones, and any `VALUES` draw that qualifies."""
    if isinstance(value, dict | list):
        kind = type(value)
        plain = st.sampled_from(["x", 7, True, {"x": 1} if kind is list else ["x"]])
        return st.one_of(plain, VALUES.filter(lambda v: v is not None and not isinstance(v, kind)))
    plain = st.sampled_from([["x"], {"x": 1}])
    return st.one_of(plain, VALUES.filter(lambda v: isinstance(v, dict | list)))


LOOSE = {
    ("node_states", 0): ("status",),
    ("scaled_objects", 0): ("spec",),
}
"""Where a looser CRD lets another JSON type through, and every value under it is read."""


@settings(EXAMPLE, max_examples=60)
@given(st.data())
def test_a_loose_shape_is_an_unreadable_entry_naming_the_object(data):
    """A value under a GpuNodeState's `status` or a ScaledObject's `spec` replaced by one of
    another JSON type (a `status` that is a string, a card list that is a number, a pod entry
    that is a string...); or a pod without a namespace or a name. One unreadable entry names
    the object; everything else is read."""
    edit = Edit(base())
    if data.draw(st.integers(0, 5), label="pod") == 0:
        i = data.draw(st.sampled_from(range(len(BASE.pods))), label="pod")
        gone = data.draw(st.sampled_from(["namespace", "name"]), label="field")
        pod = as_model(BASE.pods[i], "V1Pod")
        setattr(pod.metadata, gone, None)
        edit.cluster.pods[i] = pod
        edit.changed[("pods", i)] = [("metadata", gone)]
        ns, name = ident(BASE.pods[i])
        edit.reported(f"Pod {ns}/?" if gone == "name" else f"Pod {name}", f"metadata.{gone}")
        event(f"pod without {gone}")
    else:
        src = data.draw(st.sampled_from(sorted(LOOSE)), label="object")
        root = LOOSE[src]
        target = obj(edit, src)
        paths = [p for p in _paths(target) if p[: len(root)] == root]
        path = data.draw(st.sampled_from(paths), label="path")
        old = target
        for k in path:
            old = old[k]
        edit.set(src, path, data.draw(_other_type(old), label="value"))
        ns, name = ident(target)
        event(f"{src[0]} {'.'.join(str(p) for p in path[:3])}")
        edit.reported(f"{KINDS[src[0]]} {ns + '/' if ns else ''}{name}")
    run(edit)


def test_the_base_cluster_reads_whole_without_a_report():
    assert BASE_OBSERVED.unreadable == []
    assert len(EXPECTED) == 2 + 8 + 2 + 2 + 1 + 1 + 2 + 1, EXPECTED  # every kind it reads
    assert set(TARGET) == {("hpas", 0), ("scaled_objects", 0)}


def test_an_answer_no_api_server_gives_is_not_answered():
    """The fake's own promise: a built-in object the client cannot deserialize is not
    answered (an API server never stores it), nor a second pod of one name."""
    c = base()
    c.pods[0]["spec"]["containers"] = "main"
    c.pods[2]["metadata"]["name"] = c.pods[3]["metadata"]["name"]
    c.pods[2]["metadata"]["namespace"] = c.pods[3]["metadata"]["namespace"]
    observed, _, refused = observe_and_plan(c)
    assert {(f, i) for f, i, _ in refused if f == "pods"} == {("pods", 0), ("pods", 3)}
    assert ("namespaces", 1, f"not selected by {C.ADMISSION_NAMESPACE_LABEL}=gated") in refused
    assert isinstance(as_model(BASE.pods[0], "V1Pod"), client.V1Pod)
