#!/usr/bin/env bash
# Install gpupool with its dev extras into .venv, build (or find cached) the real Kubernetes
# control plane the integration tests run against, and run the whole test suite.
# Used by the README quick start and by .ci/run; needs python3 (>= 3.11), Go (>= 1.26, for the
# control plane: tests/cluster/README.md) and network to PyPI and the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
.venv/bin/ruff check .
.venv/bin/ruff format --check reconciler tests bench scripts
.venv/bin/lint-imports
# kube-apiserver, kube-scheduler, kube-controller-manager and etcd from the Kubernetes Go modules,
# cached outside the repository by version: minutes on a fresh machine (docs/development.md,
# "How long it takes", gives the measured times and their conditions), then
# found in well under a second. Built here, not inside a test fixture, so the time shows.
started=$(date +%s)
echo "control plane: $(bash scripts/build-control-plane.sh) ($(( $(date +%s) - started ))s)"
# NVIDIA's config parsers (tests/nvidia/nvparse, Go), cached the same way; tests/nvidia/test_nvparse.py.
started=$(date +%s)
echo "nvparse: $(bash scripts/build-nvparse.sh) ($(( $(date +%s) - started ))s)"
# KEDA's own operator and metrics server (tests/neighbours/keda, Go), cached the same way; long on a
# fresh machine (KEDA links every scaler: docs/development.md). GPUPOOL_SKIP_KEDA=1 skips it and
# tests/integration/test_keda.py.
if [ -z "${GPUPOOL_SKIP_KEDA:-}" ]; then
  started=$(date +%s)
  echo "keda: $(bash scripts/build-keda.sh) ($(( $(date +%s) - started ))s)"
fi
# helm (helm.sh/helm/v4 cmd/helm v4.3.2, from the Go module proxy) for the chart's tests
# (tests/deploy), cached the same way. GPUPOOL_SKIP_HELM=1 skips it (and those tests).
if [ -z "${GPUPOOL_SKIP_HELM:-}" ]; then
  started=$(date +%s)
  echo "helm: $(bash scripts/build-helm.sh) ($(( $(date +%s) - started ))s)"
fi
# The simulated NVML library (tests/nvidia/nvmlsim, C, seconds) that real pynvml and NVIDIA's
# device plugin load as libnvidia-ml.so.1; tests/nvidia/test_nvmlsim.py.
started=$(date +%s)
echo "nvmlsim: $(bash scripts/build-nvmlsim.sh) ($(( $(date +%s) - started ))s)"
# NVIDIA's nvidia-device-plugin v0.19.3 and kubeletsim (tests/nvidia/devplugin, Go), cached the
# same way; the tests run the plugin on every simulated node without MIG cards.
started=$(date +%s)
echo "device plugin: $(bash scripts/build-devplugin.sh) ($(( $(date +%s) - started ))s)"
# Kueue's manager (sigs.k8s.io/kueue cmd/kueue, tests/neighbours/kueue), cached the same way;
# tests/integration/test_kueue_manager.py runs it.
started=$(date +%s)
echo "kueue: $(bash scripts/build-kueue.sh) ($(( $(date +%s) - started ))s)"
# Prometheus for the signal tests: Debian's package, downloaded and unpacked (not installed) into
# the same cache; seconds the first time, then found at once. GPUPOOL_SKIP_PROMETHEUS=1 skips it.
if [ -z "${GPUPOOL_SKIP_PROMETHEUS:-}" ]; then
  started=$(date +%s)
  echo "prometheus: $(bash scripts/fetch-prometheus.sh) ($(( $(date +%s) - started ))s)"
fi
# Kueue's and KEDA's CRDs for the integration tests, from their published Go modules (into Go's
# module cache, outside the repository; the versions are pinned in tests/integration/crds.py).
started=$(date +%s)
modules=$(.venv/bin/python -c 'from tests.integration.crds import PINNED; print(*PINNED)')
for m in $modules; do bash scripts/fetch-crds.sh "$m" . >/dev/null; done
echo "CRD modules: $modules ($(( $(date +%s) - started ))s)"
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
# pytest exits 5 when it collected no tests: that is a failure of the suite, not a pass.
if [ "$rc" -eq 5 ]; then
  echo "no tests were collected" >&2
  exit 1
fi
exit "$rc"
