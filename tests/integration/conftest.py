"""The integration tests drive the controller against a real control plane (tests/cluster) with
simulated kubelets and NVIDIA stand-ins (tests/nvidia); see world.py."""

from tests.cluster.fixtures import control_plane, kubelets, pytest_runtest_makereport  # noqa: F401
from tests.faultproxy.fixtures import fault_proxy  # noqa: F401,E402
from tests.integration.world import installed, kube  # noqa: F401
