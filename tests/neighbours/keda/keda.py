"""KEDA's own operator and metrics server (github.com/kedacore/keda/v2, the version
tests/neighbours/keda/go.mod pins; built by scripts/build-keda.sh) run against the suite's real
API server, as KEDA's own manifests (config/ in the module) install them:

- KEDA's six CRDs (config/crd/bases), installed by `start()` and removed by `stop()` (which
  deletes every KEDA object with them);
- namespace `keda`, ServiceAccount `keda-operator` and KEDA's RBAC (config/rbac,
  config/metrics-server/role*.yaml): both processes run as that ServiceAccount (a token from the
  TokenRequest API), so a missing rule is a 403 from the real authorizer, and the HPA
  controller's ServiceAccount may read external metrics (`keda-hpa-controller-external-metrics`);
- the operator (`cmd/operator`) with cert rotation off (`--enable-cert-rotation=false`, its
  default; the manifests turn it on to mint certificates into a Secret) and its gRPC metrics
  service on loopback;
- the metrics server (`cmd/adapter`) on loopback, registered as the APIService
  `v1beta1.external.metrics.k8s.io`. The aggregator dials an APIService through its Service:
  with no kube-proxy a ClusterIP leads nowhere, and Endpoints at a loopback address are refused
  by validation, so the Service is of type ExternalName `localhost` (kube-aggregator dials
  `<externalName>:<APIService port>` for one: k8s.io/apiserver v0.37.2
  pkg/util/proxy/proxy.go, ResolveCluster; its availability check reads Endpoints only for
  ClusterIP Services). No `--enable-aggregator-routing` is needed, so the session's control
  plane serves KEDA unchanged.

Certificates come from the suite's generator (`kcp certs`, tests/cluster/kcp/certs.go) with the
Service names as extra hosts: its `apiserver` pair (server auth; localhost, 127.0.0.1 and
`keda-metrics-apiserver.keda.svc`, the name the aggregator verifies) serves the metrics server
and the operator's gRPC service; its spare client pair (`apiserver-etcd-client`) is the metrics
server's gRPC client certificate (KEDA's gRPC is mutual TLS: pkg/metricsservice/utils/tls.go).
KEDA's admission webhooks (`cmd/webhooks`) are not run: the operator checks the same bounds
itself (see tests/integration/test_keda.py).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import yaml
from kubernetes import client, utils

from tests.cluster.controlplane import free_port, tail
from tests.integration.crds import install_crd, remove_crd

REPO = Path(__file__).resolve().parents[3]
BUILD_SCRIPT = REPO / "scripts" / "build-keda.sh"
NS, SA = "keda", "keda-operator"
SERVICE = "keda-metrics-apiserver"
API_SERVICE = "v1beta1.external.metrics.k8s.io"
RBAC_FILES = (
    "config/rbac/role.yaml",
    "config/rbac/role_binding.yaml",
    "config/metrics-server/role.yaml",
    "config/metrics-server/role_binding.yaml",
)
OPERATOR_USER = f"system:serviceaccount:{NS}:{SA}"


def _read(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


class KedaUnavailable(RuntimeError):
    """KEDA is not built and cannot be (no Go toolchain)."""


def keda_binaries() -> Path:
    """The directory holding keda-operator and keda-adapter (scripts/build-keda.sh builds them
    on first use: long, see docs/development.md; well under a second after)."""
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if proc.returncode == 3:  # the script's code for "no Go toolchain"
        raise KedaUnavailable(proc.stderr.strip())
    if proc.returncode != 0:
        raise RuntimeError(
            f"scripts/build-keda.sh failed ({proc.returncode}):\n{proc.stderr[-8000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


class Keda:
    """KEDA installed into the control plane `plane` and running: `start()`, `stop()`.
    `logs_tail()` for failure messages."""

    def __init__(self, plane, binaries: Path, module: Path, workdir: Path):
        self.plane, self.binaries, self.module = plane, Path(binaries), Path(module)
        self.workdir = Path(workdir)
        self.pki = self.workdir / "pki"
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs = {n: self.workdir / f"{n}.log" for n in ("keda-operator", "keda-adapter")}
        self.crds: list[str] = []
        self.api = plane.api_client()

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self, timeout: float = 180, tries: int = 6) -> Keda:
        """Install and start KEDA. Both processes watch their certificate directory with
        inotify; where other processes of the same user hold nearly all of
        fs.inotify.max_user_instances (128 by default: several test sessions on one machine),
        one exits with "too many open files": it is started again, `tries` times at most."""
        try:
            for path in sorted((self.module / "config/crd/bases").glob("*.yaml")):
                self.crds.append(install_crd(self.api, path))
            self._install_rbac()
            kubeconfig = self._kubeconfig()
            self._certs()
            for attempt in range(1, tries + 1):
                try:
                    self._run(kubeconfig, time.monotonic() + timeout)
                    return self
                except AssertionError as exc:
                    if "too many open files" not in str(exc) or attempt == tries:
                        raise
                    self._stop_processes()
                    time.sleep(10)
        except BaseException:
            self.stop()
            raise
        return self

    def _run(self, kubeconfig: Path, deadline: float) -> None:
        grpc = f"127.0.0.1:{free_port()}"
        probe = free_port()
        self._run_operator(kubeconfig, grpc, probe)
        adapter_port = free_port()
        self._run_adapter(kubeconfig, grpc, adapter_port)
        self._wait_http(f"http://127.0.0.1:{probe}/readyz", "keda-operator", deadline)
        self._register(adapter_port)
        self._wait_available(deadline)

    def _stop_processes(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        self.procs.clear()

    def stop(self) -> None:
        """Everything `start()` made, APIService first: an unavailable aggregated API stalls
        discovery, and with it the namespace controller, for every test after."""
        reg = client.ApiregistrationV1Api(self.api)
        with contextlib.suppress(client.ApiException):
            reg.delete_api_service(API_SERVICE)
        self._delete_scaled_objects()
        self._stop_processes()
        for name in reversed(self.crds):
            with contextlib.suppress(client.ApiException, TimeoutError):
                remove_crd(self.api, name)
        self.crds.clear()
        rbac = client.RbacAuthorizationV1Api(self.api)
        for path in RBAC_FILES:
            for d in docs(self.module / path):
                name, ns = d["metadata"]["name"], d["metadata"].get("namespace")
                with contextlib.suppress(client.ApiException):
                    match d["kind"]:
                        case "ClusterRole":
                            rbac.delete_cluster_role(name)
                        case "ClusterRoleBinding":
                            rbac.delete_cluster_role_binding(name)
                        case "Role":
                            rbac.delete_namespaced_role(name, ns or NS)
                        case "RoleBinding":
                            rbac.delete_namespaced_role_binding(name, ns or NS)
        with contextlib.suppress(client.ApiException):
            client.CoreV1Api(self.api).delete_namespace(NS)
        self.api.close()

    def _delete_scaled_objects(self, timeout: float = 30) -> None:
        """Every ScaledObject left, while the operator still runs to take off its finalizer
        (`finalizer.keda.sh`: without it the CRD's deletion would wait for ever); after
        `timeout`, the finalizers are taken off here."""
        custom = client.CustomObjectsApi(self.api)
        args = ("keda.sh", "v1alpha1", "scaledobjects")
        deadline = time.monotonic() + timeout
        with contextlib.suppress(client.ApiException):
            while items := custom.list_cluster_custom_object(*args)["items"]:
                for o in items:
                    meta = o["metadata"]
                    with contextlib.suppress(client.ApiException):
                        if time.monotonic() > deadline:
                            custom.patch_namespaced_custom_object(
                                *args[:2],
                                meta["namespace"],
                                args[2],
                                meta["name"],
                                {"metadata": {"finalizers": None}},
                            )
                        elif not meta.get("deletionTimestamp"):
                            custom.delete_namespaced_custom_object(
                                *args[:2], meta["namespace"], args[2], meta["name"]
                            )
                time.sleep(0.3)

    def check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                log = tail(self.logs[name], 40)
                hint = (
                    "\n(inotify instances of this user exhausted: fs.inotify.max_user_instances="
                    f"{_read('/proc/sys/fs/inotify/max_user_instances')})"
                    if "too many open files" in log
                    else ""
                )
                raise AssertionError(f"{name} exited with {proc.returncode}:\n{log}{hint}")

    def logs_tail(self, lines: int = 30) -> str:
        return "\n".join(
            f"----- {name} ({path}) -----\n{tail(path, lines)}" for name, path in self.logs.items()
        )

    # ---- installation --------------------------------------------------------------------
    def _install_rbac(self) -> None:
        core = client.CoreV1Api(self.api)
        for create in (
            lambda: core.create_namespace({"metadata": {"name": NS}}),
            lambda: core.create_namespaced_service_account(NS, {"metadata": {"name": SA}}),
        ):
            with contextlib.suppress(client.ApiException):
                create()
        for path in RBAC_FILES:
            for d in docs(self.module / path):
                with contextlib.suppress(utils.FailToCreateError):  # kept from an earlier run
                    utils.create_from_dict(self.api, d)

    def _kubeconfig(self) -> Path:
        token = self.plane.service_account_token(NS, SA, create=False, expiration_seconds=7200)
        path = self.workdir / "keda.kubeconfig"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "test",
                            "cluster": {
                                "server": self.plane.server,
                                "certificate-authority": str(self.plane.cert_dir / "ca.crt"),
                            },
                        }
                    ],
                    "users": [{"name": SA, "user": {"token": token}}],
                    "contexts": [{"name": SA, "context": {"cluster": "test", "user": SA}}],
                    "current-context": SA,
                }
            )
        )
        return path

    def _certs(self) -> None:
        hosts = f"{SERVICE}.{NS}.svc,{SERVICE}.{NS}.svc.cluster.local,{SA}.{NS}.svc"
        subprocess.run(
            [str(self.plane.binary), "certs", "--dir", str(self.pki), "--hosts", hosts],
            check=True,
            capture_output=True,
        )
        # KEDA reads ca.crt, tls.crt and tls.key from one directory per process
        for who, pair in (("operator", "apiserver"), ("adapter", "apiserver-etcd-client")):
            d = self.workdir / f"certs-{who}"
            d.mkdir(exist_ok=True)
            for dst, src in (
                ("ca.crt", "ca.crt"),
                ("tls.crt", f"{pair}.crt"),
                ("tls.key", f"{pair}.key"),
            ):
                (d / dst).write_bytes((self.pki / src).read_bytes())

    def _env(self, kubeconfig: Path) -> dict[str, str]:
        return {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "WATCH_NAMESPACE": "",
            "POD_NAMESPACE": NS,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": NS,
        }

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        with open(self.logs[name], "wb") as log:  # a fresh log per try
            self.procs[name] = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
                start_new_session=True,
            )

    def _run_operator(self, kubeconfig: Path, grpc: str, probe: int) -> None:
        self._spawn(
            "keda-operator",
            [
                str(self.binaries / "keda-operator"),
                "--leader-elect=false",
                "--enable-cert-rotation=false",
                f"--cert-dir={self.workdir / 'certs-operator'}",
                f"--metrics-service-bind-address={grpc}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-address=127.0.0.1:{probe}",
                f"--ca-dir={self.workdir / 'custom-ca'}",
                "--zap-log-level=info",
                "--zap-encoder=console",
            ],
            self._env(kubeconfig),
        )

    def _run_adapter(self, kubeconfig: Path, grpc: str, port: int) -> None:
        kc = str(kubeconfig)
        self._spawn(
            "keda-adapter",
            [
                str(self.binaries / "keda-adapter"),
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                f"--tls-cert-file={self.pki / 'apiserver.crt'}",
                f"--tls-private-key-file={self.pki / 'apiserver.key'}",
                f"--cert-dir={self.workdir / 'certs-adapter'}",
                f"--lister-kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                f"--metrics-service-address={grpc}",
                f"--port={free_port()}",
                "--zap-log-level=info",
            ],
            self._env(kubeconfig),
        )

    def _register(self, port: int) -> None:
        core = client.CoreV1Api(self.api)
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_service(SERVICE, NS)
        core.create_namespaced_service(
            NS,
            {
                "metadata": {"name": SERVICE},
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            },
        )
        # as config/metrics-server/api_service.yaml, with the port and the CA of this run
        api_service = docs(self.module / "config/metrics-server/api_service.yaml")[0]
        api_service["spec"]["service"]["port"] = port
        api_service["spec"]["caBundle"] = base64.b64encode(
            (self.pki / "ca.crt").read_bytes()
        ).decode()
        reg = client.ApiregistrationV1Api(self.api)
        with contextlib.suppress(client.ApiException):
            reg.delete_api_service(API_SERVICE)
        reg.create_api_service(api_service)

    # ---- waiting -------------------------------------------------------------------------
    def _wait_http(self, url: str, who: str, deadline: float) -> None:
        last = ""
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError as e:
                last = repr(e)
            if time.monotonic() > deadline:
                raise AssertionError(f"{who} not ready at {url}: {last}\n{self.logs_tail()}")
            time.sleep(0.3)

    def _wait_available(self, deadline: float) -> None:
        reg = client.ApiregistrationV1Api(self.api)
        while True:
            self.check_alive()
            conds = reg.read_api_service(API_SERVICE).status.conditions or []
            avail = next((c for c in conds if c.type == "Available"), None)
            if avail is not None and avail.status == "True":
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"APIService {API_SERVICE} not available: "
                    f"{avail.reason if avail else '?'}: {avail.message if avail else ''}\n"
                    f"{self.logs_tail()}"
                )
            time.sleep(0.5)
