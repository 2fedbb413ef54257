from tests.cluster.fixtures import (  # noqa: F401
    control_plane,
    kubelets,
    pytest_runtest_makereport,
)
