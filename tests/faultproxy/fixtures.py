"""`fault_proxy` (function scope): a started FaultProxy in front of the session's control plane,
authenticating as the admin when the client sends no Authorization header. Other test
directories import it (with `control_plane`) in their conftest.py, as this directory's does."""

from __future__ import annotations

import pytest

from tests.faultproxy.proxy import FaultProxy


@pytest.fixture
def fault_proxy(control_plane):
    pki = control_plane.cert_dir
    with FaultProxy(
        control_plane.server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key"
    ) as proxy:
        yield proxy
