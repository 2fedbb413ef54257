"""A desired state of its own for one test: one A100 pool selecting nodes labelled
`a100-<sfx>`, two PriorityClasses suffixed `-<sfx>` and a Quota for namespace `ns`, so that
tests sharing one API server do not touch each other's objects. Used by
tests/integration/test_objects_dual.py and tests/integration/test_push.py.
"""

from __future__ import annotations


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
