"""gpupool beside KEDA's own operator and metrics server (v2.19.0, tests/neighbours/keda: built
from the Go module proxy, run against the suite's API server as KEDA's manifests install them)
and the real HPA controller of kube-controller-manager:

- the envelope gpupool writes on a ScaledObject (minReplicaCount/maxReplicaCount) reaches the
  HPA KEDA creates and owns (`keda-hpa-<name>`), and the HPA controller, reading the external
  metric through the aggregator, KEDA's metrics server, its gRPC service in the operator and
  KEDA's `prometheus` scaler against the suite's real Prometheus, scales the Deployment inside
  that envelope (up to the max under a high metric, down to what the metric asks);
- scaling from 0 and `idleReplicaCount`: KEDA takes an inactive target to its idle count and an
  active one back to minReplicaCount, without the HPA; a ScaledObject whose minReplicaCount is
  not above its idleReplicaCount is refused by KEDA's operator (Ready False), and gpupool's
  envelope keeps the min above it;
- gpupool never writes the Deployments or KEDA's HPA, and its next cycle writes nothing.

Without Go and without cached binaries these tests fail with the build script's message;
GPUPOOL_SKIP_KEDA=1 turns that into a skip.
"""

from __future__ import annotations

import os

import pytest
from kubernetes import client

from reconciler import conventions as C
from tests.neighbours.keda.keda import OPERATOR_USER, Keda, KedaUnavailable, keda_binaries
from tests.support.wait import wait_for

from .crds import KEDA_MODULE, KEDA_VERSION, module_dir
from .harness import audit_mark, controller, writes
from .scenario import TEXT, base

NS = "team-b"
SO_ARGS = (C.KEDA_GROUP, C.KEDA_VERSION, NS, C.SCALED_OBJECT_PLURAL)
HPA_CONTROLLER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
METRIC = "gpupool_test_waiting"
SCALING = """\
---
apiVersion: gpupool.io/v1alpha1
kind: ScalingPolicy
metadata: {name: serve}
spec:
  pool: h100
  targets:
    - {namespace: team-b, name: summarize, minReplicas: 1, maxReplicas: 4}
    - {namespace: team-b, name: chat, minReplicas: 0, maxReplicas: 3}
  scaleUp: {queueLengthPerReplica: 10, step: 1, cooldown: 2m}
  scaleDown: {queueLengthPerReplica: 1, step: 2, cooldown: 10m}
"""


@pytest.fixture(scope="module")
def keda(installed, tmp_path_factory):
    """KEDA running for this module, on the session's control plane."""
    if os.environ.get("GPUPOOL_SKIP_KEDA"):
        pytest.skip("GPUPOOL_SKIP_KEDA is set: KEDA's operator is not run")
    try:
        binaries = keda_binaries()
    except KedaUnavailable as exc:
        pytest.fail(
            f"KEDA's operator is not built: {exc} (set GPUPOOL_SKIP_KEDA=1 to skip these tests)",
            pytrace=False,
        )
    module = module_dir(KEDA_MODULE, KEDA_VERSION)
    k = Keda(installed, binaries, module, tmp_path_factory.mktemp("keda"))
    k.start()
    try:
        yield k
    finally:
        k.stop()


def deployment(kube, name: str, replicas: int, queue: float) -> None:
    """An inference Deployment with gpupool's queue signal (what gpupool decides on); KEDA
    reads its own trigger."""
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


def scaled_object(kube, prometheus, name: str, threshold: int, **counts) -> dict:
    """A ScaledObject with KEDA's `prometheus` trigger on the exporter's series for `name`,
    polled every second, scaled down without waiting (cooldownPeriod 0, no stabilization)."""
    spec = {
        "scaleTargetRef": {"name": name},
        "pollingInterval": 1,
        "cooldownPeriod": 0,
        **counts,
        "advanced": {
            "horizontalPodAutoscalerConfig": {
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}
            }
        },
        "triggers": [
            {
                "type": "prometheus",
                "metadata": {
                    "serverAddress": prometheus.url,
                    "query": f'sum({METRIC}{{deployment="{name}"}}) or vector(0)',
                    "threshold": str(threshold),
                },
            }
        ],
    }
    return kube.custom.create_namespaced_custom_object(
        *SO_ARGS,
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def waiting(prometheus, name: str, value: float) -> None:
    """Set the series KEDA's trigger reads and wait until Prometheus has scraped it."""
    prometheus.exporter.set(METRIC, {"deployment": name}, value)
    prometheus.wait_for(
        f'{METRIC}{{deployment="{name}"}}',
        lambda r: r and float(r[0]["value"][1]) == value,
    )


def read_so(kube, name: str) -> dict:
    return kube.custom.get_namespaced_custom_object(*SO_ARGS, name)


def ready(kube, name: str) -> dict:
    conds = (read_so(kube, name).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), {})


def keda_hpa(kube, name: str):
    try:
        return client.AutoscalingV2Api(kube.api_client).read_namespaced_horizontal_pod_autoscaler(
            f"keda-hpa-{name}", NS
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def wait_hpa_envelope(kube, keda, name: str, lo: int, hi: int):
    def check():
        keda.check_alive()
        h = keda_hpa(kube, name)
        return h if h and (h.spec.min_replicas, h.spec.max_replicas) == (lo, hi) else None

    return wait_for(f"KEDA's HPA for {name} at {lo}..{hi}", check, timeout=90)


def wait_replicas(kube, keda, name: str, want: int, timeout: float = 120):
    def check():
        keda.check_alive()
        return kube.apps.read_namespaced_deployment(name, NS).spec.replicas == want

    try:
        wait_for(f"{name} at {want} replicas", check, timeout=timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{keda.logs_tail()}") from None


def scalers_of(kube, name: str, since: int) -> set[tuple[str, str]]:
    """Who wrote the Deployment's replicas through its scale subresource (user, verb)."""
    return {
        (e.user, e.verb)
        for e in kube.plane.audit_events()[since:]
        if e.resource == "deployments"
        and e.subresource == "scale"
        and e.name == name
        and e.verb in ("update", "patch")
    }


def outcomes(result) -> dict[str, str]:
    return {o.action: o.status for o in result.applied.outcomes} if result.applied else {}


def test_kedas_hpa_takes_gpupools_envelope_and_the_hpa_controller_scales_within_it(
    keda, kube, prometheus, tmp_path
):
    clock = kube.clock
    base(kube, tmp_path, clock, text=TEXT + SCALING, workloads=False)
    deployment(kube, "summarize", 2, queue=6)
    waiting(prometheus, "summarize", 4)  # active: 4 / threshold 2 = the 2 replicas it has
    so = scaled_object(
        kube, prometheus, "summarize", threshold=2, minReplicaCount=1, maxReplicaCount=10
    )
    # KEDA's HPA, owned by the ScaledObject, with the ScaledObject's envelope
    hpa = wait_hpa_envelope(kube, keda, "summarize", 1, 10)
    owner = hpa.metadata.owner_references[0]
    assert (owner.kind, owner.uid, owner.controller) == (
        "ScaledObject",
        so["metadata"]["uid"],
        True,
    )

    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)
    first = ctl.cycle()
    assert first.error is None, first.summary
    assert outcomes(first)[f"scale-envelope:{NS}/summarize"] == "done"
    spec = read_so(kube, "summarize")["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 4)
    # KEDA carries gpupool's envelope into its own HPA
    wait_hpa_envelope(kube, keda, "summarize", 1, 4)
    # a 409 on KEDA's own HPA update leaves Ready False until its next reconcile
    wait_for(
        "KEDA to take summarize",
        lambda: ready(kube, "summarize").get("status") == "True",
        timeout=60,
    )

    # the HPA controller reads the external metric (aggregator -> KEDA's metrics server ->
    # operator -> Prometheus) and scales within the envelope: 100 / 2 asks 50, the max is 4
    waiting(prometheus, "summarize", 100)
    wait_replicas(kube, keda, "summarize", 4)

    def limited():  # the HPA controller writes its status after the scale
        h = keda_hpa(kube, "summarize")
        c = {c.type: c for c in h.status.conditions or []}.get("ScalingLimited")
        return h if c and (c.status, c.reason) == ("True", "TooManyReplicas") else None

    hpa = wait_for("the HPA to say its max limits it", limited, timeout=60)
    metric = hpa.status.current_metrics[0].external
    assert metric.metric.name.endswith("prometheus") and metric.current.average_value, metric
    # and down to what the metric asks (2 / 2 = 1), which the envelope's min allows
    waiting(prometheus, "summarize", 2)
    wait_replicas(kube, keda, "summarize", 1)
    # the HPA controller scaled it (KEDA's operator may too, for its own activation)
    who = {u for u, _ in scalers_of(kube, "summarize", mark)}
    assert HPA_CONTROLLER in who and who <= {HPA_CONTROLLER, OPERATOR_USER}, who
    assert not [e for e in writes(kube, since=mark) if e.resource == "deployments"]
    assert not [e for e in writes(kube, since=mark) if e.resource == "horizontalpodautoscalers"], (
        "KEDA's HPA is KEDA's"
    )
    kedas = {
        e.verb
        for e in kube.plane.audit_events()[mark:]
        if e.resource == "horizontalpodautoscalers" and e.user == OPERATOR_USER
    }
    assert kedas == {"update"}, f"KEDA updated its HPA for gpupool's envelope: {kedas}"

    clock.advance(30)
    mark = audit_mark(kube)
    second = ctl.cycle()
    assert second.error is None and second.applied is None, second.summary
    assert writes(kube, since=mark, exclude=("leases", "reconcilerstatuses")) == []


def test_scaling_from_zero_beside_idle_zero_with_gpupools_envelope(
    keda, kube, prometheus, tmp_path
):
    """idleReplicaCount 0 and a target whose minReplicas is 0: gpupool writes minReplicaCount
    0, which KEDA takes (its HPA keeps 1); inactive -> 0, active -> 1 and on through the HPA."""
    clock = kube.clock
    base(kube, tmp_path, clock, text=TEXT + SCALING, workloads=False)
    deployment(kube, "chat", 1, queue=6)
    waiting(prometheus, "chat", 0)  # inactive
    scaled_object(
        kube,
        prometheus,
        "chat",
        threshold=1,
        idleReplicaCount=0,
        minReplicaCount=2,
        maxReplicaCount=3,
    )
    wait_hpa_envelope(kube, keda, "chat", 2, 3)
    # inactive: KEDA takes chat to its idle count, 0 (which no HPA does)
    wait_replicas(kube, keda, "chat", 0)

    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)
    first = ctl.cycle()
    assert first.error is None, first.summary
    assert outcomes(first)[f"scale-envelope:{NS}/chat"] == "done"
    spec = read_so(kube, "chat")["spec"]
    assert (spec["idleReplicaCount"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (0, 0, 3)
    wait_hpa_envelope(kube, keda, "chat", 1, 3)  # KEDA's HPA keeps at least 1
    # a 409 on KEDA's own HPA update leaves Ready False until its next reconcile
    wait_for("KEDA to take chat", lambda: ready(kube, "chat").get("status") == "True", timeout=60)
    assert kube.apps.read_namespaced_deployment("chat", NS).spec.replicas == 0

    # active: KEDA scales from 0 (to 1: a min of 0 counts as 1), then the HPA up to the max
    waiting(prometheus, "chat", 5)
    wait_replicas(kube, keda, "chat", 3)
    # inactive again: back to idle
    waiting(prometheus, "chat", 0)
    wait_replicas(kube, keda, "chat", 0)
    who = scalers_of(kube, "chat", mark)
    assert {u for u, _ in who} == {OPERATOR_USER, HPA_CONTROLLER}, who
    assert not [e for e in writes(kube, since=mark) if e.resource == "deployments"]

    clock.advance(30)
    mark = audit_mark(kube)
    second = ctl.cycle()
    assert second.error is None and second.applied is None, second.summary
    assert writes(kube, since=mark, exclude=("leases", "reconcilerstatuses")) == []


def test_gpupool_keeps_the_min_above_idle_replicas_as_keda_requires(
    keda, kube, prometheus, tmp_path
):
    """idleReplicaCount 1 beside minReplicaCount 1 (the target's minimum, what gpupool wrote
    before it read idleReplicaCount): KEDA's operator refuses the ScaledObject and scales
    nothing; gpupool's envelope raises the min to 2, KEDA takes it, idles the target at 1 and
    scales it to the min when active."""
    clock = kube.clock
    text = TEXT + SCALING.replace("name: chat, minReplicas: 0", "name: chat, minReplicas: 1")
    base(kube, tmp_path, clock, text=text, workloads=False)
    deployment(kube, "chat", 3, queue=6)
    waiting(prometheus, "chat", 0)  # inactive
    scaled_object(
        kube,
        prometheus,
        "chat",
        threshold=100,
        idleReplicaCount=1,
        minReplicaCount=1,
        maxReplicaCount=3,
    )
    cond = wait_for(
        "KEDA to refuse chat",
        lambda: ready(kube, "chat"),
        timeout=60,
        until=lambda c: c.get("status") == "False",
    )
    assert "IdleReplicaCount=1 must be less than MinReplicaCount=1" in cond["message"], cond
    assert keda_hpa(kube, "chat") is None
    assert kube.apps.read_namespaced_deployment("chat", NS).spec.replicas == 3

    ctl = controller(kube, tmp_path, clock)
    first = ctl.cycle()
    assert first.error is None, first.summary
    assert outcomes(first)[f"scale-envelope:{NS}/chat"] == "done"
    spec = read_so(kube, "chat")["spec"]
    assert (spec["idleReplicaCount"], spec["minReplicaCount"], spec["maxReplicaCount"]) == (1, 2, 3)
    wait_for("KEDA to take chat", lambda: ready(kube, "chat").get("status") == "True", timeout=60)
    wait_hpa_envelope(kube, keda, "chat", 2, 3)
    # inactive: to the idle count; active (1 / threshold 100 asks 1): to the min, 2
    wait_replicas(kube, keda, "chat", 1)
    waiting(prometheus, "chat", 1)
    wait_replicas(kube, keda, "chat", 2)
