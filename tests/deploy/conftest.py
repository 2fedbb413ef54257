"""The chart's tests (deploy/chart/gpupool) with the real `helm` (tests/deploy/helm.py); the
control-plane fixtures (`kube`, `installed`) come from tests/conftest.py."""
