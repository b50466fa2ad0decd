#!/usr/bin/env bash
# Runs every benchmark of issue 11 at the sizes recorded in benchmarks/RESULTS.md, one after another (they
# must not share the machine), writing each one's output to benchmarks/results/<name>.txt as well.
#
#   bash benchmarks/run_all.sh [name ...]     # names: cli report_scale decompose trial_overhead overhead
#                                             #        efficiency asha_economy mlflow_share scale
# About an hour on 2 idle cores for all of them.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=benchmarks/results
mkdir -p "$OUT"

run() {
  local name=$1; shift
  echo "=== $name: $* ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg))" | tee "$OUT/$name.txt"
  "$PY" "$@" 2>&1 | tee -a "$OUT/$name.txt"
}

ALL=(cli report_scale decompose trial_overhead overhead efficiency asha_economy mlflow_share scale)
for name in "${@:-${ALL[@]}}"; do
  case $name in
    cli)            run cli benchmarks/cli.py 10 ;;
    report_scale)   run report_scale benchmarks/report_scale.py --trials 10000 --repeat 3 ;;
    decompose)      run decompose benchmarks/trial_overhead.py --decompose --workers 2 --repeat 2 ;;
    trial_overhead) run trial_overhead benchmarks/trial_overhead.py --workers 1 2 4 --trials 3 --epochs 3 ;;
    overhead)       run overhead benchmarks/overhead.py 2 --trials 4 --epochs 6 --workers 2 --concurrency 2 ;;
    efficiency)     run efficiency benchmarks/efficiency.py long --trials 2 --concurrency 2 --workers 1 --epochs 50 \
                      --long-hidden 2560 --long-batch 32 ;;
    asha_economy)   run asha_economy benchmarks/asha_economy.py --trials 24 --epochs 12 --seeds 0 1 \
                      --asha-arg scheduler.grace_period=1 --asha-arg scheduler.reduction_factor=4 ;;
    mlflow_share)   run mlflow_share benchmarks/mlflow_share.py sweep.num_samples=8 ;;
    scale)          run scale benchmarks/scale.py --trials 1000 --modes raw sweeps --report-trials 10000 ;;
    *) echo "unknown benchmark: $name (one of: ${ALL[*]})" >&2; exit 2 ;;
  esac
done
