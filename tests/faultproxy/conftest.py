from tests.cluster.fixtures import control_plane, pytest_runtest_makereport  # noqa: F401
from tests.faultproxy.fixtures import fault_proxy  # noqa: F401
