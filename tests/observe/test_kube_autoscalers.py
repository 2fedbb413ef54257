"""How the Kubernetes adapter reads the autoscalers of inference workloads
(reconciler/observe/kube.py): autoscaling/v2 HPAs (official client models, as the API server
returns them) and KEDA ScaledObjects (dicts, as CustomObjectsApi returns them)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.observe import kube
from reconciler.observe.model import InferenceService, Request, UnreadableObject

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)


def hpa(
    name: str = "chat",
    *,
    target: tuple[str, str, str] = ("apps/v1", "Deployment", "chat"),
    lo: int | None = 2,
    hi: int = 6,
    owner: tuple[str, str, str] | None = None,
    annotations: dict | None = None,
) -> client.V2HorizontalPodAutoscaler:
    refs = (
        [
            client.V1OwnerReference(
                api_version=owner[0], kind=owner[1], name=owner[2], uid="u", controller=True
            )
        ]
        if owner
        else None
    )
    return client.V2HorizontalPodAutoscaler(
        metadata=client.V1ObjectMeta(
            name=name, namespace="team-b", owner_references=refs, annotations=annotations
        ),
        spec=client.V2HorizontalPodAutoscalerSpec(
            scale_target_ref=client.V2CrossVersionObjectReference(
                api_version=target[0], kind=target[1], name=target[2]
            ),
            min_replicas=lo,
            max_replicas=hi,
        ),
    )


def scaled_object(name: str = "chat", **spec) -> dict:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": "team-b"},
        "spec": {"scaleTargetRef": {"name": "chat"}, "triggers": [], **spec},
    }


def service(name: str = "chat", kind: str = "Deployment") -> InferenceService:
    return InferenceService(
        namespace="team-b", name=name, kind=kind, replicas=2, replica_request=Request(gpus=1)
    )


def test_an_hpa_on_a_deployment():
    target, a = kube._hpa(hpa(annotations={C.LAST_SCALE_ANN: "2026-12-03T05:00:00Z"}))
    assert target == ("team-b", "Deployment", "chat")
    assert (a.kind, a.key, a.min_replicas, a.max_replicas, a.owner) == (
        "HorizontalPodAutoscaler",
        "team-b/chat",
        2,
        6,
        "",
    )
    assert a.last_change_at == datetime(2026, 12, 3, 5, 0, tzinfo=UTC)


def test_an_hpa_without_min_keeps_one():
    assert kube._hpa(hpa(lo=None))[1].min_replicas == 1


def test_the_hpa_keda_made_is_marked_as_the_scaledobjects():
    _, a = kube._hpa(hpa("keda-hpa-chat", owner=("keda.sh/v1alpha1", "ScaledObject", "chat")))
    assert a.owner == "ScaledObject/chat"
    _, b = kube._hpa(hpa("x", owner=("apps/v1", "Deployment", "chat")))
    assert b.owner == ""


@pytest.mark.parametrize(
    "target",
    [("v1", "ReplicationController", "chat"), ("argoproj.io/v1alpha1", "Rollout", "chat")],
)
def test_an_hpa_on_a_kind_gpupool_does_not_scale_targets_nothing(target):
    assert kube._hpa(hpa(target=target))[0] is None


def test_a_scaledobject_with_keda_defaults():
    # scaleTargetRef without apiVersion/kind: apps/v1 Deployment (keda gvkr.go ParseGVKR);
    # no minReplicaCount: 0, no maxReplicaCount: 100
    target, a = kube._scaled_object(scaled_object())
    assert target == ("team-b", "Deployment", "chat")
    assert (a.kind, a.min_replicas, a.max_replicas) == ("ScaledObject", 0, 100)


def test_a_scaledobject_with_its_envelope_on_a_statefulset():
    o = scaled_object(minReplicaCount=1, maxReplicaCount=5)
    o["spec"]["scaleTargetRef"] = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "chat"}
    target, a = kube._scaled_object(o)
    assert target == ("team-b", "StatefulSet", "chat")
    assert (a.min_replicas, a.max_replicas, a.idle_replicas) == (1, 5, None)


def test_a_scaledobjects_idle_replica_count():
    _, a = kube._scaled_object(scaled_object(minReplicaCount=1, idleReplicaCount=0))
    assert (a.idle_replicas, a.min_replicas) == (0, 1)


def test_services_get_the_autoscalers_that_target_them():
    found = [
        kube._scaled_object(scaled_object()),
        kube._hpa(hpa("keda-hpa-chat", owner=("keda.sh/v1alpha1", "ScaledObject", "chat"))),
        kube._hpa(hpa("rank", target=("apps/v1", "StatefulSet", "chat"))),
        kube._hpa(hpa("other", target=("apps/v1", "Deployment", "other"))),
    ]
    svcs = kube.with_autoscalers([service(), service(kind="StatefulSet"), service("idle")], found)
    assert [[(a.kind, a.name) for a in s.autoscalers] for s in svcs] == [
        [("HorizontalPodAutoscaler", "keda-hpa-chat"), ("ScaledObject", "chat")],
        [("HorizontalPodAutoscaler", "rank")],
        [],
    ]


class FakeApis:
    def __init__(self, hpas: list, objects: list | None, status: int = 404):
        self.hpas, self.objects, self.status = hpas, objects, status

    def autoscaling(self, _api):
        fake = self

        class Api:
            def list_horizontal_pod_autoscaler_for_all_namespaces(self):
                return client.V2HorizontalPodAutoscalerList(items=fake.hpas)

        return Api()

    def custom(self, _api):
        fake = self

        class Api:
            def list_cluster_custom_object(self, group, version, plural):
                assert (group, version, plural) == ("keda.sh", "v1alpha1", "scaledobjects")
                if fake.objects is None:
                    raise client.ApiException(status=fake.status, reason="x")
                return {"items": fake.objects}

        return Api()


@pytest.fixture
def apis(monkeypatch):
    def install(hpas, objects, status=404):
        f = FakeApis(hpas, objects, status)
        monkeypatch.setattr(client, "AutoscalingV2Api", f.autoscaling)
        monkeypatch.setattr(client, "CustomObjectsApi", f.custom)

    return install


def collect(fn):
    found: list[UnreadableObject] = []
    token = kube._UNREADABLE.set(found)
    try:
        return fn(), found
    finally:
        kube._UNREADABLE.reset(token)


def test_without_kedas_crd_there_are_no_scaledobjects_and_no_finding(apis):
    apis([hpa()], None, 404)
    got, bad = collect(lambda: kube.read_autoscalers(object()))
    assert [a.name for _, a in got] == ["chat"] and bad == []


def test_a_forbidden_scaledobject_list_fails_the_observation(apis):
    # not knowing which workloads KEDA scales would let gpupool patch replicas KEDA owns
    apis([], None, 403)
    with pytest.raises(client.ApiException):
        kube.read_autoscalers(object())


def test_a_malformed_autoscaler_is_left_out_and_reported(apis):
    # an HPA the API server validated parses (the client's models validate it too); a
    # ScaledObject is only as good as KEDA's CRD schema, which takes a negative count
    apis(
        [hpa()],
        [
            scaled_object("no-ref", scaleTargetRef=None),
            scaled_object("junk", minReplicaCount="two"),
            scaled_object("negative", maxReplicaCount=-1),
            scaled_object("idle-junk", idleReplicaCount="0"),
            scaled_object("idle-negative", idleReplicaCount=-1),
            scaled_object("fine", maxReplicaCount=3),
        ],
    )
    got, bad = collect(lambda: kube.read_autoscalers(object()))
    assert [(a.kind, a.name) for _, a in got] == [
        ("HorizontalPodAutoscaler", "chat"),
        ("ScaledObject", "fine"),
    ]
    assert sorted((u.kind, u.name) for u in bad) == [
        ("ScaledObject", "idle-junk"),
        ("ScaledObject", "idle-negative"),
        ("ScaledObject", "junk"),
        ("ScaledObject", "negative"),
        ("ScaledObject", "no-ref"),
    ]
    assert all(u.namespace == "team-b" and "left out" in u.message for u in bad)
