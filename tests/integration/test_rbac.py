"""Least privilege, tested: every request the controller and the agent send during full runs
(the fake API server's request log) must be allowed by the rules in deploy/rbac.yaml, and every
rule there must be needed by some request. The fake does no authorization itself, so this is
how "it works with only those verbs" is checked here (deploy/README.md says so too)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from reconciler.apply.handlers import ApplyConfig
from reconciler.loop.agent import run_once
from reconciler.loop.controller import Controller
from reconciler.loop.informer import ClusterCache
from reconciler.loop.sources import DirectorySource
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml
from tests.plan.scenarios import SCALING

from .harness import DEPLOY, Clock, create_pdb, docs, ensure_namespace, mig_manager_step
from .scenario import base
from .test_faults import scaling_setup

EXERCISED_ELSEWHERE = {
    ("", "get apps/deployments"), ("", "patch apps/deployments"),  # test_controller_scaling_within_rbac_rules
    ("", "get apps/statefulsets"), ("", "patch apps/statefulsets"),  # same code path as deployments (ScalingPolicy kind: StatefulSet)
    ("", "get gpupool.io/gpunodestates"),  # mig-manager says success before the agent republished: test_mig_success_waits_for_the_agent
    ("gpu-operator", "patch core/configmaps"),  # a second layout added to the existing mig-parted config
}
CONTROLLER_UA, AGENT_UA = "gpupool-controller/test", "gpupool-agent/test"
NS, OPERATOR_NS = "gpupool-system", "gpu-operator"


@dataclass(frozen=True)
class Access:
    verb: str
    group: str
    resource: str  # with "/subresource"
    namespace: str  # "" for cluster-scoped
    name: str  # "" for collections / create


def access(method: str, path: str, query: dict, content_type: str | None, status: int | None) -> list[Access]:
    """What Kubernetes' authorizer is asked for a request (RequestInfo)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return [Access("get", "*nonresource*", path, "", "")]
    ns = ""
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        ns, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("true", "1") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}[method]
    out = [Access(verb, group, resource, ns, name if not (verb == "create" and "/" not in resource) else "")]
    if method == "PATCH" and (content_type or "").startswith("application/apply-patch") and status == 201:
        out.append(Access("create", group, resource, ns, ""))  # server-side apply that creates needs create too
    return out


def rules(kind: str, name: str) -> list[tuple[str, dict]]:
    """(namespace or "" for a ClusterRole, rule) for every Role/ClusterRole bound to the service account."""
    objs = docs(DEPLOY / "rbac.yaml")
    sa = f"gpupool-{kind}"
    bound = set()
    for o in objs:
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding") and any(s["name"] == sa for s in o["subjects"]):
            bound.add((o["roleRef"]["kind"], o["roleRef"]["name"], o["metadata"].get("namespace", "")))
    out = []
    for o in objs:
        if o["kind"] in ("Role", "ClusterRole"):
            ns = o["metadata"].get("namespace", "")
            if (o["kind"], o["metadata"]["name"], ns) in bound:
                out += [(ns, r) for r in o["rules"]]
    return out


def allows(ns: str, rule: dict, a: Access) -> bool:
    if ns and a.namespace != ns:
        return False
    if a.group not in rule.get("apiGroups", []) and "*" not in rule.get("apiGroups", []):
        return False
    if a.resource not in rule.get("resources", []):
        return False
    if a.verb not in rule.get("verbs", []):
        return False
    names = rule.get("resourceNames")
    return not names or a.name in names


def check(server, ua: str, role_rules: list[tuple[str, dict]]) -> tuple[set[Access], list[tuple[str, dict]]]:
    seen: set[Access] = set()
    for r in server.requests():
        if r.user_agent != ua:
            continue
        for a in access(r.method, r.path, r.query, r.content_type, r.status):
            if a.group != "*nonresource*":
                seen.add(a)
    denied = {a for a in seen if not any(allows(ns, rule, a) for ns, rule in role_rules)}
    assert not denied, "requests the RBAC rules do not allow:\n" + "\n".join(map(str, sorted(denied, key=str)))
    unused = []
    for ns, rule in role_rules:
        for res in rule["resources"]:
            for verb in rule["verbs"]:
                r1 = {**rule, "resources": [res], "verbs": [verb]}
                if not any(allows(ns, r1, a) for a in seen):
                    unused.append((ns, f"{verb} {rule['apiGroups'][0] or 'core'}/{res}"))
    return seen, unused


def _client(kube, ua: str):
    api = kube.server.api_client()
    api.user_agent = ua
    kube.cleanup(api.close)
    return api


def _controller(kube, root, clock, api) -> Controller:
    cfg = ApplyConfig(mig_config_namespace=OPERATOR_NS, events_namespace=NS)
    return Controller(DirectorySource(root), api, namespace=NS, identity="gpupool-0", apply_config=cfg, clock=clock)


def _cycles(ctl, kube, clock, n=12, node="a100-2"):
    for _ in range(n):
        r = ctl.cycle()
        assert r.error is None, r.error
        if r.converged:
            return
        mig_manager_step_ns(kube, node)
        clock.advance(120)
    raise AssertionError("did not converge")


def mig_manager_step_ns(kube, node):
    # the stand-in reads the mig-parted ConfigMap from the controller's config namespace
    from . import harness

    saved = harness._mig_config
    harness._mig_config = lambda k: k.core.read_namespaced_config_map("gpupool-mig-parted-config", OPERATOR_NS)
    try:
        mig_manager_step(kube, node)
    finally:
        harness._mig_config = saved


def test_controller_needs_exactly_its_rbac_rules(kube, tmp_path):
    kube.require_fake()
    clock = Clock()
    for ns in (NS, OPERATOR_NS):
        ensure_namespace(kube, ns)
    # run 1: preemption (with a PDB that first blocks it), MIG reconfiguration, quotas, classes
    base(kube, tmp_path, clock)
    create_pdb(kube, "team-b", "bert-new", {"app": "bert-new"}, min_available=1)
    api = _client(kube, CONTROLLER_UA)
    ctl = _controller(kube, tmp_path, clock, api)
    # observe through the watch-fed cache, as `Controller.run` does (list + watch nodes, pods)
    stop = threading.Event()
    kube.cleanup(stop.set)
    ctl.cache = ClusterCache(api, timeout_seconds=5).start(stop)
    assert ctl.cache.wait_synced(10)
    for _ in range(3):
        ctl.cycle()
        clock.advance(200)
    kube.policy.delete_namespaced_pod_disruption_budget("bert-new", "team-b")
    _cycles(ctl, kube, clock)
    # a PriorityClass whose value changed is replaced (immutable value: delete + create)
    kube.scheduling.delete_priority_class("spot")
    kube.scheduling.create_priority_class({"metadata": {"name": "spot"}, "value": 7, "preemptionPolicy": "Never"})
    _cycles(ctl, kube, clock)
    # a second controller that is not the leader, then a leadership handover (create of the Lease already seen)
    ctl.elector.release()
    _cycles(ctl, kube, clock)
    seen, unused = check(kube.server, CONTROLLER_UA, rules("controller", "gpupool-controller"))
    # rules this run does not need, each exercised by another test under the same check
    assert set(unused) <= EXERCISED_ELSEWHERE, set(unused) - EXERCISED_ELSEWHERE
    assert any(a.resource == "pods/eviction" for a in seen)


def test_controller_scaling_within_rbac_rules(kube, tmp_path):
    kube.require_fake()
    clock = Clock()
    for ns in (NS, OPERATOR_NS):
        ensure_namespace(kube, ns)
    scaling_setup(kube, tmp_path, clock)
    assert SCALING in (tmp_path / "policies" / "desired.yaml").read_text()
    ctl = _controller(kube, tmp_path, clock, _client(kube, CONTROLLER_UA))
    _cycles(ctl, kube, clock, node="a100-1")
    seen, _ = check(kube.server, CONTROLLER_UA, rules("controller", "gpupool-controller"))
    assert {("patch", "deployments"), ("get", "deployments")} <= {(a.verb, a.resource) for a in seen}


def test_agent_needs_exactly_its_rbac_rules(kube):
    kube.require_fake()
    from .harness import add_gpu_node, install_crds

    install_crds(kube)
    add_gpu_node(kube, "a100-9", state=False)
    api = _client(kube, AGENT_UA)
    nvml = FakeNvml([FakeGpu("A100-SXM4-80GB"), FakeGpu("A100-SXM4-80GB", mig=True, instances=[("7g.80gb", 0)])])
    run_once(api, "a100-9", nvml=nvml)  # first run: creates its object
    run_once(api, "a100-9", nvml=nvml)  # later runs: read, patch status
    seen, unused = check(kube.server, AGENT_UA, rules("agent", "gpupool-agent"))
    assert unused == []
    assert {(a.verb, a.resource) for a in seen} == {("get", "gpunodestates"), ("create", "gpunodestates"),
                                                    ("patch", "gpunodestates/status")}


def test_rbac_file_denies_what_is_not_listed():
    """The checker itself: a request outside the rules is reported (so a pass means something)."""
    ctl = rules("controller", "gpupool-controller")
    assert not any(allows(ns, r, Access("delete", "", "pods", "team-b", "x")) for ns, r in ctl)
    assert not any(allows(ns, r, Access("update", "", "nodes", "", "a100-1")) for ns, r in ctl)
    assert not any(allows(ns, r, Access("get", "coordination.k8s.io", "leases", NS, "someone-else")) for ns, r in ctl)
    assert not any(allows(ns, r, Access("patch", "", "configmaps", "kube-system", "gpupool-mig-parted-config")) for ns, r in ctl)
    assert any(allows(ns, r, Access("create", "", "pods/eviction", "team-b", "bert")) for ns, r in ctl)
    assert access("PATCH", "/api/v1/namespaces/a/resourcequotas/q", {}, "application/apply-patch+yaml", 201) == [
        Access("patch", "", "resourcequotas", "a", "q"), Access("create", "", "resourcequotas", "a", "")]
    assert access("POST", "/api/v1/namespaces/a/pods/p/eviction", {}, None, 201) == [Access("create", "", "pods/eviction", "a", "p")]
    assert access("GET", "/apis/gpupool.io/v1alpha1/gpunodestates", {}, None, 200) == [Access("list", "gpupool.io", "gpunodestates", "", "")]

