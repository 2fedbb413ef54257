"""Kueue mode on the real API server, under Kueue's own CRDs (issue 14 item 4).

The CRDs come from Kueue's published Go module (sigs.k8s.io/kueue v0.17.0, tests/integration/
crds.py): the API server validates what gpupool writes against Kueue's real schemas, including
their CEL rules (a flavor listing every covered resource, no borrowingLimit without a cohort,
an immutable LocalQueue.spec.clusterQueue). Kueue's own manager and webhooks are not run here;
test_kueue_manager.py runs them. The CRDs are installed for this module only and removed after
it, so no other test sees Kueue's API."""

from __future__ import annotations

import time
import uuid

import pytest

from reconciler import conventions as C

from .crds import install_crd, kueue_crd_paths, remove_crd
from .harness import audit_mark, controller, custom_object, write_policy, writes
from .harness import outcome_texts as outcomes
from .rbac_rules import unused_controller_rules

G, V = C.KUEUE_GROUP, C.KUEUE_VERSION


@pytest.fixture(scope="module")
def kueue_crds(installed):
    paths = kueue_crd_paths()  # skips without Go
    api = installed.api_client()
    names = [install_crd(api, p) for p in paths]
    try:
        yield names
    finally:
        for name in names:
            remove_crd(api, name)
        api.close()


def policy(sfx: str, mode: str, quotas: str) -> str:
    return f"""\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: p{sfx}}}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: p{sfx}}}}}
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
  admission: {{controller: {mode}, cohort: c{sfx}}}
  classes:
    - {{name: low-{sfx}, value: 10000, workload: training}}
{quotas}"""


def quota(name: str, namespaces: list[str], pools: str) -> str:
    return (
        f"---\napiVersion: gpupool.io/v1alpha1\nkind: Quota\nmetadata: {{name: {name}}}\n"
        f"spec:\n  namespaces: [{', '.join(namespaces)}]\n  pools: {pools}\n"
    )


def cluster(kube, plural: str, name: str, ns: str = "") -> dict | None:
    return custom_object(kube, G, V, plural, name, ns)


def test_kueue_mode_on_the_real_api_server(kube, kueue_crds, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    ns_a, ns_b, ns_c = (kube.new_namespace() for _ in range(3))
    qa, qb = f"qa-{sfx}", f"qb-{sfx}"
    pools_a = (
        f"[{{pool: p{sfx}, whole: {{guaranteed: 4, borrowingLimit: 4, lendingLimit: 2}}, "
        "mig: {3g.40gb: {guaranteed: 1}}}]"
    )
    pools_b = f"[{{pool: p{sfx}, whole: {{guaranteed: 2}}, sharedMemory: {{guaranteed: 40Gi}}}}]"
    quotas = quota(qa, [ns_a], pools_a) + quota(qb, [ns_b], pools_b)
    clock = kube.clock
    mark = audit_mark(kube)

    # gpupool mode first: ResourceQuotas; a foreign ClusterQueue (no managed-by label) exists
    write_policy(tmp_path, policy(sfx, "gpupool", quotas))
    ctl = controller(kube, tmp_path, clock)
    done = outcomes(ctl.cycle())
    assert done[f"quota:{ns_a}/gpupool-{qa}"].startswith("done")
    foreign = f"foreign-{sfx}"
    kube.custom.create_cluster_custom_object(
        G,
        V,
        "clusterqueues",
        {
            "apiVersion": C.KUEUE_API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": foreign},
            "spec": {"cohortName": f"c{sfx}", "namespaceSelector": {}},
        },
    )

    # kueue mode: flavors, cluster queues, local queues created, the ResourceQuotas pruned
    write_policy(tmp_path, policy(sfx, "kueue", quotas))
    clock.advance(30)
    done = outcomes(ctl.cycle())
    flavor, cq_a, cq_b = f"gpupool-p{sfx}", f"gpupool-{qa}", f"gpupool-{qb}"
    assert done == {
        f"kueue:ResourceFlavor:{flavor}": "done: created",
        f"kueue:ClusterQueue:{cq_a}": "done: created",
        f"kueue:ClusterQueue:{cq_b}": "done: created",
        f"kueue:LocalQueue:{ns_a}/gpupool": "done: created",
        f"kueue:LocalQueue:{ns_b}/gpupool": "done: created",
        f"prune-quota:{ns_a}/gpupool-{qa}": "done: deleted",  # team b's has no limit: none
    }
    rf = cluster(kube, "resourceflavors", flavor)
    assert rf["spec"]["nodeLabels"] == {C.POOL_LABEL: f"p{sfx}"}
    assert rf["metadata"]["labels"][C.MANAGED_BY_LABEL] == C.MANAGED_BY
    spec = cluster(kube, "clusterqueues", cq_a)["spec"]
    assert spec["cohortName"] == f"c{sfx}"
    assert spec["queueingStrategy"] == "BestEffortFIFO"  # the CRD's default, kept by the server
    (group,) = spec["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]
    assert group["flavors"] == [
        {
            "name": flavor,
            "resources": [
                {
                    "name": "nvidia.com/gpu",
                    "nominalQuota": 4,
                    "borrowingLimit": 4,
                    "lendingLimit": 2,
                },
                {"name": "nvidia.com/mig-3g.40gb", "nominalQuota": 1},
            ],
        }
    ]
    shared = cluster(kube, "clusterqueues", cq_b)["spec"]["resourceGroups"][0]
    assert shared["coveredResources"] == ["nvidia.com/gpu", "nvidia.com/gpu.shared"]
    assert shared["flavors"][0]["resources"][1] == {
        "name": "nvidia.com/gpu.shared",
        "nominalQuota": 2,
    }
    assert cluster(kube, "localqueues", "gpupool", ns_a)["spec"]["clusterQueue"] == cq_a
    assert kube.core.list_namespaced_resource_quota(ns_a).items == []

    # the next cycle changes nothing
    write_mark = audit_mark(kube)
    clock.advance(30)
    again = ctl.cycle()
    assert again.converged and again.applied is None, again.summary
    assert writes(kube, since=write_mark, exclude=("leases", "reconcilerstatuses")) == []

    # drift: someone edits the flavor's node labels; gpupool puts them back (a merge patch)
    kube.custom.patch_cluster_custom_object(
        G, V, "resourceflavors", flavor, {"spec": {"nodeLabels": {C.POOL_LABEL: "elsewhere"}}}
    )
    clock.advance(30)
    assert outcomes(ctl.cycle()) == {f"kueue:ResourceFlavor:{flavor}": "done: updated"}
    assert cluster(kube, "resourceflavors", flavor)["spec"]["nodeLabels"] == {
        C.POOL_LABEL: f"p{sfx}"
    }

    # a changed Quota: its ClusterQueue is patched, the dropped limits (lendingLimit, the MIG
    # profile) go with the list;
    # ns_b moves to team a (its LocalQueue is made again: clusterQueue is immutable), team b
    # gets ns_c
    pools_a2 = f"[{{pool: p{sfx}, whole: {{guaranteed: 3, borrowingLimit: 1}}}}]"
    moved = quota(qa, [ns_a, ns_b], pools_a2) + quota(qb, [ns_c], pools_b)
    write_policy(tmp_path, policy(sfx, "kueue", moved))
    clock.advance(30)
    done = outcomes(ctl.cycle())
    assert done == {
        f"kueue:ClusterQueue:{cq_a}": "done: updated",
        f"kueue:ClusterQueue:{cq_b}": "done: updated",
        f"prune-kueue:LocalQueue:{ns_b}/gpupool": "done: deleted",
        f"kueue:LocalQueue:{ns_b}/gpupool": "done: created",
        f"kueue:LocalQueue:{ns_c}/gpupool": "done: created",
    }
    spec = cluster(kube, "clusterqueues", cq_a)["spec"]
    assert spec["resourceGroups"][0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/gpu", "nominalQuota": 3, "borrowingLimit": 1}
    ]
    assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == sorted([ns_a, ns_b])
    assert cluster(kube, "localqueues", "gpupool", ns_b)["spec"]["clusterQueue"] == cq_a
    clock.advance(30)
    assert ctl.cycle().converged

    # team b's Quota removed from git: its ClusterQueue and LocalQueue are pruned
    write_policy(tmp_path, policy(sfx, "kueue", quota(qa, [ns_a, ns_b], pools_a2)))
    clock.advance(30)
    assert outcomes(ctl.cycle()) == {
        f"prune-kueue:LocalQueue:{ns_c}/gpupool": "done: deleted",
        f"prune-kueue:ClusterQueue:{cq_b}": "done: deleted",
    }
    assert cluster(kube, "clusterqueues", cq_b) is None
    assert cluster(kube, "localqueues", "gpupool", ns_c) is None

    # back to gpupool mode: every Kueue object gpupool made is pruned, the ResourceQuotas
    # return; the foreign ClusterQueue stays through all of it
    write_policy(tmp_path, policy(sfx, "gpupool", quota(qa, [ns_a, ns_b], pools_a2)))
    clock.advance(30)
    done = outcomes(ctl.cycle())
    assert {k: v for k, v in done.items() if k.startswith("prune-kueue")} == {
        f"prune-kueue:LocalQueue:{ns_a}/gpupool": "done: deleted",
        f"prune-kueue:LocalQueue:{ns_b}/gpupool": "done: deleted",
        f"prune-kueue:ClusterQueue:{cq_a}": "done: deleted",
        f"prune-kueue:ResourceFlavor:{flavor}": "done: deleted",
    }
    assert done[f"quota:{ns_a}/gpupool-{qa}"] == "done: applied"
    for plural in ("resourceflavors", "clusterqueues"):
        left = kube.custom.list_cluster_custom_object(G, V, plural)["items"]
        assert [o["metadata"]["name"] for o in left] == (
            [foreign] if plural == "clusterqueues" else []
        )
    clock.advance(30)
    assert ctl.cycle().converged

    # least privilege: every Kueue rule of deploy/rbac.yaml was needed by this run, and the
    # real authorizer refused nothing (test_rbac.py's check, on this run's audit events)
    # (their watches: the controller's watch cache, test_rbac.py::
    # test_the_watch_cache_needs_its_watch_rules)
    picked, unused = unused_controller_rules(
        kube, mark, lambda label: "kueue" in label and not label.startswith("*: watch ")
    )
    assert picked == 14 and unused == [], unused


def test_training_without_the_queue_label_is_found_on_the_real_api_server(kube, kueue_crds):
    """The adapter reads `kueue.x-k8s.io/queue-name` from a pod's Job (where Kueue reads it):
    in kueue mode the Job without it is a finding, the labelled one is not."""
    from reconciler.observe.kube import observe_cluster
    from reconciler.plan.planner import plan
    from reconciler.policy.files import SourceFile
    from reconciler.policy.loader import load

    sfx = uuid.uuid4().hex[:6]
    ns = kube.new_namespace()
    for name, labels in (("queued", {C.KUEUE_QUEUE_LABEL: C.KUEUE_LOCAL_QUEUE}), ("loose", {})):
        kube.batch.create_namespaced_job(
            ns,
            {
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "main",
                                    "image": "registry.example/train:1",
                                    "resources": {"limits": {C.GPU_RESOURCE: "1"}},
                                }
                            ],
                        }
                    }
                },
            },
        )
    deadline = time.monotonic() + 60
    while len(kube.core.list_namespaced_pod(ns).items) < 2:  # made by the Job controller
        assert time.monotonic() < deadline, "the Job controller made no pods"
        time.sleep(0.2)
    observed = observe_cluster(kube.api_client)
    queues = {w.owner_name: w.queue_name for w in observed.workloads if w.namespace == ns}
    assert queues == {"queued": C.KUEUE_LOCAL_QUEUE, "loose": ""}
    assert observed.kueue is not None  # the CRDs are served
    text = policy(sfx, "kueue", quota(f"q-{sfx}", [ns], f"[{{pool: p{sfx}}}]"))
    p = plan(load([SourceFile("desired.yaml", text)]), observed)
    missing = [f.message for f in p.findings if f.code == "kueue-queue-name-missing"]
    assert len(missing) == 1 and f"Job {ns}/loose" in missing[0], missing
