"""The deploy/ manifests hang together: kustomization lists real files, the controller's args
are ones `gpupool reconcile` accepts, probes hit the health server's paths, the dashboard uses
exactly the metrics gpupool exports."""

from __future__ import annotations

import argparse
import json
import re

from reconciler.commands import reconcile
from reconciler.loop import metrics

from .harness import DEPLOY, docs


def _by_kind(name: str) -> dict:
    return {d["kind"]: d for d in docs(DEPLOY / name)}


def test_kustomization_lists_existing_files():
    k = docs(DEPLOY / "kustomization.yaml")[0]
    for r in k["resources"]:
        assert (DEPLOY / r).is_file(), r
    assert "namespace" not in k  # would move the gpu-operator Role into gpupool-system


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
