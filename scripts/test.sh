#!/usr/bin/env bash
# Every test tier: the fast tier first (a fast failure is reported in a minute), then the rest (slow = real
# sweeps, browser = Chromium against a real MLflow UI, cluster = multi-node Ray on this machine); `gpu` tests
# skip themselves without CUDA. Each test has a time limit (pytest-timeout), so a hang fails one test.
# Extra arguments go to both pytest runs (e.g. -x, -k NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest -m "not slow" "$@"
.venv/bin/python -m pytest -m "slow" "$@"
