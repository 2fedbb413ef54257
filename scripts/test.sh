#!/usr/bin/env bash
# Install gpupool with its dev extras into .venv and run the whole test suite.
# Used by the README quick start and by .ci/run; needs only python3 (>= 3.11) and network to PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
.venv/bin/ruff check .
.venv/bin/lint-imports
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
