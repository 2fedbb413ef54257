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

import threading
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from kubernetes import client

from reconciler.loop.agent import run_once
from reconciler.loop.informer import ClusterCache
from tests.plan.scenarios import SCALING

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
    docs,
    write_policy,
)
from .scenario import TEXT, base
from .world import AGENT_SA, SHARING_CM

CONTROLLER = f"system:serviceaccount:{NS}:{CONTROLLER_SA}"
AGENT = f"system:serviceaccount:{NS}:{AGENT_SA}"

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
}


@dataclass(frozen=True)
class Access:
    """What the authorizer is asked for one request (its attributes, k8s RequestInfo)."""

    verb: str
    group: str
    resource: str  # "pods", "pods/eviction"
    namespace: str  # "" for cluster-scoped objects
    name: str  # "" for collections and for create (the name is not known to the authorizer)


def access(e) -> list[Access]:
    """The authorizer's attributes for an audit event; a server-side apply that created the
    object (patch answered 201) was also authorised for create."""
    if not e.resource:
        return []  # non-resource URLs (discovery), granted to every authenticated user
    res = e.resource + (f"/{e.subresource}" if e.subresource else "")
    collection = e.verb in ("list", "watch", "deletecollection") or (
        e.verb == "create" and not e.subresource
    )
    out = [
        Access(
            e.verb, e.api_group or "", res, e.namespace or "", "" if collection else e.name or ""
        )
    ]
    if e.verb == "patch" and e.code == 201:
        out.append(Access("create", e.api_group or "", res, e.namespace or "", ""))
    return out


def rules(sa: str) -> list[tuple[str, dict]]:
    """(namespace, or "" for a ClusterRole bound cluster-wide; rule) for every rule bound to
    the ServiceAccount `sa` in gpupool-system, as deploy/rbac.yaml writes them."""
    objs = docs(DEPLOY / "rbac.yaml")
    bound = set()
    for o in objs:
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding") and any(
            s["kind"] == "ServiceAccount" and s["name"] == sa and s.get("namespace") == NS
            for s in o["subjects"]
        ):
            ref = o["roleRef"]
            bound.add(
                (
                    ref["kind"],
                    ref["name"],
                    o["metadata"].get("namespace", "") if o["kind"] == "RoleBinding" else "",
                )
            )
    out = []
    for o in objs:
        if o["kind"] in ("Role", "ClusterRole"):
            key = (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", ""))
            if key in bound:
                out += [(key[2], r) for r in o["rules"]]
    assert out, f"no rules bound to {sa}"
    return out


def allows(ns: str, rule: dict, a: Access) -> bool:
    if ns and a.namespace != ns:
        return False
    if not {"*", a.group} & set(rule.get("apiGroups", [])):
        return False
    if not {"*", a.resource} & set(rule.get("resources", [])):
        return False
    if not {"*", a.verb} & set(rule.get("verbs", [])):
        return False
    names = rule.get("resourceNames")
    return not names or a.name in names


def allowed(role_rules, a: Access) -> bool:
    return any(allows(ns, r, a) for ns, r in role_rules)


def narrowed(role_rules) -> list[tuple[str, str, dict]]:
    """Each rule split into one per verb and resource: (label, namespace, rule)."""
    out = []
    for ns, r in role_rules:
        for res in r["resources"]:
            for verb in r["verbs"]:
                label = f"{ns or '*'}: {verb} {r['apiGroups'][0] or 'core'}/{res}"
                if r.get("resourceNames"):
                    label += f" {r['resourceNames']}"
                out.append((label, ns, {**r, "resources": [res], "verbs": [verb]}))
    return out


def audited(kube, user: str, since: int) -> list:
    return [e for e in kube.plane.audit_events()[since:] if e.user == user]


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


def test_controller_needs_exactly_its_rbac_rules(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    create_pdb(kube, "team-b", "bert-new", {"app": "bert-new"}, min_available=1)
    mark = audit_mark(kube)
    ctl = controller(kube, tmp_path, clock)
    # observe through the watch-fed cache, as `Controller.run` does (list + watch nodes, pods)
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

    # run 2: a PriorityClass whose value changed is replaced (immutable value: delete, create)
    kube.scheduling.delete_priority_class("spot")
    kube.scheduling.create_priority_class(
        {"metadata": {"name": "spot"}, "value": 7, "preemptionPolicy": "Never"}
    )
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
    kube.settle()
    converge(ctl, kube, clock=clock)
    assert kube.apps.read_namespaced_deployment("chat", "team-b").spec.replicas == 4
    assert kube.apps.read_namespaced_stateful_set("rank", "team-b").spec.replicas == 1
    assert SHARING_CM in {
        c.metadata.name for c in kube.core.list_namespaced_config_map(OPERATOR_NS).items
    }

    seen, unused = check(kube, CONTROLLER, CONTROLLER_SA, mark)
    assert set(unused) <= set(EXERCISED_ELSEWHERE), "rules no run needed:\n" + "\n".join(
        sorted(set(unused) - set(EXERCISED_ELSEWHERE))
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
    Access("watch", "apps", "deployments", "", ""),
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
