"""A Lightning script's trial under the script adapter, against the same script alone and the bundled loop.

Three ways, alternating, each at two epoch counts (N1 < N2), so per-epoch time and start-up separate cleanly:
per epoch = (T(N2) - T(N1)) / (N2 - N1), start-up = T(N1) - N1 x per epoch.

- ``alone``: ``torchrun --standalone --nproc-per-node 2 lightning_digits.py --devices 2 --accelerator cpu`` (the
  script's own DDP over gloo), T = the whole command's wall time;
- ``script``: the same file scaffolded with ``sweeps new trainable --script`` and run as a one-trial sweep on 2
  Train workers (FIFO, one fixed lr), T = the trial's ``time_total_s`` (Tune's clock, from the trial's start);
- ``bundled``: the bundled ``digits`` loop (the same MLP size, data and batch) as the same one-trial sweep.

The goal (issue 48): per epoch within 5% of the script alone; start-up within the framework's own import of the
bundled loop's (``import lightning.pytorch`` beyond ``import torch``, measured here too).

    python benchmarks/script_overhead.py --repeat 2 --epochs 4 12
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "examples" / "scripts" / "lightning_digits.py"
BATCH, HIDDEN, LR = 8, 64, 0.01


def _env(home: Path) -> tuple[dict[str, str], str]:
    ray_tmp = tempfile.mkdtemp(prefix="rb", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "SWEEPS_CONF_DIR"}
    env.update(SWEEPS_HOME=str(home), RAY_TMPDIR=ray_tmp, RAY_USAGE_STATS_ENABLED="0")
    return env, ray_tmp


def _sweep(project: Path, args: list[str]) -> float:
    """One sweep's single trial: its time_total_s at the last reported epoch."""
    home = project / ".home"
    env, ray_tmp = _env(home)
    before = set((home / "sweeps").glob("*.json")) if (home / "sweeps").is_dir() else set()
    try:
        proc = subprocess.run([sys.executable, "-m", "sweeps", "run", *args], cwd=project, env=env,
                              capture_output=True, text=True, timeout=1800)
    finally:
        subprocess.run(["pkill", "-9", "-f", ray_tmp], check=False)
        shutil.rmtree(ray_tmp, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"sweeps run {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    (new,) = set((home / "sweeps").glob("*.json")) - before
    rec = json.loads(new.read_text())
    rows = [json.loads(line) for exp in rec["experiment_dirs"] for f in Path(exp).glob("*/result.json")
            for line in f.read_text().splitlines() if line.strip()]
    return float(rows[-1]["time_total_s"])


def alone(work: Path, epochs: int) -> float:
    out = work / f"alone-{epochs}"
    t0 = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc-per-node", "2",
                    str(SCRIPT), "--devices", "2", "--accelerator", "cpu", "--max-epochs", str(epochs),
                    "--batch-size", str(BATCH), "--hidden", str(HIDDEN), "--lr", str(LR), "--output-dir", str(out)],
                   cwd=work, check=True, capture_output=True, timeout=1800,
                   env={**os.environ, "OMP_NUM_THREADS": "1"})
    return time.perf_counter() - t0


def script(project: Path, epochs: int) -> float:
    return _sweep(project, ["+experiment=lit", "sweep.num_samples=1", "scheduler=fifo", "report.enabled=false",
                            f"trainable.params.max_epochs={epochs}", f"trainable.params.batch_size={BATCH}",
                            f"trainable.params.hidden={HIDDEN}", f"search_space.lr={{dist: choice, values: [{LR}]}}",
                            "~search_space.hidden", "~search_space.batch_size", "~search_space.dropout"])


def bundled(project: Path, epochs: int) -> float:
    return _sweep(project, ["+experiment=quickstart", "sweep.num_samples=1", "scheduler=fifo",
                            "report.enabled=false", f"trainable.params.epochs={epochs}",
                            f"trainable.params.batch_size={BATCH}", f"trainable.params.hidden_size={HIDDEN}",
                            f"search_space.lr={{dist: choice, values: [{LR}]}}", "~search_space.hidden_size",
                            "~search_space.batch_size"])


def import_seconds(module: str, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def split(t1: float, t2: float, n1: int, n2: int) -> tuple[float, float]:
    """(start-up, per epoch) from the times at two epoch counts."""
    per_epoch = (t2 - t1) / (n2 - n1)
    return t1 - n1 * per_epoch, per_epoch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--epochs", type=int, nargs=2, default=[4, 12])
    a = ap.parse_args()
    n1, n2 = a.epochs
    work = Path(tempfile.mkdtemp(prefix="script-bench-"))
    shutil.copy(SCRIPT, work / SCRIPT.name)
    subprocess.run([sys.executable, "-m", "sweeps", "new", "trainable", "lit", "--script", SCRIPT.name], cwd=work,
                   env=_env(work / ".home")[0], check=True, capture_output=True)
    times: dict[str, dict[int, list[float]]] = {k: {n1: [], n2: []} for k in ("alone", "script", "bundled")}
    for r in range(a.repeat):
        for n in (n1, n2):
            for name, fn in (("alone", alone), ("script", script), ("bundled", bundled)):
                t = fn(work, n)
                times[name][n].append(t)
                print(f"repeat {r + 1}: {name:<8} {n:>3} epochs: {t:7.2f} s", flush=True)
    result: dict[str, Any] = {}
    for name, by_n in times.items():
        start, per_epoch = split(statistics.median(by_n[n1]), statistics.median(by_n[n2]), n1, n2)
        result[name] = {"start_s": round(start, 2), "per_epoch_s": round(per_epoch, 3)}
    lightning_import = import_seconds("lightning.pytorch") - import_seconds("torch")
    print(json.dumps(result, indent=1))
    print(f"per epoch, script under sweeps / alone under torchrun: "
          f"{result['script']['per_epoch_s'] / result['alone']['per_epoch_s']:.3f}  (goal <= 1.05)")
    print(f"start-up, script - bundled loop: {result['script']['start_s'] - result['bundled']['start_s']:.2f} s; "
          f"lightning's import beyond torch's: {lightning_import:.2f} s  (goal: the first <= the second)")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
