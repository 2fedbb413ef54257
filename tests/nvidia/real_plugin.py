"""NVIDIA's own nvidia-device-plugin (k8s-device-plugin v0.19.3, cmd/nvidia-device-plugin, built
from the Go module proxy by scripts/build-devplugin.sh) on a simulated node without MIG.

What runs, in one private mount namespace per plugin (`unshare -m`, or `unshare -rm` when not
root), with a scratch directory bind-mounted over /var/lib because the plugin's socket
directory /var/lib/kubelet/device-plugins is hard-coded (the host's /var/lib is never written):

* kubeletsim (tests/nvidia/devplugin/kubeletsim): the kubelet's side of the device-plugin API
  (Registration v1beta1 on kubelet.sock; ListAndWatch, Allocate, GetPreferredAllocation), which
  reports in JSON lines;
* its child, the real plugin, with `--config-file` (the file the config-manager selected), the
  GPU operator's environment, and NVML from the simulated library (tests/nvidia/nvmlsim) found
  under `--driver-root`/`--container-driver-root` as NVIDIA's `tryResolveLibrary` looks for it.

MPS: the plugin checks its MPS daemon with the driver's `nvidia-cuda-mps-control` binary
(cmd/mps-control-daemon/mps/daemon.go `AssertHealthy`), which is part of the closed driver and
needs a GPU. `mps_daemon=True` puts a stand-in of that one client on the plugin's PATH that
answers the health query; the decision whether NVIDIA's MPS control daemon would be up (its
per-card client limit) is the caller's (device_plugin.py `node_refuses`). Everything else the
plugin does with MPS (validateFlags, refusing MIG devices, the Allocate answer) is its own.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.nvidia.nvmlsim import ENV_VAR, library_dir, write_devices

ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = ROOT / "scripts" / "build-devplugin.sh"
SKIP_ENV = "GPUPOOL_SKIP_DEVPLUGIN"
PLUGIN_FLAGS = ["--device-discovery-strategy=nvml", "--fail-on-init-error=true"]

MPS_CONTROL_STANDIN = """#!/bin/sh
# Stand-in for the driver's nvidia-cuda-mps-control client (tests/nvidia/real_plugin.py): the
# device plugin asks the MPS daemon for its default active thread percentage.
read -r command
case "$command" in
  get_default_active_thread_percentage) echo 100.0 ;;
  *) echo "unsupported in the stand-in: $command" >&2; exit 1 ;;
esac
"""


class PluginUnavailable(Exception):
    """The real plugin cannot run on this machine (no build, no mount namespace)."""


@functools.cache
def _build() -> tuple[int, str, str]:
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


@functools.cache
def _unshare() -> tuple[str, ...] | None:
    """The unshare command line that gives a private mount namespace here, or None."""
    if not shutil.which("unshare"):
        return None
    for cmd in (("unshare", "-m", "--propagation", "private"), ("unshare", "-rm")):
        probe = subprocess.run(
            [*cmd, "sh", "-c", "mount -t tmpfs none /mnt 2>/dev/null || mount --bind / /mnt"],
            capture_output=True,
        )
        if probe.returncode == 0:
            return cmd
    return None


def availability() -> str | None:
    """Why the real plugin cannot run here (None: it can)."""
    if _unshare() is None:
        return "no private mount namespace here (unshare -m and unshare -rm both fail)"
    rc, _, err = _build()
    if rc == 3:
        return f"nvidia-device-plugin cannot be built: {err.strip()}"
    if rc != 0:
        return f"scripts/build-devplugin.sh failed ({rc}):\n{err[-4000:]}"
    return None


def require() -> None:
    """Fail the calling test (skip with GPUPOOL_SKIP_DEVPLUGIN=1) when the plugin cannot run."""
    why = availability()
    if why is None:
        return
    if os.environ.get(SKIP_ENV):
        pytest.skip(f"{why} ({SKIP_ENV} is set)")
    pytest.fail(f"{why}; set {SKIP_ENV}=1 to skip the tests that run NVIDIA's device plugin")


def in_use() -> bool:
    """Whether the integration world's nodes without MIG cards are served by the real plugin."""
    return wanted() and availability() is None


def require_in_world() -> None:
    """For an integration test about the real plugin: skip under GPUPOOL_DEVICE_PLUGIN=standin,
    else as `require()`."""
    if not wanted():
        pytest.skip("GPUPOOL_DEVICE_PLUGIN=standin: the world runs the Python stand-in")
    require()


def usable() -> bool:
    """For the integration world (device_plugin.py): True when the real plugin can run here;
    False, so that the stand-in serves, when it cannot and GPUPOOL_SKIP_DEVPLUGIN=1 says to go
    on without it (skipping every integration test instead would test less); otherwise the
    calling test fails with the reason."""
    why = availability()
    if why is None:
        return True
    if os.environ.get(SKIP_ENV):
        return False
    pytest.fail(f"{why}; set {SKIP_ENV}=1 to use the Python stand-in instead")


def binaries() -> Path:
    rc, out, err = _build()
    if rc != 0:
        raise PluginUnavailable(err.strip())
    return Path(out.strip().splitlines()[-1])


_LIVE: set[RealDevicePlugin] = set()


@atexit.register
def _stop_all() -> None:
    for plugin in list(_LIVE):
        plugin.stop()


def wanted() -> bool:
    """Whether device_plugin.py runs NVIDIA's plugin on nodes without MIG cards (the default);
    GPUPOOL_DEVICE_PLUGIN=standin keeps the Python stand-in everywhere."""
    return os.environ.get("GPUPOOL_DEVICE_PLUGIN", "real") != "standin"


class RealDevicePlugin:
    """One run of NVIDIA's plugin with `config` on the GPUs `devices` (nvmlsim JSON)."""

    def __init__(
        self,
        workdir: Path,
        devices: list[dict[str, Any]],
        config: str,
        env: dict[str, str] | None = None,
        mps_daemon: bool = False,
    ):
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.devices_file = write_devices(workdir / "gpus.json", devices)
        (workdir / "config.yaml").write_text(config)
        self.env = dict(env or {})
        self.mps_daemon = mps_daemon
        self.events: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._seq = 0
        self.proc: subprocess.Popen[str] | None = None

    # ------------------------------------------------------------------ process
    def _driver_root(self) -> Path:
        root = self.workdir / "driver-root"
        (root / "usr" / "lib64").mkdir(parents=True, exist_ok=True)
        link = root / "usr" / "lib64" / "libnvidia-ml.so.1"
        link.unlink(missing_ok=True)
        link.symlink_to(library_dir() / "libnvidia-ml.so.1")
        return root

    def start(self) -> RealDevicePlugin:
        unshare = _unshare()
        if unshare is None:
            raise PluginUnavailable("no private mount namespace")
        bins = binaries()
        root = self._driver_root()
        varlib = self.workdir / "var-lib"
        varlib.mkdir(exist_ok=True)
        path = os.environ.get("PATH", "/usr/bin:/bin")
        if self.mps_daemon:
            mps_bin = self.workdir / "mps-bin"
            mps_bin.mkdir(exist_ok=True)
            ctl = mps_bin / "nvidia-cuda-mps-control"
            ctl.write_text(MPS_CONTROL_STANDIN)
            ctl.chmod(0o755)
            path = f"{mps_bin}:{path}"
        env = {
            "PATH": path,
            "HOME": str(self.workdir),
            ENV_VAR: str(self.devices_file),
            "NVIDIA_DRIVER_ROOT": str(root),
            "CONTAINER_DRIVER_ROOT": str(root),
            **self.env,
        }
        plugin = [str(bins / "nvidia-device-plugin"), *PLUGIN_FLAGS]
        plugin.append(f"--config-file={self.workdir / 'config.yaml'}")
        script = 'mount --bind "$1" /var/lib && shift && exec "$@"'
        cmd = [*unshare, "sh", "-c", script, "sh", str(varlib), str(bins / "kubeletsim")]
        self.log_path = self.workdir / "plugin.log"
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [*cmd, "--", *plugin],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env=env,
                start_new_session=True,
            )
        _LIVE.add(self)
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line)
                with self._cond:
                    self.events.append(event)
                    self._cond.notify_all()
        with self._cond:
            self.events.append({"event": "kubeletsim-exit"})
            self._cond.notify_all()

    def stop(self) -> None:
        _LIVE.discard(self)
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def __enter__(self) -> RealDevicePlugin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path.exists() else ""

    # ------------------------------------------------------------------ what it said
    def _wait(self, what: str, match, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for e in self.events:
                    if match(e):
                        return e
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{what}: not seen in {timeout}s\n{self.log()[-4000:]}")
                self._cond.wait(left)

    def outcome(self, timeout: float = 60) -> dict[str, Any]:
        """The first ListAndWatch answer, or the plugin's exit (it refused to start)."""
        return self._wait(
            "the plugin's devices or its exit",
            lambda e: e["event"] in ("devices", "plugin-exit", "kubeletsim-exit"),
            timeout,
        )

    def settle(self, timeout: float = 60) -> str | None:
        """None once the plugin advertises; else why it does not: its exit (a config or flag
        it refused) or a failed start it would retry every 30 s (e.g. no MPS daemon)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._cond:
                seen = {e["event"] for e in self.events}
            if "devices" in seen:
                return None
            if seen & {"plugin-exit", "kubeletsim-exit"}:
                return self.exit_reason()
            failed = [ln for ln in self.log().splitlines() if "Failed to start plugin" in ln]
            if failed:
                return failed[0]
            time.sleep(0.1)
        raise AssertionError(
            f"the device plugin neither advertised nor failed in {timeout}s\n{self.log()[-4000:]}"
        )

    def wait_log(self, text: str, timeout: float = 60) -> str:
        """The first line of the plugin's log containing `text` (waits for it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.log().splitlines():
                if text in line:
                    return line
            time.sleep(0.2)
        raise AssertionError(
            f"{text!r} not in the plugin's log in {timeout}s\n{self.log()[-4000:]}"
        )

    def exit_reason(self) -> str:
        """The plugin's last error line (its own words) after it exited."""
        lines = [ln for ln in self.log().splitlines() if ln.startswith("E")]
        return lines[-1] if lines else self.log()[-500:]

    def advertised(self) -> dict[str, list[str]]:
        """Resource -> healthy device IDs, as the latest ListAndWatch answer of each says."""
        with self._cond:
            latest: dict[str, list[dict[str, Any]]] = {}
            for e in self.events:
                if e["event"] == "devices":
                    latest[e["resource"]] = e["devices"]
        return {
            r: [d["id"] for d in devs if d["health"] == "Healthy"] for r, devs in latest.items()
        }

    def registered(self) -> dict[str, dict[str, Any]]:
        with self._cond:
            return {e["resource"]: e for e in self.events if e["event"] == "registered"}

    def _call(self, request: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdin is not None
        with self._cond:
            self._seq += 1
            seq = self._seq
        self.proc.stdin.write(json.dumps({**request, "seq": seq}) + "\n")
        self.proc.stdin.flush()
        return self._wait(
            f"{request['op']} answer", lambda e: e.get("seq") == seq and "event" in e, timeout
        )

    def allocate(self, resource: str, ids: list[str]) -> dict[str, Any]:
        """The plugin's Allocate answer for one container: {envs, extra} or {error}."""
        return self._call({"op": "allocate", "resource": resource, "ids": ids})

    def preferred(
        self, resource: str, available: list[str], size: int, must: list[str] | None = None
    ) -> list[str]:
        out = self._call(
            {
                "op": "preferred",
                "resource": resource,
                "ids": available,
                "mustInclude": must or [],
                "size": size,
            }
        )
        assert not out.get("error"), out["error"]
        return out.get("ids") or []
