"""The integration tests drive the controller against the `kube` fixture: the fake API server
over HTTP by default, a real cluster when GPUPOOL_TEST_KUBECONFIG is set."""

from tests.kubeapi.fixtures import kube, kube_server  # noqa: F401
