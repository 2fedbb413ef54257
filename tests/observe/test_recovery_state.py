"""What recovery from node failure reads from the cluster (reconciler/plan/stages/recovery.py):
a Node's Ready `lastTransitionTime` and creation time (the settle time of a node back from a
failure; bounded like every time), and a Job's `gpupool.io/recoveries` count, believed only
when gpupool's field manager wrote it (kube_owners.py `_recoveries`)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kubernetes import client

from reconciler import conventions as C
from reconciler.observe.kube_common import _UNREADABLE
from reconciler.observe.kube_nodes import _node
from reconciler.observe.kube_owners import _recoveries

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)
H100 = "NVIDIA-H100-80GB-HBM3"


def k8s_node(ready: str, changed: datetime | None) -> client.V1Node:
    return client.V1Node(
        metadata=client.V1ObjectMeta(
            name="n1",
            labels={C.POOL_LABEL: "h100", C.PRODUCT_LABEL: H100},
            creation_timestamp=T0,
        ),
        spec=client.V1NodeSpec(),
        status=client.V1NodeStatus(
            capacity={C.GPU_RESOURCE: "8"},
            allocatable={C.GPU_RESOURCE: "8"},
            conditions=[
                client.V1NodeCondition(type="Ready", status=ready, last_transition_time=changed)
            ],
        ),
    )


@pytest.mark.parametrize(
    ("ready", "changed", "is_ready", "read"),
    [
        ("True", T0.replace(hour=7), True, T0.replace(hour=7)),
        ("Unknown", T0.replace(hour=8), False, T0.replace(hour=8)),
        ("True", None, True, None),
        ("True", datetime(1970, 1, 1, tzinfo=UTC), True, None),  # out of bounds: absent
    ],
)
def test_a_nodes_ready_transition_is_read(ready, changed, is_ready, read):
    found: list = []
    token = _UNREADABLE.set(found)
    try:
        n = _node(k8s_node(ready, changed), None)
    finally:
        _UNREADABLE.reset(token)
    assert (n.ready, n.ready_changed_at, n.created_at) == (is_ready, read, T0)


def job(value: str, manager: str) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(
            name="train",
            namespace="team-a",
            annotations={C.RECOVERIES_ANN: value},
            managed_fields=[
                client.V1ManagedFieldsEntry(
                    manager=manager,
                    operation="Update",
                    api_version="batch/v1",
                    fields_type="FieldsV1",
                    fields_v1={"f:metadata": {"f:annotations": {f"f:{C.RECOVERIES_ANN}": {}}}},
                    time=T0,
                )
            ],
        )
    )


@pytest.mark.parametrize(
    ("value", "manager", "read", "report"),
    [
        ("2", C.FIELD_MANAGER, 2, ""),
        ("0", "kubectl-annotate", None, "forged-state"),  # someone else wrote it: ignored
        ("x", C.FIELD_MANAGER, None, "unreadable"),
        (str(C.MAX_RECOVERIES_READ + 1), C.FIELD_MANAGER, None, "unreadable"),
    ],
)
def test_a_jobs_recovery_count_is_believed_only_from_gpupool(value, manager, read, report):
    found: list = []
    token = _UNREADABLE.set(found)
    try:
        got = _recoveries(job(value, manager))
    finally:
        _UNREADABLE.reset(token)
    assert got == read
    assert [u.message.split(" ")[0].rstrip(":") for u in found] == ([report] if report else [])


def pod(phase: str, *, owner: str | None = "Job", gang: str | None = None, node="n1", ended=None):
    """A 4-GPU pod of phase `phase` bound to `node`, owned by `owner` (kind) or none."""
    refs = (
        [client.V1OwnerReference(api_version="v1", kind=owner, name="train", uid="u")]
        if owner
        else None
    )
    statuses = (
        [
            client.V1ContainerStatus(
                name="main",
                image="i",
                image_id="i",
                ready=False,
                restart_count=0,
                state=client.V1ContainerState(
                    terminated=client.V1ContainerStateTerminated(exit_code=1, finished_at=ended)
                ),
            )
        ]
        if ended
        else None
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name="train-1",
            namespace="team-a",
            creation_timestamp=T0,
            owner_references=refs,
            annotations={C.GANG_ANN: gang} if gang else {},
        ),
        spec=client.V1PodSpec(
            node_name=node,
            containers=[
                client.V1Container(
                    name="main",
                    resources=client.V1ResourceRequirements(limits={C.GPU_RESOURCE: "4"}),
                )
            ],
        ),
        status=client.V1PodStatus(phase=phase, container_statuses=statuses),
    )


@pytest.mark.parametrize(
    ("p", "read"),
    [
        (pod("Failed", ended=T0.replace(hour=9)), T0.replace(hour=9)),  # a Job's pod
        (pod("Failed", owner=None, gang="g"), T0),  # an explicit gang, no end time: created
        (pod("Succeeded", ended=T0.replace(hour=9)), None),  # finished: not lost
        (pod("Running"), None),
        (pod("Failed", owner="ReplicaSet", ended=T0), None),  # a replica stands alone
        (pod("Failed", owner=None), None),  # a bare pod stands alone
        (pod("Failed", node=None), None),  # never bound: held nothing
    ],
)
def test_failed_gang_members_are_read_with_when_they_failed(p, read):
    from reconciler.observe.kube_owners import Owners
    from reconciler.observe.kube_pods import failed_members

    found = failed_members([p], Owners())
    assert [w.failed_at for w in found] == ([read] if read else [])
    assert all(w.allocations == [] and w.node == "n1" for w in found)
