"""Kueue's own manager (sigs.k8s.io/kueue cmd/kueue, built by scripts/build-kueue.sh) running
against the suite's API server, with its webhooks served on loopback.

What is set up, as Kueue's own install does it (config/components in the module, read from Go's
module cache, nothing copied into this repository):
- every CRD of config/components/crd/bases (the manager watches Workloads, AdmissionChecks,
  Topologies, ... and does not start without them);
- a Configuration (config.kueue.x-k8s.io/v1beta2): leader election off, internal certificate
  management off, the `batch/job` integration, the webhook server on 127.0.0.1 with the suite's
  apiserver serving certificate (valid for 127.0.0.1, signed by the suite's CA: tests/cluster/
  kcp certs.go), health probes on loopback, the visibility server off (an aggregated API this
  suite does not register), CPU and memory excluded from quota (docs/operations.md, "Kueue
  mode", says operators must set `resources.excludeResourcePrefixes`);
- the webhooks of config/components/webhook/manifests.yaml whose rules name Kueue's own API or
  an enabled integration's (batch Jobs), named as Kueue's kustomization names them (prefix
  `kueue-`), with `clientConfig.url` on loopback and the suite's CA as `caBundle`.

With internal certificate management off, the manager reads its metrics certificate from a fixed
path (/etc/kueue/metrics/certs, cmd/kueue/main.go). It runs in a mount namespace of its own
(`unshare -m`, or `unshare -rm` when not root) with an overlay on /etc, so that path exists for
it alone and nothing is written to the host's /etc.

Without Go and without a cached binary, `binary()` fails the calling test with the build
script's message (GPUPOOL_SKIP_KUEUE=1 makes that an explicit skip instead).
"""

from __future__ import annotations

import copy
import functools
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.cluster.controlplane import free_port, tail

from .crds import KUEUE_MODULE, KUEUE_VERSION, module_dir

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-kueue.sh"
WEBHOOK_GROUPS = {"kueue.x-k8s.io", "batch"}
"""Whose webhooks are registered: Kueue's own kinds and the one integration enabled (batch/job).
The others (pods, Deployments, Ray, Kubeflow, ...) belong to integrations this Configuration
does not enable."""
NAME_PREFIX = "kueue-"
"""config/default/kustomization.yaml `namePrefix`."""
NAMESPACE = "kueue-system"


@functools.cache
def _build() -> tuple[int, str, str]:
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def binary() -> Path:
    """Kueue's manager ($KUEUE_BINARY, else the build script's cached one; the first build takes
    minutes, docs/development.md)."""
    override = os.environ.get("KUEUE_BINARY")
    if override:
        return Path(override)
    rc, out, err = _build()
    if rc == 3:
        msg = f"Kueue's manager (scripts/build-kueue.sh) cannot be built: {err.strip()}"
        if os.environ.get("GPUPOOL_SKIP_KUEUE"):
            pytest.skip(msg + " (GPUPOOL_SKIP_KUEUE is set)")
        pytest.fail(msg + "; install Go >= 1.26 or set GPUPOOL_SKIP_KUEUE=1 to skip")
    if rc != 0:
        pytest.fail(f"scripts/build-kueue.sh failed ({rc}):\n{err[-8000:]}")
    return Path(out.strip().splitlines()[-1])


def source() -> Path:
    """Kueue's module source (Go's module cache; downloaded when missing)."""
    return module_dir(KUEUE_MODULE, KUEUE_VERSION)


def crd_paths() -> list[Path]:
    return sorted((source() / "config" / "components" / "crd" / "bases").glob("*.yaml"))


def webhook_configurations(url: str, ca_bundle: str) -> list[dict]:
    """Kueue's Mutating/ValidatingWebhookConfigurations, as its manifests declare them, for
    `WEBHOOK_GROUPS`, served at `url` (+ each webhook's path) and trusted through `ca_bundle`
    (base64 PEM)."""
    text = (source() / "config" / "components" / "webhook" / "manifests.yaml").read_text()
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"] = {"name": NAME_PREFIX + doc["metadata"]["name"]}
        hooks = []
        for h in doc.get("webhooks", []):
            groups = {g for r in h.get("rules", []) for g in r.get("apiGroups", [])}
            if not groups <= WEBHOOK_GROUPS:
                continue
            path = h["clientConfig"]["service"]["path"]
            h["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
            hooks.append(h)
        doc["webhooks"] = hooks
        out.append(doc)
    return out


def configuration(webhook_port: int, cert_dir: Path, health_port: int) -> dict:
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},  # off: nothing here scrapes it
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["batch/job"]},
        "resources": {"excludeResourcePrefixes": ["cpu", "memory", "ephemeral-storage"]},
    }


_WRAPPER = """\
set -eu
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$KUEUE_ETC/upper,workdir=$KUEUE_ETC/work" /etc
mkdir -p /etc/kueue/metrics/certs
cp "$KUEUE_CERTS/tls.crt" "$KUEUE_CERTS/tls.key" /etc/kueue/metrics/certs/
exec "$@"
"""


class KueueManager:
    """Kueue's manager as a process of this test run; `start()` returns once its readiness probe
    (certificates loaded, webhook server started) answers."""

    def __init__(self, plane, workdir: Path):
        self.plane = plane
        self.workdir = workdir
        self.log_path = workdir / "kueue.log"
        self.proc: subprocess.Popen | None = None
        self.webhooks: list[dict] = []

    def start(self, timeout: float = 120) -> KueueManager:
        if shutil.which("unshare") is None:
            pytest.fail("Kueue's manager needs `unshare` (util-linux) for its mount namespace")
        exe = binary()
        certs = self.workdir / "certs"
        for d in (certs, self.workdir / "etc" / "upper", self.workdir / "etc" / "work"):
            d.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.plane.cert_dir / "apiserver.crt", certs / "tls.crt")
        shutil.copy(self.plane.cert_dir / "apiserver.key", certs / "tls.key")
        self.webhook_port, health = free_port(), free_port()
        cfg = self.workdir / "config.yaml"
        cfg.write_text(yaml.safe_dump(configuration(self.webhook_port, certs, health)))
        ns = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-rm"]
        argv = [
            *ns,
            "sh",
            "-c",
            _WRAPPER,
            "kueue",
            str(exe),
            f"--config={cfg}",
            "--feature-gates=VisibilityOnDemand=false",
        ]
        env = {
            **os.environ,
            "KUBECONFIG": str(self.plane.kubeconfig_path),
            "KUEUE_ETC": str(self.workdir / "etc"),
            "KUEUE_CERTS": str(certs),
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._wait_ready(f"http://127.0.0.1:{health}/readyz", timeout)
        return self

    def _wait_ready(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kueue not ready after {timeout}s:\n{self.logs_tail()}")
            time.sleep(0.3)

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"Kueue's manager exited with {self.proc.returncode}:\n{self.logs_tail()}"
            )

    def logs_tail(self, lines: int = 60) -> str:
        return tail(self.log_path, lines)

    def register_webhooks(self, api_client) -> None:
        """Kueue's webhook configurations, served by this manager (the suite's CA trusts its
        certificate)."""
        import base64

        ca = base64.b64encode((self.plane.cert_dir / "ca.crt").read_bytes()).decode()
        adm = client.AdmissionregistrationV1Api(api_client)
        self.webhooks = webhook_configurations(f"https://127.0.0.1:{self.webhook_port}", ca)
        for doc in self.webhooks:
            if doc["kind"] == "MutatingWebhookConfiguration":
                adm.create_mutating_webhook_configuration(doc)
            else:
                adm.create_validating_webhook_configuration(doc)

    def remove_webhooks(self, api_client) -> None:
        adm = client.AdmissionregistrationV1Api(api_client)
        for doc in self.webhooks:
            name = doc["metadata"]["name"]
            try:
                if doc["kind"] == "MutatingWebhookConfiguration":
                    adm.delete_mutating_webhook_configuration(name)
                else:
                    adm.delete_validating_webhook_configuration(name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
        self.webhooks = []

    def stop(self, timeout: float = 15) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None


def strip_kueue_objects(api_client, plurals: list[str]) -> None:
    """Delete every object of Kueue's kinds, dropping their finalizers first (Kueue's manager is
    stopped by then, and `kueue.x-k8s.io/resource-in-use` would keep the CRDs from going)."""
    custom = client.CustomObjectsApi(api_client)
    g, v = "kueue.x-k8s.io", "v1beta2"
    for plural in plurals:
        try:
            items = custom.list_cluster_custom_object(g, v, plural)["items"]
        except client.ApiException:
            continue
        for o in items:
            meta = o["metadata"]
            ns, name = meta.get("namespace"), meta["name"]
            patch = {"metadata": {"finalizers": None}}
            try:
                if ns:
                    custom.patch_namespaced_custom_object(g, v, ns, plural, name, patch)
                    custom.delete_namespaced_custom_object(g, v, ns, plural, name)
                else:
                    custom.patch_cluster_custom_object(g, v, plural, name, patch)
                    custom.delete_cluster_custom_object(g, v, plural, name)
            except client.ApiException as exc:
                if exc.status != 404:
                    raise
