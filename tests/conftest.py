"""Fixtures shared across test folders, defined once here so that a session starts ONE real
control plane (tests/cluster) for every folder that uses it."""

from tests.cluster.fixtures import control_plane, kubelets, pytest_runtest_makereport  # noqa: F401
from tests.faultproxy.fixtures import fault_proxy  # noqa: F401
from tests.integration.world import installed, kube  # noqa: F401
from tests.prometheus.fixtures import prometheus, signals_exporter  # noqa: F401
