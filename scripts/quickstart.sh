#!/usr/bin/env bash
# Install gpupool into .venv and run it on the bundled example (no cluster, no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e .
.venv/bin/gpupool validate pools policies
if .venv/bin/gpupool --help | grep -q ' plan '; then
  .venv/bin/gpupool plan pools policies --observed examples/observed.yaml || [ $? -eq 2 ]
fi
