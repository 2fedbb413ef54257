"""The controller cycles with the cyclic garbage collector paused (reconciler/loop/collector.py)
and leaves it as it found it, also when the cycle raises; once started it freezes the heap
alive then, once."""

from __future__ import annotations

import gc

import pytest

from reconciler.loop.collector import freeze_heap, paused_collector


@pytest.mark.parametrize("enabled", [True, False])
def test_paused_then_restored(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with paused_collector():
            assert not gc.isenabled()
        assert gc.isenabled() is enabled
        with pytest.raises(RuntimeError), paused_collector():
            raise RuntimeError("a plan that fails")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def _controller(tmp_path):
    from kubernetes import client

    from reconciler.loop.controller import Controller
    from reconciler.loop.sources import DirectorySource

    (tmp_path / "pools").mkdir()
    return Controller(
        DirectorySource(tmp_path),
        client.ApiClient(client.Configuration(host="http://127.0.0.1:9")),
        namespace="gpupool-system",
        identity="t",
    )


def test_a_cycle_runs_with_the_collector_paused(tmp_path):
    ctl = _controller(tmp_path)
    seen = []

    def timed():
        seen.append(gc.isenabled())
        raise RuntimeError("a cycle that fails")

    ctl._timed_cycle = timed
    was = gc.isenabled()
    try:
        gc.enable()
        with pytest.raises(RuntimeError):
            ctl.cycle()
        assert seen == [False] and gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_started_freezes_the_heap_once(tmp_path, monkeypatch):
    import reconciler.loop.controller as controller

    ctl = _controller(tmp_path)
    frozen = []
    monkeypatch.setattr(controller, "freeze_heap", lambda: frozen.append(1))
    ctl.started()
    ctl.started()
    assert frozen == [1]


def test_freeze_heap_moves_what_is_alive_to_the_permanent_generation():
    before = gc.get_freeze_count()
    try:
        freeze_heap()
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()  # back to the collector: this test process goes on
