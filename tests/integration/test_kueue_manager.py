"""Kueue mode with Kueue itself running (issue 31 item 1): Kueue's manager v0.17.0, built from
its Go module (scripts/build-kueue.sh), against the suite's API server with its webhooks on
loopback (tests/integration/kueue_manager.py). gpupool renders the queues from the Quotas;
Kueue admits Jobs through them; gpupool places what Kueue admitted.

Kueue's CRDs and webhooks are installed for this module only and removed after it, so no other
test module sees Kueue."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from reconciler import conventions as C

from .crds import install_crd, remove_crds
from .gating import gated_namespace
from .harness import A100, add_gpu_node, audit_mark, controller, write_policy, writes
from .harness import outcome_texts as outcomes
from .kueue_manager import KueueManager, crd_paths, strip_kueue_objects

G, V = C.KUEUE_GROUP, C.KUEUE_VERSION


@pytest.fixture(scope="module")
def kueue(installed, tmp_path_factory):
    paths = crd_paths()  # skips without Go
    api = installed.api_client()
    names = [install_crd(api, p) for p in paths]
    mgr = KueueManager(installed, tmp_path_factory.mktemp("kueue"))
    try:
        mgr.start()
        mgr.register_webhooks(api)
        yield mgr
    finally:
        with contextlib.suppress(Exception):
            mgr.remove_webhooks(api)
        mgr.stop()
        strip_kueue_objects(api, [n.split(".", 1)[0] for n in names])
        remove_crds(api, names)
        api.close()


# ----------------------------------------------------------------------------------- helpers


def policy(sfx: str, quotas: str, *, nodes: int = 1, pool_mode: str = "kueue") -> str:
    return f"""\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: p{sfx}}}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: p{sfx}}}}}
  capacity: {{nodes: {nodes}, gpusPerNode: 8}}
  training: {{minGPUs: 0}}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {{name: cluster}}
spec:
  admission: {{controller: {pool_mode}, cohort: c{sfx}}}
  classes:
    - {{name: low-{sfx}, value: 10000, workload: training}}
{quotas}"""


def quota(name: str, namespaces: list[str], whole: str) -> str:
    return (
        f"---\napiVersion: gpupool.io/v1alpha1\nkind: Quota\nmetadata: {{name: {name}}}\n"
        f"spec:\n  namespaces: [{', '.join(namespaces)}]\n"
        f"  pools: [{{pool: POOL, whole: {whole}}}]\n"
    )


def job(name: str, gpus: int, cls: str, *, queue: bool = True, parallelism: int = 1) -> dict:
    res = {C.GPU_RESOURCE: str(gpus)}
    labels = {C.KUEUE_QUEUE_LABEL: C.KUEUE_LOCAL_QUEUE} if queue else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "priorityClassName": cls,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.example/train:1",
                            "resources": {"requests": res, "limits": res},
                        }
                    ],
                },
            },
        },
    }


def workload_of(kube, ns: str, job_name: str) -> dict | None:
    for w in kube.custom.list_namespaced_custom_object(G, V, ns, "workloads")["items"]:
        refs = w["metadata"].get("ownerReferences") or []
        if any(r["kind"] == "Job" and r["name"] == job_name for r in refs):
            return w
    return None


def admitted(w: dict | None) -> bool:
    conds = ((w or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Admitted" and c["status"] == "True" for c in conds)


def until(what: str, fn: Callable[[], Any], timeout: float = 60, step: Callable | None = None):
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        if step is not None:
            step()
        time.sleep(0.3)


def pods_of(kube, ns: str, app: str) -> list:
    return kube.core.list_namespaced_pod(ns, label_selector=f"app={app}").items


def cycle_ok(ctl):
    r = ctl.cycle()
    assert r.error is None, r.error
    return r


def setup_world(kube, tmp_path, sfx: str, quotas: str, *, nodes: int = 1, gated: bool = True):
    """A pool of `nodes` 8-card A100 nodes, the policy in kueue mode, the controller's first
    cycle (it renders the flavor, cluster queues, local queues and PriorityClasses)."""
    for i in range(nodes):
        add_gpu_node(kube, f"n{i}-{sfx}", pool=f"p{sfx}", model=A100)
    write_policy(tmp_path, policy(sfx, quotas.replace("POOL", f"p{sfx}"), nodes=nodes))
    ctl = controller(kube, tmp_path, kube.clock)
    cycle_ok(ctl)
    return ctl


def active(kube, name: str) -> bool:
    cq = kube.custom.get_cluster_custom_object(G, V, "clusterqueues", name)
    conds = (cq.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conds)


def drive(ctl, kube, done: Callable[[], bool], what: str, cycles: int = 12) -> list:
    """gpupool's cycles, the scheduler and kubelets settling and the node stand-ins stepping
    between them, until `done()`; the cycles' results."""
    results = []
    for _ in range(cycles):
        results.append(cycle_ok(ctl))
        kube.settle()
        kube.step_nodes()
        kube.settle()
        if done():
            return results
        kube.clock.advance(30)
        time.sleep(0.5)  # Kueue's turn
    raise AssertionError(f"not done after {cycles} gpupool cycles: {what}")


def running(kube, ns: str, app: str, n: int = 1) -> bool:
    pods = pods_of(kube, ns, app)
    return len(pods) == n and all(p.status.phase == "Running" for p in pods)


# ------------------------------------------------------------------------------------- tests


def test_kueue_admits_through_gpupools_queues_and_gpupool_places(kube, kueue, tmp_path):
    """Kueue decides whether (its webhook suspends the Job, its scheduler admits the Workload
    through the ClusterQueue gpupool rendered and unsuspends it with the flavor's node label),
    gpupool decides where (the Job's pod carries gpupool's gate until gpupool admits it onto a
    node and cards)."""
    sfx = uuid.uuid4().hex[:6]
    ns = gated_namespace(kube)
    cq = f"gpupool-qa-{sfx}"
    ctl = setup_world(kube, tmp_path, sfx, quota(f"qa-{sfx}", [ns], "{guaranteed: 4}"), nodes=2)
    until("Kueue to take the ClusterQueue gpupool rendered", lambda: active(kube, cq))

    created = kube.batch.create_namespaced_job(ns, job("train", 4, f"low-{sfx}"))
    assert created.spec.suspend is True  # Kueue's mutating webhook: queued, not started
    w = until(
        "Kueue to admit the Job's Workload",
        lambda: (w := workload_of(kube, ns, "train")) and admitted(w) and w,
    )
    assert w["status"]["admission"]["clusterQueue"] == cq
    (ps,) = w["status"]["admission"]["podSetAssignments"]
    assert ps["flavors"] == {C.GPU_RESOURCE: f"gpupool-p{sfx}"}
    (pod,) = until("the Job's pod (Kueue unsuspended it)", lambda: pods_of(kube, ns, "train"))
    assert pod.spec.node_selector == {C.POOL_LABEL: f"p{sfx}"}  # the flavor's nodeLabels
    assert [g.name for g in pod.spec.scheduling_gates] == [C.ADMISSION_GATE]
    assert not pod.spec.node_name

    results = drive(ctl, kube, lambda: running(kube, ns, "train"), "the pod admitted and running")
    admits = [a for r in results for a in (r.plan.actions if r.plan else ()) if a.kind == "admit"]
    (admit,) = admits
    (pod,) = pods_of(kube, ns, "train")
    assert not pod.spec.scheduling_gates
    assert pod.spec.node_name == admit.pods[0].node  # where gpupool placed it
    assert pod.metadata.annotations[C.INTENDED_GPUS_ANN]  # and on which cards
    assert kube.batch.read_namespaced_job("train", ns).spec.suspend is False
    assert admitted(workload_of(kube, ns, "train"))


def pending_reason(w: dict | None) -> str:
    """Why Kueue has not admitted `w` ("" while it has, or has not looked yet)."""
    conds = ((w or {}).get("status") or {}).get("conditions") or []
    for c in conds:
        if c["type"] == "QuotaReserved" and c["status"] == "False":
            return c.get("message", "")
    return ""


def test_over_quota_waits_in_kueue_borrowing_as_the_quota_says_and_a_removed_quota(
    kube, kueue, tmp_path
):
    """One 8-card node; team a is guaranteed 4 and may borrow 2, team b is guaranteed 4. Kueue
    admits a's 6 (4 + 2 borrowed from b's unused) and b's 2; a's next card would borrow 3: its
    Job waits in Kueue (suspended, no pod), and gpupool has nothing to say about it. b's Quota
    removed from git: gpupool prunes b's queues, and Kueue keeps b's running Job (its
    ClusterQueue stays, terminating, behind Kueue's finalizer, until the Job is gone)."""
    sfx = uuid.uuid4().hex[:6]
    ns_a, ns_b = gated_namespace(kube), gated_namespace(kube)
    qa, qb = f"qa-{sfx}", f"qb-{sfx}"
    quota_a = quota(qa, [ns_a], "{guaranteed: 4, borrowingLimit: 2}")
    ctl = setup_world(kube, tmp_path, sfx, quota_a + quota(qb, [ns_b], "{guaranteed: 4}"))
    for cq in (f"gpupool-{qa}", f"gpupool-{qb}"):
        until(f"{cq} active", lambda cq=cq: active(kube, cq))
    cls = f"low-{sfx}"
    kube.batch.create_namespaced_job(ns_b, job("b1", 2, cls))
    kube.batch.create_namespaced_job(ns_a, job("a1", 6, cls))
    for ns, name in ((ns_a, "a1"), (ns_b, "b1")):
        until(f"{name} admitted", lambda ns=ns, name=name: admitted(workload_of(kube, ns, name)))
    until(
        "a's ClusterQueue to report 6 cards, 2 of them borrowed",
        lambda: reserved(kube, qa) == ("6", "2"),
    )
    drive(ctl, kube, lambda: running(kube, ns_a, "a1") and running(kube, ns_b, "b1"), "a1, b1")

    kube.batch.create_namespaced_job(ns_a, job("a2", 1, cls))
    why = until("a2 to wait in Kueue", lambda: pending_reason(workload_of(kube, ns_a, "a2")))
    assert "borrowing limit" in why or "insufficient" in why.lower(), why
    r = cycle_ok(ctl)
    assert kube.batch.read_namespaced_job("a2", ns_a).spec.suspend is True
    assert pods_of(kube, ns_a, "a2") == []
    # about a2: its Job or pods, by namespace (a bare "a2" also matched a random pool name,
    # `p7e3ea2`, in another test's finding: whole suite, 2026-12-06)
    a2 = f"{ns_a}/a2"
    assert not [f for f in r.plan.findings if a2 in f.subject or a2 in f.message]

    # b's Quota removed from git: its LocalQueue and ClusterQueue are pruned; Kueue keeps b1
    write_policy(tmp_path, policy(sfx, quota_a.replace("POOL", f"p{sfx}")))
    kube.clock.advance(30)
    done = outcomes(ctl.cycle())
    assert done[f"prune-kueue:LocalQueue:{ns_b}/gpupool"] == "done: deleted"
    assert done[f"prune-kueue:ClusterQueue:gpupool-{qb}"] == "done: deleted"
    cq_b = kube.custom.get_cluster_custom_object(G, V, "clusterqueues", f"gpupool-{qb}")
    assert cq_b["metadata"]["deletionTimestamp"]  # held by Kueue while b1 runs
    assert "kueue.x-k8s.io/resource-in-use" in cq_b["metadata"]["finalizers"]
    for _ in range(3):
        kube.clock.advance(30)
        r = cycle_ok(ctl)
        assert not [o for o in (r.applied.outcomes if r.applied else ()) if "prune" in o.action]
    assert kube.batch.read_namespaced_job("b1", ns_b).spec.suspend is False
    assert running(kube, ns_b, "b1") and admitted(workload_of(kube, ns_b, "b1"))
    kube.batch.delete_namespaced_job("b1", ns_b, propagation_policy="Background")
    until("b's ClusterQueue gone once b1 is", lambda: _gone(kube, f"gpupool-{qb}"), timeout=90)


def reserved(kube, quota_name: str) -> tuple[str, str]:
    """(total, borrowed) whole cards Kueue reserved in the quota's ClusterQueue."""
    cq = kube.custom.get_cluster_custom_object(G, V, "clusterqueues", f"gpupool-{quota_name}")
    for fl in (cq.get("status") or {}).get("flavorsReservation") or []:
        for r in fl["resources"]:
            if r["name"] == C.GPU_RESOURCE:
                return str(r["total"]), str(r.get("borrowed", "0"))
    return "0", "0"


def _gone(kube, cq: str) -> bool:
    try:
        kube.custom.get_cluster_custom_object(G, V, "clusterqueues", cq)
    except client.ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


def test_kueue_preemption_and_gpupool_never_fight(kube, kueue, tmp_path):
    """Team a borrows all of team b's unused guarantee; team b's Job then asks for its own:
    Kueue reclaims (reclaimWithinCohort Any) by suspending a's Job once, and unsuspends b's;
    over several gpupool cycles after that neither Job's `spec.suspend` flips again, gpupool
    writes no Job, and places b's pod on the freed cards."""
    sfx = uuid.uuid4().hex[:6]
    ns_a, ns_b = gated_namespace(kube), gated_namespace(kube)
    qa, qb = f"qa-{sfx}", f"qb-{sfx}"
    quotas = quota(qa, [ns_a], "{guaranteed: 4}") + quota(qb, [ns_b], "{guaranteed: 4}")
    ctl = setup_world(kube, tmp_path, sfx, quotas)
    for cq in (f"gpupool-{qa}", f"gpupool-{qb}"):
        until(f"{cq} active", lambda cq=cq: active(kube, cq))
    cls = f"low-{sfx}"
    flips: dict[str, list[bool]] = {"a1": [], "b1": []}
    where = {"a1": ns_a, "b1": ns_b}

    def record() -> None:
        for name, seen in flips.items():
            try:
                s = bool(kube.batch.read_namespaced_job(name, where[name]).spec.suspend)
            except client.ApiException:
                continue
            if not seen or seen[-1] != s:
                seen.append(s)

    kube.batch.create_namespaced_job(ns_a, job("a1", 8, cls))
    until("a1 admitted (borrowing 4)", lambda: admitted(workload_of(kube, ns_a, "a1")))
    drive(ctl, kube, lambda: running(kube, ns_a, "a1"), "a1 running")
    record()
    mark = audit_mark(kube)
    kube.batch.create_namespaced_job(ns_b, job("b1", 4, cls))
    record()
    until("b1 admitted", lambda: admitted(workload_of(kube, ns_b, "b1")), step=record)
    drive(ctl, kube, lambda: (record() or True) and running(kube, ns_b, "b1"), "b1 running")
    for _ in range(4):  # and then nothing moves
        kube.clock.advance(30)
        cycle_ok(ctl)
        kube.settle()
        time.sleep(0.5)
        record()
    assert flips == {"a1": [False, True], "b1": [True, False]}, flips
    assert not admitted(workload_of(kube, ns_a, "a1"))  # waits in Kueue for quota
    assert [e for e in writes(kube, since=mark) if e.resource == "jobs"] == []


def test_every_object_gpupool_renders_passes_kueues_webhooks(kube, kueue, tmp_path):
    """gpupool's flavors, cluster queues (MIG profiles, shared slices, borrowing and lending
    limits) and local queues are created and updated with Kueue's validating and mutating
    webhooks on (failurePolicy Fail: a write they did not pass would have failed); the same
    ClusterQueue with a lendingLimit above its nominalQuota is refused by Kueue's webhook
    (the CRD's schema lets it through; gpupool's validation refuses the Quota that would render
    it: tests/plan/test_kueue.py)."""
    sfx = uuid.uuid4().hex[:6]
    ns_a, ns_b = kube.new_namespace(), kube.new_namespace()
    pool = f"p{sfx}"
    text = f"""\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: {pool}}}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: {pool}}}}}
  capacity: {{nodes: 1, gpusPerNode: 8}}
  training: {{minGPUs: 0}}
  inference:
    mig: {{layouts: [{{name: two-3g, profiles: [3g.40gb, 3g.40gb]}}]}}
    shared: {{slicesPerGPU: 4, memoryPerSlice: 20Gi}}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {{name: cluster}}
spec:
  admission: {{controller: kueue, cohort: c{sfx}}}
  classes:
    - {{name: low-{sfx}, value: 10000, workload: training}}
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {{name: qa-{sfx}}}
spec:
  namespaces: [{ns_a}]
  pools: [{{pool: {pool}, whole: {{guaranteed: 4, borrowingLimit: 4, lendingLimit: 2}},
           mig: {{3g.40gb: {{guaranteed: 1, lendingLimit: 1}}}}}}]
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {{name: qb-{sfx}}}
spec:
  namespaces: [{ns_b}]
  pools: [{{pool: {pool}, whole: {{guaranteed: 2}},
           sharedMemory: {{guaranteed: 40Gi, borrowingLimit: 60Gi}}}}]
"""
    write_policy(tmp_path, text)
    ctl = controller(kube, tmp_path, kube.clock)
    done = outcomes(ctl.cycle())
    kinds = [k for k in done if k.startswith("kueue:")]
    assert len(kinds) == 5 and all(done[k].startswith("done") for k in kinds), done
    for cq in (f"gpupool-qa-{sfx}", f"gpupool-qb-{sfx}"):
        until(f"Kueue to take {cq}", lambda cq=cq: active(kube, cq))
    # an update goes through them too
    write_policy(tmp_path, text.replace("guaranteed: 4, borrowingLimit: 4", "guaranteed: 3"))
    kube.clock.advance(30)
    assert outcomes(ctl.cycle())[f"kueue:ClusterQueue:gpupool-qa-{sfx}"] == "done: updated"

    bad = kube.custom.get_cluster_custom_object(G, V, "clusterqueues", f"gpupool-qa-{sfx}")
    spec = bad["spec"]
    spec["resourceGroups"][0]["flavors"][0]["resources"][0]["lendingLimit"] = 5  # nominal 3
    body = {"apiVersion": C.KUEUE_API_VERSION, "kind": "ClusterQueue"}
    body |= {"metadata": {"name": f"bad-{sfx}"}, "spec": spec}
    with pytest.raises(client.ApiException) as refused:
        kube.custom.create_cluster_custom_object(G, V, "clusterqueues", body)
    assert "vclusterqueue.kb.io" in refused.value.body
    assert "must be less than or equal to the nominalQuota" in refused.value.body


def test_the_manager_and_the_crds_are_one_kueue_version():
    """scripts/build-kueue.sh builds the version tests/neighbours/kueue/go.mod pins; the CRDs
    (crds.py) and gpupool's rendering are for KUEUE_VERSION: one number."""
    from .crds import KUEUE_MODULE, KUEUE_VERSION
    from .kueue_manager import ROOT

    gomod = (ROOT / "tests" / "neighbours" / "kueue" / "go.mod").read_text().split("\n")
    pinned = [ln.split()[1] for ln in gomod if ln.strip().startswith(KUEUE_MODULE + " ")]
    assert pinned == [KUEUE_VERSION]
