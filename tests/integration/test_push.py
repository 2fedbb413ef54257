"""A push wakes the running controller (issue 14): `gpupool reconcile` runs as it does in the
cluster — its own process, the controller's ServiceAccount, a git remote, a 10-minute poll
interval and the push webhook receiver — and a policy change pushed to the branch is on the
API server within seconds of GitHub's signed delivery, long before the next poll; and SIGTERM
ends the process promptly with its Lease handed back.

Nothing here stands in for gpupool: the command line, the git source (a real bare repository
over file://), the receiver and the cycle are the product's own. GitHub's side is a POST with
the headers its push deliveries carry (X-GitHub-Event, X-Hub-Signature-256; see
reconciler/loop/webhook.py for the documentation it follows)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from reconciler.loop.webhook import PATH, sign
from tests.support.wait import wait_for_process

from .objects_desired import _desired
from .world import CONTROLLER_SA, NS, OPERATOR_NS

SECRET = b"push-secret-for-the-test"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def commit_and_push(work: Path, text: str, message: str) -> str:
    (work / "policies").mkdir(exist_ok=True)
    (work / "policies" / "desired.yaml").write_text(text)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", message)
    git(work, "push", "-q", "origin", "HEAD:refs/heads/main")
    return git(work, "rev-parse", "HEAD")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def controller_kubeconfig(kube, path: Path) -> Path:
    """A kubeconfig for the controller's ServiceAccount (a TokenRequest token, as a pod's
    projected token would be): the process gets deploy/rbac.yaml's rules and no more."""
    plane = kube.plane
    token = plane.service_account_token(NS, CONTROLLER_SA, create=False)
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
        "users": [{"name": "controller", "user": {"token": token}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "controller"}}],
        "current-context": "test",
    }
    path.write_text(json.dumps(kc))
    return path


def deliver_push(port: int, body: bytes) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{PATH}",
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "push",
            "X-Hub-Signature-256": sign(SECRET, body),
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except urllib.error.URLError:
        return 0  # the receiver is not listening yet


def hard_gpus(kube, ns: str) -> str | None:
    items = kube.core.list_namespaced_resource_quota(ns).items
    q = next((q for q in items if q.metadata.name == "gpupool-team-x"), None)
    return None if q is None else (q.spec.hard or {}).get("requests.nvidia.com/gpu")


def test_a_push_reaches_the_cluster_within_seconds(kube, tmp_path):
    sfx = uuid.uuid4().hex[:6]
    ns = kube.new_namespace()
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(tmp_path, "init", "-q", "-b", "main", str(work))
    git(work, "remote", "add", "origin", origin.as_uri())
    text = _desired(ns, sfx)
    commit_and_push(work, text, "team-x may use 8 cards")
    (tmp_path / "secret").write_bytes(SECRET + b"\n")
    port = free_port()
    log = tmp_path / "reconcile.log"
    cmd = [
        sys.executable,
        "-c",
        "import sys; from reconciler.cli import main; sys.exit(main(sys.argv[1:]))",
        "reconcile",
        f"--git-url={origin.as_uri()}",
        "--branch=main",
        f"--cache={tmp_path / 'cache'}",
        "--interval=10m",
        f"--namespace={NS}",
        f"--mig-config-namespace={OPERATOR_NS}",
        f"--kubeconfig={controller_kubeconfig(kube, tmp_path / 'kubeconfig')}",
        "--identity=gpupool-push-test",
        "--health-port=0",
        "--metrics-bind-address=0",
        f"--webhook-bind-address=127.0.0.1:{port}",
        f"--webhook-secret-file={tmp_path / 'secret'}",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    gpupool = "gpupool reconcile"
    try:
        # the first cycle runs at start: the quota the first commit asks for
        wait_for_process(
            "the first cycle's quota",
            lambda: hard_gpus(kube, ns) == "8",
            proc,
            log,
            90,
            name=gpupool,
        )
        head = commit_and_push(
            work, text.replace("maxGPUs: 8", "maxGPUs: 6"), "team-x gives back 2 cards"
        )
        # the poll is 10 minutes away: without a delivery nothing changes
        time.sleep(3)
        assert hard_gpus(kube, ns) == "8"
        body = json.dumps({"ref": "refs/heads/main", "after": head}).encode()
        wait_for_process(
            "the receiver", lambda: deliver_push(port, body) == 202, proc, log, 10, name=gpupool
        )
        delivered = time.monotonic()
        wait_for_process(
            "the pushed quota", lambda: hard_gpus(kube, ns) == "6", proc, log, 20, name=gpupool
        )
        took = time.monotonic() - delivered
        status = kube.custom.get_namespaced_custom_object(
            "gpupool.io", "v1alpha1", NS, "reconcilerstatuses", "gpupool"
        )
        assert head.startswith(status["status"]["lastAppliedRevision"][:12]), status["status"]
        print(f"pushed policy applied {took:.1f} s after the delivery")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            # the kubelet waits terminationGracePeriodSeconds (30 s) before SIGKILL: the loop,
            # asleep for its 10-minute interval, must end well inside that
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-4000:]
    # and it stepped down on the way out, so a standby need not wait for the Lease to expire
    lease = kube.coordination.read_namespaced_lease("gpupool-controller", NS)
    assert lease.spec.holder_identity != "gpupool-push-test"
