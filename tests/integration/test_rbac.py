"""Least privilege, on the real control plane.

RBAC is enforced by the real authorizer in every integration test (the controller runs as its
ServiceAccount with exactly deploy/rbac.yaml's rules): a missing rule is a 403 that fails them.
This module checks the other half, that every rule is NEEDED: full runs of the controller
(checkpoint, preemption first blocked by a PodDisruptionBudget, MIG reconfiguration, quotas,
a replaced PriorityClass, a Lease handover, scaling a Deployment and a StatefulSet, a sharing
config written into a ConfigMap gpupool creates, Events, the watch-fed cache) and of the node
agent, read back from the API server's audit log. Each audited request is mapped to what the
authorizer was asked (verb, API group, resource/subresource, namespace, name), and each rule of
deploy/rbac.yaml, parsed, not hard-coded, must authorise at least one of them; every request
those users sent must have been answered with something other than 403. The parser's verdicts
are checked against the real authorizer (SubjectAccessReview).
"""

from __future__ import annotations

import contextlib
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from reconciler import conventions as C
from reconciler.loop.agent import run_once
from reconciler.loop.informer import ClusterCache
from tests.plan.scenarios import SCALING
from tests.support.wait import wait_for

from .crds import install_crd, keda_scaled_object_crd, kueue_crd_paths, remove_crds
from .harness import (
    CONTROLLER_SA,
    DEPLOY,
    NS,
    OPERATOR_NS,
    add_gpu_node,
    audit_mark,
    controller,
    converge,
    create_inference_deployment,
    create_pdb,
    create_pod,
    docs,
    write_policy,
)
from .rbac_rules import (
    AGENT,
    CONTROLLER,
    Access,
    access,
    allowed,
    allows,
    audited,
    narrowed,
    rules,
    unused_controller_rules,
)
from .scenario import TEXT, base
from .world import AGENT_SA, SHARING_CM

# Narrowed rules of deploy/rbac.yaml that the runs below do not need, each with the test that
# does (and that would get the real 403 without it). Keep it short.
EXERCISED_ELSEWHERE: dict[str, str] = {
    # The MIG step reads the agent's GpuNodeState only when mig-manager says success before the
    # agent republished; in a run the next plan already sees the new layout and drops the step.
    "*: get gpupool.io/gpunodestates": "test_converge.py::test_mig_success_waits_for_the_agent",
    # Hold's pod condition: only pods in a namespace gated for admission are held, and the runs
    # below gate none.
    "*: patch core/pods/status": (
        "../apply/test_handlers_api.py::test_admission_steps_run_with_the_controllers_rbac"
    ),
    # A move's reservation on the evicted pod's Job: the runs below move no Job's pod.
    "*: patch batch/jobs": (
        "../apply/test_handlers_api.py::test_move_of_a_jobs_pod_runs_with_the_controllers_rbac"
    ),
    # An autoscaled workload's envelope (the runs below scale workloads no autoscaler scales;
    # they list HPAs and ScaledObjects every cycle, which the list rules cover).
    "*: get autoscaling/horizontalpodautoscalers": (
        "test_autoscalers.py::test_the_real_hpa_controller_scales_into_gpupools_envelope"
    ),
    "*: patch autoscaling/horizontalpodautoscalers": (
        "test_autoscalers.py::test_the_real_hpa_controller_scales_into_gpupools_envelope"
    ),
    "*: get keda.sh/scaledobjects": (
        "test_autoscalers.py::test_a_scaledobjects_envelope_through_kedas_crd"
    ),
    "*: patch keda.sh/scaledobjects": (
        "test_autoscalers.py::test_a_scaledobjects_envelope_through_kedas_crd"
    ),
    # The wake on a queue annotation's crossing (issue 28): the runs below cycle by hand, not
    # through `Controller.run`, which starts the watch.
    "*: watch apps/deployments": (
        "test_wake.py::test_a_queue_annotation_spike_wakes_a_cycle_within_seconds"
    ),
    "*: watch apps/statefulsets": (
        "test_wake.py::test_a_queue_annotation_spike_wakes_a_cycle_within_seconds"
    ),
    # Prune: the runs below remove no Quota from git.
    "*: delete core/resourcequotas": (
        "test_objects_dual.py::test_removing_a_quota_and_a_class_from_git_removes_their_objects"
    ),
}
# Kueue mode (issue 14): the runs below are in gpupool mode without Kueue's CRDs: the list of
# ResourceFlavors is answered 404 (and needs its list rule), and the adapter stops there. The
# other lists, reading one before a write, writing and pruning are exercised on Kueue's CRDs,
# each rule checked against that run's audit events.
EXERCISED_ELSEWHERE.update(
    {
        f"*: {verb} kueue.x-k8s.io/{res}": ("test_kueue.py::test_kueue_mode_on_the_real_api_server")
        for res, verbs in (
            ("resourceflavors", ("get", "create", "patch", "delete")),
            ("clusterqueues", ("list", "get", "create", "patch", "delete")),
            ("localqueues", ("list", "get", "create", "delete")),
        )
        for verb in verbs
    }
)
# DRA (issue 32): the runs below have no pool with backend dra; the writes and the reads before
# them are exercised on the real API server by test_dra.py, each rule checked against its audit.
EXERCISED_ELSEWHERE.update(
    {
        label: "test_dra.py::test_dra_objects_on_the_real_api_server"
        for label in (
            *(
                f"*: {v} resource.k8s.io/deviceclasses"
                for v in ("get", "create", "patch", "delete")
            ),
            *(
                f"*: {v} resource.k8s.io/resourceclaimtemplates"
                for v in ("get", "create", "delete")
            ),
        )
    }
)
# DRA drains: a DeviceTaintRule per device of a card being repartitioned, read before the write,
# put back when edited, deleted once the driver republished the layout.
EXERCISED_ELSEWHERE.update(
    {
        f"*: {v} resource.k8s.io/devicetaintrules": (
            "test_dra_taints.py::test_a_drain_by_device_taint_on_the_real_scheduler"
        )
        for v in ("get", "create", "patch", "delete")
    }
)
# DRA exact admission: a gated pod's claim replaced with one pinned to the planned devices.
EXERCISED_ELSEWHERE.update(
    {
        f"*: {v} resource.k8s.io/resourceclaims": (
            "test_dra_admit.py::test_allocations_are_the_plan"
        )
        for v in ("get", "create", "delete")
    }
)
# DRA exact admission by allocation (`dra.admission: allocate`): the plan and Kubernetes'
# finalizer patched onto the pod's own claim before its allocation is written.
EXERCISED_ELSEWHERE["*: patch resource.k8s.io/resourceclaims"] = (
    "test_dra_allocate.py::test_the_plan_is_written_as_the_claims_allocation"
)
# DRA exact admission on DynamicMIG: the planned partition written as the claim's allocation.
EXERCISED_ELSEWHERE.update(
    {
        f"*: update resource.k8s.io/resourceclaims/{sub}": (
            "test_dra_dynamic_placement.py::"
            "test_two_partitions_planned_on_one_card_in_one_cycle_are_both_allocated"
        )
        for sub in ("status", "binding")
    }
)
# DRA through the watch cache: the runs below have no DRA pool, so the controller stops
# reading resource.k8s.io after its first cycle and never watches it.
EXERCISED_ELSEWHERE.update(
    {
        f"*: watch resource.k8s.io/{res}": (
            "test_dra_informer.py::test_dra_through_the_watch_cache_reads_its_own_writes"
        )
        for res in C.DRA_PLURALS.values()
    }
)
# The watch cache's watches of resources whose CRDs the runs below do not install: started on
# those CRDs by the test below.
EXERCISED_ELSEWHERE.update(
    {
        f"*: watch {res}": "test_rbac.py::test_the_watch_cache_needs_its_watch_rules"
        for res in (
            "keda.sh/scaledobjects",
            "scheduling.x-k8s.io/podgroups",
            *(f"kueue.x-k8s.io/{plural}" for plural in C.KUEUE_PLURALS.values()),
        )
    }
)
# Granted ahead of the code that needs them (issue 16: an Event naming every object skipped as
# malformed; a recorder that updates a repeated Event's count, through either Events API).
# Checked by test_event_rules_are_granted below; drop an entry once a run here needs it.
AHEAD_OF_CODE = {
    "*: patch core/events",
    "*: create events.k8s.io/events",
    "*: patch events.k8s.io/events",
}


def check(kube, user: str, sa: str, since: int) -> tuple[set[Access], list[str]]:
    """Every request `user` sent since `since` was answered (not 403) and is allowed by the
    parsed rules; returns what was asked and the narrowed rules nothing needed. Every
    resourceName a rule lists must also be an object some request touched."""
    events = audited(kube, user, since)
    assert events, f"no requests from {user} in the audit log"
    refused = [e for e in events if e.code == 403]
    assert not refused, "refused by the real authorizer:\n" + "\n".join(
        f"{e.verb} {e.uri}" for e in refused
    )
    seen = {a for e in events for a in access(e)}
    role_rules = rules(sa)
    outside = sorted((a for a in seen if not allowed(role_rules, a)), key=str)
    assert not outside, (
        "allowed by the server but not by the parsed rules (parser bug?):\n"
        + "\n".join(map(str, outside))
    )
    unused = [
        label for label, ns, r in narrowed(role_rules) if not any(allows(ns, r, a) for a in seen)
    ]
    for ns, r in role_rules:
        for name in r.get("resourceNames") or []:
            assert any(allows(ns, {**r, "resourceNames": [name]}, a) for a in seen), (
                f"{name}: named in {r}, never used"
            )
    return seen, unused


# ------------------------------------------------------------------ the controller

SUMMARIZE = "    - {namespace: team-b, name: summarize, minReplicas: 1, maxReplicas: 8}\n"
RANK = "    - {namespace: team-b, name: rank, kind: StatefulSet, minReplicas: 1, maxReplicas: 8}\n"
CHAT = "    - {namespace: team-b, name: chat, minReplicas: 1, maxReplicas: 8}\n"
SCALING_H100 = (
    SCALING.replace("pool: a100", "pool: h100")
    .replace(SUMMARIZE, SUMMARIZE + RANK)
    .replace(CHAT, CHAT.replace("maxReplicas: 8", "maxReplicas: 4"))
)  # one step up, no more


def create_inference_statefulset(
    kube, ns: str, name: str, *, replicas: int, queue: float, last_scale
) -> None:
    kube.apps.create_namespaced_stateful_set(
        ns,
        {
            "metadata": {
                "name": name,
                "labels": {"gpupool.io/inference": "true"},
                "annotations": {
                    "gpupool.io/queue-length": str(queue),
                    "gpupool.io/last-scale": last_scale.isoformat(),
                },
            },
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "priorityClassName": "serving",
                        "nodeSelector": {"gpupool.io/pool": "h100"},
                        "containers": [
                            {
                                "name": "srv",
                                "image": "registry.example/serve:1",
                                "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                            }
                        ],
                    },
                },
            },
        },
    )


def cached(ctl, resource: str, match) -> None:
    """Wait until the controller's watch cache holds an object this test wrote: gpupool reads
    what it wrote itself before it plans (`ClusterCache.caught_up`), not what others wrote."""
    wait_for(
        f"{resource} in the watch cache",
        lambda: any(match(o) for o in ctl.cache.listed(resource) or []),
        timeout=20,
        interval=0.05,
    )


def test_controller_needs_exactly_its_rbac_rules(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    create_pdb(kube, "team-b", "bert-new", {"app": "bert-new"}, min_available=1)
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)
    # observe through the watch-fed cache, as `Controller.run` does (list + watch nodes, pods,
    # GpuNodeStates and every other resource observe reads)
    stop = threading.Event()
    kube.cleanup(stop.set)
    ctl.cache = ClusterCache(ctl.api, timeout_seconds=5).start(stop)
    assert ctl.cache.wait_synced(10)

    # run 1: checkpoint, then a preemption the PDB blocks (429), then allows; MIG
    # reconfiguration through mig-manager; the team quotas; the Lease and status created
    for _ in range(2):
        ctl.cycle()
        clock.advance(400)
    kube.policy.delete_namespaced_pod_disruption_budget("bert-new", "team-b")
    converge(ctl, kube, clock=clock)

    # run 2: gpupool's PriorityClass whose value changed is replaced (immutable value: delete,
    # create; only one carrying gpupool's managed-by label)
    kube.scheduling.delete_priority_class("spot")
    kube.scheduling.create_priority_class(
        {
            "metadata": {"name": "spot", "labels": {"app.kubernetes.io/managed-by": "gpupool"}},
            "value": 7,
            "preemptionPolicy": "Never",
        }
    )
    cached(ctl, C.PRIORITY_CLASSES, lambda o: o.metadata.name == "spot" and o.value == 7)
    converge(ctl, kube, clock=clock)
    assert kube.scheduling.read_priority_class("spot").value == 1000

    # run 3: the Lease handed over (release) and taken again by a get + update
    ctl.elector.release()
    converge(ctl, kube, clock=clock)

    # run 4: scaling a Deployment (up) and a StatefulSet (down); the replicas are served by
    # shared slices, whose device-plugin config goes into a ConfigMap gpupool creates. The
    # training job on h100-2 ends first: the device plugin time-slices every whole card of a
    # node (issue 12), which must not be one a training pod holds.
    assert RANK in SCALING_H100 and "maxReplicas: 4" in SCALING_H100
    kube.core.delete_namespaced_pod("bert-old", "team-b")
    write_policy(tmp_path, TEXT + SCALING_H100)
    kube.core.delete_namespaced_config_map(SHARING_CM, OPERATOR_NS)
    hour_ago = clock.now - timedelta(hours=1)
    create_inference_deployment(kube, "team-b", "chat", replicas=2, queue=60, last_scale=hour_ago)
    create_inference_statefulset(kube, "team-b", "rank", replicas=2, queue=0, last_scale=hour_ago)
    cached(ctl, C.DEPLOYMENTS, lambda o: o.metadata.name == "chat")
    cached(ctl, C.STATEFUL_SETS, lambda o: o.metadata.name == "rank")
    kube.settle()
    converge(ctl, kube, clock=clock)
    assert kube.apps.read_namespaced_deployment("chat", "team-b").spec.replicas == 4
    assert kube.apps.read_namespaced_stateful_set("rank", "team-b").spec.replicas == 1
    assert SHARING_CM in {
        c.metadata.name for c in kube.core.list_namespaced_config_map(OPERATOR_NS).items
    }

    seen, unused = check(kube, CONTROLLER, CONTROLLER_SA, mark)
    expected_unused = set(EXERCISED_ELSEWHERE) | AHEAD_OF_CODE
    assert set(unused) <= expected_unused, "rules no run needed:\n" + "\n".join(
        sorted(set(unused) - expected_unused)
    )
    assert not set(EXERCISED_ELSEWHERE) - {
        label for label, _, _ in narrowed(rules(CONTROLLER_SA))
    }, "stale entries"
    for where in EXERCISED_ELSEWHERE.values():
        module, _, test = where.partition("::")
        assert test in (Path(__file__).parent / module).read_text(), where
    # the things this module is here for did happen, and were allowed
    asked = {(a.verb, a.resource) for a in seen}
    assert {
        ("create", "pods/eviction"),
        ("watch", "pods"),
        ("watch", "nodes"),
        ("watch", "gpunodestates"),
        ("delete", "priorityclasses"),
        ("patch", "statefulsets"),
        ("patch", "deployments"),
        ("create", "configmaps"),
        ("create", "events"),
    } <= asked
    codes = [e.code for e in audited(kube, CONTROLLER, mark) if e.subresource == "eviction"]
    assert 429 in codes and 201 in codes  # refused by the PDB, then carried out


# ------------------------------------------------------------------ the node agent


def test_agent_needs_exactly_its_rbac_rules(kube):
    sim = add_gpu_node(kube, "rbac-agent-1", state=False)
    agent = kube.agent_client("rbac-agent-1")  # gpupool-agent, its token bound to a pod on the node
    kube.cleanup(agent.close)
    mark = audit_mark(kube)
    run_once(agent, "rbac-agent-1", nvml=sim.gpus.nvml)  # first start: creates its object
    run_once(agent, "rbac-agent-1", nvml=sim.gpus.nvml)  # later runs: read, write status
    seen, unused = check(kube, AGENT, AGENT_SA, mark)
    assert unused == []
    assert {(a.verb, a.resource) for a in seen} == {
        ("get", "gpunodestates"),
        ("create", "gpunodestates"),
        ("patch", "gpunodestates/status"),
    }


# ------------------------------------------------------------------ the checker itself


def review(kube, user: str, a: Access) -> bool:
    """The real authorizer's verdict (SubjectAccessReview, asked as the admin)."""
    res, _, sub = a.resource.partition("/")
    attrs = {
        "verb": a.verb,
        "group": a.group,
        "resource": res,
        "subresource": sub or None,
        "namespace": a.namespace or None,
        "name": a.name or None,
    }
    body = {
        "spec": {
            "user": user,
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{NS}",
                "system:authenticated",
            ],
            "resourceAttributes": {k: v for k, v in attrs.items() if v is not None},
        }
    }
    return (
        client.AuthorizationV1Api(kube.api_client).create_subject_access_review(body).status.allowed
    )


NOT_GRANTED = [
    Access("delete", "", "pods", "team-b", "x"),  # evictions only, never deletes
    Access("update", "", "nodes", "", "h100-1"),  # patch only
    Access("watch", "apps", "replicasets", "", ""),
    Access("get", "", "secrets", NS, "anything"),
    Access("get", "coordination.k8s.io", "leases", NS, "someone-else"),  # only its own Lease
    Access("update", "coordination.k8s.io", "leases", "kube-system", "gpupool-controller"),
    Access(
        "patch", "", "configmaps", "kube-system", "gpupool-mig-parted-config"
    ),  # only in gpu-operator
    Access("patch", "", "configmaps", OPERATOR_NS, "some-other-config"),
    Access("patch", "gpupool.io", "reconcilerstatuses", NS, "gpupool"),  # only its status
    Access("create", "gpupool.io", "gpunodestates", "", ""),  # the agent's
]


@pytest.mark.parametrize("who", ["controller", "agent"])
def test_parsed_rules_agree_with_the_real_authorizer(kube, who):
    """The parser says yes exactly where the API server's RBAC does: for every narrowed rule
    of deploy/rbac.yaml (in a namespace where it applies and one where it must not) and for
    requests the rules do not grant."""
    sa = CONTROLLER_SA if who == "controller" else AGENT_SA
    user = f"system:serviceaccount:{NS}:{sa}"
    role_rules = rules(sa)
    probes = list(NOT_GRANTED)
    for _, ns, r in narrowed(role_rules):
        group, res, verb = r["apiGroups"][0], r["resources"][0], r["verbs"][0]
        name = (
            (r.get("resourceNames") or ["some-name"])[0]
            if verb not in ("list", "watch", "create")
            else ""
        )
        probes.append(Access(verb, group, res, ns or "team-b", name))
        probes.append(Access(verb, group, res, "elsewhere", name))
    verdicts = {a: (allowed(role_rules, a), review(kube, user, a)) for a in probes}
    differ = {a: v for a, v in verdicts.items() if v[0] != v[1]}
    assert not differ, "parser (first) vs authorizer (second):\n" + "\n".join(
        f"{a}: {v}" for a, v in differ.items()
    )
    assert any(ours for ours, _ in verdicts.values()) and not all(
        ours for ours, _ in verdicts.values()
    )


def test_access_from_audit_events():
    from tests.cluster.controlplane import AuditEvent

    def ev(verb, resource, sub=None, ns=None, name=None, group=None, code=200):
        return AuditEvent("u", (), verb, resource, sub, ns, name, group, code, "/", "id")

    assert access(ev("patch", "resourcequotas", ns="a", name="q", code=201)) == [
        Access("patch", "", "resourcequotas", "a", "q"),
        Access("create", "", "resourcequotas", "a", ""),
    ]
    assert access(ev("create", "pods", "eviction", "a", "p", code=201)) == [
        Access("create", "", "pods/eviction", "a", "p")
    ]
    assert access(ev("create", "events", ns="default", name="gpupool.x")) == [
        Access("create", "", "events", "default", "")
    ]
    assert access(ev("watch", "pods")) == [Access("watch", "", "pods", "", "")]
    assert access(ev("get", None)) == []


# ------------------------------------------------------------------ what RBAC cannot say


def _kustomized() -> list[str]:
    return docs(DEPLOY / "kustomization.yaml")[0]["resources"]


def _contains(served, shipped) -> bool:
    """`shipped` as written, within `served` (which adds the API server's defaults)."""
    if isinstance(shipped, dict):
        return isinstance(served, dict) and all(
            _contains(served.get(k), v) for k, v in shipped.items()
        )
    if isinstance(shipped, list):
        return (
            isinstance(served, list)
            and len(served) == len(shipped)
            and all(_contains(a, b) for a, b in zip(served, shipped, strict=True))
        )
    return served == shipped


def test_agent_cannot_write_another_nodes_state(kube):
    """deploy/agent-admission.yaml is installed by the kustomization as shipped, the API server
    serves exactly it, and with it an agent's token (bound to a pod on its node) cannot create
    or write the GpuNodeState of another node, nor can a token bound to no node; its own node's
    it can."""
    assert "agent-admission.yaml" in _kustomized()
    adm = client.AdmissionregistrationV1Api(kube.api_client)
    for d in docs(DEPLOY / "agent-admission.yaml"):
        read = (
            adm.read_validating_admission_policy
            if d["kind"] == "ValidatingAdmissionPolicy"
            else adm.read_validating_admission_policy_binding
        )
        served = kube.api_client.sanitize_for_serialization(read(d["metadata"]["name"]))
        assert _contains(served["spec"], d["spec"]), d["metadata"]["name"]

    sim_a = add_gpu_node(kube, "rbac-own-a", state=False)
    add_gpu_node(kube, "rbac-own-b", state=True)  # b's own agent published b's object
    agent_a = kube.agent_client("rbac-own-a")
    kube.cleanup(agent_a.close)
    custom = client.CustomObjectsApi(agent_a)
    body = {
        "apiVersion": "gpupool.io/v1alpha1",
        "kind": "GpuNodeState",
        "metadata": {"name": "rbac-own-c"},
    }
    with pytest.raises(client.ApiException) as err:  # create another node's
        custom.create_cluster_custom_object("gpupool.io", "v1alpha1", "gpunodestates", body)
    assert err.value.status in (403, 422) and "own node" in err.value.body
    with pytest.raises(client.ApiException) as err:  # overwrite another node's status
        custom.patch_cluster_custom_object_status(
            "gpupool.io",
            "v1alpha1",
            "gpunodestates",
            "rbac-own-b",
            {"status": {"gpus": []}},
        )
    assert err.value.status in (403, 422) and "own node" in err.value.body
    # a token of the agent's ServiceAccount bound to no pod (so to no node): nothing
    unbound = kube.plane.service_account_client(NS, AGENT_SA, create=False)
    kube.cleanup(unbound.close)
    with pytest.raises(client.ApiException) as err:
        client.CustomObjectsApi(unbound).create_cluster_custom_object(
            "gpupool.io", "v1alpha1", "gpunodestates", {**body, "metadata": {"name": "rbac-own-a"}}
        )
    assert err.value.status in (403, 422)
    run_once(agent_a, "rbac-own-a", nvml=sim_a.gpus.nvml)  # its own: allowed


# The controller's admission policies (deploy/controller-admission.yaml) are tried on a stand-in
# ServiceAccount with the controller's RBAC, the policies' copies matching it instead: the
# session's other tests keep the controller as the world installs it.
STANDIN = "gpupool-controller-vaptest"
STANDIN_USER = f"system:serviceaccount:{NS}:{STANDIN}"


def _install_standin(kube) -> client.ApiClient:
    from kubernetes import utils

    assert "controller-admission.yaml" in _kustomized()
    core, rbac = kube.core, client.RbacAuthorizationV1Api(kube.api_client)
    adm = client.AdmissionregistrationV1Api(kube.api_client)
    with contextlib.suppress(client.ApiException):
        core.create_namespaced_service_account(NS, {"metadata": {"name": STANDIN}})
    subject = [{"kind": "ServiceAccount", "name": STANDIN, "namespace": NS}]
    for d in docs(DEPLOY / "rbac.yaml"):
        if d["kind"] not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        if not any(s["name"] == CONTROLLER_SA for s in d["subjects"]):
            continue
        d = {**d, "metadata": {**d["metadata"], "name": f"{d['metadata']['name']}-vaptest"}}
        d["subjects"] = subject
        ns = d["metadata"].get("namespace")
        undo = (
            (lambda n=d["metadata"]["name"], ns=ns: rbac.delete_namespaced_role_binding(n, ns))
            if ns
            else (lambda n=d["metadata"]["name"]: rbac.delete_cluster_role_binding(n))
        )
        with contextlib.suppress(client.ApiException):
            undo()  # left by an interrupted run
        kube.cleanup(undo)
        utils.create_from_dict(kube.api_client, d)
    text = (DEPLOY / "controller-admission.yaml").read_text()
    real_user = f"system:serviceaccount:{NS}:{CONTROLLER_SA}"
    assert real_user in text
    for d in yaml.safe_load_all(text.replace(real_user, STANDIN_USER)):
        name = d["metadata"]["name"] + "-vaptest"
        d["metadata"]["name"] = name
        if d["kind"] == "ValidatingAdmissionPolicy":
            create, delete = (
                adm.create_validating_admission_policy,
                adm.delete_validating_admission_policy,
            )
        else:
            d["spec"]["policyName"] += "-vaptest"
            create, delete = (
                adm.create_validating_admission_policy_binding,
                adm.delete_validating_admission_policy_binding,
            )
        with contextlib.suppress(client.ApiException):
            delete(name)  # left by an interrupted run
        kube.cleanup(lambda n=name, delete=delete: delete(n))
        create(d)
    # the policies type-check against the served schemas: no warnings
    for d in yaml.safe_load_all(text):
        if d["kind"] != "ValidatingAdmissionPolicy":
            continue
        name = d["metadata"]["name"] + "-vaptest"
        deadline = time.monotonic() + 20
        while True:
            st = adm.read_validating_admission_policy(name).status
            if st is not None and st.observed_generation:
                break
            assert time.monotonic() < deadline, f"{name} not checked by the API server"
            time.sleep(0.2)
        warnings = (st.type_checking.expression_warnings or []) if st.type_checking else []
        assert not warnings, [(w.field_ref, w.warning) for w in warnings]
    api = kube.plane.service_account_client(NS, STANDIN, create=False)
    kube.cleanup(api.close)
    # the API server enforces a new policy once its informer has it: wait for a known refusal
    events = client.CoreV1Api(api)
    ev = {
        "metadata": {"generateName": "vaptest-"},
        "involvedObject": {"kind": "Pod", "namespace": "kube-public", "name": "x"},
    }
    deadline = time.monotonic() + 20
    while True:
        try:
            made_ev = events.create_namespaced_event("kube-public", ev)
        except client.ApiException as exc:
            if exc.status in (403, 422) and "system namespace" in exc.body:
                break
            raise
        kube.core.delete_namespaced_event(made_ev.metadata.name, "kube-public")
        assert time.monotonic() < deadline, "the controller's admission policies not enforced"
        time.sleep(0.2)
    return api


def _refused(call, fragment: str) -> None:
    """`call()` is refused (403) with `fragment` in the message. Each new admission policy is
    enforced once the API server's informer has it, policy by policy: first wait until a
    dry run of the same request is refused (admission runs for dry runs; nothing is
    written), so a policy not yet in force does not let the real request through."""

    def dry_run_refused() -> bool:
        try:
            call(dry_run="All")
        except client.ApiException as exc:
            if exc.status == 403:
                return True
            raise
        return False

    wait_for(f"a dry run to be refused: {fragment}", dry_run_refused, timeout=20)
    with pytest.raises(client.ApiException) as err:
        call()
    assert err.value.status == 403, err.value.body
    assert fragment in err.value.body, err.value.body


def test_controller_admission_allows_what_gpupool_writes(kube):
    """Every kind of write the handlers make (through KubeOps, as they make them) passes the
    controller's admission policies."""
    from reconciler.apply.kube import KubeOps
    from reconciler.apply.port import ApiError

    api = _install_standin(kube)
    ops = KubeOps(api)
    add_gpu_node(kube, "rbac-vap-1", labels={"nvidia.com/mig.config.state": "success"})
    ns = kube.new_namespace("vap")
    create_pod(kube, ns, "train", node="rbac-vap-1", gpus=1, cls=None)
    create_inference_deployment(kube, ns, "srv", replicas=1, queue=0, cls="")

    ops.patch_node("rbac-vap-1", unschedulable=True, annotations={"gpupool.io/cordoned-for": "x"})
    ops.patch_node("rbac-vap-1", labels={"gpupool.io/pool": "h100"})
    ops.patch_node(
        "rbac-vap-1",
        labels={"nvidia.com/mig.config": "gpupool-x", "nvidia.com/mig.config.state": None},
        annotations={"gpupool.io/reconfigure-since": "now"},
    )
    ops.patch_node(
        "rbac-vap-1",
        unschedulable=None,
        labels={"nvidia.com/device-plugin.config": "gpupool-y"},
        annotations={"gpupool.io/cordoned-for": None},
    )
    ops.annotate_pod(ns, "train", {"gpupool.io/checkpoint-requested-at": "now"})

    # the Deployment controller is still writing the new Deployment's status: a 409 on the
    # resourceVersion guard is what the handler meets too (it waits for the next cycle);
    # here, read again and retry
    def scaled() -> bool:
        w = ops.read_workload("Deployment", ns, "srv")
        try:
            ops.scale_workload(
                "Deployment",
                ns,
                "srv",
                replicas=2,
                resource_version=w.resource_version,
                annotations={"gpupool.io/last-scale": "now"},
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
            return False
        return True

    wait_for("a scale past the Deployment controller's status writes", scaled, 5, interval=0.25)
    ops.server_side_apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {
                "name": "gpupool-vap",
                "namespace": ns,
                "labels": {"app.kubernetes.io/managed-by": "gpupool"},
            },
            "spec": {"hard": {"requests.nvidia.com/gpu": "2"}},
        }
    )
    pc = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": "rbac-vap-ours",
            "labels": {"app.kubernetes.io/managed-by": "gpupool"},
        },
        "value": 5,
        "preemptionPolicy": "Never",
        "globalDefault": False,
    }
    ops.server_side_apply(pc)
    kube.cleanup(lambda: _delete_pc(kube, "rbac-vap-ours"))
    ops.server_side_apply({**pc, "description": "managed by gpupool"})
    ops.delete_priority_class("rbac-vap-ours")
    ops.create_event(
        "default",
        {
            "metadata": {"generateName": "gpupool."},
            "involvedObject": {"kind": "Node", "name": "rbac-vap-1"},
            "reason": "Test",
            "message": "allowed",
            "type": "Normal",
        },
    )
    # an autoscaled workload's envelope: an HPA's and a ScaledObject's min/max
    _autoscalers(kube, ns)
    for kind in ("HorizontalPodAutoscaler", "ScaledObject"):
        for _ in range(20):  # the HPA controller writes the new HPA's status meanwhile: a 409
            a = ops.read_autoscaler(kind, ns, "srv")
            try:
                ops.set_autoscaler_bounds(
                    kind,
                    ns,
                    "srv",
                    min_replicas=2,
                    max_replicas=3,
                    resource_version=a.resource_version,
                    annotations={"gpupool.io/last-scale": "now"},
                )
                break
            except ApiError as exc:
                if exc.status != 409:
                    raise
                time.sleep(0.2)
        got = ops.read_autoscaler(kind, ns, "srv")
        assert (got.min_replicas, got.max_replicas) == (2, 3)
    node = kube.core.read_node("rbac-vap-1")
    assert node.metadata.labels["nvidia.com/device-plugin.config"] == "gpupool-y"
    assert "nvidia.com/mig.config.state" not in node.metadata.labels
    assert kube.apps.read_namespaced_deployment("srv", ns).spec.replicas == 2


def _autoscalers(kube, ns: str) -> None:
    """An HPA and a KEDA ScaledObject (KEDA's CRD installed from its module) on `srv`."""
    install_crd(kube.api_client, keda_scaled_object_crd())
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "srv"}
    client.AutoscalingV2Api(kube.api_client).create_namespaced_horizontal_pod_autoscaler(
        ns,
        {
            "metadata": {"name": "srv", "labels": {"app": "srv"}},
            "spec": {"scaleTargetRef": ref, "minReplicas": 1, "maxReplicas": 4},
        },
    )
    kube.custom.create_namespaced_custom_object(
        "keda.sh",
        "v1alpha1",
        ns,
        "scaledobjects",
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "srv"},
            "spec": {
                "scaleTargetRef": {"name": "srv"},
                "triggers": [{"type": "cpu", "metadata": {"value": "50"}}],
            },
        },
    )


def _delete_pc(kube, name: str) -> None:
    with contextlib.suppress(client.ApiException):
        kube.scheduling.delete_priority_class(name)


def test_controller_admission_refuses_what_rbac_alone_would_allow(kube):
    """Writes the controller's RBAC grants but gpupool never makes are refused by
    deploy/controller-admission.yaml: other labels, annotations, taints of nodes, any change to a
    control-plane node, foreign PriorityClasses and quotas, anything in kube-system, a pod's
    image or labels, an ungated pod's claims in its status, a workload's template."""
    api = _install_standin(kube)
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    sched = client.SchedulingV1Api(api)
    add_gpu_node(kube, "rbac-vap-2")
    kube.core.create_node(
        {
            "metadata": {
                "name": "rbac-vap-cp",
                "labels": {"node-role.kubernetes.io/control-plane": ""},
            }
        }
    )
    kube.cleanup(lambda: kube.core.delete_node("rbac-vap-cp"))
    ns = kube.new_namespace("vap")
    create_pod(kube, ns, "train", node="rbac-vap-2", gpus=1, cls=None)
    create_inference_deployment(kube, ns, "srv", replicas=1, queue=0, cls="")
    kube.scheduling.create_priority_class({"metadata": {"name": "rbac-vap-foreign"}, "value": 3})
    kube.cleanup(lambda: _delete_pc(kube, "rbac-vap-foreign"))
    kube.core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "theirs"}, "spec": {"hard": {"pods": "100"}}}
    )
    merge = "application/merge-patch+json"

    def node(body, name="rbac-vap-2"):
        return lambda **kw: core.patch_node(name, body, _content_type=merge, **kw)

    _refused(node({"metadata": {"labels": {"team": "mine"}}}), "own node labels")
    _refused(node({"metadata": {"labels": {"nvidia.com/gpu.product": "x"}}}), "own node labels")
    _refused(node({"metadata": {"annotations": {"other.io/x": "y"}}}), "own node annotations")
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    _refused(node({"spec": {"taints": [taint]}}), "spec.unschedulable")
    _refused(node({"spec": {"unschedulable": True}}, name="rbac-vap-cp"), "control-plane node")
    _refused(
        node({"metadata": {"labels": {"gpupool.io/pool": "h100"}}}, name="rbac-vap-cp"),
        "control-plane node",
    )
    # PriorityClasses and quotas gpupool does not own
    _refused(lambda **kw: sched.delete_priority_class("rbac-vap-foreign", **kw), "not labelled")
    _refused(
        lambda **kw: sched.patch_priority_class(
            "rbac-vap-foreign",
            {"metadata": {"labels": {"app.kubernetes.io/managed-by": "gpupool"}}},
            _content_type=merge,
            **kw,
        ),
        "not labelled",
    )
    _refused(
        lambda **kw: core.patch_namespaced_resource_quota(
            "theirs", ns, {"spec": {"hard": {"pods": "1"}}}, _content_type=merge, **kw
        ),
        "not labelled",
    )
    _refused(
        lambda **kw: sched.create_priority_class(
            {"metadata": {"name": "rbac-vap-unlabelled"}, "value": 1}, **kw
        ),
        "must carry the label",
    )
    # system namespaces: not even gpupool's own kinds of writes
    _refused(
        lambda **kw: core.create_namespaced_resource_quota(
            "kube-system",
            {
                "metadata": {
                    "name": "gpupool-x",
                    "labels": {"app.kubernetes.io/managed-by": "gpupool"},
                },
                "spec": {"hard": {"pods": "1"}},
            },
            **kw,
        ),
        "system namespace",
    )
    ev = {
        "metadata": {"generateName": "x-"},
        "involvedObject": {"kind": "Pod", "namespace": "kube-node-lease", "name": "x"},
    }
    _refused(
        lambda **kw: core.create_namespaced_event("kube-node-lease", ev, **kw), "system namespace"
    )
    # workloads: nothing but gpupool's annotations and the fields its actions set
    pod_spec = kube.core.read_namespaced_pod("train", ns).spec
    image = {"spec": {"containers": [{"name": pod_spec.containers[0].name, "image": "evil:1"}]}}
    _refused(
        lambda **kw: core.patch_namespaced_pod(
            "train", ns, image, _content_type="application/strategic-merge-patch+json", **kw
        ),
        "node affinity",
    )
    _refused(
        lambda **kw: core.patch_namespaced_pod(
            "train", ns, {"metadata": {"labels": {"app": "other"}}}, _content_type=merge, **kw
        ),
        "labels",
    )
    _refused(
        lambda **kw: core.patch_namespaced_pod(
            "train",
            ns,
            {"metadata": {"annotations": {"other.io/x": "y"}}},
            _content_type=merge,
            **kw,
        ),
        "own annotations",
    )
    template = {
        "spec": {"template": {"spec": {"containers": [{"name": "srv", "image": "evil:1"}]}}}
    }
    _refused(
        lambda **kw: apps.patch_namespaced_deployment(
            "srv", ns, template, _content_type="application/strategic-merge-patch+json", **kw
        ),
        "spec.replicas",
    )
    _refused(
        lambda **kw: core.patch_namespaced_pod_status(
            "train",
            ns,
            {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
            _content_type="application/strategic-merge-patch+json",
            **kw,
        ),
        "own pod condition",
    )
    # a pod's claims in its status: only while gpupool's gate holds it (exact admission on DRA)
    kube.core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "claimant"},
            "spec": {
                "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "theirs"}],
                "containers": [{"name": "main", "image": "registry.example.com/work:1"}],
            },
        },
    )
    _refused(
        lambda **kw: core.patch_namespaced_pod_status(
            "claimant",
            ns,
            {"status": {"resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "x"}]}},
            _content_type="application/strategic-merge-patch+json",
            **kw,
        ),
        "resourceClaimStatuses only while its gate holds",
    )
    _refused(
        lambda **kw: core.patch_namespaced_pod_status(
            "claimant",
            ns,
            {"status": {"nominatedNodeName": "node-a"}},
            _content_type="application/strategic-merge-patch+json",
            **kw,
        ),
        "nominatedNodeName only while its gate holds",
    )
    # autoscalers: only their envelope; never what they scale, nor on which triggers
    _autoscalers(kube, ns)
    hpas = client.AutoscalingV2Api(api)
    other = {
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}}
    }
    _refused(
        lambda **kw: hpas.patch_namespaced_horizontal_pod_autoscaler(
            "srv", ns, other, _content_type=merge, **kw
        ),
        "spec.minReplicas and spec.maxReplicas",
    )
    _refused(
        lambda **kw: hpas.patch_namespaced_horizontal_pod_autoscaler(
            "srv", ns, {"metadata": {"labels": {"app": "x"}}}, _content_type=merge, **kw
        ),
        "labels",
    )
    triggers = {"spec": {"triggers": [{"type": "cpu", "metadata": {"value": "1"}}]}}
    _refused(
        lambda **kw: client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "keda.sh", "v1alpha1", ns, "scaledobjects", "srv", triggers, _content_type=merge, **kw
        ),
        "spec.minReplicaCount and spec.maxReplicaCount",
    )
    # and RBAC still grants these writes (so it is the policies that refused them)
    for verb, res, where in (
        ("patch", "nodes", ""),
        ("delete", "priorityclasses", ""),
        ("create", "resourcequotas", "kube-system"),
        ("patch", "pods", ns),
        ("patch", "deployments", ns),
        ("patch", "horizontalpodautoscalers", ns),
        ("patch", "scaledobjects", ns),
    ):
        group = {
            "priorityclasses": "scheduling.k8s.io",
            "deployments": "apps",
            "horizontalpodautoscalers": "autoscaling",
            "scaledobjects": "keda.sh",
        }.get(res, "")
        assert review(kube, STANDIN_USER, Access(verb, group, res, where, "x")), (verb, res)


def test_event_rules_are_granted(kube):
    """The Event rules granted ahead of the code (AHEAD_OF_CODE) are what the real authorizer
    answers: create and patch of Events, both APIs, in a team namespace and in `default`."""
    role_rules = rules(CONTROLLER_SA)
    labels = {label for label, _, _ in narrowed(role_rules)}
    assert labels >= AHEAD_OF_CODE
    for group in ("", "events.k8s.io"):
        for verb in ("create", "patch"):
            for ns in ("team-b", "default"):
                a = Access(verb, group, "events", ns, "" if verb == "create" else "e")
                assert allowed(role_rules, a) and review(kube, CONTROLLER, a), a


# ------------------------------------------------------------------ the watch cache

COSCHEDULING_POD_GROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{C.POD_GROUP_PLURAL}.{C.POD_GROUP_GROUP}"},
    "spec": {
        "group": C.POD_GROUP_GROUP,
        "names": {"kind": "PodGroup", "plural": C.POD_GROUP_PLURAL, "singular": "podgroup"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": C.POD_GROUP_VERSION,
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
"""A stand-in for kubernetes-sigs/scheduler-plugins' PodGroup CRD (its module is not in the
suite's cache): served at the same group, version and plural, which is all RBAC looks at."""


def test_the_watch_cache_needs_its_watch_rules(kube, tmp_path):
    """With KEDA's ScaledObject, Kueue's three and the coscheduling PodGroup CRDs served, the
    controller's watch cache (as `Controller.run` starts it) lists and watches each, as its
    ServiceAccount, and the real authorizer allows it; every watch rule of deploy/rbac.yaml is
    needed by a watch of this run or the one above."""
    install_crd(kube.api_client, keda_scaled_object_crd())  # kept, as `_autoscalers` does
    paths = [tmp_path / "podgroups.yaml"]
    paths[0].write_text(yaml.safe_dump(COSCHEDULING_POD_GROUP_CRD))
    paths += kueue_crd_paths()  # skips without Go
    names = [install_crd(kube.api_client, p) for p in paths]
    stop = threading.Event()
    try:
        mark = audit_mark(kube)
        ctl = controller(kube, tmp_path, kube.clock)
        cache = ClusterCache(ctl.api, timeout_seconds=1).start(stop)
        wait_for(
            "every object informer synced",
            lambda: [n for n, i in cache.object_informers.items() if not i.synced.is_set()],
            timeout=30,
            until=lambda left: not left,
        )
        time.sleep(3)  # a watch is audited when it ends: the server ends these after 1 s
        here = "test_rbac.py::test_the_watch_cache_needs_its_watch_rules"
        picked, unused = unused_controller_rules(
            kube, mark, lambda label: EXERCISED_ELSEWHERE.get(label) == here
        )
        assert picked == 5 and unused == [], unused
    finally:
        stop.set()
        remove_crds(kube.api_client, names)
