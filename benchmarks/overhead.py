"""`sweeps` against a minimal hand-written Ray Tune + Train script (benchmarks/handwritten.py): same sweep.

Both run trainables.digits.train_loop with the same trials, epochs, workers, seed, concurrency, space and
scheduler, from a fresh process each time (process start to exit: imports, Ray start, sweep, shutdown;
`sweeps` also writes MLflow, its index and the report). The runs alternate A B B A A B ... so a drift in
the machine's load hits both. Goal: median(sweeps) / median(handwritten) <= 1.0.

    python benchmarks/overhead.py [N=3] [--trials 6] [--epochs 8] [--workers 2] [--concurrency 2]
        [--scheduler fifo|asha] [--space digits_small|digits] [--bridge callback|queue] [--seed 0]
        [--sweeps-arg KEY=VALUE ...]
    python benchmarks/overhead.py --phases [same sizes]   # where each process's time goes (one run each)

--phases runs `sweeps` once in a fresh process with timers around each pipeline stage (benchmarks/_common.py
SWEEPS_PHASES: compose+validate, probes, Ray start, MLflow parent run, Tuner.fit, closing runs, reading
results, summary, parent run finish, report, Ray stop) and the handwritten script once (its Ray start, fit,
total), and prints both breakdowns.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (  # noqa: E402
    LAST_RUN,
    REPO,
    SWEEPS_PHASES,
    load_average,
    median,
    phase_timers,
    run_sweeps,
    run_timed,
    trial_rows,
)

CLEAN = 0.10  # a run is "clean" when other processes took less than this share of the machine meanwhile


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("n", nargs="?", type=int, default=3, help="runs of each")
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--scheduler", choices=("fifo", "asha"), default="fifo")
    p.add_argument("--space", choices=("digits_small", "digits"), default="digits_small")
    p.add_argument("--bridge", choices=("callback", "queue"), default="callback")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweeps-arg", action="append", default=[], help="extra override for the sweeps run")
    p.add_argument("--fresh-store", action="store_true", help="sweeps: a new MLflow store for every run")
    p.add_argument("--phases", action="store_true", help="one timed-by-stage run of each (see above)")
    p.add_argument("--phases-child", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args()


def sweeps_overrides(a: argparse.Namespace) -> list[str]:
    return ["run", "+experiment=quickstart", f"scheduler={a.scheduler}", f"search_space={a.space}",
            f"sweep.num_samples={a.trials}", f"trainable.params.epochs={a.epochs}",
            f"trainable.num_workers={a.workers}", f"sweep.max_concurrent_trials={a.concurrency}",
            f"sweep.seed={a.seed}", *a.sweeps_arg]


def new_home(fresh_store: bool) -> Path:
    """A private SWEEPS_HOME; unless ``fresh_store``, with its MLflow SQLite store already created (a user's
    second sweep: creating the tables takes ~1-2 s once per store, not once per sweep)."""
    home = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    if not fresh_store:
        from mlflow.tracking import MlflowClient

        (home / "mlflow.db").parent.mkdir(parents=True, exist_ok=True)
        MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}").search_experiments()
    return home


def run_sweeps_once(a: argparse.Namespace) -> dict[str, Any]:
    home = new_home(a.fresh_store)
    try:
        wall, rec = run_sweeps(sweeps_overrides(a), home)
        rows = trial_rows(rec)
        return {"wall": wall, "fit": rec["wall_s"], "epochs": sum(len(r) for r in rows.values()),
                "best": rec["best"].get("value", float("nan")), "cpu": LAST_RUN["cpu_s"],
                "others": LAST_RUN["others"].share}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def run_handwritten_once(a: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="bench-handwritten-"))
    cmd = [sys.executable, str(REPO / "benchmarks" / "handwritten.py"), "--trials", str(a.trials), "--epochs",
           str(a.epochs), "--workers", str(a.workers), "--concurrency", str(a.concurrency), "--scheduler",
           a.scheduler, "--space", a.space, "--bridge", a.bridge, "--seed", str(a.seed),
           "--storage", str(home / "ray")]
    try:
        wall, proc = run_timed(cmd, home)
        line = next(x for x in proc.stdout.splitlines() if x.startswith("HANDWRITTEN "))
        out = json.loads(line.removeprefix("HANDWRITTEN "))
        bests = [t["best"] for t in out["trials"] if t["best"] is not None]
        return {"wall": wall, "fit": out["fit_s"], "epochs": sum(t["epochs"] for t in out["trials"]),
                "best": max(bests) if bests else float("nan"), "total": out["total_s"], "init": out["init_s"],
                "before_init": out["before_init_s"], "cpu": LAST_RUN["cpu_s"], "others": LAST_RUN["others"].share,
                "after": out["total_s"] - out["fit_s"] - out["init_s"] - out["before_init_s"]}
    finally:
        shutil.rmtree(home, ignore_errors=True)


def show(name: str, i: int, r: dict[str, Any]) -> None:
    print(f"  {name:<11} run {i}: wall {r['wall']:6.1f} s  (Tuner.fit {r['fit']:6.1f} s)  CPU {r['cpu']:6.1f} s  "
          f"epochs {r['epochs']:3d}  best val/acc {r['best']:.4f}  {LAST_RUN['others']}; load {load_average()}",
          flush=True)


def phases_child(a: argparse.Namespace) -> None:
    """In a fresh process: import the CLI, time each pipeline stage of one `sweeps run`."""
    t_imports = time.perf_counter()
    from sweeps.cli import main as cli_main

    imports = time.perf_counter() - t_imports
    t = time.perf_counter()
    timers = phase_timers()  # imports the pipeline's modules (cli.main would import them later)
    pipeline_imports = time.perf_counter() - t
    t = time.perf_counter()
    rc = cli_main.main(sweeps_overrides(a))
    main_s = time.perf_counter() - t
    tracker = timers.pop("tracker", [None])[0]
    out = {k: sum(v) for k, v in timers.items()}
    out.update({"import sweeps.cli": imports, "import pipeline modules": pipeline_imports, "cli.main": main_s, "rc": rc,
                "mlflow in callbacks": tracker.timer.seconds if tracker is not None else float("nan")})
    print("PHASES " + json.dumps(out), flush=True)


def phases(a: argparse.Namespace) -> None:
    home = new_home(a.fresh_store)
    try:
        wall, proc = run_timed([sys.executable, str(Path(__file__).resolve()), "--phases-child",
                                *sys.argv[2:]], home, {"SWEEPS_HOME": str(home)})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    ph = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("PHASES "))[7:])
    print(f"sweeps: process {wall:.1f} s; {LAST_RUN['others']}; load {load_average()}")
    start = wall - ph["cli.main"] - ph["import pipeline modules"] - ph["import sweeps.cli"]
    print(f"  {'interpreter start, before sweeps.cli':<40} {start:7.2f} s")
    print(f"  {'import sweeps.cli':<40} {ph['import sweeps.cli']:7.2f} s")
    print(f"  {'import runner/tracking/tuner/...':<40} {ph['import pipeline modules']:7.2f} s")
    for name in [f"{m.rsplit('.', 1)[1]}.{f}" for m, f in SWEEPS_PHASES] + ["Tuner.fit", "tracker.close_open"]:
        if name in ph:
            print(f"  {name:<40} {ph[name]:7.2f} s")
    print(f"  {'(MLflow calls inside the callback)':<40} {ph['mlflow in callbacks']:7.2f} s")
    print(f"  {'cli.main total':<40} {ph['cli.main']:7.2f} s")
    hw = run_handwritten_once(a)
    print(f"handwritten: process {hw['wall']:.1f} s; {LAST_RUN['others']}")
    for name, v in (("interpreter start (before line 1)", hw["wall"] - hw["total"]),
                    ("imports before ray.init", hw["before_init"]), ("ray.init", hw["init"]),
                    ("Tuner.fit", hw["fit"]), ("after fit (results, ray.shutdown)", hw["after"])):
        print(f"  {name:<40} {v:7.2f} s")


def main() -> None:
    a = parse_args()
    if a.phases_child:
        phases_child(a)
        return
    if a.phases:
        phases(a)
        return
    print(f"overhead: {a.trials} trials x {a.epochs} epochs x {a.workers} workers, concurrency {a.concurrency}, "
          f"{a.scheduler}, space {a.space}, seed {a.seed}; handwritten bridge: {a.bridge}; {a.n} runs each; "
          f"load {load_average()}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {"sweeps": [], "handwritten": []}
    for i in range(a.n):
        order = ("sweeps", "handwritten") if i % 2 == 0 else ("handwritten", "sweeps")
        for name in order:
            r = run_sweeps_once(a) if name == "sweeps" else run_handwritten_once(a)
            runs[name].append(r)
            show(name, i, r)
    clean = {k: [r for r in v if r["others"] < CLEAN] for k, v in runs.items()}
    for title, sel in (("all runs", runs), (f"runs with others < {CLEAN:.0%} of the machine", clean)):
        if not all(sel.values()):
            print(f"{title}: none for one side")
            continue
        print(f"{title} (sweeps n={len(sel['sweeps'])}, handwritten n={len(sel['handwritten'])}):")
        for key, label in (("wall", "process wall"), ("fit", "Tuner.fit only"), ("cpu", "CPU of the tree")):
            s, h = median([r[key] for r in sel["sweeps"]]), median([r[key] for r in sel["handwritten"]])
            print(f"  {label:<15}: sweeps median {s:.1f} s, handwritten median {h:.1f} s, ratio {s / h:.2f} "
                  f"(goal <= 1.0: {'met' if s / h <= 1.0 else 'MISSED'})")
    print(f"load at the end: {load_average()}")


if __name__ == "__main__":
    main()
