"""The controller's workload memo (reconciler/observe/kube_pods.py, `WorkloadMemo`): a pod is read
into a `Workload` once per version of the pod and of what it is read with, and the snapshot
equals the one observed without the memo (==, and its JSON) through a sequence of changes: pods
added, bound, finished, deleted, their owners, PodGroups, nodes and agents' publications
changed without a new version of the pod, and reports that are made again on every cycle. The
pods nothing changed for keep the same `Workload` object (`is`) from cycle to cycle: what the
planner's memo recognises an unchanged pod by."""

from __future__ import annotations

import copy
import itertools

from reconciler import conventions as C
from reconciler.observe.kube import WorkloadMemo, observe_cluster
from tests.cluster.dra_slices import gpu_device, node_slice
from tests.observe.fake_cluster import NOW, Cluster, base, node, node_state, pod, serving

_RV = itertools.count(500)


def bump(o: dict) -> dict:
    """A new resourceVersion for the pod `o` (any write of it makes one)."""
    o["metadata"]["resourceVersion"] = str(next(_RV))
    return o


def cluster():
    c = base()
    for o in c.pods + c.node_states:
        bump(o)  # a GpuNodeState's publication is kept per version too
    c.workload_pod_groups = []  # the Workload API served, no group yet
    return c


class Cycles:
    """The same cluster observed without and with one memo, cycle after cycle."""

    def __init__(self, c):
        self.c = c
        self.memo = WorkloadMemo()
        self.last: dict[str, object] = {}

    def step(self, changed: set[str]):
        """One cycle; `changed`: the workloads (namespace/name) expected to be new objects
        (added or read differently); every other one must be last cycle's very object."""
        with serving(self.c):
            plain = observe_cluster(object(), now=NOW)
            memoized = observe_cluster(object(), now=NOW, workloads=self.memo)
        assert memoized == plain
        assert memoized.model_dump_json() == plain.model_dump_json()
        now = {w.key: w for w in memoized.workloads}
        kept = {k for k, w in now.items() if self.last.get(k) is w}
        assert set(now) - kept == changed, sorted(set(now) - kept)
        self.last = now
        return plain


def test_the_memo_gives_the_snapshot_made_without_it_through_changes():
    c = cluster()
    run = Cycles(c)
    first = run.step({w.key for w in observe_once(c).workloads})
    assert run.memo.hits["workload"] == 0 and run.memo.kept_pods() == len(first.workloads)

    run.step(set())  # nothing changed: every workload is the last cycle's
    assert run.memo.misses["workload"] == len(first.workloads)

    # a pod added behind the gate; another written to with nothing it reads changed (a new
    # version all the same: read again, equal)
    c.pods.append(bump(pod("team-a", "new", limits={C.GPU_RESOURCE: "1"}, gated=True)))
    bump(c.find("pods", "ranker-0"))["metadata"]["labels"]["touched"] = "yes"
    run.step({"team-a/new", "team-b/ranker-0"})

    # the gated pod is admitted and bound; its node's agent publishes it
    waiting = c.find("pods", "waiting")
    waiting["spec"].pop("schedulingGates")
    waiting["spec"]["nodeName"] = "a100-1"
    waiting["status"] = {"phase": "Running", "startTime": waiting["metadata"]["creationTimestamp"]}
    bump(waiting)
    bump(c.find("node_states", "a100-1"))["status"]["pods"].append(
        {"namespace": "team-a", "name": "waiting", "allocations": [{"gpu": 4}, {"gpu": 5}]}
    )
    plain = run.step({"team-a/waiting"})
    assert next(w for w in plain.workloads if w.name == "waiting").node == "a100-1"

    # a status change: the shared pod finishes (it leaves the workloads), then is deleted
    bump(c.find("pods", "embed-0"))["status"]["phase"] = "Succeeded"
    run.step(set())
    c.pods.remove(c.find("pods", "embed-0"))
    c.pods.remove(c.find("pods", "new"))
    run.step(set())
    assert run.memo.kept_pods() == len(run.last)  # the gone pods are not kept

    # the agent republishes what train-0 holds (its pod unchanged)
    state = bump(c.find("node_states", "a100-1"))
    state["status"]["pods"][0]["allocations"] = [{"gpu": 6}, {"gpu": 7}]
    hits = run.memo.hits["published"]
    run.step({"team-a/train-0"})
    assert run.memo.hits["published"] == hits  # the one GpuNodeState was read again
    run.step(set())
    assert run.memo.hits["published"] == hits + 1

    # owners change, the pods do not: the Job's parallelism, its next-pod reservation, the
    # coscheduling PodGroup's minMember
    c.find("jobs", "train")["spec"]["parallelism"] = 3
    run.step({"team-a/train-0"})
    c.find("jobs", "train")["metadata"]["annotations"].clear()
    run.step({"team-a/train-0"})  # its part of the owners changed: read again, equal
    c.find("pod_groups", "gang")["spec"]["minMember"] = 3
    plain = run.step({"team-a/gang-0"})
    assert next(w for w in plain.workloads if w.name == "gang-0").gang_size == 3

    # a namespace's gating changes: no workload reads it
    c.find("namespaces", "team-b")["metadata"]["labels"] = {
        C.ADMISSION_NAMESPACE_LABEL: C.ADMISSION_NAMESPACE_VALUE
    }
    plain = run.step(set())
    assert plain.gated_namespaces == ["team-a", "team-b"]

    # a pod joins a Workload-API PodGroup that does not exist yet (held, reported every
    # cycle), then the group is made: the pod is read again without its version changing
    gang = c.find("pods", "gang-0")
    bump(gang)["spec"]["schedulingGroup"] = {"podGroupName": "wl"}
    plain = run.step({"team-a/gang-0"})
    assert any(u.name == "gang-0" and "does not exist" in u.message for u in plain.unreadable)
    plain = run.step(set())
    assert any(u.name == "gang-0" and "does not exist" in u.message for u in plain.unreadable)
    c.workload_pod_groups.append(
        {
            "apiVersion": f"{C.WORKLOAD_API_GROUP}/{C.WORKLOAD_API_VERSION}",
            "kind": "PodGroup",
            "metadata": {"name": "wl", "namespace": "team-a"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
    )
    plain = run.step({"team-a/gang-0"})
    assert (
        next(w for w in plain.workloads if w.name == "gang-0").gang == C.WORKLOAD_GANG_PREFIX + "wl"
    )


def test_a_node_gone_and_back_reaches_the_pods_admitted_to_it():
    """`admitted` to a node that is gone is not believed (reported on every cycle); when the
    node is back, the admission is."""
    c = cluster()
    run = Cycles(c)
    run.step({w.key for w in observe_once(c).workloads})
    gone = c.find("nodes", "a100-2")
    c.nodes.remove(gone)
    for _ in range(2):
        plain = run.step({"team-a/admitted"} if _ == 0 else set())
        admitted = next(w for w in plain.workloads if w.name == "admitted")
        assert admitted.node is None
        assert any(u.name == "admitted" and "forged-state" in u.message for u in plain.unreadable)
    c.nodes.append(gone)
    plain = run.step({"team-a/admitted"})
    assert next(w for w in plain.workloads if w.name == "admitted").node == "a100-2"


def test_reports_are_made_again_and_pods_without_a_version_are_read_every_time():
    c = cluster()
    bad = bump(pod("team-a", "odd", limits={C.GPU_RESOURCE: "1"}, gated=True))
    bad["metadata"]["annotations"][C.GPU_MEMORY_ANN] = "lots"
    c.pods.append(bad)
    versionless = pod("team-a", "plain", limits={C.GPU_RESOURCE: "1"}, gated=True)
    c.pods.append(versionless)
    c.node_states = [copy.deepcopy(node_state("a100-1", [], []))]  # no cards, no pods
    run = Cycles(c)
    run.step({w.key for w in observe_once(c).workloads})
    for _ in range(2):
        plain = run.step({"team-a/plain"})  # no resourceVersion: a new Workload every cycle
        assert any(u.name == "odd" and C.GPU_MEMORY_ANN in u.message for u in plain.unreadable)


def _claim(name: str, devices: list[str], holder: str) -> dict:
    """A claim of team-a for whole cards of n1, allocated `devices`, reserved for `holder`."""
    request = {"name": "gpu", "exactly": {"deviceClassName": "d100-whole", "count": 2}}
    return {
        "metadata": {"namespace": "team-a", "name": name},
        "spec": {"devices": {"requests": [request]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": d}
                        for d in devices
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": holder, "uid": f"uid-team-a-{holder}"}],
        },
    }


def test_a_pod_whose_dra_claim_changes_is_read_again():
    """What a pod asks and holds through DRA claims changes with the claim, not the pod."""
    trainer = bump(pod("team-a", "trainer-0", node_name="n1", limits={}))
    trainer["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": "c1"}]
    trainer["status"]["resourceClaimStatuses"] = [{"name": "gpus", "resourceClaimName": "c1"}]
    other = bump(pod("team-a", "other", node_name="n1", limits={C.GPU_RESOURCE: "1"}))
    c = Cluster(
        nodes=[node("n1", gpus=4)],
        pods=[trainer, other],
        dra={
            "resourceslices": [node_slice("n1", [gpu_device("n1", i) for i in range(4)])],
            "deviceclasses": [
                {
                    "metadata": {
                        "name": "d100-whole",
                        "labels": {C.MANAGED_BY_LABEL: "gpupool", C.POOL_LABEL: "d100"},
                    },
                    "spec": {
                        "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]
                    },
                }
            ],
            "resourceclaims": [_claim("c1", ["gpu-1", "gpu-2"], "trainer-0")],
            "resourceclaimtemplates": [],
        },
    )
    run = Cycles(c)
    plain = run.step({"team-a/trainer-0", "team-a/other"})
    held = next(w for w in plain.workloads if w.name == "trainer-0").allocations
    assert sorted(a.gpu for a in held) == [1, 2]
    run.step(set())
    c.dra["resourceclaims"] = [_claim("c1", ["gpu-2", "gpu-3"], "trainer-0")]
    plain = run.step({"team-a/trainer-0"})
    held = next(w for w in plain.workloads if w.name == "trainer-0").allocations
    assert sorted(a.gpu for a in held) == [2, 3]


def observe_once(c):
    with serving(c):
        return observe_cluster(object(), now=NOW)
