"""Gangs from the Workload API on the real control plane (issue 32, item 5).

The session's control plane serves `scheduling.k8s.io/v1beta1` and runs with the
`GenericWorkload` gate (tests/cluster/controlplane.py, `FEATURE_GATES`, `RUNTIME_CONFIG`), so the
real kube-scheduler has its GangScheduling plugin and its pod-group scheduling cycle: pods naming
a gang PodGroup (`spec.schedulingGroup.podGroupName`) are placed as one group, `minCount` of them
or none, and the scheduler writes the outcome on the group (condition
`PodGroupInitiallyScheduled`). gpupool reads the group as a gang
(reconciler/observe/kube_podgroups.py) and, in a namespace it gates, admits it all or nothing;
the two must agree:

* a gang of two 4-GPU pods, on two nodes with four free cards each: while one pod exists gpupool
  admits nothing; once both do, it admits both in one cycle and the real scheduler binds both
  (one to each node) as one group;
* a gang that does not fit (three 8-GPU pods on two 8-card nodes) stays whole: gpupool admits
  none of it; and the real scheduler agrees: with every pod's gate removed by hand it binds none
  ("minCount (3) cannot be satisfied"), though two would fit, as it does at minCount 2; with one
  pod of a two-pod gang ungated it binds nothing until the other is ungated too;
* a group whose priority is not its pods' (a PodGroup without priorityClassName gets the default
  class): gpupool holds it with a finding, and the scheduler refuses the whole group for it;
* a member's node dies: gpupool stops the whole group (the survivor checkpoints and is evicted,
  the lost pod is evicted), never a part of it.

The pods are bare pods (what a JobSet or LeaderWorkerSet would make): gpupool stops them by
eviction, the stop path of every gang that is not a Job's.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from reconciler.conventions import (
    ADMISSION_GATE,
    GPU_RESOURCE,
    POOL_LABEL,
    WORKLOAD_API_GROUP,
    WORKLOAD_API_VERSION,
    WORKLOAD_POD_GROUP_PLURAL,
)

from .gating import gate_names, gated_namespace
from .harness import audit_mark, controller, create_pod, evictions, writes
from .scenario import base, seed_priority_classes

DEAD = "h100-2"


def pod_group(kube, ns: str, name: str, min_count: int, cls: str | None = "training-high") -> None:
    """A gang PodGroup; `cls` its priority class (None: none, the default class applies)."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if cls:
        # the pods' class: kube-scheduler refuses a group whose pods' priority is not the
        # group's (without it the group gets the default class, training-low)
        spec["priorityClassName"] = cls
    kube.custom.create_namespaced_custom_object(
        WORKLOAD_API_GROUP,
        WORKLOAD_API_VERSION,
        ns,
        WORKLOAD_POD_GROUP_PLURAL,
        {
            "apiVersion": f"{WORKLOAD_API_GROUP}/{WORKLOAD_API_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def member(kube, ns: str, group: str, i: int, gpus: int) -> None:
    """Pod `<group>-<i>` of PodGroup `group`, asking for `gpus` whole cards in pool h100."""
    container = {
        "name": "main",
        "image": "registry.example/train:1",
        "resources": {"limits": {GPU_RESOURCE: str(gpus)}},
    }
    spec: dict[str, Any] = {
        "schedulingGroup": {"podGroupName": group},
        "priorityClassName": "training-high",
        "nodeSelector": {POOL_LABEL: "h100"},
        "terminationGracePeriodSeconds": 1,
        "restartPolicy": "Never",
        "containers": [container],
    }
    meta = {
        "name": f"{group}-{i}",
        "labels": {"app": group},
        "annotations": {"gpupool.io/checkpointable": "true"},
    }
    kube.core.create_namespaced_pod(ns, {"metadata": meta, "spec": spec})


def pods(kube, ns: str, group: str) -> list:
    return sorted(
        kube.core.list_namespaced_pod(ns, label_selector=f"app={group}").items,
        key=lambda p: p.metadata.name,
    )


def where(kube, ns: str, group: str) -> dict[str, tuple[str | None, str, list[str]]]:
    """Pod -> (node, phase, scheduling gates)."""
    return {
        p.metadata.name: (p.spec.node_name, p.status.phase, gate_names(p))
        for p in pods(kube, ns, group)
    }


def setup(kube, tmp_path) -> str:
    """h100-1 and h100-2 with four cards each taken by work that is not preemptible; a
    namespace gpupool gates. Returns the namespace."""
    base(kube, tmp_path, kube.clock, workloads=False)
    seed_priority_classes(kube)
    ns = gated_namespace(kube)
    for node in ("h100-1", DEAD):
        create_pod(kube, "team-a", f"fill-{node}", node=node, gpus=4, cls="training-high")
    return ns


def cycles(ctl, kube, n: int, dead: str = "", step: float = 60) -> None:
    """`n` controller cycles; between them the stand-ins of the live nodes publish and step,
    and the test clock moves on. No wait for unbound pods: a gang's pods the scheduler holds
    get no PodScheduled condition (World.settle would wait for one)."""
    for _ in range(n):
        r = ctl.cycle()
        assert r.error is None, r.error
        time.sleep(1.0)  # the scheduler and the kubelets act on what the cycle wrote
        for name, sim in kube.nodes.items():
            if name != dead:
                sim.annotate_pods()
                sim.observe()
                sim.step()
        kube.clock.advance(step)


def wait_bound(kube, ns: str, group: str, count: int, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        now = where(kube, ns, group)
        if sum(1 for node, phase, _ in now.values() if node and phase == "Running") >= count:
            return now
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} pod(s) of {group} not running in {timeout}s: {now}")
        time.sleep(0.2)


def group_scheduled(kube, ns: str, name: str, status: str, timeout: float = 30) -> dict:
    """The PodGroup's `PodGroupInitiallyScheduled` condition, once it has `status`: what
    kube-scheduler's pod-group cycle writes (pkg/scheduler/schedule_one_podgroup.go)."""
    deadline = time.monotonic() + timeout
    while True:
        g = kube.custom.get_namespaced_custom_object(
            WORKLOAD_API_GROUP, WORKLOAD_API_VERSION, ns, WORKLOAD_POD_GROUP_PLURAL, name
        )
        conds = {c["type"]: c for c in (g.get("status") or {}).get("conditions") or []}
        found = conds.get("PodGroupInitiallyScheduled")
        if found and found["status"] == status:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"PodGroup {ns}/{name}: no condition {status} in {conds}")
        time.sleep(0.2)


def ungate(kube, ns: str, name: str) -> None:
    """Remove gpupool's gate by hand, as someone bypassing gpupool would."""
    p = kube.core.read_namespaced_pod(name, ns)
    kept = [{"name": g} for g in gate_names(p) if g != ADMISSION_GATE]
    kube.core.patch_namespaced_pod(name, ns, {"spec": {"schedulingGates": kept or None}})


def test_a_podgroup_gang_is_admitted_whole_and_bound_by_the_gang_scheduler(kube, tmp_path):
    ns = setup(kube, tmp_path)
    pod_group(kube, ns, "llm", 2)
    member(kube, ns, "llm", 0, gpus=4)
    ctl = controller(kube, tmp_path, kube.clock)
    cycles(ctl, kube, 2)
    # one of two: gpupool admits nothing (its reason on the pod), the pod keeps its gate
    assert where(kube, ns, "llm") == {"llm-0": (None, "Pending", [ADMISSION_GATE])}
    r = ctl.cycle()
    assert "gang-incomplete" in {f.code for f in r.plan.findings if f.subject == f"{ns}/llm-0"}

    mark = audit_mark(kube)
    member(kube, ns, "llm", 1, gpus=4)
    r = ctl.cycle()
    assert r.error is None, r.error
    (admit,) = [a for a in r.plan.actions if a.kind == "admit"]
    assert sorted(p.name for p in admit.pods) == ["llm-0", "llm-1"]
    now = wait_bound(kube, ns, "llm", 2)
    assert {node for node, _, _ in now.values()} == {"h100-1", DEAD}, now
    assert all(not gates for _, _, gates in now.values())
    assert group_scheduled(kube, ns, "llm", "True")["reason"] == "Scheduled"  # as one group
    # both admitted in that one cycle, by gpupool: one patch each
    patched = {
        e.name for e in writes(kube, since=mark) if e.resource == "pods" and not e.subresource
    }
    assert {"llm-0", "llm-1"} <= patched


def test_a_gang_that_does_not_fit_stays_whole_and_the_scheduler_agrees(kube, tmp_path):
    ns = setup(kube, tmp_path)
    for node in ("h100-1", DEAD):  # the fills go: two empty 8-card nodes
        kube.core.delete_namespaced_pod(f"fill-{node}", "team-a", grace_period_seconds=0)
    kube.settle()
    pod_group(kube, ns, "big", 3)
    for i in range(3):
        member(kube, ns, "big", i, gpus=8)
    ctl = controller(kube, tmp_path, kube.clock)
    cycles(ctl, kube, 3)
    now = where(kube, ns, "big")
    assert all(gates == [ADMISSION_GATE] and node is None for node, _, gates in now.values()), now

    # kube-scheduler on its own: all three ungated by hand, two would fit, none is bound ...
    for i in range(3):
        ungate(kube, ns, f"big-{i}")
    time.sleep(8)
    now = where(kube, ns, "big")
    assert all(node is None and not gates for node, _, gates in now.values()), now
    refused = group_scheduled(kube, ns, "big", "False")  # its own words
    assert refused["reason"] == "Unschedulable", refused
    assert "minCount (3) cannot be satisfied" in refused["message"], refused
    # ... because of the gang: at minCount 2, two are bound, one to each node
    kube.custom.patch_namespaced_custom_object(
        WORKLOAD_API_GROUP,
        WORKLOAD_API_VERSION,
        ns,
        WORKLOAD_POD_GROUP_PLURAL,
        "big",
        {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
    )
    now = wait_bound(kube, ns, "big", 2)
    assert sorted(node for node, _, _ in now.values() if node) == ["h100-1", DEAD], now


def test_the_scheduler_binds_no_part_of_a_gang_ungated_in_part(kube, tmp_path):
    """One pod of a complete two-pod gang ungated alone (an admission cut short): the real
    scheduler does not bind it; it binds both once the other is ungated too."""
    ns = setup(kube, tmp_path)
    pod_group(kube, ns, "pair", 2)
    for i in range(2):
        member(kube, ns, "pair", i, gpus=1)
    ungate(kube, ns, "pair-0")
    time.sleep(8)
    assert where(kube, ns, "pair")["pair-0"][0] is None, where(kube, ns, "pair")
    ungate(kube, ns, "pair-1")
    wait_bound(kube, ns, "pair", 2)


def test_a_group_whose_priority_is_not_its_pods_is_held_and_the_scheduler_agrees(kube, tmp_path):
    """A PodGroup without priorityClassName gets the default class (training-low), its pods are
    training-high: gpupool holds them (a finding), and kube-scheduler, given them ungated by
    hand, refuses the whole group for it."""
    ns = setup(kube, tmp_path)
    pod_group(kube, ns, "odd", 2, cls=None)
    for i in range(2):
        member(kube, ns, "odd", i, gpus=1)
    ctl = controller(kube, tmp_path, kube.clock)
    r = ctl.cycle()
    assert r.error is None, r.error
    assert not [a for a in r.plan.actions if a.kind == "admit"]
    said = [f.message for f in r.plan.findings if f.subject == f"Pod {ns}/odd-0"]
    assert any("its PodGroup odd 10000" in m for m in said), said
    for i in range(2):
        ungate(kube, ns, f"odd-{i}")
    refused = group_scheduled(kube, ns, "odd", "False")
    assert "should have the same priority as the pod group's priority" in refused["message"]
    assert all(node is None for node, _, _ in where(kube, ns, "odd").values())


def test_a_member_whose_node_dies_stops_the_whole_group(kube, tmp_path):
    ns = setup(kube, tmp_path)
    pod_group(kube, ns, "llm", 2)
    for i in range(2):
        member(kube, ns, "llm", i, gpus=4)
    ctl = controller(kube, tmp_path, kube.clock)
    cycles(ctl, kube, 3)
    now = wait_bound(kube, ns, "llm", 2)
    on_dead = next(name for name, (node, _, _) in now.items() if node == DEAD)
    survivor = next(name for name in now if name != on_dead)

    mark = audit_mark(kube)
    kube.kubelets.kill(DEAD)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        node = kube.core.read_node(DEAD)
        if next(c for c in node.status.conditions if c.type == "Ready").status != "True":
            break
        time.sleep(1)
    findings = []
    for _ in range(12):  # past the survivor's checkpoint grace period (5 m of the test's clock)
        r = ctl.cycle()
        assert r.error is None, r.error
        findings += [f for f in r.plan.findings if f.code == "gang-member-lost"]
        if set(evictions(kube, since=mark)) >= {f"{ns}/{survivor}", f"{ns}/{on_dead}"}:
            break
        time.sleep(0.5)
        kube.clock.advance(60)
    assert set(evictions(kube, since=mark)) == {f"{ns}/{survivor}", f"{ns}/{on_dead}"}
    assert findings and findings[0].message.startswith("gang podgroup:llm lost")
    # the survivor is gone (its kubelet finished the eviction); the lost pod waits for its
    # dead kubelet, Terminating
    left = {p.metadata.name: p for p in pods(kube, ns, "llm")}
    assert survivor not in left or left[survivor].metadata.deletion_timestamp, left
    assert left[on_dead].metadata.deletion_timestamp


def test_the_podgroup_api_is_served_and_listable_by_the_controller(kube):
    """The controller's own credentials list PodGroups (deploy/rbac.yaml): a 403 would read as
    an API that is not served, and gangs would silently not be read."""
    with kube.controller_client() as api:
        listed = client.CustomObjectsApi(api).list_cluster_custom_object(
            WORKLOAD_API_GROUP, WORKLOAD_API_VERSION, WORKLOAD_POD_GROUP_PLURAL
        )
    assert listed["kind"] == "PodGroupList"
