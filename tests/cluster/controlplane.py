"""A real Kubernetes control plane for tests: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager, run as subprocesses of the `kcp` binary (tests/cluster/kcp, built from
the upstream Go modules by scripts/build-control-plane.sh).

Everything listens on 127.0.0.1 on free ports. Certificates are generated into the work dir at
start. Authentication is by client certificate (admin: O=system:masters) and ServiceAccount
tokens; authorization is Node,RBAC; admission is the upstream default set plus NodeRestriction
(ValidatingAdmissionPolicy and MutatingAdmissionPolicy are GA in 1.37 and on by default, so they
need no flags). The three components run with the same feature gates (`FEATURE_GATES`), and
kube-apiserver serves the group versions of `RUNTIME_CONFIG` beyond its defaults. The apiserver
writes an audit log (Metadata level) that tests can read back.

There are no kubelets: tests/cluster/kubelets.py simulates them through the API.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "build-control-plane.sh"
SERVICE_CIDR = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

FEATURE_GATES: dict[str, bool] = {
    # scheduling.k8s.io/v1beta1 Workload and PodGroup, pods' spec.schedulingGroup, and
    # kube-scheduler's GangScheduling and PodGroupPodsCount plugins (beta in 1.37, off by
    # default: k8s.io/kubernetes pkg/features/kube_features.go; the scheduler adds both plugins
    # to its default profile when the gate is on: pkg/scheduler/apis/config/v1/default_plugins.go).
    # Not WorkloadWithJob (alpha): the Job controller would make a PodGroup for every Job.
    "GenericWorkload": True,
}
"""Feature gates of kube-apiserver, kube-scheduler and kube-controller-manager alike (one list:
a gate on in one component and off in another is a cluster no one runs).

DRA (issue 32) needs none in 1.37.2: DynamicResourceAllocation is GA and locked on,
DRAPrioritizedList GA, DRADeviceTaints and DRADeviceTaintRules GA (on by default),
DRAPartitionableDevices and DRAConsumableCapacity beta and on by default
(k8s.io/kubernetes v1.37.2 pkg/features/kube_features.go), and resource.k8s.io/v1 is served
without runtime-config."""

RUNTIME_CONFIG: dict[str, bool] = {
    # beta APIs are not served by default: the group version of Workload and PodGroup
    "scheduling.k8s.io/v1beta1": True,
}
"""kube-apiserver's `--runtime-config`: API group versions served beyond the defaults."""


def feature_gates_flag(gates: dict[str, bool] | None = None) -> str:
    """`--feature-gates=A=true,B=false` for `gates` (default: FEATURE_GATES)."""
    gates = FEATURE_GATES if gates is None else gates
    return "--feature-gates=" + ",".join(f"{k}={str(v).lower()}" for k, v in sorted(gates.items()))


def runtime_config_flag(config: dict[str, bool] | None = None) -> str:
    """`--runtime-config=group/version=true,...` for `config` (default: RUNTIME_CONFIG)."""
    config = RUNTIME_CONFIG if config is None else config
    return "--runtime-config=" + ",".join(
        f"{k}={str(v).lower()}" for k, v in sorted(config.items())
    )


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    # One event per request, written when the response is complete.
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        # Health probes (ours and the components') would only bury the requests tests look for.
        {"level": "None", "nonResourceURLs": ["/healthz*", "/readyz*", "/livez*"]},
        {"level": "Metadata"},
    ],
}


class BuildUnavailable(RuntimeError):
    """The kcp binary is not built and cannot be (no Go toolchain)."""


class ControlPlaneError(RuntimeError):
    pass


def build_binary(env: dict[str, str] | None = None) -> Path:
    """Path to the kcp binary: $KCP_BINARY if set, else scripts/build-control-plane.sh's
    (which builds it on first use, minutes, and finds it in well under a second after)."""
    override = os.environ.get("KCP_BINARY")
    if override:
        path = Path(override)
        if not os.access(path, os.X_OK):
            raise ControlPlaneError(f"KCP_BINARY={override} is not an executable file")
        return path
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode == 3:  # the script's code for "no Go toolchain"
        raise BuildUnavailable(proc.stderr.strip())
    if proc.returncode != 0:
        raise ControlPlaneError(
            f"scripts/build-control-plane.sh failed ({proc.returncode}):\n{proc.stderr[-8000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class AuditEvent:
    """The fields of one audit event (stage ResponseComplete) that tests ask about."""

    user: str
    groups: tuple[str, ...]
    verb: str
    resource: str | None
    subresource: str | None
    namespace: str | None
    name: str | None
    api_group: str | None
    code: int | None
    uri: str
    audit_id: str

    @classmethod
    def from_json(cls, ev: dict) -> AuditEvent:
        ref = ev.get("objectRef") or {}
        user = ev.get("user") or {}
        return cls(
            user=user.get("username", ""),
            groups=tuple(user.get("groups") or ()),
            verb=ev.get("verb", ""),
            resource=ref.get("resource"),
            subresource=ref.get("subresource"),
            namespace=ref.get("namespace"),
            name=ref.get("name"),
            api_group=ref.get("apiGroup"),
            code=(ev.get("responseStatus") or {}).get("code"),
            uri=ev.get("requestURI", ""),
            audit_id=ev.get("auditID", ""),
        )


class _Process:
    def __init__(self, name: str, argv: Sequence[str], log_path: Path):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here
        try:
            log.write(f"\n=== start {time.strftime('%H:%M:%S')}: {' '.join(self.argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: a test's ^C does not reach it
            )
        finally:
            log.close()

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 15) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with {self.proc.returncode}; log tail:\n{tail(self.log_path)}"
            )


def tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ControlPlane:
    """etcd + kube-apiserver + kube-scheduler + kube-controller-manager on 127.0.0.1.

    `start()` takes a few seconds once the binary exists. Attributes after start:
    `server` (https URL), `kubeconfig_path` (admin), `workdir`, `cert_dir`, `log_dir`,
    `audit_log_path`.
    """

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        *,
        node_monitor_grace_period: str = "20s",
        service_account_credentials: bool = True,
        extra_apiserver_args: Iterable[str] = (),
        extra_controller_manager_args: Iterable[str] = (),
        extra_scheduler_args: Iterable[str] = (),
    ):
        self.binary = Path(binary)
        self.workdir = Path(workdir)
        self.cert_dir = self.workdir / "pki"
        self.log_dir = self.workdir / "logs"
        self.etcd_dir = self.workdir / "etcd"
        self.audit_log_path = self.log_dir / "audit.log"
        self.kubeconfig_path = self.workdir / "admin.kubeconfig"
        self.node_monitor_grace_period = node_monitor_grace_period
        self.service_account_credentials = service_account_credentials
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.extra_controller_manager_args = list(extra_controller_manager_args)
        self.extra_scheduler_args = list(extra_scheduler_args)
        self.apiserver_port = 0
        self.server = ""
        self._procs: dict[str, _Process] = {}
        self.timings: dict[str, float] = {}  # seconds from start() to each milestone

    # ---- lifecycle -------------------------------------------------------------------------

    def start(self, timeout: float = 120) -> ControlPlane:
        for d in (self.cert_dir, self.log_dir, self.etcd_dir):
            d.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + timeout
        self._run_kcp("certs", "--dir", str(self.cert_dir))

        etcd_client, etcd_peer = free_port(), free_port()
        self.apiserver_port = free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        scheduler_port, cm_port = free_port(), free_port()

        policy = self.workdir / "audit-policy.json"
        policy.write_text(json.dumps(AUDIT_POLICY, indent=2))
        c = self.cert_dir
        self._write_kubeconfig(self.kubeconfig_path, "admin")
        sched_kc = self._write_kubeconfig(self.workdir / "scheduler.kubeconfig", "scheduler")
        cm_kc = self._write_kubeconfig(
            self.workdir / "controller-manager.kubeconfig", "controller-manager"
        )

        self._add(
            "etcd",
            "etcd",
            f"--data-dir={self.etcd_dir}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_client}",
            f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
        )
        self._add(
            "kube-apiserver",
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The lease/master-count endpoint reconcilers refuse a loopback advertise address,
            # and nothing here dials the in-cluster `kubernetes` Service, so it gets no
            # Endpoints.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.apiserver_port}",
            f"--tls-cert-file={c / 'apiserver.crt'}",
            f"--tls-private-key-file={c / 'apiserver.key'}",
            f"--client-ca-file={c / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--anonymous-auth=true",  # upstream default; /readyz etc. stay public-info
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={c / 'sa.pub'}",
            f"--service-account-signing-key-file={c / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            # The upstream default plugins (which include ValidatingAdmissionPolicy and
            # MutatingAdmissionPolicy, both GA) plus what kubeadm adds.
            "--enable-admission-plugins=NodeRestriction",
            # Request-header authentication as kubeadm sets it up: the scheduler and the
            # controller-manager read this CA from kube-system/extension-apiserver-authentication
            # for their own delegated authentication (and log errors every second without it).
            f"--requestheader-client-ca-file={c / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={c / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={c / 'front-proxy-client.key'}",
            # On SIGTERM, end open watches within 2s; without it the HTTP server waits for the
            # components' watch connections and the process outlives any sensible stop timeout.
            "--shutdown-watch-termination-grace-period=2s",
            "--allow-privileged=true",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log_path}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxbackup=0",
            # Never rotate: the tests and the soak read the log by position (`audit_events`),
            # and the API server's default rotates it at 100 MB (lumberjack's default for a
            # max size of 0), which the whole suite passes: a mark taken before a rotation
            # then sees nothing after it.
            "--audit-log-maxsize=100000",
            "--profiling=false",
            feature_gates_flag(),
            runtime_config_flag(),
            "--v=1",
            *self.extra_apiserver_args,
        )
        self._add(
            "kube-scheduler",
            "kube-scheduler",
            f"--kubeconfig={sched_kc}",
            f"--authentication-kubeconfig={sched_kc}",
            f"--authorization-kubeconfig={sched_kc}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={scheduler_port}",
            feature_gates_flag(),
            "--v=1",
            *self.extra_scheduler_args,
        )
        self._add(
            "kube-controller-manager",
            "kube-controller-manager",
            f"--kubeconfig={cm_kc}",
            f"--authentication-kubeconfig={cm_kc}",
            f"--authorization-kubeconfig={cm_kc}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={cm_port}",
            # Each controller authenticates as its own ServiceAccount and so is held to its
            # bootstrap RBAC role, as in kubeadm clusters. (Minting those credentials is most of
            # the controller-manager's ~5 s start; False saves it.)
            f"--use-service-account-credentials={str(self.service_account_credentials).lower()}",
            f"--service-account-private-key-file={c / 'sa.key'}",
            f"--root-ca-file={c / 'ca.crt'}",
            f"--cluster-signing-cert-file={c / 'ca.crt'}",
            f"--cluster-signing-key-file={c / 'ca.key'}",
            # Every default controller: GC, ReplicaSet/Deployment/Job/StatefulSet, namespace,
            # serviceaccount(-token), disruption, nodelifecycle, HPA, ... The cloud ones
            # (service-lb, node-route, cloud-node-lifecycle) switch themselves off without a
            # cloud provider.
            "--controllers=*",
            "--node-monitor-period=2s",
            f"--node-monitor-grace-period={self.node_monitor_grace_period}",
            "--horizontal-pod-autoscaler-sync-period=5s",
            feature_gates_flag(),
            "--v=1",
            *self.extra_controller_manager_args,
        )
        scheduler_url = f"https://127.0.0.1:{scheduler_port}/healthz"
        cm_url = f"https://127.0.0.1:{cm_port}/healthz"
        self._cm_url = cm_url
        t0 = time.monotonic()
        try:
            self._procs["etcd"].start()
            self._procs["kube-apiserver"].start()
            self._wait_ready(deadline)
            self.timings["apiserver_ready"] = time.monotonic() - t0
            self._procs["kube-scheduler"].start()
            self._procs["kube-controller-manager"].start()
            self._wait_url(scheduler_url, "kube-scheduler", deadline, client_cert=False)
            self._wait_url(cm_url, "kube-controller-manager", deadline, client_cert=False)
            self.timings["components_healthy"] = time.monotonic() - t0
            self._wait_default_service_account(deadline)
            self.timings["started"] = time.monotonic() - t0
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-scheduler", "kube-apiserver", "etcd"):
            p = self._procs.get(name)
            if p is not None:
                p.stop()

    def stop_apiserver(self, timeout: float = 15) -> None:
        """Stop only kube-apiserver, by SIGTERM (graceful; SIGKILL after `timeout`). etcd keeps
        the state; the scheduler, the controller-manager and the kubelets keep running and
        reconnect once it is back."""
        self._procs["kube-apiserver"].stop(timeout)

    def start_apiserver(self, timeout: float = 60) -> None:
        """Start kube-apiserver again, with the same flags and port, and wait for /readyz."""
        p = self._procs["kube-apiserver"]
        if not p.running():
            p.start()
        self._wait_ready(time.monotonic() + timeout)

    def restart_apiserver(self, timeout: float = 60) -> None:
        self.stop_apiserver()
        self.start_apiserver(timeout)

    def restart_controller_manager(self, timeout: float = 60) -> None:
        """Stop kube-controller-manager (SIGTERM) and start it again with the same flags, and
        wait for its /healthz: its controllers start from empty caches (their informers list
        afresh; what they remembered of their own writes is gone, as after an upgrade or a
        leader change)."""
        p = self._procs["kube-controller-manager"]
        p.stop()
        p.start()
        self._wait_url(
            self._cm_url, "kube-controller-manager", time.monotonic() + timeout, client_cert=False
        )

    # ---- clients ---------------------------------------------------------------------------

    def api_client(self):
        """A `kubernetes.client.ApiClient` authenticated as the admin (system:masters)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig_path))

    def service_account_token(
        self, namespace: str, name: str, *, create: bool = True, expiration_seconds: int = 3600
    ) -> str:
        """A bound token for ServiceAccount namespace/name from the TokenRequest API
        (creating the namespace and the ServiceAccount if missing, unless create=False)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.api_client() as admin:
            core = client.CoreV1Api(admin)
            if create:
                for create_call in (
                    lambda: core.create_namespace(
                        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
                    ),
                    lambda: core.create_namespaced_service_account(
                        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
                    ),
                ):
                    try:
                        create_call()
                    except ApiException as e:
                        if e.status != 409:
                            raise
            tr = core.create_namespaced_service_account_token(
                name,
                namespace,
                client.AuthenticationV1TokenRequest(
                    spec=client.V1TokenRequestSpec(
                        audiences=[SERVICE_ACCOUNT_ISSUER], expiration_seconds=expiration_seconds
                    )
                ),
            )
            return tr.status.token

    def service_account_client(self, namespace: str, name: str, **kw):
        """A `kubernetes.client.ApiClient` that authenticates as the ServiceAccount (bearer token
        from TokenRequest). It has exactly the RBAC permissions bound to that ServiceAccount."""
        return self.token_client(self.service_account_token(namespace, name, **kw))

    def token_client(self, token: str):
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.server
        cfg.ssl_ca_cert = str(self.cert_dir / "ca.crt")
        cfg.verify_ssl = True
        cfg.api_key = {"authorization": token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        return client.ApiClient(cfg)

    # ---- audit -----------------------------------------------------------------------------

    def audit_events(
        self,
        *,
        user: str | None = None,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        namespace: str | None = None,
        name: str | None = None,
        code: int | None = None,
        where: Callable[[AuditEvent], bool] | None = None,
    ) -> list[AuditEvent]:
        """The audit log's completed requests, oldest first, filtered by the given fields
        (None matches anything)."""
        want = {
            "user": user,
            "verb": verb,
            "resource": resource,
            "subresource": subresource,
            "namespace": namespace,
            "name": name,
            "code": code,
        }
        out = []
        for ev in self._read_audit():
            e = AuditEvent.from_json(ev)
            if any(v is not None and getattr(e, k) != v for k, v in want.items()):
                continue
            if where is not None and not where(e):
                continue
            out.append(e)
        return out

    def wait_audit_event(self, timeout: float = 10, **filters) -> AuditEvent:
        """The first audit event matching `filters` (as for audit_events), waiting for the log
        to catch up with the request."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.audit_events(**filters)
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no audit event matching {filters} within {timeout}s")
            time.sleep(0.1)

    def _read_audit(self) -> Iterable[dict]:
        if not self.audit_log_path.exists():
            return
        with open(self.audit_log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written right now
                if ev.get("stage") in ("ResponseComplete", "Panic"):
                    yield ev

    # ---- logs ------------------------------------------------------------------------------

    def log_paths(self) -> dict[str, Path]:
        return {name: p.log_path for name, p in self._procs.items()}

    def logs_tail(self, lines: int = 40) -> str:
        parts = []
        for name, path in self.log_paths().items():
            parts.append(f"----- {name} ({path}) -----\n{tail(path, lines)}")
        return "\n".join(parts)

    # ---- internals -------------------------------------------------------------------------

    def _add(self, name: str, *args: str) -> None:
        self._procs[name] = _Process(name, [str(self.binary), *args], self.log_dir / f"{name}.log")

    def _run_kcp(self, *args: str) -> None:
        proc = subprocess.run(
            [str(self.binary), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if proc.returncode != 0:
            raise ControlPlaneError(f"kcp {' '.join(args)} failed:\n{proc.stdout}")

    def _write_kubeconfig(self, path: Path, who: str) -> Path:
        c = self.cert_dir
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gpupool-test",
                    "cluster": {
                        "server": f"https://127.0.0.1:{self.apiserver_port}",
                        "certificate-authority": str(c / "ca.crt"),
                    },
                }
            ],
            "users": [
                {
                    "name": who,
                    "user": {
                        "client-certificate": str(c / f"{who}.crt"),
                        "client-key": str(c / f"{who}.key"),
                    },
                }
            ],
            "contexts": [{"name": who, "context": {"cluster": "gpupool-test", "user": who}}],
            "current-context": who,
        }
        path.write_text(json.dumps(kc, indent=2))  # JSON is YAML: every kubeconfig reader takes it
        return path

    def _ssl_context(self, client_cert: bool) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.cert_dir / "ca.crt"))
        if client_cert:
            ctx.load_cert_chain(str(self.cert_dir / "admin.crt"), str(self.cert_dir / "admin.key"))
        else:  # the scheduler and controller-manager serve with self-signed in-memory certs
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        return ctx

    def _wait_url(self, url: str, who: str, deadline: float, client_cert: bool) -> None:
        ctx = self._ssl_context(client_cert)
        last = ""
        while True:
            self._procs[who].check_alive()
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=5) as r:
                    if r.status == 200:
                        return
                    last = f"HTTP {r.status}"
            except urllib.error.HTTPError as e:
                last = f"HTTP {e.code}: {e.read()[-2000:].decode(errors='replace')}"
            except (OSError, ssl.SSLError) as e:
                last = repr(e)
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{who} not healthy at {url}: {last}\n{tail(self._procs[who].log_path)}"
                )
            time.sleep(0.2)

    def _wait_ready(self, deadline: float) -> None:
        self._procs["etcd"].check_alive()
        self._wait_url(f"{self.server}/readyz", "kube-apiserver", deadline, client_cert=True)

    def _wait_default_service_account(self, deadline: float) -> None:
        """The controller-manager is working once its serviceaccount controller has made
        default/default (and the scheduler is up by then too)."""
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        with self.api_client() as api:
            core = client.CoreV1Api(api)
            while True:
                self._procs["kube-controller-manager"].check_alive()
                with contextlib.suppress(ApiException):
                    core.read_namespaced_service_account("default", "default")
                    return
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        "controller-manager made no default ServiceAccount in time\n"
                        + tail(self._procs["kube-controller-manager"].log_path)
                    )
                time.sleep(0.2)


def have_go() -> bool:
    return shutil.which("go") is not None or os.access("/usr/local/go/bin/go", os.X_OK)
