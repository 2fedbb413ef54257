"""Dual-target: quotas and PriorityClasses converge and a second cycle changes nothing — on the
fake, or on the cluster named by GPUPOOL_TEST_KUBECONFIG (which must have deploy/crds.yaml
applied; names are unique per run and removed afterwards)."""

from __future__ import annotations

import uuid

from kubernetes import client

from .harness import Clock, controller, install_crds, write_policy, writes


def _desired(ns: str, sfx: str) -> str:
    return f"""\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: a100}}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: a100-{sfx}}}}}
  capacity: {{nodes: 1, gpusPerNode: 8}}
  training: {{minGPUs: 0}}
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {{name: cluster}}
spec:
  defaultClass: low-{sfx}
  classes:
    - {{name: high-{sfx}, value: 50000, workload: training, preemptible: false}}
    - {{name: low-{sfx}, value: 10000, workload: training}}
  preemption: {{checkpointGracePeriod: 5m, minRuntime: 15m, budgetPerHour: 4, rules: []}}
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {{name: team-x}}
spec:
  namespaces: [{ns}]
  maxGPUs: 8
  pools: [{{pool: a100, whole: {{guaranteed: 4, borrowingLimit: 4}}}}]
"""


def test_objects_converge_and_stay_put(kube, tmp_path):
    if kube.is_fake:
        install_crds(kube)
    else:
        try:
            kube.apiextensions.read_custom_resource_definition("reconcilerstatuses.gpupool.io")
        except client.ApiException:
            import pytest

            pytest.skip("apply deploy/crds.yaml to the test cluster first")
    sfx = uuid.uuid4().hex[:6]
    for name in (f"high-{sfx}", f"low-{sfx}"):
        kube.cleanup(lambda n=name: kube.scheduling.delete_priority_class(n))
    write_policy(tmp_path, _desired(kube.namespace, sfx))
    clock = Clock()
    ctl = controller(kube, tmp_path, clock)
    first = ctl.cycle()
    assert first.error is None and first.leader
    assert {o.action: o.status for o in first.applied.outcomes} == {
        f"quota:{kube.namespace}/gpupool-team-x": "done", f"priority-class:high-{sfx}": "done", f"priority-class:low-{sfx}": "done"}
    q = kube.core.read_namespaced_resource_quota("gpupool-team-x", kube.namespace)
    assert q.spec.hard == {"requests.nvidia.com/gpu": "8"}
    pc = kube.scheduling.read_priority_class(f"low-{sfx}")
    assert pc.value == 10000 and pc.preemption_policy == "Never"
    if kube.is_fake:
        kube.server.clear_requests()
    clock.advance(30)
    second = ctl.cycle()
    assert second.converged and second.applied is None
    if kube.is_fake:
        assert writes(kube.server, exclude=("/leases", "/reconcilerstatuses")) == []
    # someone edits the quota by hand: the next cycle puts it back (drift is healed)
    kube.core.patch_namespaced_resource_quota("gpupool-team-x", kube.namespace, {"spec": {"hard": {"requests.nvidia.com/gpu": "2"}}})
    third = ctl.cycle()
    assert [o.action for o in third.applied.outcomes] == [f"quota:{kube.namespace}/gpupool-team-x"]
    assert kube.core.read_namespaced_resource_quota("gpupool-team-x", kube.namespace).spec.hard == {"requests.nvidia.com/gpu": "8"}
    # and a PriorityClass whose value changed is replaced (value is immutable)
    kube.scheduling.delete_priority_class(f"high-{sfx}")
    kube.scheduling.create_priority_class({"metadata": {"name": f"high-{sfx}"}, "value": 1, "preemptionPolicy": "PreemptLowerPriority"})
    ctl.cycle()
    pc = kube.scheduling.read_priority_class(f"high-{sfx}")
    assert pc.value == 50000 and pc.preemption_policy == "Never"
    assert ctl.cycle().converged
