"""The controller plans with the cyclic garbage collector paused (reconciler/loop/collector.py)
and leaves it as it found it, also when the plan raises."""

from __future__ import annotations

import gc

import pytest

from reconciler.loop.collector import paused_collector


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
