"""`KubeOps.admit_pod` patches against the pod as gpupool last read or wrote it (the Admit
step's read, the reservation, the status naming a pinned claim): no second read, the same
resourceVersion precondition. Against a stub of the client's CoreV1Api; on the real API
server the handler table (tests/apply/test_handlers_api.py) runs the same path."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from reconciler import conventions as C
from reconciler.apply import kube
from reconciler.apply.kube import KubeOps


def gated(rv: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", namespace="t", resource_version=rv, uid="u"),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="main")],
            scheduling_gates=[client.V1PodSchedulingGate(name=C.ADMISSION_GATE)],
        ),
        status=client.V1PodStatus(phase="Pending"),
    )


class Core:
    """The pod "t/p" at resourceVersion `rv`; each call recorded."""

    def __init__(self) -> None:
        self.rv, self.calls, self.patches, self.status_patches = 1, [], [], []

    def read_namespaced_pod(self, name: str, ns: str) -> client.V1Pod:
        self.calls.append("GET")
        return gated(str(self.rv))

    def patch_namespaced_pod(self, name: str, ns: str, body: dict, **_: Any) -> client.V1Pod:
        self.calls.append("PATCH")
        self.patches.append(body)
        self.rv += 1
        return gated(str(self.rv))

    def patch_namespaced_pod_status(self, name: str, ns: str, body: dict, **_: Any):
        self.calls.append("PATCH status")
        self.status_patches.append(body)
        self.rv += 1
        return gated(str(self.rv))


def ops() -> tuple[KubeOps, Core]:
    o = KubeOps(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    o.core = Core()  # type: ignore[assignment]
    return o, o.core  # type: ignore[return-value]


def admit(o: KubeOps) -> None:
    o.admit_pod("t", "p", node="n1", annotations={C.ADMITTED_ANN: "n1"})


def test_the_admission_patches_against_the_steps_own_read():
    o, core = ops()
    o.read_pod("t", "p")
    admit(o)
    assert core.calls == ["GET", "PATCH"]
    assert core.patches[0]["metadata"]["resourceVersion"] == "1"


def test_after_the_status_naming_a_claim_it_patches_against_that_answer():
    o, core = ops()
    o.read_pod("t", "p")
    o.set_pod_claim("t", "p", "gpu", "p-gpu-abc")
    admit(o)
    assert core.calls == ["GET", "PATCH status", "PATCH"]
    assert core.patches[0]["metadata"]["resourceVersion"] == "2"


def test_an_ungated_pod_is_read_again():
    """The scheduler writes a pod once its gates are gone (binding, conditions): a copy of
    an ungated pod would only make the admission a 409."""
    o, core = ops()
    o.read_pod("t", "p")
    o._pods["t/p"][1].spec.scheduling_gates = None
    admit(o)
    assert core.calls == ["GET", "GET", "PATCH"]


def test_a_pod_from_the_watch_cache_is_admitted_against_that_copy():
    """`peek_pod`: the controller's watch cache's copy (`pod_peek`), no request; the admission
    patches against its resourceVersion, so a pod changed since is a 409, not a blind write.
    No cache, or a cache without the pod: None (the step reads it)."""
    o, core = ops()
    assert o.peek_pod("t", "p") is None
    o.pod_peek = lambda ns, name: gated("7") if (ns, name) == ("t", "p") else None
    assert o.peek_pod("t", "q") is None
    info = o.peek_pod("t", "p")
    assert info is not None and info.gates == (C.ADMISSION_GATE,) and info.uid == "u"
    admit(o)
    assert core.calls == ["PATCH"]
    assert core.patches[0]["metadata"]["resourceVersion"] == "7"


def test_a_pod_not_seen_lately_is_read_again(monkeypatch):
    o, core = ops()
    admit(o)  # never read
    assert core.calls == ["GET", "PATCH"]
    o.read_pod("t", "p")
    monkeypatch.setattr(kube, "POD_REUSE_SECONDS", -1.0)  # what it saw is too old
    admit(o)
    assert core.calls[2:] == ["GET", "GET", "PATCH"]
    monkeypatch.setattr(kube, "POD_REUSE_SECONDS", 10.0)
    admit(o)  # against the last patch's answer
    assert core.calls[5:] == ["PATCH"]
    assert core.patches[-1]["metadata"]["resourceVersion"] == str(core.rv - 1)


def test_a_terminating_pod_says_when_its_deletion_was_asked():
    """`PodInfo.delete_asked`: the deletionTimestamp less the grace period the delete gave (the
    API server stamps the end of the grace period); None while the pod is not being deleted."""
    pod = gated("1")
    assert kube._pod(pod).delete_asked is None
    at = datetime(2026, 12, 6, 12, 0, 30, tzinfo=UTC)
    pod.metadata.deletion_timestamp, pod.metadata.deletion_grace_period_seconds = at, 30
    info = kube._pod(pod)
    assert info.deleting and info.delete_asked == datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


def test_a_pod_says_when_it_was_created():
    """`PodInfo.created`: its creationTimestamp (None when unset), which tells a DRA pod just
    created, whose claim Kubernetes has not named yet, from one whose claim will not come."""
    pod = gated("1")
    pod.metadata.creation_timestamp = None
    assert kube._pod(pod).created is None
    at = datetime(2026, 12, 7, 9, 0, 1, tzinfo=UTC)
    pod.metadata.creation_timestamp = at
    assert kube._pod(pod).created == at


def test_the_status_naming_a_claim_names_the_node_in_the_same_patch():
    """`set_pod_claim` with a node: one status patch with the claim and
    `nominatedNodeName`; without one, the claim alone. A condition's patch may remove it."""
    o, core = ops()
    o.set_pod_claim("t", "p", "gpu", "p-gpu-abc", node="n1")
    o.set_pod_claim("t", "p", "gpu", "p-gpu-abc")
    o.set_pod_condition(
        "t",
        "p",
        type=C.ADMITTED_CONDITION,
        status="False",
        reason="HeldCap",
        message="m",
        last_transition_time="2026-12-06T00:00:00Z",
        clear_nominated=True,
    )
    claim = [{"name": "gpu", "resourceClaimName": "p-gpu-abc"}]
    assert [b["status"] for b in core.status_patches[:2]] == [
        {"resourceClaimStatuses": claim, "nominatedNodeName": "n1"},
        {"resourceClaimStatuses": claim},
    ]
    assert core.status_patches[2]["status"]["nominatedNodeName"] is None


def test_a_pod_s_nominated_node_is_read():
    pod = gated("1")
    pod.status.nominated_node_name = "n1"
    assert kube._pod(pod).nominated == "n1"
    assert kube._pod(gated("1")).nominated == ""


def test_a_condition_set_from_a_copy_is_conditional_on_its_version():
    """`set_pod_condition(resource_version=...)`: the copy's version rides in the status patch
    (a precondition: 409 once the pod changed); without one, the patch is unconditional (a
    Hold decided on a read a moment ago). `PodInfo.resource_version` is the copy's."""
    o, core = ops()
    o.pod_peek = lambda ns, name: gated("7")
    info = o.peek_pod("t", "p")
    assert info is not None and info.resource_version == "7"
    condition = dict(
        type=C.ADMITTED_CONDITION,
        status="False",
        reason="HeldCap",
        message="held",
        last_transition_time="2026-12-07T12:00:00Z",
    )
    o.set_pod_condition("t", "p", **condition, resource_version=info.resource_version)
    o.set_pod_condition("t", "p", **condition)
    assert core.calls == ["PATCH status", "PATCH status"]
    first, second = core.status_patches
    assert first["metadata"] == {"resourceVersion": "7"} and "metadata" not in second
    assert first["status"] == second["status"]
