"""deploy/chart/gpupool with the real helm (v4.3.2, tests/deploy/helm.py): `helm lint --strict`,
its default render equal to what `kubectl apply -k deploy/` makes (less Helm's own labels), the
non-default values files of its ci/ folder rendered as they say, the controller's arguments
accepted by `gpupool reconcile`, bad values refused by values.schema.json with helm's message,
the values table of its README in step with values.yaml, and every rendered object accepted by
the suite's real API server (server-side dry-run)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import subprocess
import sys

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from reconciler.commands import reconcile
from reconciler.policy.quantity import DURATION_PATTERN

from .helm import (
    CHART,
    CI_VALUES,
    HELM_VERSION,
    ROOT,
    by_key,
    helm,
    kustomize,
    render,
    without_helm_metadata,
)
from .objects import dry_run_create

VALUES_FILES = sorted(p.name for p in CI_VALUES.glob("*-values.yaml"))


def _controller(objects: list[dict]) -> dict:
    (dep,) = [o for o in objects if o["kind"] == "Deployment"]
    return dep


def _container(objects: list[dict]) -> dict:
    return _controller(objects)["spec"]["template"]["spec"]["containers"][0]


def _cli(container: dict) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    reconcile.register(parser.add_subparsers())
    return parser.parse_args(container["args"])


def test_helm_is_the_pinned_version():
    out = helm("version", "--short").stdout.strip()
    assert out.startswith(HELM_VERSION), out


@pytest.mark.parametrize("values", [None, *VALUES_FILES])
def test_helm_lint_strict(values):
    args = ["lint", "--strict", str(CHART)]
    if values:
        args += ["--values", str(CI_VALUES / values)]
    out = helm(*args, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 chart(s) failed" in out.stdout, out.stdout


def test_the_default_render_is_the_kustomization():
    """The way the chart and deploy/ stay in step: with its default values the chart renders
    exactly the objects `kubectl apply -k deploy/` applies, field for field, once Helm's own
    labels and annotations are taken off (tests/deploy/helm.py HELM_LABELS, HELM_ANNOTATIONS).
    A change to a file of deploy/ must be made in the chart's template too, and back."""
    chart = by_key([without_helm_metadata(o) for o in render()])
    kust = by_key(kustomize())
    assert sorted(chart) == sorted(kust), set(chart) ^ set(kust)
    for key, want in kust.items():
        assert chart[key] == want, f"{key} differs:\nchart: {chart[key]}\nkustomize: {want}"
    # and the chart labels everything as Helm's own, on top of deploy/'s labels
    for o in render():
        labels = o["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "Helm", o["metadata"]["name"]
        assert labels["app.kubernetes.io/part-of"] == "gpupool", o["metadata"]["name"]


def _git_secret(objs):
    c = _container(objs)
    args = _cli(c)
    assert args.branch == "production"
    (secret,) = [o for o in objs if o["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "gpupool-deploy-key"
    assert set(secret["stringData"]) == {"ssh-privatekey", "known_hosts"}
    vol = {v["name"]: v for v in _controller(objs)["spec"]["template"]["spec"]["volumes"]}
    assert vol["git-credentials"]["secret"]["secretName"] == "gpupool-deploy-key"
    assert vol["git-credentials"]["secret"]["optional"] is False
    cm = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    assert cm["gpupool-source"]["data"]["url"] == "git@git.example.com:platform/gpu-pool-policy.git"


def _git_url_secret(objs):
    env = {e["name"]: e for e in _container(objs)["env"]}
    assert env["GIT_URL"]["valueFrom"] == {
        "secretKeyRef": {"name": "gpupool-git-url", "key": "url"}
    }
    assert not [o for o in objs if o["kind"] == "ConfigMap"]  # no URL in a ConfigMap


def _directory(objs):
    c = _container(objs)
    args = _cli(c)
    assert args.git_url is None and args.path == "/srv/gpu-policy"
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    assert mounts["policy"] == {"name": "policy", "mountPath": "/srv/gpu-policy", "readOnly": True}
    assert "GIT_URL" not in {e["name"] for e in c["env"]}
    vol = {v["name"]: v for v in _controller(objs)["spec"]["template"]["spec"]["volumes"]}
    assert vol["policy"]["persistentVolumeClaim"]["claimName"] == "gpu-policy"


def _configmap(objs):
    c = _container(objs)
    assert _cli(c).path == "/etc/gpupool/policy"
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap"]
    assert cm["metadata"]["name"] == "gpupool-policy" and set(cm["data"]) == {"priority.yaml"}
    (mount,) = [m for m in c["volumeMounts"] if m["name"] == "policy"]
    # one regular file per key (subPath), not the volume's ..data symbolic links, which the
    # directory source refuses
    assert mount["mountPath"] == "/etc/gpupool/policy/policies/priority.yaml"
    assert mount["subPath"] == "priority.yaml"


def _kueue(objs):
    assert not [
        o for o in objs if o["kind"] == "Namespace" and o["metadata"]["name"] != "gpupool-system"
    ]
    assert any(o["kind"] == "MutatingAdmissionPolicy" for o in objs)


def _prometheus(objs):
    args = _cli(_container(objs))
    assert args.prometheus_url == "http://prometheus-operated.monitoring.svc:9090"
    assert args.prometheus_timeout == 10.0 and args.signal_poll_interval == 15.0
    assert args.interval == "15s" and args.git_timeout == "60s"
    gated = {
        o["metadata"]["name"]
        for o in objs
        if o["kind"] == "Namespace"
        and o["metadata"]["labels"].get("gpupool.io/admission") == "gated"
    }
    assert gated == {"team-a", "team-b"}


def _image(objs):
    image = "registry.example.com/platform/gpupool@sha256:" + "0123456789abcdef" * 4
    for o in objs:
        spec = o.get("spec", {}).get("template", {}).get("spec")
        if spec:
            assert [c["image"] for c in spec["containers"]] == [image]
            assert [c["imagePullPolicy"] for c in spec["containers"]] == ["IfNotPresent"]
            assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    dep = _controller(objs)
    assert dep["spec"]["replicas"] == 1
    c = _container(objs)
    assert c["resources"]["limits"]["memory"] == "1Gi"
    args = _cli(c)
    assert args.mig_config_namespace == "nvidia-gpu-operator"
    assert args.webhook_bind_address == ":9443" and args.webhook_secret_file
    roles = [o for o in objs if o["kind"] in ("Role", "RoleBinding")]
    assert {o["metadata"]["namespace"] for o in roles} == {"gpupool-system", "nvidia-gpu-operator"}
    assert not [o for o in objs if o["kind"] == "Namespace"]


CHECKS = {
    "configmap-values.yaml": _configmap,
    "directory-values.yaml": _directory,
    "git-secret-values.yaml": _git_secret,
    "git-url-secret-values.yaml": _git_url_secret,
    "image-values.yaml": _image,
    "kueue-values.yaml": _kueue,
    "prometheus-values.yaml": _prometheus,
}


def test_every_values_file_has_its_check():
    assert sorted(CHECKS) == VALUES_FILES


@pytest.mark.parametrize("values", VALUES_FILES)
def test_a_values_file_renders_what_it_says(values):
    objs = render(CI_VALUES / values)
    CHECKS[values](objs)


@pytest.mark.parametrize("values", [None, *VALUES_FILES])
def test_the_controller_runs_a_command_line_gpupool_accepts(values):
    """As tests/integration/test_deploy.py checks deploy/controller.yaml: the arguments parse,
    the probes are the health server's, the ports are the flags', the identity comes from the
    downward API, and the ServiceAccount is the one the RBAC binds."""
    objs = render(*([CI_VALUES / values] if values else []))
    dep = _controller(objs)
    c = _container(objs)
    args = _cli(c)
    assert args.git_url or args.path
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == args.health_port
    assert ports["metrics"] == int(args.metrics_bind_address.rpartition(":")[2])
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    bound = {
        (s["name"], s["namespace"])
        for o in objs
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in o["subjects"]
    }
    assert (sa, "gpupool-system") in bound
    if args.git_url is not None:
        assert args.git_url == "$(GIT_URL)" and "GIT_URL" in env


BAD = [
    # (--set, the value's path in helm's message, what the schema says)
    ("controller.interval=soon", "/controller/interval", "does not match pattern"),
    ("source.type=svn", "/source/type", "value must be one of"),
    ("image.digest=latest", "/image/digest", "does not match pattern"),
    ("controller.replicas=-1", "/controller/replicas", "minimum"),
    ("controler.replicas=1", "", "additional properties 'controler' not allowed"),
    ("agent.enabled=maybe", "/agent/enabled", "got string, want boolean"),
]


@pytest.mark.parametrize(("setting", "where", "why"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_value_is_refused_by_the_schema(setting, where, why):
    out = helm("template", "gpupool", str(CHART), "--set", setting, check=False)
    assert out.returncode == 1 and not out.stdout, out.stdout
    assert "values don't meet the specifications of the schema(s)" in out.stderr, out.stderr
    assert f"- at '{where}': " in out.stderr and why in out.stderr, out.stderr


INCONSISTENT = [
    (
        ("kueue.enabled=true", "admissionGate.namespaces={team-a}"),
        "admissionGate.namespaces: in Kueue mode",
    ),
    (("source.git.url=",), "source.git.url: empty"),
    (("source.type=configMap",), "source.configMap.files: empty"),
    (("source.git.credentials.create=true",), "source.git.credentials.sshPrivateKey: empty"),
    (
        ("source.type=directory", "controller.webhook.enabled=true"),
        "the push webhook needs source.type=git",
    ),
]


@pytest.mark.parametrize(("sets", "message"), INCONSISTENT, ids=[m for _, m in INCONSISTENT])
def test_values_that_do_not_hold_together_are_refused(sets, message):
    args = ["template", "gpupool", str(CHART)]
    for s in sets:
        args += ["--set", s]
    out = helm(*args, check=False)
    assert out.returncode == 1 and message in out.stderr, out.stderr


def test_the_schema_takes_its_durations_from_gpupool():
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert (
        schema["properties"]["controller"]["properties"]["interval"]["pattern"] == DURATION_PATTERN
    )


def _leaves(values: dict, schema: dict, path: str = "") -> list[str]:
    """Paths of values.yaml that values.schema.json does not describe."""
    missing = []
    props = schema.get("properties", {})
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if key not in props:
            missing.append(where)
        elif isinstance(value, dict) and props[key].get("properties"):
            missing += _leaves(value, props[key], where)
    return missing


def test_the_schema_describes_every_value_and_the_defaults_pass_it():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert _leaves(values, schema) == []
    import jsonschema

    jsonschema.validate(values, schema)


def test_the_values_table_is_in_step_with_values_yaml():
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "chart_values_table.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    spec = importlib.util.spec_from_file_location(
        "chart_values_table", ROOT / "scripts" / "chart_values_table.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    paths = [p for p, _, _ in module.rows((CHART / "values.yaml").read_text())]
    readme = (CHART / "README.md").read_text()
    assert all(f"| `{p}` |" in readme for p in paths)
    # a value without a comment is refused, naming its line
    bad = re.sub(r"\n  # Replicas of the controller[^\n]*", "", (CHART / "values.yaml").read_text())
    with pytest.raises(ValueError, match=r"values.yaml:\d+: controller.replicas has no comment"):
        module.rows(bad)


@pytest.mark.parametrize("values", [None, *VALUES_FILES])
def test_every_rendered_object_is_accepted_by_the_api_server(kube, values):
    """Each object of the render, CRDs first, as a server-side dry-run create on the suite's
    kube-apiserver (v1.37.2: its schemas, CEL rules of the admission policies, defaulting and
    admission); objects deploy/ already installed there are dry-run applied instead."""
    objs = render(*([CI_VALUES / values] if values else []))
    for ns in sorted({o["metadata"].get("namespace") for o in objs} - {None}):
        try:  # gpupool-system and gpu-operator are the suite's, kept; others made for this test
            kube.core.read_namespace(ns)
        except ApiException as exc:
            assert exc.status == 404, exc
            kube.ensure_namespace(ns)  # deleted at teardown
    how = dry_run_create(kube.api_client, objs)
    assert len(how) == len(objs)


def test_the_build_script_pins_the_version_the_tests_expect():
    script = (ROOT / "scripts" / "build-helm.sh").read_text()
    assert f'version="${{HELM_VERSION:-{HELM_VERSION}}}"' in script
    assert "helm.sh/helm/v4/cmd/helm@" in script
    assert "bash scripts/build-helm.sh" in (ROOT / "scripts" / "test.sh").read_text()


def test_the_readme_install_command_is_accepted_by_helm_and_the_api_server(kube):
    """README.md's `helm install` line as written (run from the repository root), with
    `--dry-run=server` against the suite's kube-apiserver: the flags exist in the pinned helm,
    the chart's kubeVersion admits the server's, and `--take-ownership` lets the chart adopt
    what is already there (here: the suite's install of deploy/, as on a cluster installed
    with `kubectl apply -k deploy/` before)."""
    readme = (ROOT / "README.md").read_text()
    joined = readme.replace("\\\n", " ")  # continuation lines joined
    (command,) = [line for line in joined.splitlines() if line.startswith("helm install gpupool ")]
    words = command.split()
    assert words[:4] == ["helm", "install", "gpupool", "deploy/chart/gpupool"], words
    assert "--take-ownership" in words and "--create-namespace" in words
    words = [str(CHART) if w == "deploy/chart/gpupool" else w for w in words[1:]]
    out = helm(*words, "--dry-run=server", check=False, kubeconfig=kube.plane.kubeconfig_path)
    assert out.returncode == 0, out.stderr
    assert "STATUS: pending-install" in out.stdout, out.stdout[:2000]
