"""Scaling through the autoscaler that is there (issue 14), on the real control plane: gpupool
sets the envelope of a real autoscaling/v2 HPA and the REAL horizontal-pod-autoscaler controller
(kube-controller-manager, `--horizontal-pod-autoscaler-sync-period=5s`) scales the Deployment
into it; a KEDA ScaledObject's envelope goes through KEDA's own CRD schema. gpupool never writes
the Deployments (the audit log says so), and the cycle after changes nothing.

There is no metrics-server here: the HPA controller still enforces the envelope, because it
checks the bounds before it computes any metric: kubernetes v1.37.2
pkg/controller/podautoscaler/horizontal.go, reconcileAutoscaler: `currentReplicas >
hpa.Spec.MaxReplicas` -> desiredReplicas = MaxReplicas ("Current number of replicas above
Spec.MaxReplicas"), `currentReplicas < minReplicas` -> desiredReplicas = minReplicas, both with
`needsMetricComputation = false`; only a target within the bounds has its metrics computed
(and, without metrics, is left as it is).

KEDA's operator is not run in this module (it is in test_keda.py, with its metrics server and
the HPA it makes from the ScaledObject): here the HPA KEDA would make (`keda-hpa-<name>`, owned
by the ScaledObject: keda v2.19.0 controllers/keda/hpa.go, getDefaultHpaName and
newHPAForScaledObject) is created by the test as KEDA would, to show gpupool leaves it alone.
"""

from __future__ import annotations

import time

from kubernetes import client

from reconciler import conventions as C

from .crds import install_crd, keda_scaled_object_crd
from .harness import audit_mark, controller, writes
from .scenario import TEXT, base

SCALING = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: serve}
spec:
  pool: h100
  targets:
    - {namespace: team-b, name: chat, minReplicas: 1, maxReplicas: 3}
    - {namespace: team-b, name: embed, minReplicas: 2, maxReplicas: 3}
    - {namespace: team-b, name: summarize, minReplicas: 1, maxReplicas: 4}
  scaleUp: {queueLengthPerReplica: 10, step: 1, cooldown: 2m}
  scaleDown: {queueLengthPerReplica: 1, step: 2, cooldown: 10m}
"""
NS = "team-b"
HPA_CONTROLLER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
"""kube-controller-manager's HPA controller, under its own ServiceAccount
(--use-service-account-credentials)."""
SO_ARGS = (C.KEDA_GROUP, C.KEDA_VERSION, NS, C.SCALED_OBJECT_PLURAL)


def deployment(kube, name: str, replicas: int, queue: float) -> None:
    """An inference Deployment (gpupool.io/inference=true) with its queue-length signal. Its
    pods ask for no GPU: gpupool reads only the Deployment here, and the HPA only its scale."""
    kube.apps.create_namespaced_deployment(
        NS,
        {
            "metadata": {
                "name": name,
                "labels": {"gpupool.io/inference": "true"},
                "annotations": {C.QUEUE_LENGTH_ANN: str(queue)},
            },
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "srv", "image": "registry.example/serve:1"}]},
                },
            },
        },
    )


def hpa(kube, name: str, target: str, lo: int, hi: int, owner: dict | None = None) -> None:
    meta: dict = {"name": name}
    if owner:
        meta["ownerReferences"] = [owner]
    client.AutoscalingV2Api(kube.api_client).create_namespaced_horizontal_pod_autoscaler(
        NS,
        {
            "metadata": meta,
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
                "minReplicas": lo,
                "maxReplicas": hi,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 80},
                        },
                    }
                ],
            },
        },
    )


def hpa_seen(kube, name: str, timeout: float = 60.0) -> None:
    """Wait until the HPA controller has reconciled the HPA once (it writes its status then):
    a status write between gpupool's read and its patch would be a 409, retried next cycle."""
    deadline = time.monotonic() + timeout
    while not ((st := read_hpa(kube, name).status) and st.conditions):
        assert time.monotonic() < deadline, f"the HPA controller has not seen {name}"
        time.sleep(0.5)


def read_hpa(kube, name: str):
    return client.AutoscalingV2Api(kube.api_client).read_namespaced_horizontal_pod_autoscaler(
        name, NS
    )


def replicas(kube, name: str) -> int:
    return kube.apps.read_namespaced_deployment(name, NS).spec.replicas


def wait_replicas(kube, name: str, want: int, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while (got := replicas(kube, name)) != want:
        assert time.monotonic() < deadline, f"{name} has {got} replicas, not {want}"
        time.sleep(0.5)


def outcomes(result) -> dict[str, str]:
    return {o.action: o.status for o in result.applied.outcomes} if result.applied else {}


def never_wrote_deployments(kube, since: int) -> None:
    """The controller's ServiceAccount sent no write to a Deployment (nor its scale)."""
    assert [
        (e.verb, e.resource, e.subresource, e.name)
        for e in writes(kube, since=since)
        if e.resource == "deployments"
    ] == []


def test_the_real_hpa_controller_scales_into_gpupools_envelope(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock, text=TEXT + SCALING, workloads=False)
    # chat: 3 replicas, calm (queue 0): the envelope's max goes 3 -> 1 (step 2), and the HPA
    # controller scales chat down to it. embed: 1 replica, the target's minimum is 2: the
    # envelope's min goes 1 -> 2, and the HPA controller scales embed up to it.
    deployment(kube, "chat", 3, queue=0)
    deployment(kube, "embed", 1, queue=6)  # 6 / max 3 = 2 per replica: neither hot nor calm
    hpa(kube, "chat", "chat", 1, 3)
    hpa(kube, "embed", "embed", 1, 3)
    hpa_seen(kube, "chat")
    hpa_seen(kube, "embed")
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)
    first = ctl.cycle()
    assert first.error is None and first.leader
    got = outcomes(first)
    assert got[f"scale-envelope:{NS}/chat"] == "done"
    assert got[f"scale-envelope:{NS}/embed"] == "done"
    assert not [a for a in got if a.startswith("scale:")], "replicas are never patched"
    chat, embed = read_hpa(kube, "chat"), read_hpa(kube, "embed")
    assert (chat.spec.min_replicas, chat.spec.max_replicas) == (1, 1)
    assert (embed.spec.min_replicas, embed.spec.max_replicas) == (2, 3)
    assert chat.metadata.annotations[C.LAST_SCALE_ANN] == clock.now.isoformat()
    # the real HPA controller, without any metrics, brings each Deployment into its envelope
    wait_replicas(kube, "chat", 1)
    wait_replicas(kube, "embed", 2)
    never_wrote_deployments(kube, mark)
    hpa_writes = [
        (e.verb, e.name)
        for e in writes(kube, since=mark)
        if e.resource == "horizontalpodautoscalers"
    ]
    assert sorted(hpa_writes) == [("patch", "chat"), ("patch", "embed")]
    # what did write the Deployments' replicas: the HPA controller, through their scale
    scalers = {
        (e.user, e.verb, e.name)
        for e in kube.plane.audit_events()[mark:]
        if e.resource == "deployments"
        and e.subresource == "scale"
        and e.verb in ("update", "patch")
    }
    assert {(v, n) for _, v, n in scalers} == {("update", "chat"), ("update", "embed")}
    assert {u for u, _, _ in scalers} == {HPA_CONTROLLER}, scalers

    # the cycle after: the envelopes are what the policy wants; nothing is written
    clock.advance(30)
    mark = audit_mark(kube)
    second = ctl.cycle()
    assert second.error is None and second.converged and second.applied is None, second.summary
    assert writes(kube, since=mark, exclude=("leases", "reconcilerstatuses")) == []


def test_a_scaledobjects_envelope_through_kedas_crd(kube, tmp_path):
    install_crd(kube.api_client, keda_scaled_object_crd())
    clock = kube.clock
    base(kube, tmp_path, clock, text=TEXT + SCALING, workloads=False)
    deployment(kube, "summarize", 2, queue=6)
    so = kube.custom.create_namespaced_custom_object(
        *SO_ARGS,
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "summarize"},
            # no minReplicaCount (KEDA: 0), maxReplicaCount over the target's maximum
            "spec": {
                "scaleTargetRef": {"name": "summarize"},
                "maxReplicaCount": 10,
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {
                            "serverAddress": "http://prometheus.monitoring:9090",
                            "query": "sum(vllm:num_requests_waiting)",
                            "threshold": "10",
                        },
                    }
                ],
            },
        },
    )
    # the HPA KEDA makes for it, owned by it: gpupool must leave it alone
    hpa(
        kube,
        "keda-hpa-summarize",
        "summarize",
        1,
        10,
        owner={
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "name": "summarize",
            "uid": so["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        },
    )
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)
    first = ctl.cycle()
    assert first.error is None
    got = outcomes(first)
    assert got[f"scale-envelope:{NS}/summarize"] == "done"
    assert not [a for a in got if a.startswith("scale:") or "keda-hpa" in a]
    obj = kube.custom.get_namespaced_custom_object(*SO_ARGS, "summarize")
    # accepted by KEDA's CRD schema (int32 counts)
    assert (obj["spec"]["minReplicaCount"], obj["spec"]["maxReplicaCount"]) == (1, 4)
    assert obj["metadata"]["annotations"][C.LAST_SCALE_ANN] == clock.now.isoformat()
    keda_hpa = read_hpa(kube, "keda-hpa-summarize")
    assert (keda_hpa.spec.min_replicas, keda_hpa.spec.max_replicas) == (1, 10)
    assert replicas(kube, "summarize") == 2
    never_wrote_deployments(kube, mark)
    assert not [e for e in writes(kube, since=mark) if e.resource == "horizontalpodautoscalers"]

    clock.advance(30)
    mark = audit_mark(kube)
    second = ctl.cycle()
    assert second.error is None and second.converged and second.applied is None, second.summary
    assert writes(kube, since=mark, exclude=("leases", "reconcilerstatuses")) == []
