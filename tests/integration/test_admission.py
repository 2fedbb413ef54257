"""Admission on the real control plane: a gated gang gets exactly the cards freed for it.

The done-criterion of the admission issue: an 8-GPU Job that needs a preemption, in a
namespace gpupool gates (deploy/admission-gate.yaml), is admitted onto the node whose work
was preempted for it, once that work is gone, and onto nothing else; a lower-priority gated
pod that would fit in the freed cards stays gated, with the reason on it; nothing is
evicted twice. The real kube-scheduler binds the admitted pod (its node affinity is the only
thing that makes it pick that node), the real Job controller creates the pod (the admission
policy gates it), the simulated kubelets run it with devices from the node's device manager.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from reconciler.conventions import (
    ADMISSION_GATE,
    ADMITTED_CONDITION,
    GPU_RESOURCE,
    POOL_LABEL,
    RESERVED_ANN,
)

from .gating import gated_namespace
from .harness import (
    NS,
    audit_mark,
    controller,
    converge,
    create_pod,
    evictions,
    node_state,
)
from .scenario import TEXT, base, seed_priority_classes
from .world import CONTROLLER_SA

# training-high may preempt training-low here (checkpoint first: grace period 5m)
POLICY = TEXT.replace(
    "{preemptor: training-high, victims: [spot], when: always}",
    "{preemptor: training-high, victims: [spot, training-low], when: always}",
)
assert POLICY != TEXT
CONTROLLER = f"system:serviceaccount:{NS}:{CONTROLLER_SA}"


def job(ns: str, name: str, gpus: int, cls: str, parallelism: int = 1) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "registry.example/train:1",
        "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
    }
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": cls,
                    "nodeSelector": {POOL_LABEL: "h100"},
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                },
            },
        },
    }


def pods_of(kube, ns: str, app: str) -> list:
    return kube.core.list_namespaced_pod(ns, label_selector=f"app={app}").items


def test_a_gang_needing_a_preemption_gets_exactly_the_freed_cards(kube, tmp_path):
    clock = kube.clock
    # h100-1: resnet (training-high, 8 cards, not preemptible); h100-2: bert-old and bert-new
    # (training-low, 4 cards each): the only cards that can be freed for the gang
    base(kube, tmp_path, clock, text=POLICY, pending=False)
    ns = gated_namespace(kube)
    kube.batch.create_namespaced_job(ns, job(ns, "llm", 8, "training-high"))
    # a lower-priority gated pod that would fit in half of the freed cards
    create_pod(kube, ns, "small", gpus=4, cls="training-low")
    kube.settle()
    (gang_pod,) = pods_of(kube, ns, "llm")
    assert [g.name for g in gang_pod.spec.scheduling_gates or []] == [ADMISSION_GATE]

    mark = audit_mark(kube)  # the audit log is the session's: count this test's only
    ctl = controller(kube, tmp_path, clock)
    results = converge(ctl, kube, clock=clock, step=60, max_cycles=20)
    assert all(r.error is None for r in results)

    (gang_pod,) = pods_of(kube, ns, "llm")
    assert gang_pod.status.phase == "Running" and gang_pod.spec.node_name == "h100-2"
    assert not gang_pod.spec.scheduling_gates
    assert (gang_pod.metadata.annotations or {})[RESERVED_ANN] == "h100-2:" + ",".join(
        str(i) for i in range(8)
    )
    # the cards the device plugin gave it (the node agent's PodResources view) are the ones
    # freed: every card of h100-2, which bert-old and bert-new held
    held = {
        f"{e['namespace']}/{e['name']}": sorted(a["gpu"] for a in e.get("allocations", []))
        for e in node_state(kube, "h100-2")["status"]["pods"]
    }
    assert held == {f"{ns}/{gang_pod.metadata.name}": list(range(8))}
    # admitted only once the victims were gone: the kubelet's final deletion of both comes
    # before gpupool's last write to the gang pod (the patch that ungated it)
    log = kube.plane.audit_events()
    gone = max(
        i
        for i, e in enumerate(log)
        if e.verb == "delete" and e.resource == "pods" and e.name in ("bert-old", "bert-new")
    )
    admitted = max(
        i
        for i, e in enumerate(log)
        if e.user == CONTROLLER and e.verb == "patch" and e.name == gang_pod.metadata.name
    )
    assert gone < admitted
    # exactly the two victims, each once; resnet untouched
    assert Counter(evictions(kube, since=mark)) == Counter(
        {"team-b/bert-old": 1, "team-b/bert-new": 1}
    )
    assert kube.core.read_namespaced_pod("resnet", "team-a").status.phase == "Running"
    # the small pod stays gated, and says why
    small = kube.core.read_namespaced_pod("small", ns)
    assert [g.name for g in small.spec.scheduling_gates or []] == [ADMISSION_GATE]
    assert not small.spec.node_name
    (cond,) = [c for c in small.status.conditions or [] if c.type == ADMITTED_CONDITION]
    assert cond.status == "False" and "small" not in cond.message and cond.message


def test_a_jobs_gang_is_suspended_for_a_preemptor_and_resumed_when_it_is_gone(kube, tmp_path):
    """The victim is a Job: gpupool stops it by suspending the Job (the real Job controller
    deletes its pod and creates none, and counts no failure), admits the preemptor onto the
    cards, and when the preemptor's Job is deleted resumes the victim, whose new pod is gated
    and admitted again."""
    clock = kube.clock
    base(kube, tmp_path, clock, text=POLICY, pending=False)
    ns = gated_namespace(kube)
    # bert-old/bert-new leave h100-2 to the victim Job
    for name in ("bert-old", "bert-new"):
        kube.core.delete_namespaced_pod(name, "team-b", grace_period_seconds=0)
    kube.batch.create_namespaced_job(ns, job(ns, "victim", 8, "training-low"))
    kube.settle()
    ctl = controller(kube, tmp_path, clock)
    converge(ctl, kube, clock=clock, step=60, max_cycles=10)
    (v,) = pods_of(kube, ns, "victim")
    assert (v.status.phase, v.spec.node_name) == ("Running", "h100-2")
    clock.advance(20 * 60)  # past minRuntime

    mark = len(kube.plane.audit_events())
    kube.batch.create_namespaced_job(ns, job(ns, "llm", 8, "training-high"))
    kube.settle()
    converge(ctl, kube, clock=clock, step=60, max_cycles=20)
    (gang_pod,) = pods_of(kube, ns, "llm")
    assert (gang_pod.status.phase, gang_pod.spec.node_name) == ("Running", "h100-2")
    victim = kube.batch.read_namespaced_job("victim", ns)
    assert victim.spec.suspend is True
    assert pods_of(kube, ns, "victim") == []
    assert not (victim.status.failed or 0)  # suspension spends no backoffLimit retry
    assert evictions(kube, since=mark) == []  # stopped by suspension, not evicted

    kube.batch.delete_namespaced_job("llm", ns, propagation_policy="Foreground")
    kube.settle()
    converge(ctl, kube, clock=clock, step=60, max_cycles=20)
    victim = kube.batch.read_namespaced_job("victim", ns)
    assert not victim.spec.suspend
    (again,) = pods_of(kube, ns, "victim")
    assert (again.status.phase, again.spec.node_name) == ("Running", "h100-2")
    assert not again.spec.scheduling_gates


def test_a_gated_pod_wakes_the_running_loop(kube, tmp_path):
    """`gpupool reconcile` cycles every 30 s by default; a pod waiting behind the gate must not
    wait for that. The loop runs with a 10-minute interval here: only the pod's watch event can
    get it admitted (and bound by the real scheduler) within seconds."""
    base(kube, tmp_path, kube.clock, text=POLICY, workloads=False)
    seed_priority_classes(kube, POLICY)
    ns = gated_namespace(kube)
    ctl = controller(kube, tmp_path, kube.clock, wake_gap_seconds=0.5)
    stop = threading.Event()
    kube.cleanup(stop.set)
    threading.Thread(target=ctl.run, args=(stop, 600.0), daemon=True).start()
    deadline = time.monotonic() + 60
    while ctl.last_ok is None:  # the first cycle (priority classes, labels) is done
        assert time.monotonic() < deadline, "the loop's first cycle did not finish"
        time.sleep(0.1)
    time.sleep(1.0)  # past the wake gap, and the first cycle's own writes
    create_pod(kube, ns, "woken", gpus=2, cls="training-low")
    deadline = time.monotonic() + 30
    while not (p := kube.core.read_namespaced_pod("woken", ns)).spec.node_name:
        assert time.monotonic() < deadline, (
            f"not admitted within 30 s: gates {p.spec.scheduling_gates}, "
            f"annotations {p.metadata.annotations}"
        )
        time.sleep(0.2)
    assert not p.spec.scheduling_gates and p.spec.node_name in ("h100-1", "h100-2")


def test_a_suspension_is_ours_only_while_gpupool_owns_spec_suspend(kube):
    """gpupool resumes only Jobs it suspended. Its annotation outlives its suspension when
    someone else unsuspends the Job; if another system then suspends it again, the API
    server's field ownership of spec.suspend (managedFields) says it is no longer ours."""
    from reconciler.apply.kube import KubeOps
    from reconciler.conventions import SUSPENDED_BY_ANN
    from reconciler.observe.kube import read_owners

    ns = kube.new_namespace()
    body = job(ns, "victim", 1, "training-low")
    body["spec"]["template"]["spec"]["schedulerName"] = "nobody"  # never placed
    kube.batch.create_namespaced_job(ns, body)
    api = kube.controller_client()

    def ours() -> bool:
        return any(j.name == "victim" and j.namespace == ns for j in read_owners(api).suspended)

    KubeOps(api).set_job_suspend(
        ns, "victim", suspend=True, annotations={SUSPENDED_BY_ANN: kube.clock.now.isoformat()}
    )
    assert ours()
    # someone unsuspends it, and another system (as Kueue would) suspends it again
    for value in (False, True):
        kube.batch.patch_namespaced_job(
            "victim", ns, {"spec": {"suspend": value}}, field_manager="kueue-admission"
        )
    j = kube.batch.read_namespaced_job("victim", ns)
    assert j.spec.suspend and SUSPENDED_BY_ANN in (j.metadata.annotations or {})
    assert not ours()
