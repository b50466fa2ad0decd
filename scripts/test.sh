#!/usr/bin/env bash
# Every test tier that can run here: fast, slow (real sweeps), browser. GPU tests skip without CUDA.
set -euo pipefail
cd "$(dirname "$0")/.."
exec .venv/bin/python -m pytest -m "not gpu" "$@"
