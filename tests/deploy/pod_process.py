"""A container of a rendered pod template run as a local process, the way the kubelet would
start it, for a cluster without a container runtime: the image's ENTRYPOINT (the Dockerfile's,
`gpupool`, run from this checkout) with the container's args; its environment resolved as the
kubelet does (values, fieldRefs of the pod, configMapKeyRef/secretKeyRef read from the API
server) and `$(VAR)` references in args expanded; its file system a directory (`rootfs`)
holding only its volume mounts (a Secret's or ConfigMap's keys written as files, read from the
API server; a subPath mount as one regular file), and an argument naming an absolute path
made to name it there; the pod's ServiceAccount token (a TokenRequest bound to the pod, as the
projected token is) in a kubeconfig, since there is no in-cluster config. Ports are moved to
free local ones: the pod's network namespace is not there."""

from __future__ import annotations

import base64
import json
import re
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

ROOT = Path(__file__).resolve().parents[2]


def entrypoint() -> list[str]:
    """The image's ENTRYPOINT (exec form) from the Dockerfile."""
    found = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", (ROOT / "Dockerfile").read_text(), re.M)
    assert found, "the Dockerfile has no exec-form ENTRYPOINT"
    return json.loads(found[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PodProcess:
    """The container `container` of `pod` (a live Pod object's dict, created by its
    controller), started by `start()`."""

    plane: object  # tests.cluster.controlplane.ControlPlane
    api: client.ApiClient  # an admin client, for what the kubelet reads
    pod: dict
    container: dict
    home: Path
    ports: dict[str, int] = field(default_factory=dict)  # port name -> local port
    proc: subprocess.Popen | None = None
    _token: str | None = None

    @property
    def log(self) -> Path:
        return self.home / "log"

    def start(self) -> subprocess.Popen:
        self.home.mkdir(parents=True, exist_ok=True)
        env = self._env()
        self._mounts()
        args = [self._expand(a, env) for a in self.container.get("args", [])]
        args = [self._local(a) for a in args]
        args = self._move_ports(args)
        kubeconfig = self._kubeconfig()
        argv = entrypoint() + args + [f"--kubeconfig={kubeconfig}"]
        assert argv[0] == "gpupool", argv
        cmd = [
            sys.executable,
            "-c",
            "import sys; from reconciler.cli import main; sys.exit(main(sys.argv[1:]))",
        ]
        tmp = self.rootfs / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        proc_env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(tmp),
            "TMPDIR": str(tmp),
            "PYTHONPATH": str(ROOT),
            **env,
        }
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                cmd + argv[1:], stdout=out, stderr=subprocess.STDOUT, env=proc_env, cwd=self.home
            )
        return self.proc

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    # -- what the kubelet does ----------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        core = client.CoreV1Api(self.api)
        ns = self.pod["metadata"]["namespace"]
        out: dict[str, str] = {}
        for e in self.container.get("env", []):
            if "value" in e:
                out[e["name"]] = self._expand(e["value"], out)
                continue
            src = e["valueFrom"]
            if "fieldRef" in src:
                path = src["fieldRef"]["fieldPath"]
                obj = self.pod
                for part in path.split("."):
                    obj = obj[part]
                out[e["name"]] = str(obj)
            elif "configMapKeyRef" in src:
                ref = src["configMapKeyRef"]
                out[e["name"]] = core.read_namespaced_config_map(ref["name"], ns).data[ref["key"]]
            elif "secretKeyRef" in src:
                ref = src["secretKeyRef"]
                data = core.read_namespaced_secret(ref["name"], ns).data[ref["key"]]
                out[e["name"]] = base64.b64decode(data).decode()
            else:
                raise AssertionError(f"env {e['name']}: {src} is not resolved here")
        return out

    @staticmethod
    def _expand(text: str, env: dict[str, str]) -> str:
        return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), text)

    @property
    def rootfs(self) -> Path:
        """The container's file system: what its mounts put there, and nothing else."""
        return self.home / "rootfs"

    def _mounts(self) -> None:
        """Each volume mount made under `rootfs` as the kubelet would mount it: an emptyDir
        as an empty directory, a Secret's, ConfigMap's or projected volume's keys as files
        (an optional Secret that is absent as an empty directory), a `subPath` mount as the
        one regular file of that key."""
        core = client.CoreV1Api(self.api)
        ns = self.pod["metadata"]["namespace"]
        volumes = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        for m in self.container.get("volumeMounts", []):
            v = volumes[m["name"]]
            files: dict[str, bytes] = {}
            if "secret" in v:
                try:
                    secret = core.read_namespaced_secret(v["secret"]["secretName"], ns)
                except client.ApiException as exc:
                    if exc.status != 404 or not v["secret"].get("optional"):
                        raise
                    secret = None
                files = {
                    k: base64.b64decode(d)
                    for k, d in ((secret.data or {}) if secret else {}).items()
                }
            elif "configMap" in v:
                cm = core.read_namespaced_config_map(v["configMap"]["name"], ns)
                files = {k: d.encode() for k, d in (cm.data or {}).items()}
            elif "projected" in v:  # the API server's kube-api-access-* volume
                files = self._projected(v["projected"]["sources"])
            elif "emptyDir" not in v:
                raise AssertionError(f"volume {m['name']}: {v} is not made here")
            target = self.rootfs / m["mountPath"].lstrip("/")
            if m.get("subPath"):
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(files[m["subPath"]])
                continue
            target.mkdir(parents=True, exist_ok=True)
            for k, data in files.items():
                (target / k).write_bytes(data)

    def _projected(self, sources: list[dict]) -> dict[str, bytes]:
        core = client.CoreV1Api(self.api)
        files: dict[str, bytes] = {}
        for s in sources:
            if "serviceAccountToken" in s:
                files[s["serviceAccountToken"]["path"]] = self.token().encode()
            elif "configMap" in s:
                cm = core.read_namespaced_config_map(
                    s["configMap"]["name"], self.pod["metadata"]["namespace"]
                )
                for item in s["configMap"]["items"]:
                    files[item["path"]] = cm.data[item["key"]].encode()
            elif "downwardAPI" in s:
                for item in s["downwardAPI"]["items"]:
                    obj = self.pod
                    for part in item["fieldRef"]["fieldPath"].split("."):
                        obj = obj[part]
                    files[item["path"]] = str(obj).encode()
            else:
                raise AssertionError(f"projected source {s} is not made here")
        return files

    def _local(self, arg: str) -> str:
        """An argument naming a path of the container (`--flag=/abs/path`) made to name
        that path under `rootfs`."""
        return re.sub(r"^(--[a-z-]+=)(/)", lambda m: f"{m[1]}{self.rootfs}/", arg)

    def _move_ports(self, args: list[str]) -> list[str]:
        named = {p["containerPort"]: p["name"] for p in self.container.get("ports", [])}
        out = []
        for a in args:
            m = re.fullmatch(r"(--[a-z-]+)=(\S*?):?(\d+)", a)
            if m and int(m[3]) in named:
                local = free_port()
                self.ports[named[int(m[3])]] = local
                host = "127.0.0.1:" if m[2] or ":" in a.split("=", 1)[1] else ""
                a = f"{m[1]}={host}{local}"
            out.append(a)
        return out

    def token(self) -> str:
        """The pod's ServiceAccount token, bound to the pod (one TokenRequest, kept)."""
        if self._token is None:
            self._token = self._request_token()
        return self._token

    def _request_token(self) -> str:
        core = client.CoreV1Api(self.api)
        meta = self.pod["metadata"]
        tr = core.create_namespaced_service_account_token(
            self.pod["spec"]["serviceAccountName"],
            meta["namespace"],
            {
                "spec": {
                    "audiences": [],
                    "expirationSeconds": 3600,
                    "boundObjectRef": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta["name"],
                        "uid": meta["uid"],
                    },
                }
            },
        )
        return tr.status.token

    def _kubeconfig(self) -> Path:
        kc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "suite",
                    "cluster": {
                        "server": self.plane.server,
                        "certificate-authority": str(self.plane.cert_dir / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": "pod", "user": {"token": self.token()}}],
            "contexts": [{"name": "suite", "context": {"cluster": "suite", "user": "pod"}}],
            "current-context": "suite",
        }
        path = self.home / "kubeconfig"
        path.write_text(json.dumps(kc))
        return path
