"""A stand-in for NVIDIA's k8s-device-plugin with its config-manager sidecar, as deployed by
the GPU operator, that behaves like the real one.

Read in NVIDIA/k8s-device-plugin (commit 1b826acc6):
* cmd/config-manager/main.go: an informer on the node hands over `nvidia.com/device-plugin.config`
  on add and whenever it CHANGES; updateConfigName picks that name, or the default config when
  the label is empty, and fails with "specified config ... does not exist" when the mounted
  ConfigMap has no such key. The error ends the sidecar; the kubelet restarts it
  (CrashLoopBackOff) and the new process starts from the node's current label: the selection is
  retried until the mounted copy has the key (mounted.py: that takes a while).
* api/config/v1/replicas.go: `replicas` must be >= 2 ("number of replicas must be >= 2"); a
  `devices` list in sharing.timeSlicing.resources is ignored with "Customizing the 'devices'
  field ... is not yet supported ... Ignoring": sharing applies to every card of the resource
  on the node. With `renameByDefault: true` the replicas are advertised as
  `nvidia.com/gpu.shared` (and `nvidia.com/gpu` disappears from the node).
* api/config/v1/sharing.go: `sharing.mps` takes the same shape as `sharing.timeSlicing` and wins
  when both are there (`SharingStrategy`); internal/plugin/mps.go `getMPSOptions`: an MPS config
  on a node with any MIG device fails the plugin ("sharing using MPS is not supported for MIG
  devices"); cmd/mps-control-daemon/mps/device.go `assertReplicas`: more than 48 replicas per
  card (Volta and newer) is an invalid MPS configuration, and the plugin, which waits for the
  MPS daemon (`waitForDaemon`), does not come up.
* cmd/nvidia-device-plugin/main.go (v0.19.3) `validateFlags`, run at start-up on the config as
  api/config/v1/config.go `NewConfig` finalises it (command line, then environment, then the
  file): an MPS config with the mixed MIG strategy is refused ("using --mig-strategy=mixed is
  not supported with MPS"), so is one without an MPS root ("using MPS requires --mps-root to be
  specified"). The GPU operator's DaemonSet sets MPS_ROOT=/run/nvidia/mps
  (assets/state-device-plugin/0500_daemonset.yaml) and, when its ClusterPolicy names a
  `mig.strategy`, MIG_STRATEGY, which then overrides every node's file
  (controllers/object_controls.go `applyMIGConfiguration`); gpupool's install leaves it unset.
  The strategy defaults to `none` (the flag's default).
* A config the plugin rejects stops it from starting (the GPU operator runs it with
  FAIL_ON_INIT_ERROR=true, api/config/v1/flags.go `failOnInitError`): the node then advertises
  none of its GPU resources.
* MIG devices are separate resources (`nvidia.com/mig-<profile>`, the operator's mixed strategy),
  never time-sliced by a `nvidia.com/gpu` entry.

What the plugin advertises reaches the Node's capacity/allocatable through the kubelet:
`set_resources` (the simulated kubelet) writes it.

Since issue 30, on a node with no card in MIG mode the config the config-manager selected is
given to NVIDIA's own nvidia-device-plugin v0.19.3 (tests/nvidia/real_plugin.py): it decides
whether it starts and what it advertises, in its own words. This stand-in's `parse_sharing` and
`node_refuses` then only decide whether the MPS control daemon (closed driver code) would be up.
The stand-in alone serves what the real plugin cannot do here: MIG resources (the simulated NVML
library has no MIG), and everywhere when GPUPOOL_DEVICE_PLUGIN=standin, or GPUPOOL_SKIP_DEVPLUGIN=1
on a machine where the real plugin cannot run (no Go build, no mount namespace).
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml
from kubernetes import client

from reconciler.conventions import DEVICE_PLUGIN_CONFIG_LABEL, GPU_RESOURCE
from tests.nvidia import real_plugin
from tests.nvidia.gpunode import Sharing, SimulatedGpuNode
from tests.nvidia.mounted import MountedConfigMap


class ConfigError(Exception):
    pass


MPS_MAX_REPLICAS = 48  # per card, Volta and newer (mps/device.go `maxClients`)
OPERATOR_ENV = {"MPS_ROOT": "/run/nvidia/mps"}
"""The plugin container's environment as the GPU operator sets it with gpupool's Helm values
(deploy/gpu-operator/values.yaml leaves `mig.strategy` unset, so no MIG_STRATEGY)."""


def parse_sharing(text: str, env: dict[str, str] | None = None) -> Sharing | None:
    """The sharing (time-slicing or MPS) the plugin would apply for `nvidia.com/gpu`; raises
    ConfigError where the plugin refuses the config whatever the node. `env`: the plugin's
    environment (default: the GPU operator's, OPERATOR_ENV). tests/nvidia/test_nvparse.py
    checks that NVIDIA's own parser agrees on generated configs."""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"unparsable config: {exc}") from None
    if not isinstance(doc, dict) or doc.get("version", "v1") != "v1":  # missing: v1
        raise ConfigError("unknown config version")
    sharing = doc.get("sharing") or {}
    found: Sharing | None = None
    for key, strategy in (("timeSlicing", "time-slicing"), ("mps", "mps")):
        if key not in sharing or (key == "mps" and sharing[key] is None):
            continue
        section = sharing[key] or {}
        resources = section.get("resources")  # ReplicatedResources.UnmarshalJSON
        if not resources:
            raise ConfigError("no resources specified")
        for r in resources:
            name, replicas = _replicated_resource(r)
            if name == GPU_RESOURCE:  # `devices` ignored: every card
                found = Sharing(replicas, bool(section.get("renameByDefault")), strategy)
    flags = doc.get("flags") or {}
    env = OPERATOR_ENV if env is None else env
    strategy = env.get("MIG_STRATEGY") or flags.get("migStrategy") or "none"
    if strategy not in ("none", "single", "mixed"):
        raise ConfigError(f"unknown MIG strategy: {strategy}")
    if found is not None and found.strategy == "mps":
        _check_mps_flags(flags, env)
    return found  # MPS, read last, wins when both are there


_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _resource_name(n) -> str:
    """api/config/v1/resources.go `NewResourceName`: `nvidia.com/` prefixed when missing, at
    most 63 characters, the name a DNS subdomain."""
    if not isinstance(n, str):
        raise ConfigError(f"resource name {n!r} is not a string")
    full = n if n.startswith("nvidia.com/") else f"nvidia.com/{n}"
    if len(full) > 63 or not _DNS_SUBDOMAIN.fullmatch(full.split("/", 1)[1]):
        raise ConfigError(f"incorrect format for resource name '{full}'")
    return full


def _replicated_resource(r) -> tuple[str, int]:
    """replicas.go `ReplicatedResource.UnmarshalJSON` and `ReplicatedDevices.UnmarshalJSON`."""
    if not isinstance(r, dict) or "name" not in r:
        raise ConfigError("no resource name specified")
    name = _resource_name(r["name"])
    devices = r.get("devices", "all")
    ok_int = isinstance(devices, int) and not isinstance(devices, bool) and devices > 0
    ok_list = isinstance(devices, list) and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices
    )  # (strings: GPU/MIG indices and UUIDs are accepted too; gpupool writes none)
    if devices != "all" and not ok_int and not ok_list:
        raise ConfigError(f"unsupported devices spec: {devices!r}")
    replicas = r.get("replicas")
    if "replicas" not in r:
        raise ConfigError("no replicas specified")
    if not isinstance(replicas, int) or isinstance(replicas, bool):
        raise ConfigError(f"replicas {replicas!r} is not an integer")
    if replicas < 2:  # every resource is checked
        raise ConfigError("number of replicas must be >= 2")
    if "rename" in r:
        _resource_name(r["rename"])
    return name, replicas


def _check_mps_flags(flags: dict, env: dict[str, str]) -> None:
    """main.go `validateFlags` on an MPS config; the environment wins over the file."""
    strategy = env.get("MIG_STRATEGY") or flags.get("migStrategy") or "none"
    if strategy == "mixed":
        raise ConfigError("using --mig-strategy=mixed is not supported with MPS")
    if not (env.get("MPS_ROOT") or flags.get("mpsRoot")):
        raise ConfigError("using MPS requires --mps-root to be specified")


def node_refuses(sharing: Sharing | None, gpus: SimulatedGpuNode) -> str | None:
    """Why the plugin does not come up with `sharing` on this node (None: it does)."""
    if sharing is None or sharing.strategy != "mps":
        return None
    if gpus.mig_cards():
        return "sharing using MPS is not supported for MIG devices"
    if sharing.replicas > MPS_MAX_REPLICAS:
        return "invalid MPS configuration: maximum allowed replicas exceeded"
    return None


_BY_NODE: dict[str, DevicePlugin] = {}


class DevicePlugin:
    def __init__(
        self,
        api_client,
        gpus: SimulatedGpuNode,
        mounted: MountedConfigMap,
        set_resources: Callable[[dict[str, str]], None],
        default_config: str = "default",
        env: dict[str, str] | None = None,
    ):
        self.core = client.CoreV1Api(api_client)
        self.gpus, self.mounted, self.set_resources = gpus, mounted, set_resources
        self.default_config = default_config
        self.env = OPERATOR_ENV if env is None else env  # the plugin container's environment
        self.applied: str | None = None  # the config the running plugin uses
        self.crashes = 0  # config-manager restarts (a config it could not find)
        self.rejected = 0  # plugin start failures (a config it refused)
        self.refusals: list[str] = []  # the real plugin's reasons, in its words
        self._runs = 0
        self._workdir = Path(tempfile.mkdtemp(prefix=f"devplugin-{gpus.name}-"))
        atexit.register(shutil.rmtree, self._workdir, True)
        # A node name is unique within a world, and worlds come one after another: a new
        # plugin for a name ends the real plugin of the previous world's node of that name, so
        # a session holds one plugin (two processes, about 40 MB) per node name at most.
        previous = _BY_NODE.get(gpus.name)
        if previous is not None and previous is not self:
            previous._stop_real()
        _BY_NODE[gpus.name] = self

    def step(self) -> str | None:
        """Select and apply the config the node's label names; returns the name applied, or
        None when nothing changed."""
        files = self.mounted.view()
        if files is None:
            return None
        label = (self.core.read_node(self.gpus.name).metadata.labels or {}).get(
            DEVICE_PLUGIN_CONFIG_LABEL
        ) or ""
        name = label or self.default_config
        if name == self.applied:
            return None
        if name not in files:
            self.crashes += 1  # exits; restarted, it will look again next time
            return None
        self.applied = name
        self._start(files[name])
        return name

    def restart(self) -> None:
        """The plugin started again with the config it has (mig-manager restarts the GPU
        clients after a reconfiguration): a node that has MIG cards now may refuse it."""
        files = self.mounted.view() or {}
        if self.applied in files:
            self._start(files[self.applied])

    def _start(self, text: str) -> None:
        self._stop_real()
        if real_plugin.wanted() and not self.gpus.mig_cards() and real_plugin.usable():
            self._start_real(text)
            self.set_resources(self.gpus.advertised())
            return
        try:
            sharing = parse_sharing(text, self.env)
            refused = node_refuses(sharing, self.gpus)
            if refused:
                raise ConfigError(refused)
            self.gpus.sharing = sharing
            self.gpus.plugin_healthy = True
        except ConfigError:
            self.rejected += 1
            self.gpus.plugin_healthy = False
        self.set_resources(self.gpus.advertised())

    def _stop_real(self) -> None:
        if self.gpus.real_plugin is not None:
            self.gpus.real_plugin.stop()
            self.gpus.real_plugin = None

    def _start_real(self, text: str) -> None:
        """NVIDIA's plugin with the selected config on this node's cards."""
        try:
            sharing = parse_sharing(text, self.env)
        except ConfigError:
            sharing = None  # the real plugin says so in its own words
        daemon_up = (
            sharing is not None
            and sharing.strategy == "mps"
            and node_refuses(sharing, self.gpus) is None
        )
        self._runs += 1
        workdir = self._workdir / f"run-{self._runs}"
        plugin = real_plugin.RealDevicePlugin(
            workdir, self.gpus.nvml_devices(), text, env=self.env, mps_daemon=daemon_up
        ).start()
        why = plugin.settle()
        if why is None:
            self.gpus.sharing, self.gpus.plugin_healthy = sharing, True
            self.gpus.real_plugin = plugin
        else:
            plugin.stop()
            self.refusals.append(why)
            self.rejected += 1
            self.gpus.plugin_healthy = False
