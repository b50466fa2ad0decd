#!/usr/bin/env bash
# Every test tier: fast, slow (real sweeps), browser; `gpu` tests skip themselves without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest "$@"
