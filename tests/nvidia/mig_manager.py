"""A stand-in for NVIDIA's mig-manager (GPU operator) that behaves like the real one.

Read in NVIDIA/mig-parted (commit bd7160f4):
* cmd/nvidia-mig-manager/main.go: `ContinuouslySyncMigConfigChanges` is an informer on the node:
  `AddFunc` hands over the label's value, `UpdateFunc` only when `nvidia.com/mig.config` CHANGED.
  `SyncableMigConfig.Set` stores the value and wakes the main loop only when it is not empty;
  `Get` returns at once when the value differs from the one last read, else it waits to be woken.
  The main loop (`start`) runs one reconfiguration per value `Get` returns and, on an error, logs
  it and calls `Get` again: a `failed` state stays until the label's value changes. A label
  removed while idle wakes nothing; one removed during a run is read after it (a run of "").
* pkg/mig/reconfigure/reconfigure.go `Run`: `nvidia-mig-parted assert --valid-config` of the
  selected config against the config FILE -> `failed` when it does not parse or lacks the name
  (mig_parted_spec.py); already applied (`assert`) -> `success`; else `pending`, stop the GPU
  clients, apply the mode change (`apply --mode-only`; its error is ignored without
  WITH_REBOOT), apply the config (`apply`), restart the GPU clients, `success`; an error on the
  way -> `failed` (`setState` restarts the GPU clients first).
* cmd/nvidia-mig-parted/apply/apply.go `ApplyMigConfigWithHooks`: the mode is applied only if a
  listed card's mode differs (`AssertMigMode`), then the devices if a listed card differs.
* cmd/nvidia-mig-parted/apply/mode.go `ApplyMigMode`: for EVERY card the config lists, in order:
  clear its MIG config if it is in MIG mode (`ClearMigConfig`: destroying instances with work in
  them fails), set the wanted mode; on Ampere a mode change is left pending and then
  `util.ResetAllGPUs()` resets every GPU of the node (`nvidia-smi -r` over all of them), which
  fails while any GPU of the node runs work (NVIDIA MIG User Guide, "Setting MIG mode on the
  A100/A30 requires a GPU reset"); on Hopper the mode takes effect on the card at once, refused
  while the card has work (hooks-minimal.yaml, for compute capability >= 9.0, has no
  pre-apply-mode hook: no reset to prepare). The walk stops at the first error, leaving the cards
  before it changed.
* cmd/nvidia-mig-parted/apply/config.go `ApplyMigConfig`: per listed card in MIG mode, skip it if
  its devices are as wanted, else replace them (`SetMigConfig`, refused while it has work); a
  card in the wrong mode fails the apply ("unable to apply MIG config with MIG mode disabled").
* The config file is the operator's ConfigMap mounted as a volume (NVIDIA/gpu-operator
  controllers/object_controls.go `TransformMIGManager`, CONFIG_FILE=/mig-parted-config/
  config.yaml, a non-optional ConfigMap volume in assets/state-mig-manager/0600_daemonset.yaml):
  see mounted.py. The pod does not start until that ConfigMap exists.
* Format (api/spec/v1): `version: v1`, `mig-configs: {NAME: [{devices: [i] | all,
  mig-enabled: bool, mig-devices: {profile: count}}]}`; cards not listed are left alone.

Not modelled: whether a reset also destroys the instances of MIG cards a config does not list
(gpupool lists every card when a mode change resets the node); WITH_REBOOT; a run that stops
early with `pending` (a GPU client that does not shut down in time).

After a run that stopped the GPU clients, they restart (success or failure); gpupool's node agent
then republishes the node (`publish`, the real agent code over the node's NVML).
"""

from __future__ import annotations

from collections.abc import Callable

import pynvml
from kubernetes import client

from reconciler.conventions import MIG_CONFIG_LABEL, MIG_STATE_LABEL
from reconciler.policy.catalog import default_catalog
from tests.nvidia.gpunode import SimulatedGpuNode
from tests.nvidia.mig_parted_spec import SpecError, select
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
        self.informer: str | None = None  # the label value the informer last saw
        self.current = ""  # SyncableMigConfig.current
        self.last_read = ""  # SyncableMigConfig.lastRead
        self.ready = False  # Get() returns at once (the value changed since it was last read)
        self.woken = False  # Get() was woken while waiting (Set of a non-empty value)
        self.running: str | None = None  # the value of the run in progress
        self.phase = ""  # "" | "pending"
        self.runs: list[tuple[str, str]] = []  # (config, outcome) of every run, for tests

    def _label(self, key: str, value: str | None) -> None:
        self.core.patch_node(
            self.gpus.name, {"metadata": {"labels": {key: value}}}, _content_type=MERGE
        )

    # ---------------------------------------------------------------- main.go's loop
    def _set(self, value: str) -> None:
        self.current = value
        if value and self.running is None:  # Broadcast wakes a waiting Get()
            self.woken = True

    def _get(self) -> str | None:
        if not (self.ready or self.woken):
            return None
        self.ready = self.woken = False
        self.last_read = self.current
        return self.last_read

    def _after_run(self) -> None:
        """The loop calls Get() again: it returns at once if the value moved on meanwhile."""
        self.running, self.phase = None, ""
        self.ready, self.woken = self.last_read != self.current, False

    def step(self) -> str | None:
        """One tick: the informer's view of the label; start or advance a run by one phase.
        Returns the state label it wrote, or None."""
        files = self.mounted.view()
        if files is None:
            return None  # the pod cannot start without its ConfigMap
        value = (self.core.read_node(self.gpus.name).metadata.labels or {}).get(
            MIG_CONFIG_LABEL, ""
        )
        if self.informer is None or value != self.informer:  # AddFunc, UpdateFunc on change
            self.informer = value
            self._set(value)
        if self.running is None:
            name = self._get()
            if name is None:
                return None
            self.running = name
            return self._start(files, name)
        return self._apply(files, self.running)

    # ---------------------------------------------------------------- reconfigure.go's Run
    def _start(self, files: dict[str, str], name: str) -> str:
        try:
            items = select(files.get(CONFIG_KEY) or "", name)
        except SpecError:
            return self._finish(name, "failed")
        if self._applied(self._wanted(items)):
            return self._finish(name, "success")
        self.phase = "pending"
        self._label(MIG_STATE_LABEL, "pending")
        return "pending"

    def _apply(self, files: dict[str, str], name: str) -> str:
        try:  # every nvidia-mig-parted call reads the file again
            wanted = self._wanted(select(files.get(CONFIG_KEY) or "", name))
            self._apply_mode(wanted)
            self._apply_devices(wanted)
        except (SpecError, pynvml.NVMLError):
            return self._finish(name, "failed")
        return self._finish(name, "success")

    def _finish(self, name: str, outcome: str) -> str:
        stopped_clients = self.phase == "pending"
        self.runs.append((name, outcome))
        self._after_run()
        if stopped_clients:  # restarted before the state is written, success or not
            self.publish()
        self._label(MIG_STATE_LABEL, outcome)
        return outcome

    # ---------------------------------------------------------------- mig-parted
    def _wanted(self, items: list[dict]) -> list[tuple[int, bool, list[str]]]:
        """(card, MIG on, profiles) for every card the config lists, in the order mig-parted
        walks them (`WalkSelectedMigConfigForEachGPU`: per item, per matching card)."""
        model = default_catalog().model(self.gpus.model)
        ids = {i.lower() for i in (model.pci_device_ids if model else ())}
        out: list[tuple[int, bool, list[str]]] = []
        for item in items:
            flt = item.get("device-filter")
            if flt is not None:
                want = {flt.lower()} if isinstance(flt, str) else {f.lower() for f in flt}
                if not ids & want:
                    continue
            devices = item["devices"]
            cards = range(self.gpus.count) if devices == "all" else devices
            profiles = [p for p, k in sorted(item["mig-devices"].items()) for _ in range(int(k))]
            for i in cards:
                if 0 <= i < self.gpus.count:
                    out.append((int(i), item["mig-enabled"], profiles))
        return out

    def _layout_is(self, i: int, profiles: list[str]) -> bool:
        return sorted(p for p, _ in self.gpus.layout(i)) == sorted(profiles)

    def _applied(self, wanted: list[tuple[int, bool, list[str]]]) -> bool:
        mig = self.gpus.mig_cards()
        return all(
            (i in mig) == on and (not on or self._layout_is(i, profiles))
            for i, on, profiles in wanted
        )

    def _apply_mode(self, wanted: list[tuple[int, bool, list[str]]]) -> None:
        mig = self.gpus.mig_cards()
        if all((i in mig) == on for i, on, _ in wanted):
            return  # AssertMigMode passes: no mode step
        pending: list[tuple[int, bool]] = []
        for i, on, _ in wanted:
            if i in self.gpus.mig_cards():
                self.gpus.clear_mig(i)  # IN_USE with work on it
            if (i in self.gpus.mig_cards()) == on:
                continue
            if self.gpus.family == "ampere":
                pending.append((i, on))  # takes effect at the reset
            else:
                self.gpus.set_mig_mode(i, on)  # IN_USE with work on the card
        if pending:
            if self.gpus.busy_cards():  # nvidia-smi -r over every GPU of the node
                raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
            for i, on in pending:
                self.gpus.set_mig_mode(i, on)

    def _apply_devices(self, wanted: list[tuple[int, bool, list[str]]]) -> None:
        for i, on, profiles in wanted:
            if (i in self.gpus.mig_cards()) != on:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # wrong mode
            if on and not self._layout_is(i, profiles):
                self.gpus.create_mig(i, profiles)  # IN_USE with work on the card
