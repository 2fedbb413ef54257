"""A stand-in for NVIDIA's mig-manager (GPU operator) that behaves like the real one.

Read in NVIDIA/mig-parted (commit bd7160f4):
* cmd/nvidia-mig-manager/main.go, ContinuouslySyncMigConfigChanges: an informer on the node;
  AddFunc takes the label's value, UpdateFunc acts only when `nvidia.com/mig.config` CHANGED.
  The main loop runs a reconfiguration per value it is handed and, on an error, logs it and
  waits for the next change: a `failed` state stays until the label changes again.
* pkg/mig/reconfigure/reconfigure.go, Run: validate the selected config against the mounted
  config file (`nvidia-mig-parted assert --valid-config`) -> `failed` if it is not there;
  already applied -> `success`; else `pending`, stop the GPU clients, apply, restart them,
  `success`; any error on the way -> `failed`.
* cmd/nvidia-mig-parted/apply/mode.go: MIG mode changes left pending by the driver are applied
  by resetting ALL GPUs (util.ResetAllGPUs), which needs every GPU of the node idle; on Hopper
  the mode change applies per card (no pending reset; ../shared/notes/nvidia-stack.md).
* The config file is the operator's ConfigMap mounted as a volume: see mounted.py. The pod does
  not start until that ConfigMap exists.
* Format (api/spec/v1): `version: v1`, `mig-configs: {NAME: [{devices: [i] | all,
  mig-enabled: bool, mig-devices: {profile: count}}]}`; cards not listed are left alone.

After a successful change the node's GPU clients restart; gpupool's node agent then republishes
the node (`publish`, the real agent code over the node's NVML).
"""

from __future__ import annotations

from collections.abc import Callable

import pynvml
import yaml
from kubernetes import client

from reconciler.conventions import MIG_CONFIG_LABEL, MIG_STATE_LABEL
from tests.nvidia.gpunode import SimulatedGpuNode
from tests.nvidia.mounted import MountedConfigMap

CONFIG_KEY = "config.yaml"
MERGE = "application/merge-patch+json"


class MigManager:
    def __init__(
        self,
        api_client,
        gpus: SimulatedGpuNode,
        mounted: MountedConfigMap,
        publish: Callable[[], None] = lambda: None,
    ):
        self.core = client.CoreV1Api(api_client)
        self.gpus, self.mounted, self.publish = gpus, mounted, publish
        self.seen: str | None = None  # the label value the informer last handed over
        self.queued: str | None = None
        self.phase = ""  # "" | "pending": a run in progress
        self.runs: list[tuple[str, str]] = []  # (config, outcome) of every run, for tests

    def _label(self, key: str, value: str | None) -> None:
        self.core.patch_node(
            self.gpus.name, {"metadata": {"labels": {key: value}}}, _content_type=MERGE
        )

    def step(self) -> str | None:
        """One tick: notice a label change; advance a run by one phase. Returns the state
        label it wrote, or None."""
        files = self.mounted.view()
        if files is None:
            return None  # the pod cannot start without its ConfigMap
        value = (self.core.read_node(self.gpus.name).metadata.labels or {}).get(MIG_CONFIG_LABEL)
        if value != self.seen:
            self.seen = value
            if value:
                self.queued, self.phase = value, ""
        if not self.queued:
            return None
        name = self.queued
        if self.phase == "":
            entries = self._entries(files, name)
            if entries is None:
                return self._finish(name, "failed")
            if self._applied(entries):
                return self._finish(name, "success")
            self.phase = "pending"
            self._label(MIG_STATE_LABEL, "pending")
            return "pending"
        entries = self._entries(files, name)
        if entries is None:  # the file changed under a run: validation fails the same way
            return self._finish(name, "failed")
        try:
            self._apply(entries)
        except pynvml.NVMLError:
            return self._finish(name, "failed")
        self.publish()
        return self._finish(name, "success")

    def _finish(self, name: str, outcome: str) -> str:
        self.queued, self.phase = None, ""
        self.runs.append((name, outcome))
        self._label(MIG_STATE_LABEL, outcome)
        return outcome

    def _entries(self, files: dict[str, str], name: str) -> list[dict] | None:
        try:
            doc = yaml.safe_load(files.get(CONFIG_KEY) or "") or {}
        except yaml.YAMLError:
            return None
        if doc.get("version") != "v1":
            return None
        entries = (doc.get("mig-configs") or {}).get(name)
        return entries if isinstance(entries, list) else None

    def _wanted(self, entries: list[dict]) -> dict[int, tuple[bool, list[str]]]:
        out: dict[int, tuple[bool, list[str]]] = {}
        for e in entries:
            devices = (
                range(self.gpus.count) if e.get("devices") == "all" else e.get("devices") or []
            )
            profiles = [
                p for p, k in sorted((e.get("mig-devices") or {}).items()) for _ in range(int(k))
            ]
            for i in devices:
                out[int(i)] = (bool(e.get("mig-enabled")), profiles if e.get("mig-enabled") else [])
        return out

    def _applied(self, entries: list[dict]) -> bool:
        for i, (enabled, profiles) in self._wanted(entries).items():
            have = sorted(p for p, _ in self.gpus.layout(i))
            if (i in self.gpus.mig_cards()) != enabled or have != sorted(profiles):
                return False
        return True

    def _apply(self, entries: list[dict]) -> None:
        wanted = self._wanted(entries)
        mode_change = [i for i, (on, _) in wanted.items() if (i in self.gpus.mig_cards()) != on]
        if mode_change and self.gpus.family == "ampere" and self.gpus.busy_cards():
            # mode.go resets every GPU of the node to apply pending mode changes
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        for i, (on, profiles) in sorted(wanted.items()):
            if (i in self.gpus.mig_cards()) == on and sorted(
                p for p, _ in self.gpus.layout(i)
            ) == sorted(profiles):
                continue
            self.gpus.set_mig(i, on, profiles)
