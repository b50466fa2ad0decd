#!/usr/bin/env bash
# Every test tier: the fast tier first (a fast failure is reported in a minute), then the rest (slow = real
# sweeps, browser = Chromium against a real MLflow UI, cluster = multi-node Ray on this machine); `gpu` tests
# skip themselves without CUDA; with SWEEPS_CI=1 (.ci/run sets it) any other skip fails its test (tests/conftest.py).
# Each test has a time limit (pytest-timeout), so a hang fails one test.
# Extra arguments go to both pytest runs (e.g. -x, -k NAME).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each tier in two processes (SWEEPS_TEST_WORKERS=0 runs both in this process instead). The fast tier's tests
# are spread one by one; the slow tier's one test file each at a time (a file's module fixtures stay in one
# process), the longest files first (tests/conftest.py, LONGEST_FIRST): real sweeps spend much of their time
# waiting on process start-up, so two overlap well on 2 cores.
workers=${SWEEPS_TEST_WORKERS:-2}
# Each tier prints its slowest tests (the slow tier: all of them, for benchmarks/results/test_durations.txt, whose
# per-file sums order the next run: tests/conftest.py) and its wall and CPU seconds (pytest and the processes it
# waited for; Ray's daemons are not among them).
TIMEFORMAT="tier %R s wall, %U s user + %S s system CPU"
if [ "$workers" = "0" ]; then
  echo "fast tier:"; time .venv/bin/python -m pytest -m "not slow" --durations=30 "$@"
  echo "slow tier:"; time .venv/bin/python -m pytest -m "slow" --durations=0 "$@"
else
  echo "fast tier:"; time .venv/bin/python -m pytest -m "not slow" -n "$workers" --durations=30 "$@"
  echo "slow tier:"; time .venv/bin/python -m pytest -m "slow" -n "$workers" --dist loadfile --no-loadscope-reorder \
    --durations=0 "$@"
fi
