"""`helm template | kubectl apply --server-side` of deploy/chart/gpupool into the suite's
cluster yields a working controller (issue 31): the chart rendered by the real helm for a policy
repository holding this repository's own pools/ and policies/ (the bundled example, served over
file://), every object applied server-side (CRDs first) with the official client, and then
the Deployment's pods run. There is no container runtime, so each pod the Deployment's
ReplicaSet created is run as a local process from its container's args and environment, with a
token bound to that pod for the ServiceAccount the chart's RBAC grants (tests/deploy/
pod_process.py): both replicas, one of which leads. The controller converges: the bundled
policy's PriorityClasses and the teams' ResourceQuotas written, the ReconcilerStatus Ready at
the repository's head commit, /readyz answering on the probes' port."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import urllib.request

import yaml
from kubernetes import client

from tests.support.wait import wait_for

from .helm import CI_VALUES, NAMESPACE, ROOT, render
from .objects import delete, existing, key, server_side_apply
from .pod_process import PodProcess

MANAGER = "helm-template-apply"
LABELS = "app.kubernetes.io/name=gpupool,app.kubernetes.io/component=controller"


def git(cwd, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "PATH": "/usr/bin:/bin",
    }
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def bundled_repository(tmp_path) -> tuple[str, str]:
    """A bare repository whose main branch holds pools/ and policies/ of this checkout; its
    file:// URL and head commit."""
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    for d in ("pools", "policies"):
        shutil.copytree(ROOT / d, work / d)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "the bundled example")
    git(work, "push", "-q", origin.as_uri(), "HEAD:refs/heads/main")
    return origin.as_uri(), git(work, "rev-parse", "HEAD")


def _bundled() -> tuple[list[str], list[str]]:
    """The bundled policy's PriorityClasses and the namespaces its Quotas name."""
    classes, namespaces = [], []
    for path in sorted((ROOT / "policies").glob("*.yaml")):
        for d in yaml.safe_load_all(path.read_text()):
            if d and d["kind"] == "PriorityPolicy":
                classes += [c["name"] for c in d["spec"]["classes"]]
            if d and d["kind"] == "Quota":
                namespaces += d["spec"]["namespaces"]
    return classes, namespaces


def _remove_what_was_added(kube, objs: list[dict], before: set) -> None:
    """Teardown: the cluster as the test found it. What the chart added beyond the suite's own
    install of deploy/ (the workloads, their Service, NetworkPolicy and source ConfigMap, the
    state-admission policy the suite installs only where a test asks for it) is deleted; the
    objects that were there (CRDs, RBAC, the other policies: deploy/'s, the same as the chart's,
    tests/deploy/test_chart.py) stay for the session. The Deployment's pods go at once."""
    delete(kube.api_client, [o for o in objs if key(o) not in before])
    with contextlib.suppress(client.ApiException):
        kube.apps.delete_collection_namespaced_replica_set(
            NAMESPACE, label_selector=LABELS, propagation_policy="Orphan"
        )
    with contextlib.suppress(client.ApiException):
        kube.core.delete_collection_namespaced_pod(
            NAMESPACE, label_selector=LABELS, grace_period_seconds=0
        )


def test_helm_template_apply_yields_a_working_controller(kube, tmp_path):
    """The default source (git): a repository holding the bundled example."""
    url, head = bundled_repository(tmp_path)
    classes, namespaces = _bundled()
    for ns in namespaces:
        kube.ensure_namespace(ns)
    status = install_and_run(
        kube,
        tmp_path,
        render(sets=(f"source.git.url={url}", "controller.interval=10s")),
        lambda revision: head.startswith(revision[:12]),
        classes,
    )
    for ns in namespaces:  # the teams' quotas, as gpupool's
        quotas = kube.core.list_namespaced_resource_quota(ns).items
        assert any(
            (q.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "gpupool"
            for q in quotas
        ), (ns, status)


def test_the_configmap_source_runs_too(kube, tmp_path):
    """source.type=configMap (ci/configmap-values.yaml): the policy files mounted one by one
    (subPath) under the directory `--path` reads, which refuses symbolic links."""
    values = yaml.safe_load((CI_VALUES / "configmap-values.yaml").read_text())
    (text,) = values["source"]["configMap"]["files"].values()
    classes = [c["name"] for c in yaml.safe_load(text)["spec"]["classes"]]
    install_and_run(
        kube,
        tmp_path,
        render(CI_VALUES / "configmap-values.yaml", sets=("controller.interval=10s",)),
        lambda revision: revision.startswith("dir:"),
        classes,
    )


def install_and_run(kube, tmp_path, objs: list[dict], at_revision, classes: list[str]) -> dict:
    """Apply `objs`, run the Deployment's pods as processes until the ReconcilerStatus is
    Ready at a revision `at_revision` accepts, with the PriorityClasses `classes` written by
    gpupool, one leader and every replica ready on its probe; stop them (exit 0). Returns
    the status."""
    before = existing(kube.api_client, objs)
    kube.cleanup(lambda: _remove_what_was_added(kube, objs, before))
    server_side_apply(kube.api_client, objs, MANAGER)

    # the ReplicaSet's pods, as the kubelet would get them (Pending: no node runs them)
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    replicas = dep["spec"]["replicas"]
    pods = wait_for(
        f"{replicas} pods of the Deployment",
        lambda: [
            p
            for p in kube.core.list_namespaced_pod(NAMESPACE, label_selector=LABELS).items
            if p.metadata.deletion_timestamp is None
        ],
        timeout=60,
        until=lambda got: len(got) == replicas,
    )
    runs = []
    try:
        for i, pod in enumerate(pods):
            live = kube.api_client.sanitize_for_serialization(pod)
            run = PodProcess(
                kube.plane,
                kube.api_client,
                live,
                live["spec"]["containers"][0],
                tmp_path / f"pod-{i}",
            )
            run.start()
            runs.append(run)

        def alive() -> None:
            for r in runs:
                if r.proc is not None and r.proc.poll() is not None:
                    name, log = r.pod["metadata"]["name"], r.log.read_text()[-4000:]
                    raise AssertionError(f"{name} exited {r.proc.returncode}:\n{log}")

        def converged():
            alive()
            status = (
                kube.custom.get_namespaced_custom_object(
                    "gpupool.io", "v1alpha1", NAMESPACE, "reconcilerstatuses", "gpupool"
                ).get("status")
                or {}
            )
            conds = {c["type"]: c["status"] for c in status.get("conditions", [])}
            return (
                conds.get("Ready") == "True"
                and at_revision(status.get("lastAppliedRevision") or "-")
                and status
            )

        status = wait_for(
            "the controller from the chart reports Ready at the revision of its source",
            converged,
            timeout=120,
            ignore=(client.ApiException,),
        )
        # what it wrote: the policy's classes, as gpupool's
        made = {
            pc.metadata.name
            for pc in kube.scheduling.list_priority_class().items
            if (pc.metadata.labels or {}).get("app.kubernetes.io/managed-by") == "gpupool"
        }
        assert set(classes) <= made, (classes, sorted(made))
        # one leader among the replicas, both ready on the probes' port
        lease = kube.coordination.read_namespaced_lease("gpupool-controller", NAMESPACE)
        assert lease.spec.holder_identity in {p.metadata.name for p in pods}
        probe = dep["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]
        for r in runs:
            port = r.ports[probe["port"]]
            with urllib.request.urlopen(
                f"http://127.0.0.1:{port}{probe['path']}", timeout=5
            ) as resp:
                assert resp.status == 200
        alive()
    finally:
        codes = [r.stop() for r in runs]
    assert codes == [0] * len(runs), [r.log.read_text()[-2000:] for r in runs]
    return status
