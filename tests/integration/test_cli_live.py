"""The command line against the real API server: the paths that now go through
reconciler/commands/errors.py still work (observe, plan --kubeconfig, reconcile --once, agent
--once), and the real authorizer's 403 is one located line.

Each test keeps to what it makes: its own namespace for reconcile's Lease and status, its own
GpuNodeState for the agent, both removed at the end.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from reconciler.cli import main
from reconciler.observe.snapshot import load_snapshot
from tests.fakes.fake_pynvml import FakeGpu, FakeNvml

pytestmark = pytest.mark.kube

ROOT = Path(__file__).resolve().parents[2]
POOLS, POLICIES = str(ROOT / "pools"), str(ROOT / "policies")


def _kubeconfig(plane, path: Path, token: str | None = None) -> str:
    """The admin kubeconfig, or one for a bearer `token`."""
    if token is None:
        return str(plane.kubeconfig_path)
    kc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "test",
                "cluster": {
                    "server": plane.server,
                    "certificate-authority": str(plane.cert_dir / "ca.crt"),
                },
            }
        ],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "u"}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(kc))
    return str(path)


def test_observe_and_plan_read_the_live_cluster(installed, tmp_path, capsys):
    k = _kubeconfig(installed, tmp_path)
    snap = tmp_path / "snap.yaml"
    assert main(["observe", "--kubeconfig", k, "--out", str(snap)]) == 0, capsys.readouterr()
    load_snapshot(snap)
    assert main(["plan", POOLS, POLICIES, "--kubeconfig", k]) == 0, capsys.readouterr().err
    assert "Traceback" not in capsys.readouterr().err


def test_reconcile_once_in_a_namespace_of_its_own(installed, tmp_path, capsys):
    ns = f"cli-{uuid.uuid4().hex[:6]}"
    with installed.api_client() as admin:
        core = client.CoreV1Api(admin)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
        try:
            argv = ["reconcile", "--once", "--dry-run", "--path", str(ROOT), "--namespace", ns]
            argv += ["--kubeconfig", _kubeconfig(installed, tmp_path), "--identity", "cli-test"]
            rc = main(argv)
            captured = capsys.readouterr()
            assert rc == 0, captured
            assert captured.out.startswith(("leader", "follower")), captured.out
        finally:
            core.delete_namespace(ns)


def test_agent_once_publishes(installed, tmp_path, capsys, monkeypatch):
    node = f"cli-node-{uuid.uuid4().hex[:6]}"
    monkeypatch.setattr(
        "reconciler.observe.nvml._real_pynvml", lambda: FakeNvml([FakeGpu("A100-SXM4-80GB")])
    )
    k = _kubeconfig(installed, tmp_path)
    argv = ["agent", "--once", "--node", node, "--kubeconfig", k, "--pod-resources-socket", ""]
    try:
        assert main(argv) == 0, capsys.readouterr()
        with installed.api_client() as admin:
            obj = client.CustomObjectsApi(admin).get_cluster_custom_object(
                "gpupool.io", "v1alpha1", "gpunodestates", node
            )
        assert len(obj["status"]["gpus"]) == 1
    finally:
        with installed.api_client() as admin:
            try:
                client.CustomObjectsApi(admin).delete_cluster_custom_object(
                    "gpupool.io", "v1alpha1", "gpunodestates", node
                )
            except client.ApiException as exc:
                if exc.status != 404:
                    raise


def test_a_service_account_without_rights_gets_one_line(installed, tmp_path, capsys):
    ns = f"cli-{uuid.uuid4().hex[:6]}"
    token = installed.service_account_token(ns, "nobody")  # creates both; no RBAC at all
    try:
        k = _kubeconfig(installed, tmp_path / "nobody.yaml", token)
        for argv in (
            ["observe", "--kubeconfig", k, "--out", str(tmp_path / "s.yaml")],
            ["plan", POOLS, POLICIES, "--kubeconfig", k],
            ["reconcile", "--once", "--path", str(ROOT), "--namespace", ns, "--kubeconfig", k],
        ):
            assert main(argv) == 1
            err = capsys.readouterr().err
            lines = err.splitlines()
            assert len(lines) == 1 and "Traceback" not in err, err
            assert lines[0].startswith(
                f"gpupool {argv[0]}: error: the API server at {installed.server} "
                f"(from --kubeconfig {k}) forbids it (403 Forbidden): "
            ), lines[0]
            assert f'"system:serviceaccount:{ns}:nobody" cannot' in lines[0]
    finally:
        with installed.api_client() as admin:
            client.CoreV1Api(admin).delete_namespace(ns)
