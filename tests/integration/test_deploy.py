"""The deploy/ manifests hang together: kustomization lists real files, the controller's args
are ones `gpupool reconcile` accepts, probes hit the health server's paths, the dashboard uses
exactly the metrics gpupool exports; the GPU operator's prerequisites (deploy/gpu-operator/) are
accepted by the API server and usable by the controller."""

from __future__ import annotations

import argparse
import json
import re

from reconciler.commands import reconcile
from reconciler.loop import metrics
from reconciler.loop.health import parse_bind_address

from .harness import DEPLOY, docs
from .world import ROOT


def _by_kind(name: str) -> dict:
    return {d["kind"]: d for d in docs(DEPLOY / name)}


def test_kustomization_lists_existing_files():
    k = docs(DEPLOY / "kustomization.yaml")[0]
    for r in k["resources"]:
        assert (DEPLOY / r).is_file(), r
    assert "namespace" not in k  # would move the gpu-operator Role into gpupool-system


def test_kustomization_installs_every_admission_policy():
    """The policies that restrict what the agent and the controller may write are part of the
    install, not optional extras: every file of deploy/ holding a ValidatingAdmissionPolicy is
    listed, with a binding for each policy."""
    listed = set(docs(DEPLOY / "kustomization.yaml")[0]["resources"])
    policies = {}
    for path in sorted(DEPLOY.glob("*.yaml")):
        kinds = [(d["kind"], d) for d in docs(path)]
        if any(kind == "ValidatingAdmissionPolicy" for kind, _ in kinds):
            assert path.name in listed, f"{path.name} is not installed by kustomization.yaml"
            for kind, d in kinds:
                if kind == "ValidatingAdmissionPolicy":
                    policies[d["metadata"]["name"]] = False
            for kind, d in kinds:
                if kind == "ValidatingAdmissionPolicyBinding":
                    assert d["spec"]["validationActions"] == ["Deny"]
                    policies[d["spec"]["policyName"]] = True
    assert {"gpupool-agent-own-node", "gpupool-controller-nodes"} <= set(policies)
    assert all(policies.values()), policies


def test_metrics_are_not_served_where_the_probes_are():
    """The probes' port serves /healthz and /readyz on every address; /metrics has its own
    port, which only the network policy's scrapers may reach."""
    dep = _by_kind("controller.yaml")["Deployment"]
    c = dep["spec"]["template"]["spec"]["containers"][0]
    parser = argparse.ArgumentParser()
    reconcile.register(parser.add_subparsers())
    args = parser.parse_args(c["args"])
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == args.health_port
    host, port = parse_bind_address(args.metrics_bind_address)
    assert port == ports["metrics"] != args.health_port
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(port)
    svc = _by_kind("controller.yaml")["Service"]
    assert [p["targetPort"] for p in svc["spec"]["ports"]] == ["metrics"]
    netpol = _by_kind("networkpolicy.yaml")["NetworkPolicy"]
    assert netpol["spec"]["podSelector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    rules = {r["ports"][0]["port"]: r.get("from") for r in netpol["spec"]["ingress"]}
    assert rules["http"] is None and rules["metrics"]  # probes from anywhere, metrics not


def test_controller_memory_covers_the_benchmark():
    """The controller's memory limit is above the planner's own measured peak at 10,000 nodes
    (bench/README.md) with headroom, and its request covers that peak."""
    table = (ROOT / "bench" / "README.md").read_text()
    row = next(line for line in table.splitlines() if line.startswith("| 10,000 |"))
    peak_mib = float(row.split("|")[8].replace(",", ""))
    assert peak_mib > 1000  # the column read is the peak RSS
    res = _by_kind("controller.yaml")["Deployment"]["spec"]["template"]["spec"]["containers"][0][
        "resources"
    ]
    mib = {"Mi": 1, "Gi": 1024}
    limit = int(res["limits"]["memory"][:-2]) * mib[res["limits"]["memory"][-2:]]
    request = int(res["requests"]["memory"][:-2]) * mib[res["requests"]["memory"][-2:]]
    assert request >= peak_mib and limit >= 1.5 * peak_mib, (request, limit, peak_mib)


def test_controller_deployment_matches_the_cli():
    dep = _by_kind("controller.yaml")["Deployment"]
    assert dep["spec"]["replicas"] == 2
    c = dep["spec"]["template"]["spec"]["containers"][0]
    parser = argparse.ArgumentParser()
    reconcile.register(parser.add_subparsers())
    args = parser.parse_args(c["args"])
    assert args.git_url and args.branch == "main" and args.health_port == 8080
    assert (
        c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        and c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    )
    assert {e["name"] for e in c["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "gpupool-controller"


def test_agent_daemonset():
    ds = _by_kind("agent.yaml")["DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "nvidia" and spec["nodeSelector"]
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert spec["serviceAccountName"] == "gpupool-agent"


def test_dashboard_uses_exactly_the_exported_metrics():
    dash = json.loads((DEPLOY / "grafana" / "gpupool.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p.get("targets", []))
    used = {re.sub(r"_(bucket|count|sum)$", "", m) for m in re.findall(r"\bgpupool_[a-z_]+", exprs)}
    exported = {m._name for m in vars(metrics).values() if hasattr(m, "_name")}
    used = {u.removesuffix("_total") for u in used}
    assert used == exported, used ^ exported


def test_the_gpu_operator_prerequisites_install_and_the_controller_can_use_them(kube):
    """deploy/gpu-operator/ as `kubectl create -k` makes it (its namespace and labels applied),
    on the real API server: accepted, and read and merged into by the controller's
    ServiceAccount with exactly deploy/rbac.yaml's rules (through `KubeOps`, as the handlers
    do). File-level checks of their content: tests/apply/test_install.py."""
    from kubernetes import client

    from reconciler.apply.kube import KubeOps

    install = DEPLOY / "gpu-operator"
    (k,) = docs(install / "kustomization.yaml")
    core = kube.core
    made = []
    for r in k["resources"]:
        (cm,) = docs(install / r)
        cm["metadata"]["namespace"] = k["namespace"]
        for pair in k.get("labels", []):
            cm["metadata"].setdefault("labels", {}).update(pair["pairs"])
        name = cm["metadata"]["name"]
        try:  # the world seeds the same ConfigMaps for every test: replace them
            core.delete_namespaced_config_map(name, k["namespace"])
        except client.ApiException as exc:
            if exc.status != 404:
                raise
        core.create_namespaced_config_map(k["namespace"], cm)
        made.append((name, cm["data"]))
    ops = KubeOps(kube.controller_client())
    for name, data in made:
        got = ops.read_config_map(k["namespace"], name)
        assert got is not None and got.data == data
        ops.write_config_map(
            k["namespace"], name, {"gpupool-test": "x"}, resource_version=got.resource_version
        )
        after = ops.read_config_map(k["namespace"], name)
        assert after is not None and after.data == {**data, "gpupool-test": "x"}
