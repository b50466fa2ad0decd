#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv: CPU torch first, then the project.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
. .venv/bin/activate
python -m pip install -q --upgrade pip 2>&1 | grep -v "^WARNING: Location" || true
# torch 2.13.0 is a CPU build on this machine's disk: install it first so nothing pulls a multi-GB CUDA build.
python -m pip install -q torch==2.13.0 2>&1 | grep -v "^WARNING: Location" || true
python -m pip install -q -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
python -c "import sweeps, trainables, ray, torch, mlflow" 
