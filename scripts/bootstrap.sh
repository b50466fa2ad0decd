#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv: CPU torch first, then the project.
# Any failed install fails this script (and says which step), so a broken environment is never used.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

step() {  # step DESCRIPTION CMD...: run quietly (pip's location warnings dropped), fail loudly
  local what=$1 log
  shift
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    echo "bootstrap: $what failed:" >&2
    grep -v "^WARNING: Location" "$log" | tail -30 >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
}

if [ ! -x .venv/bin/python ]; then
  step "creating .venv with $PY" "$PY" -m venv .venv
fi
. .venv/bin/activate
step "upgrading pip" python -m pip install -q --upgrade pip
# torch 2.13.0 is a CPU build on this machine's disk: install it first so nothing pulls a multi-GB CUDA build.
step "installing torch==2.13.0" python -m pip install -q torch==2.13.0
# The project's own dependencies through uv (the same resolution as pip's in seconds instead of two minutes; it
# keeps the torch above, which satisfies every requirement on it); uv itself from pip's indexes. Bytecode is
# compiled at install, as pip does: uv leaves it out by default, and where PYTHONDONTWRITEBYTECODE is set (this
# machine sets it) every process, each Ray worker included, would compile ray, torch and mlflow from source on
# every import (measured: `import ray, torch, mlflow, ...` 10.0 s instead of 4.8 s; the fast tier 399 s, not 223 s).
step "installing uv" python -m pip install -q "uv>=0.4"
step "installing the project with its test extras" \
  python -m uv pip install -q --compile-bytecode --python .venv/bin/python -e ".[test,hf,lightning]"
# Every runtime dependency (and the test tools) must import, or the first sweep would fail late.
step "importing the installed packages" python -c "
import importlib, os, sys
mods = ['sweeps', 'trainables', 'ray', 'ray.tune', 'ray.train.torch', 'ray.dashboard', 'torch', 'mlflow', 'optuna',
        'hyperopt', 'hydra', 'omegaconf', 'pandas', 'matplotlib', 'sklearn', 'croniter', 'filelock', 'pyarrow',
        'transformers', 'accelerate', 'lightning', 'pytest', 'pytest_timeout', 'xdist', 'selenium', 'psutil', 'nbclient',
        'nbformat', 'ipykernel']
bad = []
for m in mods:
    try:
        importlib.import_module(m)
    except Exception as exc:
        bad.append(f'{m}: {exc}')
if not os.access(os.path.join(os.path.dirname(sys.executable), 'uv'), os.X_OK):
    bad.append('uv: no uv executable next to the venv python (the fresh-virtualenv tests need it)')
if bad:
    sys.exit('cannot import: ' + '; '.join(bad))
"
echo "bootstrap: .venv ready ($(.venv/bin/python -c 'import ray, torch, mlflow; print(f"ray {ray.__version__}, torch {torch.__version__}, mlflow {mlflow.__version__}")'))"
