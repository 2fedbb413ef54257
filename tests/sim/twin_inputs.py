"""The digital twin's desired state, shared by tests/sim/test_twin.py and
tests/prflow/test_plan_twin.py: a 2-node x 4-card A100 pool (`POOL`) with shared inference, and
`POLICIES` (a serving class that preempts training-low, and a ScalingPolicy for serve/llm of 1
to 8 replicas); `START`, the simulated clock's start.
"""

from __future__ import annotations

from datetime import UTC, datetime

START = datetime(2024, 5, 10, tzinfo=UTC)
POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata:
  name: p
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector:
    matchLabels:
      gpupool.io/pool: p
  capacity:
    nodes: 2
    gpusPerNode: 4
  inference:
    prefer: shared
    shared:
      slicesPerGPU: 2
      memoryPerSlice: 40Gi
"""
POLICIES = """\
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata:
  name: cluster
spec:
  defaultClass: training-low
  classes:
    - name: serving
      value: 100000
      workload: inference
      preemptible: false
    - name: training-low
      value: 10000
      workload: training
  preemption:
    checkpointGracePeriod: 1m
    minRuntime: 5m
    budgetPerHour: 30
    rules:
      - preemptor: serving
        victims: [training-low]
        when: always
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata:
  name: llm
spec:
  pool: p
  targets:
    - {namespace: serve, name: llm, kind: Deployment, minReplicas: 1, maxReplicas: 8}
  scaleUp:
    queueLengthPerReplica: 8
    pendingTime: 30s
    step: 2
    cooldown: 2m
  scaleDown:
    queueLengthPerReplica: 4
    step: 1
    cooldown: 10m
  borrowFrom: [training-low]
"""
UP_COOLDOWN, DOWN_COOLDOWN = 120.0, 600.0
"""POLICIES' scaleUp and scaleDown cooldowns (2m, 10m), in seconds."""
