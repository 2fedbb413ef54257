"""Golden planning scenarios: each builds a small desired state (YAML) and an observed snapshot.

`python -m tests.plan.scenarios` (or GPUPOOL_UPDATE_GOLDEN=1 pytest tests/plan/test_golden.py)
rewrites tests/golden/<name>/{desired.yaml, observed.yaml, plan.json, plan.md}; the test then
plans from those files alone and compares, and also checks each scenario's expectations
(`EXPECT`), so a regenerated golden file that is wrong still fails.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from reconciler.observe.builders import gpu, hours, mig_pod, node, shared_pod, snapshot, training
from reconciler.observe.model import (
    Autoscaler,
    InferenceService,
    KueueObject,
    Node,
    PriorityClassObject,
    QuotaObject,
    Request,
    SuspendedJob,
)
from reconciler.observe.model_dra import (
    ClaimTemplateObject,
    CounterConsumption,
    DeviceClassObject,
    DeviceTaint,
    DeviceTaintRuleObject,
    DraDevice,
    DraState,
    ResourceSlice,
)
from reconciler.plan.quotas import desired_priority_classes, desired_resource_quotas
from reconciler.policy.catalog import default_catalog
from reconciler.policy.files import SourceFile
from reconciler.policy.loader import load

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
NOW = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
A100 = "A100-SXM4-80GB"
BAL = ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]


def ago(h: float) -> datetime:
    return NOW - hours(h)


POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {{name: a100}}
spec:
  gpuModel: A100-SXM4-80GB
  nodeSelector: {{matchLabels: {{gpupool.io/pool: a100}}}}
  capacity: {{nodes: {nodes}, gpusPerNode: 8}}
  training: {{minGPUs: {train_min}, topology: node}}
  inference:
    minGPUs: {inf_min}
    maxGPUs: 8
    prefer: mig
    mig:
      layouts:
        - {{name: balanced, profiles: [3g.40gb, 2g.20gb, 1g.10gb, 1g.10gb]}}
        - {{name: two-3g, profiles: [3g.40gb, 3g.40gb]}}
    shared: {{slicesPerGPU: 4, memoryPerSlice: 20Gi}}
"""

POLICIES = (
    """\
---
apiVersion: gpupool.io/v1alpha1
kind: PriorityPolicy
metadata: {name: cluster}
spec:
  defaultClass: training-low
  classes:
    - {name: serving-critical, value: 100000, workload: inference, preemptible: false}
    - {name: training-high, value: 50000, workload: training, preemptible: false}
    - {name: serving, value: 30000, workload: inference, preemptible: false}
    - {name: training-low, value: 10000, workload: training}
    - {name: spot, value: 1000, spot: true}
  preemption:
    checkpointGracePeriod: 5m
    minRuntime: 15m
    budgetPerHour: 4
    rules:
      - {preemptor: serving, victims: [training-low, spot]}
      - {preemptor: training-high, victims: [spot], when: always}
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {name: team-a}
spec:
  namespaces: [team-a]
  maxGPUs: 8
  pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4}}]
---
apiVersion: gpupool.io/v1alpha1
kind: Quota
metadata: {name: team-b}
spec:
  namespaces: [team-b]
  maxGPUs: 16
  pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 12}, """
    """mig: {3g.40gb: {guaranteed: 2, borrowingLimit: 6}}}]
---
apiVersion: gpupool.io/v1alpha1
kind: MaintenancePolicy
metadata: {name: default}
spec:
  defragmentation: {when: pendingDemand, maxMigrationsPerCycle: 2}
  idleReclaim: {utilizationBelow: 5, idleFor: 1h, excludeClasses: [training-high]}
"""
)

L40S_POOL = """\
apiVersion: gpupool.io/v1alpha1
kind: Pool
metadata: {name: l40s}
spec:
  gpuModel: L40S-48GB
  nodeSelector: {matchLabels: {gpupool.io/pool: l40s}}
  capacity: {nodes: 2, gpusPerNode: 4}
  training: {minGPUs: 2}
  inference:
    maxGPUs: 6
    prefer: shared
    shared: {slicesPerGPU: 4, memoryPerSlice: 12Gi}
"""

SCALING = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: chat}
spec:
  pool: a100
  targets:
    - {namespace: team-b, name: chat, minReplicas: 1, maxReplicas: 8}
    - {namespace: team-b, name: summarize, minReplicas: 1, maxReplicas: 8}
  scaleUp: {queueLengthPerReplica: 10, step: 2, cooldown: 2m}
  scaleDown: {queueLengthPerReplica: 1, step: 1, cooldown: 10m}
  borrowFrom: [spot]
"""


def desired_text(nodes: int = 2, train_min: int = 4, inf_min: int = 0, extra: str = "") -> str:
    return POOL.format(nodes=nodes, train_min=train_min, inf_min=inf_min) + POLICIES + extra


def _objects(text: str) -> dict:
    """Quota and PriorityClass objects matching the desired state, as a converged cluster has."""
    d = load([SourceFile("desired.yaml", text)])
    return {
        "quotas": [
            QuotaObject(namespace=ns, name=n, hard=h, managed_by="gpupool")
            for (ns, n), h in desired_resource_quotas(d).items()
        ],
        "priority_classes": [*desired_priority_classes(d).values()],
    }


def busy_node(
    name: str, ns: str, job: str, cls: str = "training-high", started: float = 10
) -> tuple:
    return node(name, "a100", A100), [
        training(ns, job, name, 8, cls=cls, started=ago(started), checkpoint=ago(0.2))
    ]


# --------------------------------------------------------------------------- scenarios


def converged():
    text = desired_text()
    nodes = [
        node(
            "a100-1",
            "a100",
            A100,
            [gpu(i, mig=BAL if i < 2 else None, model=A100) for i in range(8)],
        ),
        node("a100-2", "a100", A100),
    ]
    w = [
        mig_pod("team-b", "ranker-0", "a100-1", "3g.40gb", gpu_index=0, start=4, started=ago(5)),
        training("team-a", "resnet", "a100-1", [2, 3, 4, 5], cls="training-high", started=ago(3)),
        training("team-b", "bert", "a100-2", 8, cls="training-low", started=ago(3)),
    ]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def inference_burst_mig():
    text = desired_text()
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-a", "resnet", "a100-1", [0, 1, 2, 3], cls="training-high", started=ago(3)),
        training("team-b", "bert", "a100-2", 8, cls="training-low", started=ago(3)),
    ]
    w += [mig_pod("team-b", f"ranker-{i}", None, "3g.40gb", pool="a100") for i in range(3)]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def inference_preempts_low_training():
    text = desired_text(train_min=0)
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-a", "resnet", "a100-1", 8, cls="training-high", started=ago(3)),
        training(
            "team-b",
            "bert-old",
            "a100-2",
            [0, 1, 2, 3],
            cls="training-low",
            started=ago(6),
            checkpoint=ago(0.5),
        ),
        training(
            "team-b",
            "bert-new",
            "a100-2",
            [4, 5, 6, 7],
            cls="training-low",
            started=ago(2),
            checkpoint=ago(0.1),
        ),
    ]
    w += [mig_pod("team-b", f"ranker-{i}", None, "3g.40gb", pool="a100") for i in range(2)]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def training_reclaims_inference_cards():
    text = desired_text()
    nodes = [
        node(
            "a100-1",
            "a100",
            A100,
            [gpu(i, mig=BAL if i >= 4 else None, model=A100) for i in range(8)],
        ),
        node("a100-2", "a100", A100),
    ]
    w = [
        training("team-b", "bert", "a100-2", 8, cls="training-low", started=ago(3)),
        training("team-a", "llm-ft", None, 8, cls="training-high", pool="a100", created=ago(0.5)),
    ]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def always_rule_preempts_before_giving_back():
    """training-high may preempt spot `when: always`: the spot job goes, warm MIG cards stay."""
    text = desired_text()
    nodes = [
        node(
            "a100-1",
            "a100",
            A100,
            [gpu(i, mig=BAL if i >= 4 else None, model=A100) for i in range(8)],
        ),
        node("a100-2", "a100", A100),
    ]
    w = [
        training("team-b", "spot-sweep", "a100-2", 8, cls="spot", started=ago(2)),
        training("team-a", "llm-ft", None, 8, cls="training-high", pool="a100", created=ago(0.5)),
    ]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def team_over_cap():
    text = desired_text()
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-a", "big", "a100-1", 8, cls="training-high", started=ago(5)),
        training(
            "team-a",
            "extra-1",
            "a100-2",
            [0],
            cls="training-low",
            started=ago(2),
            checkpoint=ago(0.3),
        ),
        training(
            "team-a",
            "extra-2",
            "a100-2",
            [1],
            cls="training-low",
            started=ago(4),
            checkpoint=ago(0.1),
        ),
    ]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def held_by_cap():
    text = desired_text()
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-a", "big", "a100-1", 8, cls="training-high", started=ago(5)),
        training("team-a", "more", None, 2, cls="training-high", pool="a100", created=ago(0.2)),
    ]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def defragment():
    text = desired_text()
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training(
            "team-b",
            f"probe-{i}",
            "a100-1",
            [i],
            cls="training-low",
            started=ago(2),
            migratable=True,
        )
        for i in range(2)
    ]
    w += [
        training("team-b", "eval", "a100-2", [0, 1, 2, 3, 4, 5], cls="training-low", started=ago(1))
    ]
    w += [training("team-a", "gang", None, 8, cls="training-low", pool="a100", created=ago(1))]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def idle_reclaim():
    text = desired_text()
    nodes = [
        node("a100-1", "a100", A100, [gpu(i, util=1.0, idle_since=ago(3)) for i in range(8)]),
        node("a100-2", "a100", A100),
    ]
    w = [
        training(
            "team-b",
            "forgotten",
            "a100-1",
            [0, 1],
            cls="training-low",
            started=ago(5),
            checkpoint=ago(3),
        ),
        training("team-a", "protected", "a100-1", [2, 3], cls="training-high", started=ago(5)),
        training("team-b", "busy", "a100-2", 8, cls="training-low", started=ago(5)),
    ]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def model_without_mig():
    text = L40S_POOL + POLICIES.replace(
        "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 4}}]", "pools: []"
    ).replace(
        (
            "pools: [{pool: a100, whole: {guaranteed: 4, borrowingLimit: 12}, "
            "mig: {3g.40gb: {guaranteed: 2, borrowingLimit: 6}}}]"
        ),
        "pools: []",
    )
    # the device plugin shares every plain card of a node: l40s-2, the free node, is shared whole
    nodes = [
        node(f"l40s-{n}", "l40s", "L40S-48GB", [gpu(i, model="L40S-48GB") for i in range(4)])
        for n in (1, 2)
    ]
    w = [training("team-a", "finetune", "l40s-1", [0, 1, 2, 3], cls="training-low", started=ago(2))]
    w += [shared_pod("team-b", f"embed-{i}", None, 1, pool="l40s") for i in range(6)]
    w += [mig_pod("team-b", "wants-mig", None, "1g.10gb")]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def scale_up_and_down():
    text = desired_text(extra=SCALING)
    nodes = [
        # gpu0 is the node's one plain card, shared (the device plugin shares per node); the
        # rest are empty MIG cards
        node(
            "a100-1",
            "a100",
            A100,
            [gpu(0, shared=4)] + [gpu(i, mig=BAL, model=A100) for i in range(1, 8)],
        ),
        node("a100-2", "a100", A100),
    ]
    w = [
        shared_pod("team-b", f"chat-{i}", "a100-1", 1, gpu_index=0, started=ago(2))
        for i in range(2)
    ]
    w += [
        shared_pod("team-b", f"summarize-{i}", "a100-1", 1, gpu_index=0, started=ago(2))
        for i in range(2)
    ]
    w += [training("team-a", "resnet", "a100-2", [0, 1, 2, 3], cls="training-high", started=ago(3))]
    svcs = [
        InferenceService(
            namespace="team-b",
            name="chat",
            replicas=2,
            priority_class="serving",
            replica_request=Request(shared_slices=1),
            pool="a100",
            queue_length=60,
            last_scale_at=ago(1),
        ),
        InferenceService(
            namespace="team-b",
            name="summarize",
            replicas=2,
            priority_class="serving",
            replica_request=Request(shared_slices=1),
            pool="a100",
            queue_length=0,
            last_scale_at=ago(1),
        ),
    ]
    return text, snapshot(NOW, nodes, w, services=svcs, **_objects(text))


def budget_spent():
    text = desired_text(train_min=0)
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-b", "bert-1", "a100-1", 8, cls="training-low", started=ago(6)),
        training("team-a", "bert-2", "a100-2", 8, cls="training-low", started=ago(6)),
    ]
    w += [mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")]
    return text, snapshot(
        NOW, nodes, w, recent_preemptions=[ago(0.1 * i) for i in range(1, 5)], **_objects(text)
    )


def min_runtime_protects():
    text = desired_text(train_min=0)
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-a", "resnet", "a100-1", 8, cls="training-high", started=ago(3)),
        training("team-b", "just-started", "a100-2", 8, cls="training-low", started=ago(0.1)),
    ]
    w += [mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def nonpreemptible_protected():
    text = desired_text(train_min=0)
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [
        training("team-a", "resnet", "a100-1", 8, cls="training-high", started=ago(3)),
        training("team-b", "pretrain", "a100-2", 8, cls="training-high", started=ago(3)),
    ]
    w += [mig_pod("team-b", "ranker-0", None, "3g.40gb", pool="a100")]
    return text, snapshot(NOW, nodes, w, **_objects(text))


def objects_and_labels():
    text = desired_text(inf_min=1).replace(
        "{gpupool.io/pool: a100}", "{node.kubernetes.io/instance-type: p4de.24xlarge}"
    )
    n1 = node("a100-1", "a100", A100, **{"node.kubernetes.io/instance-type": "p4de.24xlarge"})
    n2 = node("a100-2", "a100", A100, **{"node.kubernetes.io/instance-type": "p4de.24xlarge"})
    # a node of a Pool deleted from git (no instance-type label: it matches no pool now) still
    # carries gpupool's pool label: the label is removed
    n3 = node("a100-old", "retired-pool", A100)
    n1 = n1.model_copy(
        update={"labels": {k: v for k, v in n1.labels.items() if k != "gpupool.io/pool"}}
    )
    objs = _objects(text)
    objs["quotas"] = [q for q in objs["quotas"] if q.namespace != "team-a"]
    objs["priority_classes"] = [
        c.model_copy(update={"value": 20000}) if c.name == "training-low" else c
        for c in objs["priority_classes"]
    ]
    # what gpupool made for a team and a class the policy no longer has: pruned
    objs["quotas"].append(
        QuotaObject(
            namespace="team-old",
            name="gpupool-team-old",
            hard={"requests.nvidia.com/gpu": "2"},
            managed_by="gpupool",
        )
    )
    objs["priority_classes"].append(
        PriorityClassObject(
            name="retired", value=5, preemption_policy="Never", managed_by="gpupool"
        )
    )
    return text, snapshot(NOW, [n1, n2, n3], [], **objs)


def suspended_job_resumes():
    """team-b's 2 x 4-GPU Job was suspended by gpupool to stop its gang (a preemption); a100-2
    has 8 free cards again: the Job is resumed (its pods come back gated and are admitted
    next cycle); a Job suspended by someone else (no gpupool annotation) is not gpupool's and
    is not in the snapshot as demand."""
    text = desired_text()
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    w = [training("team-a", "big", "a100-1", 8, cls="training-high", started=ago(5))]
    job = SuspendedJob(
        namespace="team-b",
        name="finetune",
        parallelism=2,
        request=Request(gpus=4),
        priority_class="training-low",
        pool="a100",
        suspended_at=ago(0.5),
    )
    return text, snapshot(NOW, nodes, w, suspended_jobs=[job], **_objects(text))


def scale_envelope():
    """team-b/chat is scaled by an HPA and team-b/summarize by a KEDA ScaledObject (with the HPA
    KEDA made for it): gpupool sets their envelopes, never their replicas. chat's queue is long
    (30/replica over its HPA's max of 2): max 2 -> 4, its min raised to the target's 1 already;
    summarize is calm: max 4 -> 3, and its minReplicaCount 0 goes to the target's 1."""
    text = desired_text(extra=SCALING)
    nodes = [
        node(
            "a100-1",
            "a100",
            A100,
            [gpu(0, shared=4), gpu(1, shared=4)]
            + [gpu(i, mig=BAL, model=A100) for i in range(2, 8)],
        ),
        node("a100-2", "a100", A100),
    ]
    w = [
        shared_pod("team-b", f"chat-{i}", "a100-1", 1, gpu_index=0, started=ago(2))
        for i in range(2)
    ]
    w += [
        shared_pod("team-b", f"summarize-{i}", "a100-1", 1, gpu_index=1, started=ago(2))
        for i in range(2)
    ]

    def scaler(kind: str, name: str, lo: int, hi: int, owner: str = "") -> Autoscaler:
        return Autoscaler(
            kind=kind,
            namespace="team-b",
            name=name,
            min_replicas=lo,
            max_replicas=hi,
            owner=owner,
            last_change_at=ago(1),
        )

    svcs = [
        InferenceService(
            namespace="team-b",
            name="chat",
            replicas=2,
            priority_class="serving",
            replica_request=Request(shared_slices=1),
            pool="a100",
            queue_length=60,
            autoscalers=[scaler("HorizontalPodAutoscaler", "chat", 1, 2)],
        ),
        InferenceService(
            namespace="team-b",
            name="summarize",
            replicas=2,
            priority_class="serving",
            replica_request=Request(shared_slices=1),
            pool="a100",
            queue_length=0,
            autoscalers=[
                scaler(
                    "HorizontalPodAutoscaler", "keda-hpa-summarize", 1, 4, "ScaledObject/summarize"
                ),
                scaler("ScaledObject", "summarize", 0, 4),
            ],
        ),
    ]
    return text, snapshot(NOW, nodes, w, services=svcs, **_objects(text))


KUEUE_ADMISSION = """\
  admission: {controller: kueue, cohort: research}
"""


def kueue_mode():
    """Issue 14: the PriorityPolicy hands admission to Kueue. The Quotas become ClusterQueues
    of cohort `research`, the pool a ResourceFlavor, each team namespace a LocalQueue; the
    ResourceQuotas gpupool made are pruned, and so is a ClusterQueue of a Quota that is gone;
    a foreign ClusterQueue is left alone. The pending training Job of team-a is Kueue's to
    admit: no Admit, no Hold; team-b's runs without the queue-name label (a finding)."""
    text = desired_text().replace(
        "  defaultClass: training-low\n", "  defaultClass: training-low\n" + KUEUE_ADMISSION
    )
    nodes = [node("a100-1", "a100", A100), node("a100-2", "a100", A100)]
    pending = training("team-a", "pretrain", None, 4, cls="training-high")
    # a Kueue-admitted Job's pod: labelled for its LocalQueue, no gpupool gate
    pending = pending.model_copy(update={"queue_name": "gpupool", "admission": "scheduler"})
    unlabelled = training("team-b", "bert", "a100-2", 8, cls="training-low", started=ago(3))
    gpupool_text = desired_text()
    kueue = [
        KueueObject(
            kind="ClusterQueue",
            name="gpupool-team-old",
            spec={"cohortName": "research", "resourceGroups": []},
            managed_by="gpupool",
        ),
        KueueObject(kind="ClusterQueue", name="platform-batch", spec={"cohortName": "research"}),
    ]
    return text, snapshot(NOW, nodes, [pending, unlabelled], kueue=kueue, **_objects(gpupool_text))


def dra_pool():
    """Issue 32: the pool runs on DRA (`backend: dra`, no shared slices). gpupool renders a
    DeviceClass for whole cards and one per MIG profile, the teams' ResourceClaimTemplates, and
    ResourceQuotas counted in devices of those classes; a class gpupool made for a pool that is
    gone is pruned (after its template, which no pod names), a foreign class is left alone; the
    pending MIG inference repartitions through mig-manager as on the device plugin, and is not
    admitted yet: its instances are not published as DRA devices (exact admission names them)."""
    text = (
        desired_text()
        .replace("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
        .replace("  gpuModel: A100-SXM4-80GB\n", "  gpuModel: A100-SXM4-80GB\n  backend: dra\n", 1)
    )
    _, observed = inference_burst_mig()
    dra = DraState(
        device_classes=[
            DeviceClassObject(
                name="gpupool-old-gpu", selectors=["true"], managed_by="gpupool", pool="old"
            ),
            DeviceClassObject(name="gpu.nvidia.com", selectors=["device.driver == 'x'"]),
        ],
        claim_templates=[
            ClaimTemplateObject(
                namespace="team-a",
                name="gpupool-old-gpu-1",
                devices={"gpupool-old-gpu": 1},
                managed_by="gpupool",
            )
        ],
    )
    return text, observed.model_copy(update={"dra": dra})


def published_slices(nodes: list[Node]) -> list[ResourceSlice]:
    """Each node's cards as NVIDIA's DRA driver publishes them (one slice, its pool named after
    the node; names as observe/model_dra.py cites): whole cards, or a MIG card's instances."""
    out = []
    for n in nodes:
        devices = []
        for g in n.gpus:
            uuid = g.uuid or f"GPU-{n.name}-{g.index}"
            if not g.mig_enabled:
                devices.append(
                    DraDevice(name=f"gpu-{g.index}", attributes={"type": "gpu", "uuid": uuid})
                )
                continue
            devices += [
                DraDevice(
                    name=f"gpu-{g.index}-mig-{i.profile.replace('.', '')}-9-{i.start}",
                    attributes={"type": "mig", "parentUUID": uuid, "profile": i.profile},
                )
                for i in g.mig_instances
            ]
        out.append(
            ResourceSlice(
                name=n.name, driver="gpu.nvidia.com", pool=n.name, node=n.name, devices=devices
            )
        )
    return out


def drain_rule(node: str, device: str, managed_by: str = "gpupool") -> DeviceTaintRuleObject:
    """A DeviceTaintRule of gpupool's drain on one device (plan/stages/drain_taints.py)."""
    return DeviceTaintRuleObject(
        name=f"gpupool-drain-{node}-{device}",
        driver="gpu.nvidia.com",
        pool=node,
        device=device,
        taint=DeviceTaint(key="gpupool.io/drain", value="repartition", effect="NoSchedule"),
        managed_by=managed_by,
    )


def dra_drain():
    """Issue 32 item 4: the DRA pool's MIG inference repartitions a100-2's cards 0 and 1, whose
    devices the driver publishes: each gets a DeviceTaintRule (NoSchedule) before the node is
    cordoned, so the allocator gives them to no new claim while they drain; a drain rule left
    on a100-1, whose repartition is over (not cordoned, the driver publishes what the agent
    reports), is pruned."""
    text, observed = dra_pool()
    dra = DraState(
        slices=published_slices(observed.nodes),
        taint_rules=[drain_rule("a100-1", "gpu-9")],
    )
    return text, observed.model_copy(update={"dra": dra})


H100 = "H100-SXM5-80GB"


def dynamic_mig_devices(node_name: str, count: int) -> DraState:
    """The node's cards as the driver publishes them under DynamicMIG (every partition)."""
    model = default_catalog().model(H100)
    devices = []
    for minor in range(count):
        uses = [CounterConsumption(counter_set=f"gpu-{minor}-counter-set")]
        parent = f"GPU-{node_name}-{minor}"
        devices.append(
            DraDevice(
                name=f"gpu-{minor}",
                attributes={"type": "gpu", "uuid": parent},
                consumes_counters=uses,
            )
        )
        for prof, p in model.profiles.items():
            for start in p.starts:
                devices.append(
                    DraDevice(
                        name=f"gpu-{minor}-mig-{prof.replace('.', '')}-9-{start}",
                        attributes={"type": "mig", "parentUUID": parent, "profile": prof},
                        consumes_counters=uses,
                    )
                )
    return DraState(
        slices=[
            ResourceSlice(
                name=f"{node_name}-gpu{i}",
                driver="gpu.nvidia.com",
                pool=node_name,
                node=node_name,
                devices=devices,
            )
            for i in range(1)
        ]
    )


def dra_dynamic_mig():
    """Issue 32: a Hopper pool on DRA with the driver's DynamicMIG (`spec.dra.mig: dynamic`;
    the golden pool's name `a100` kept, its model H100).
    ranker-0's 3g.40gb at slice 0 of h100-1/gpu1 was made by the driver at its claim's
    prepare: the card reads as the first offered layout around it (two 3g.40gb, one free).
    Three more rankers: one takes the free partition, and a whole card becomes two 3g.40gb,
    with no node action at all (no MigReconfigure, no cordon: the driver
    makes the partitions when their claims are prepared), each Admit naming the partition the
    plan chose, placement included (`gpu.nvidia.com/h100-1/gpu-0-mig-3g40gb-9-0`: the executor
    writes it as the claim's allocation)."""
    text = (
        desired_text(train_min=0)
        .replace("    shared: {slicesPerGPU: 4, memoryPerSlice: 20Gi}\n", "")
        .replace(
            "  gpuModel: A100-SXM4-80GB\n",
            f"  gpuModel: {H100}\n  backend: dra\n  dra: {{mig: dynamic}}\n",
            1,
        )
    )
    cards = [gpu(i, mig=["3g.40gb"] if i == 1 else None, model=H100) for i in range(4)]
    nodes = [node("h100-1", "a100", H100, cards)]
    w = [mig_pod("team-b", "ranker-0", "h100-1", "3g.40gb", gpu_index=1, start=0)]
    w += [
        mig_pod("team-b", f"ranker-{i}", None, "3g.40gb", pool="a100").model_copy(
            update={"admission": "gpupool"}
        )
        for i in (1, 2, 3)
    ]
    observed = snapshot(NOW, nodes, w, **_objects(text))
    return text, observed.model_copy(update={"dra": dynamic_mig_devices("h100-1", 4)})


SCENARIOS = {
    f.__name__.replace("_", "-"): f
    for f in (
        converged,
        inference_burst_mig,
        inference_preempts_low_training,
        training_reclaims_inference_cards,
        always_rule_preempts_before_giving_back,
        team_over_cap,
        held_by_cap,
        defragment,
        idle_reclaim,
        model_without_mig,
        scale_up_and_down,
        budget_spent,
        min_runtime_protects,
        nonpreemptible_protected,
        objects_and_labels,
        suspended_job_resumes,
        scale_envelope,
        kueue_mode,
        dra_pool,
        dra_drain,
        dra_dynamic_mig,
    )
}


def write_all() -> None:
    from reconciler.observe.snapshot import dump_snapshot
    from reconciler.plan.planner import plan
    from reconciler.plan.render import to_json, to_markdown

    for name, build in SCENARIOS.items():
        text, observed = build()
        d = GOLDEN / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "desired.yaml").write_text(text)
        (d / "observed.yaml").write_text(dump_snapshot(observed))
        desired = load([SourceFile(str(d / "desired.yaml"), text)])
        p = plan(desired, load_observed(d))
        (d / "plan.json").write_text(to_json(p))
        (d / "plan.md").write_text(to_markdown(p))


def load_observed(d: Path):
    from reconciler.observe.snapshot import load_snapshot

    return load_snapshot(d / "observed.yaml")


if __name__ == "__main__":
    write_all()
    print(f"wrote {len(SCENARIOS)} scenarios under {GOLDEN}")
