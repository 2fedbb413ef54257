"""Node failure on the real control plane (issue 29): a simulated kubelet stops heartbeating
(`SimulatedKubelets.kill`: no Lease renewal, no status), the real node-lifecycle controller
marks the node Ready=Unknown after `--node-monitor-grace-period` (20 s in the session's
control plane) and taints it unreachable, and gpupool recovers:

* an 8-GPU Job of two 4-GPU pods on two nodes loses one node: the whole gang is stopped (its
  survivor checkpoints, the Job is suspended with `gpupool.io/recoveries`), resumed and
  admitted whole on healthy nodes, never on the failed one;
* an inference replica on the failed node is evicted at once and its Deployment's replacement
  runs elsewhere.

On main's code neither happens (the node is only fenced: the gang keeps its surviving pod's
cards and never runs again, the replica waits for its NoExecute toleration, 300 s). Pods on the
dead node stay Terminating (no kubelet confirms their end), so these tests settle the cluster
without waiting for them (`settle_live`).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from reconciler.conventions import (
    CORDONED_FOR_ANN,
    GPU_RESOURCE,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    POOL_LABEL,
    RECOVERIES_ANN,
)
from reconciler.plan.stages.recovery import LOST_TAINTS

from .gating import gated_namespace
from .harness import (
    add_gpu_node,
    controller,
    converge,
    create_inference_deployment,
    create_pod,
    node_state,
)
from .scenario import TEXT, base, seed_priority_classes

DEAD = "h100-2"


def gang_job(ns: str, name: str, pods: int = 2, gpus: int = 4, backoff: int = 0) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "registry.example/train:1",
        "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
    }
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "backoffLimit": backoff,
            "template": {
                "metadata": {
                    "labels": {"app": name},
                    "annotations": {"gpupool.io/checkpointable": "true"},
                },
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": "training-high",
                    "nodeSelector": {POOL_LABEL: "h100"},
                    "terminationGracePeriodSeconds": 1,
                    "containers": [container],
                },
            },
        },
    }


def settle_live(kube, timeout: float = 30.0, dead: str = DEAD) -> None:
    """`World.settle`, but for pods bound to a node whose kubelet is dead (they stay as they
    are, Terminating ones included), and only the live nodes' stand-ins publish."""
    deadline = time.monotonic() + timeout
    while True:
        busy = []
        for ns in kube.namespaces:
            for p in kube.core.list_namespaced_pod(ns).items:
                if p.spec.node_name == dead:
                    continue
                conds = {c.type for c in p.status.conditions or []}
                if (
                    p.metadata.deletion_timestamp
                    or (p.spec.node_name and p.status.phase == "Pending")
                    or (not p.spec.node_name and "PodScheduled" not in conds)
                ):
                    busy.append(f"{ns}/{p.metadata.name}")
        if not busy or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    for name, sim in kube.nodes.items():
        if name != dead:
            sim.annotate_pods()
            sim.observe()


def cycles(ctl, kube, n: int, step: float = 60, dead: str = DEAD) -> list:
    """`n` controller cycles; between them the live cluster settles, the live nodes' stand-ins
    step and the test clock moves on (past checkpoint grace periods)."""
    out = []
    for _ in range(n):
        r = ctl.cycle()
        assert r.error is None, r.error
        out.append(r)
        settle_live(kube, dead=dead)
        for name, sim in kube.nodes.items():
            if name != dead:
                sim.step()
        settle_live(kube, dead=dead)
        kube.clock.advance(step)
        if r.converged:
            break
    return out


def kill_and_wait_unknown(kube, name: str, timeout: float = 90.0) -> None:
    kube.kubelets.kill(name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = kube.core.read_node(name)
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        if ready.status != "True":
            return
        time.sleep(1)
    raise AssertionError(f"{name} still Ready {timeout}s after its kubelet died")


def revive(kube, name: str, timeout: float = 60.0) -> None:
    """The node's kubelet starts again; wait until the node is Ready and the node-lifecycle
    controller has taken its not-ready/unreachable taints off (a cordon's stays)."""
    kube.kubelets.set_ready(name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = kube.core.read_node(name)
        ready = next(c for c in node.status.conditions if c.type == "Ready")
        lost = {t.key for t in node.spec.taints or []} & LOST_TAINTS
        if ready.status == "True" and not lost:
            return
        time.sleep(1)
    raise AssertionError(f"{name} not Ready and untainted {timeout}s after its kubelet returned")


def pods_of(kube, ns: str, app: str) -> list:
    return kube.core.list_namespaced_pod(ns, label_selector=f"app={app}").items


def two_node_gang(kube, tmp_path, backoff: int = 0) -> str:
    """The Job `llm` of two 4-GPU pods in a gated namespace (returned), with 4 cards of each
    node taken, so its pods land on h100-1 and h100-2."""
    base(kube, tmp_path, kube.clock, workloads=False)
    seed_priority_classes(kube)
    ns = gated_namespace(kube)
    for node in ("h100-1", "h100-2"):
        create_pod(kube, "team-a", f"fill-{node}", node=node, gpus=4, cls="training-high")
    kube.batch.create_namespaced_job(ns, gang_job(ns, "llm", backoff=backoff))
    kube.settle()
    return ns


def test_a_two_node_gang_that_loses_a_node_is_stopped_whole_and_readmitted_elsewhere(
    kube, tmp_path
):
    clock = kube.clock
    ns = two_node_gang(kube, tmp_path)
    ctl = controller(kube, tmp_path, clock)
    cycles(ctl, kube, 10)
    before = {p.spec.node_name for p in pods_of(kube, ns, "llm") if p.status.phase == "Running"}
    assert before == {"h100-1", DEAD}, before

    add_gpu_node(kube, "h100-3")  # room for the gang once it comes back
    kill_and_wait_unknown(kube, DEAD)
    cycles(ctl, kube, 25)

    job = kube.batch.read_namespaced_job("llm", ns)
    assert (job.metadata.annotations or {}).get(RECOVERIES_ANN) == "1"  # stopped once, whole
    assert not job.spec.suspend  # and resumed
    live = [p for p in pods_of(kube, ns, "llm") if not p.metadata.deletion_timestamp]
    assert len(live) == 2, [(p.metadata.name, p.spec.node_name) for p in live]
    assert all(p.status.phase == "Running" and p.spec.node_name != DEAD for p in live)
    assert all(not p.spec.scheduling_gates for p in live)


def test_an_inference_replica_on_a_failed_node_is_replaced_at_once(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock, workloads=False)
    seed_priority_classes(kube, TEXT)
    # h100-1 full of training: the replica lands on h100-2's shared cards
    create_pod(kube, "team-a", "fill", node="h100-1", gpus=8, cls="training-high")
    create_inference_deployment(kube, "team-b", "chat", replicas=1, queue=0)
    kube.settle()
    ctl = controller(kube, tmp_path, clock)
    # h100-2's cards are shared (the device plugin's mounted config takes a while: the clock
    # moves on between cycles) and the replica runs there
    converge(ctl, kube, clock=clock, step=30)
    (first,) = [p for p in pods_of(kube, "team-b", "chat") if p.status.phase == "Running"]
    assert first.spec.node_name == DEAD

    add_gpu_node(kube, "h100-3")
    converge(ctl, kube, clock=clock, step=30)
    kill_and_wait_unknown(kube, DEAD)
    cycles(ctl, kube, 15, step=30)  # h100-3 is shared for the replacement
    pods = pods_of(kube, "team-b", "chat")
    old = next(p for p in pods if p.metadata.name == first.metadata.name)
    assert old.metadata.deletion_timestamp  # evicted by gpupool, not after 300 s
    running = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    where = [(p.metadata.name, p.status.phase, p.spec.node_name) for p in pods]
    assert [p.spec.node_name for p in running] == ["h100-3"], where


def single_node_gang(kube, tmp_path, text: str = TEXT) -> str:
    """h100-1 full of work that is not preemptible; an 8-GPU Job (one pod) runs on h100-2."""
    base(kube, tmp_path, kube.clock, text=text, workloads=False)
    seed_priority_classes(kube, text)
    ns = gated_namespace(kube)
    create_pod(kube, "team-a", "fill", node="h100-1", gpus=8, cls="training-high")
    kube.batch.create_namespaced_job(ns, gang_job(ns, "solo", pods=1, gpus=8))
    kube.settle()
    return ns


def test_a_single_node_gang_on_a_failed_node_is_stopped_and_readmitted_elsewhere(kube, tmp_path):
    ns = single_node_gang(kube, tmp_path)
    ctl = controller(kube, tmp_path, kube.clock)
    cycles(ctl, kube, 10)
    (pod,) = pods_of(kube, ns, "solo")
    assert (pod.status.phase, pod.spec.node_name) == ("Running", DEAD)
    add_gpu_node(kube, "h100-3")
    kill_and_wait_unknown(kube, DEAD)
    cycles(ctl, kube, 20)
    job = kube.batch.read_namespaced_job("solo", ns)
    assert (job.metadata.annotations or {}).get(RECOVERIES_ANN) == "1"
    assert not job.spec.suspend
    live = [p for p in pods_of(kube, ns, "solo") if not p.metadata.deletion_timestamp]
    assert [(p.status.phase, p.spec.node_name) for p in live] == [("Running", "h100-3")]


def test_a_node_that_comes_back_settles_before_the_gang_returns_to_it(kube, tmp_path):
    """No other room: the stopped Job waits suspended; its node comes back and the gang is
    resumed there only once the node has been Ready for the Pool's nodeSettleTime (20 s)."""
    text = TEXT.replace(
        "gpuModel: H100-SXM5-80GB", "gpuModel: H100-SXM5-80GB\n  nodeSettleTime: 20s", 1
    )
    assert text != TEXT
    ns = single_node_gang(kube, tmp_path, text)
    ctl = controller(kube, tmp_path, kube.clock)
    cycles(ctl, kube, 10)
    time.sleep(25)  # the node has been Ready a while (a node that only just joined is new)
    kill_and_wait_unknown(kube, DEAD)
    cycles(ctl, kube, 8)
    job = kube.batch.read_namespaced_job("solo", ns)
    assert job.spec.suspend and (job.metadata.annotations or {}).get(RECOVERIES_ANN) == "1"

    revive(kube, DEAD)
    kube.clock.now = datetime.now(UTC)  # the node is back now, by the controller's clock too
    r = ctl.cycle()
    assert r.error is None, r.error
    assert "node-settling" in {f.code for f in r.plan.findings}
    assert not [a for a in r.plan.actions if a.kind == "resume"]
    kube.clock.advance(60)  # past the settle time
    kube.nodes[DEAD].annotate_pods()  # its agent, back with the node, reports (node-unreported)
    cycles(ctl, kube, 15, dead="")
    job = kube.batch.read_namespaced_job("solo", ns)
    assert not job.spec.suspend
    live = [p for p in pods_of(kube, ns, "solo") if not p.metadata.deletion_timestamp]
    assert [(p.status.phase, p.spec.node_name) for p in live] == [("Running", DEAD)]


def fail_pod(kube, ns: str, name: str) -> None:
    """What the kubelet does when a pod's container exits non-zero (restartPolicy Never): the
    devices go back to its device manager, the pod turns Failed with the container terminated
    (exit code 1, finishedAt now), and the node agent republishes who holds which card."""
    pod = kube.core.read_namespaced_pod(name, ns)
    node = pod.spec.node_name
    kube.kubelets.device_managers[node].release(f"{ns}/{name}")
    t = datetime.now(UTC).isoformat()
    terminated = {"exitCode": 1, "reason": "Error", "startedAt": t, "finishedAt": t}
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": c.name,
                "image": c.image,
                "imageID": c.image,
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
            for c in pod.spec.containers
        ],
    }
    kube.core.patch_namespaced_pod_status(
        name, ns, {"status": status}, _content_type="application/merge-patch+json"
    )
    kube.nodes[node].annotate_pods()


def test_a_gang_whose_member_fails_is_stopped_whole_and_readmitted(kube, tmp_path):
    """Issue 29 item 1, "it failed": a pod of a 2 x 4-GPU Job exits non-zero on a healthy node.
    The Job's backoffLimit lets the Job controller make a replacement pod; on main that pod was
    admitted alone beside the survivor, which ran on. Now the survivor checkpoints, the Job
    is suspended (`gpupool.io/recoveries`), resumed, and both pods run again, from the
    checkpoint."""
    clock = kube.clock
    ns = two_node_gang(kube, tmp_path, backoff=3)
    ctl = controller(kube, tmp_path, clock)
    cycles(ctl, kube, 10, dead="")
    first = [p for p in pods_of(kube, ns, "llm") if p.status.phase == "Running"]
    assert len(first) == 2, [(p.metadata.name, p.status.phase) for p in first]
    crashed = next(p for p in first if p.spec.node_name == DEAD)
    fail_pod(kube, ns, crashed.metadata.name)
    results = cycles(ctl, kube, 20, dead="")

    lost = [f for r in results for f in r.plan.findings if f.code == "gang-member-lost"]
    assert lost and f"{crashed.metadata.name} failed" in lost[0].message, lost
    job = kube.batch.read_namespaced_job("llm", ns)
    assert (job.metadata.annotations or {}).get(RECOVERIES_ANN) == "1"
    assert not job.spec.suspend  # resumed

    def live() -> list:
        return [
            p
            for p in pods_of(kube, ns, "llm")
            if not p.metadata.deletion_timestamp and p.status.phase != "Failed"
        ]

    # the Job controller creates the resumed pods after its backoff for the failure (10 s)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (
        len(live()) == 2 and all(p.status.phase == "Running" for p in live())
    ):
        time.sleep(2)
        cycles(ctl, kube, 3, dead="")
    live = live()
    assert len(live) == 2 and all(p.status.phase == "Running" for p in live), [
        (p.metadata.name, p.status.phase) for p in live
    ]
    survivors = {p.metadata.name for p in first if p is not crashed}
    assert not survivors & {p.metadata.name for p in live}  # the survivor was stopped too


def until_mig_manager_pending(ctl, kube) -> None:
    """Cycles of the standard scenario (checkpoint and preempt bert-new, cordon h100-2, MIG on
    one of its cards) until h100-2's mig-manager has taken up gpupool's config and says
    `pending`: the repartition is under way there."""
    sim = kube.nodes[DEAD]
    for _ in range(25):
        r = ctl.cycle()
        assert r.error is None, r.error
        kube.settle()
        for name, other in kube.nodes.items():
            if name != DEAD:
                other.step()
        sim.device_plugin.step()
        if sim.mig_manager.step() == "pending":
            return
        sim.annotate_pods()
        kube.settle()
        kube.clock.advance(60)
    raise AssertionError(f"mig-manager on {DEAD} never started gpupool's config")


def test_a_node_lost_mid_repartition_is_abandoned_replanned_and_read_again_on_return(
    kube, tmp_path
):
    """Issue 29 item 2: h100-2 is cordoned and its mig-manager is applying gpupool's config
    when its kubelet dies. Nothing more is done there; the MIG pods' room is made on h100-3
    instead. When h100-2 comes back (past its settle time) with its agent not yet reporting,
    nothing is placed, repartitioned or uncordoned there (on main the plan read it from the
    agent's state of before the failure and planned its uncordon, held back only by the apply
    handler while mig-manager said pending); once mig-manager has finished and the agent has
    published the real layout, gpupool's cordon is undone."""
    text = TEXT.replace(
        "gpuModel: H100-SXM5-80GB", "gpuModel: H100-SXM5-80GB\n  nodeSettleTime: 20s", 1
    )
    base(kube, tmp_path, kube.clock, text=text)
    ctl = controller(kube, tmp_path, kube.clock)
    until_mig_manager_pending(ctl, kube)
    node = kube.core.read_node(DEAD)
    assert node.spec.unschedulable and CORDONED_FOR_ANN in node.metadata.annotations
    assert node.metadata.labels[MIG_STATE_LABEL] == "pending"

    add_gpu_node(kube, "h100-3")
    kill_and_wait_unknown(kube, DEAD)
    dead = cycles(ctl, kube, 20)
    assert not [a.id for r in dead for a in r.plan.actions if a.target == DEAD]
    rankers = [
        p for p in kube.core.list_namespaced_pod("team-b").items if "ranker" in p.metadata.name
    ]
    assert [(p.status.phase, p.spec.node_name) for p in rankers] == [("Running", "h100-3")] * 2
    node = kube.core.read_node(DEAD)
    assert node.spec.unschedulable and CORDONED_FOR_ANN in node.metadata.annotations

    revive(kube, DEAD)  # back; its agent has not published since
    # the test clock runs minutes ahead of the kubelet's (each cycle moves it 60 s): the node
    # is past its nodeSettleTime by it; turning it back would also turn back what the mounted
    # ConfigMaps hold (tests/nvidia/mounted.py)
    kube.clock.advance(60)
    r = ctl.cycle()
    assert r.error is None, r.error
    assert "node-unreported" in {f.code for f in r.plan.findings}, r.plan.findings
    assert not [a.id for a in r.plan.actions if a.target == DEAD]
    assert kube.core.read_node(DEAD).spec.unschedulable

    kube.nodes[DEAD].step()  # mig-manager finishes its run; the agent publishes
    assert kube.core.read_node(DEAD).metadata.labels[MIG_STATE_LABEL] == "success"
    cycles(ctl, kube, 15, dead="")
    node = kube.core.read_node(DEAD)
    assert not node.spec.unschedulable
    assert CORDONED_FOR_ANN not in (node.metadata.annotations or {})
    assert node.metadata.labels[MIG_CONFIG_LABEL].startswith("gpupool-")
    published = node_state(kube, DEAD)["status"]["gpus"]
    assert any(g.get("migEnabled") or g.get("mig_enabled") for g in published), published
