"""The status object on the real API server (issue 14): `observedGeneration` follows the
object's generation, and the trigger annotation `gpupool.io/reconcile-requested-at` is handled
(recorded in `lastHandledReconcileAt`) and wakes a running loop within seconds."""

from __future__ import annotations

import threading
import time

from reconciler.conventions import RECONCILE_REQUESTED_ANN

from .harness import NS, controller
from .scenario import base

ARGS = ("gpupool.io", "v1alpha1", NS, "reconcilerstatuses", "gpupool")


def status_object(kube) -> dict:
    return kube.custom.get_namespaced_custom_object(*ARGS)


def patch(kube, body: dict) -> None:
    kube.custom.patch_namespaced_custom_object(*ARGS, body)


def test_observed_generation_follows_the_spec(kube, tmp_path):
    """Each status write records the generation the cycle read, on the status and on every
    condition; a change of spec (suspend) shows as a newer generation observed next cycle."""
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    assert ctl.cycle().error is None
    obj = status_object(kube)
    gen = obj["metadata"]["generation"]
    assert obj["status"]["observedGeneration"] == gen
    assert {c["observedGeneration"] for c in obj["status"]["conditions"]} == {gen}
    patch(kube, {"spec": {"suspend": True}})
    assert status_object(kube)["metadata"]["generation"] == gen + 1
    clock.advance(60)
    ctl.cycle()
    obj = status_object(kube)
    assert obj["status"]["observedGeneration"] == gen + 1
    conds = {c["type"]: c for c in obj["status"]["conditions"]}
    assert conds["Ready"]["reason"] == "Suspended"
    assert {c["observedGeneration"] for c in conds.values()} == {gen + 1}


def test_the_requested_token_is_recorded_after_the_cycle(kube, tmp_path):
    clock = kube.clock
    base(kube, tmp_path, clock)
    ctl = controller(kube, tmp_path, clock)
    ctl.cycle()
    assert "lastHandledReconcileAt" not in status_object(kube)["status"]
    patch(kube, {"metadata": {"annotations": {RECONCILE_REQUESTED_ANN: "token-1"}}})
    assert ctl.status.read().requested
    clock.advance(60)
    assert ctl.cycle().error is None
    assert status_object(kube)["status"]["lastHandledReconcileAt"] == "token-1"
    assert not ctl.status.read().requested


def test_the_annotation_wakes_the_running_loop(kube, tmp_path):
    """The loop runs with a 10-minute interval: only the trigger annotation can get a second
    cycle (and its token recorded) within seconds."""
    base(kube, tmp_path, kube.clock)
    ctl = controller(kube, tmp_path, kube.clock, wake_gap_seconds=0.5, trigger_poll_seconds=0.5)
    stop = threading.Event()
    kube.cleanup(stop.set)
    threading.Thread(target=ctl.run, args=(stop, 600.0), daemon=True).start()
    deadline = time.monotonic() + 60
    while ctl.last_ok is None:
        assert time.monotonic() < deadline, "the loop's first cycle did not finish"
        time.sleep(0.1)
    time.sleep(1.0)
    patch(kube, {"metadata": {"annotations": {RECONCILE_REQUESTED_ANN: "now-please"}}})
    deadline = time.monotonic() + 20
    while status_object(kube)["status"].get("lastHandledReconcileAt") != "now-please":
        assert time.monotonic() < deadline, "the annotation did not wake the loop in 20 s"
        time.sleep(0.2)
