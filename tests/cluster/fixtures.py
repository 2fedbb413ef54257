"""Fixtures for tests against a real control plane (see README.md here). Other test
directories use them by importing from this module, as tests/cluster/conftest.py does.

`control_plane` (session): a started ControlPlane; skips when the kcp binary is not built and no Go
toolchain can build it. `kubelets` (session): SimulatedKubelets on that control plane.
On a failed test that used `control_plane`, the tail of each component's log is attached to the
report.
"""

from __future__ import annotations

import pytest

from tests.cluster.controlplane import BuildUnavailable, ControlPlane, build_binary
from tests.cluster.kubelets import SimulatedKubelets


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory):
    try:
        binary = build_binary()
    except BuildUnavailable as e:
        pytest.skip(f"no kcp control-plane binary and no Go toolchain to build it: {e}")
    cp = ControlPlane(binary, tmp_path_factory.mktemp("control-plane"))
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def kubelets(control_plane):
    k = SimulatedKubelets(control_plane.api_client)
    try:
        yield k
    finally:
        k.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and "control_plane" in getattr(item, "fixturenames", ()):
        cp = item.funcargs.get("control_plane") if hasattr(item, "funcargs") else None
        if cp is not None:
            rep.sections.append(
                (f"control plane logs (all in {cp.log_dir})", cp.logs_tail(lines=30))
            )
