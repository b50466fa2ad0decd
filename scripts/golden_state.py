"""Write the golden state files of the installed Ray: a stopped sweep's Tune state, as ``sweeps resume`` reads it.

Runs two tiny real Tune experiments with the Ray of the interpreter that runs this script (a plain function
trainable that checkpoints a few bytes; no torch, no Train): an ASHA sweep searched by Optuna and a PBT sweep,
each interrupted partway as Ctrl-C interrupts a sweep (a Stopper's ``stop_all`` would mark every trial
TERMINATED: nothing left to resume). Then it copies what a resume
reads into ``OUT/<ray version>/<experiment>/``:

- ``tuner.pkl`` (``Tuner.can_restore``, ``Tuner.restore``), the experiment state (``experiment_state-*.json``:
  the trials, their statuses and checkpoints), the searcher's state (``searcher-state-*.pkl`` for Optuna,
  ``basic-variant-state-*.json`` for PBT's random search);
- the callbacks' state (``callback-states-*.pkl``) holding the scheduler's state as
  ``sweeps.execution.run.schedstate`` saves it (its ``snapshot``, from a Tune callback as in a sweep);
- ``expected.json``: what this Ray read back and knew at the stop (trial ids, statuses, iterations; ASHA's rungs,
  PBT's population), which ``tests/test_golden_state.py`` checks the installed Ray against.

Usage (one run per Ray of the supported range; each writes only its own folder)::

    HOME=$(mktemp -d) .venv/bin/python scripts/golden_state.py tests/golden
    python -m venv /tmp/ray253 && /tmp/ray253/bin/pip install "ray[tune]==2.53.0" optuna
    HOME=$(mktemp -d) PYTHONPATH=. /tmp/ray253/bin/python scripts/golden_state.py tests/golden

(``HOME``: Ray >= 2.59 writes its token to ``~/.ray``; ``PYTHONPATH``: ``sweeps`` from this checkout, whose
scheduler-state module needs nothing but the standard library and Ray.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

MAX_T = 4  # iterations a trial may run
STOP_AFTER = 6  # results the whole experiment takes before it is interrupted (some trials ended, some not)
STATE_PREFIXES = ("experiment_state-", "searcher-state-", "basic-variant-state-", "callback-states-")


def train(config: dict[str, Any]) -> None:
    """A trial: ``score`` rises with ``lr``; a checkpoint of a few bytes each iteration, resumed from."""
    from ray import tune

    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            start = json.loads(Path(d, "step.json").read_text())["step"]
    for step in range(start + 1, MAX_T + 1):
        with tempfile.TemporaryDirectory() as d:
            Path(d, "step.json").write_text(json.dumps({"step": step}))
            tune.report({"score": config["lr"] * step, "step": step}, checkpoint=tune.Checkpoint.from_directory(d))


def _interrupt() -> Any:
    """A Tune callback that interrupts the experiment once it took ``STOP_AFTER`` results, as Ctrl-C does (Tune's
    own handler of SIGUSR1, the twin of its SIGINT's): trials still running or pending stay unfinished."""
    from ray import tune

    class Interrupt(tune.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.results = 0

        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                            **info: Any) -> None:
            self.results += 1
            if self.results == STOP_AFTER:
                os.kill(os.getpid(), signal.SIGUSR1)

    return Interrupt()


def _scheduler_state(scheduler: Any) -> Any:
    """A Tune callback whose state is ``scheduler``'s, as a sweep's scheduler-state callback saves it."""
    from ray import tune

    class SchedulerState(tune.Callback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.scheduler = scheduler

        def get_state(self) -> dict[str, Any] | None:
            from sweeps.execution.run import schedstate  # imported here: tuner.pkl names no sweeps module

            return schedstate.snapshot(self.scheduler)

    return SchedulerState()


def _experiments() -> dict[str, dict[str, Any]]:
    import optuna
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return {
        "asha": {"scheduler": ASHAScheduler(time_attr="training_iteration", max_t=MAX_T, grace_period=1,
                                            reduction_factor=2),
                 "search_alg": OptunaSearch(sampler=optuna.samplers.TPESampler(seed=0)),
                 "space": {"lr": tune.loguniform(1e-3, 1e-1)}, "samples": 4},
        "pbt": {"scheduler": PopulationBasedTraining(time_attr="training_iteration", perturbation_interval=2,
                                                     hyperparam_mutations={"lr": [0.001, 0.01, 0.1]}),
                "search_alg": None, "space": {"lr": tune.choice([0.001, 0.01, 0.1])}, "samples": 3},
    }


def run(name: str, setup: dict[str, Any], storage: Path) -> Path:
    """Run one experiment until its stopper stops it; its folder."""
    from ray import tune

    scheduler = setup["scheduler"]
    tuner = tune.Tuner(
        train,
        param_space=setup["space"],
        tune_config=tune.TuneConfig(metric="score", mode="max", scheduler=scheduler, search_alg=setup["search_alg"],
                                    num_samples=setup["samples"], max_concurrent_trials=2),
        run_config=tune.RunConfig(name=name, storage_path=str(storage), verbose=0,
                                  callbacks=[_scheduler_state(scheduler), _interrupt()],
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1)),
    )
    tuner.fit()
    return storage / name


def expected(experiment_dir: Path) -> dict[str, Any]:
    """What this Ray reads back from the experiment: its trials, and the scheduler's state as sweeps saved it."""
    import ray.cloudpickle as cloudpickle
    from ray.tune import ExperimentAnalysis

    from sweeps.execution.levers import scheduler_state

    trials = {t.trial_id: {"status": t.status, "iteration": (t.last_result or {}).get("training_iteration")}
              for t in ExperimentAnalysis(str(experiment_dir)).trials}
    (callbacks,) = sorted(experiment_dir.glob("callback-states-*.pkl"))
    (state,) = [s for s in cloudpickle.loads(callbacks.read_bytes()).values() if s]
    out: dict[str, Any] = {"trials": trials, "scheduler": {"kind": state["kind"], "how": state["how"]}}
    if state["how"] == "own":  # ASHA: its rungs, milestone -> {trial id: recorded score}
        import pickle

        brackets = pickle.loads(state["data"])["_brackets"]
        out["scheduler"]["rungs"] = [{str(m): dict(sorted(r.items())) for m, r in b._rungs} for b in brackets]
    elif state["how"] == "lever":  # PBT: its population, trial id -> (last score, last perturbation time)
        from ray.tune.schedulers import PopulationBasedTraining

        fresh = PopulationBasedTraining(time_attr="training_iteration", hyperparam_mutations={"lr": [0.1]})
        analysis = ExperimentAnalysis(str(experiment_dir))
        scheduler_state.load(fresh, state["data"], {t.trial_id: t for t in analysis.trials})
        out["scheduler"]["population"] = scheduler_state.population(fresh)
    return out


def keep(experiment_dir: Path, out: Path) -> None:
    """Copy what a resume reads (each trial folder's ``result.json`` and latest checkpoint of a few bytes, none of
    Tune's other trial files) and what this Ray read back."""
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(experiment_dir.iterdir()):
        if path.name == "tuner.pkl" or path.name.startswith(STATE_PREFIXES):
            shutil.copy2(path, out / path.name)
        elif path.is_dir() and (path / "result.json").exists():
            (out / path.name).mkdir()
            shutil.copy2(path / "result.json", out / path.name / "result.json")
            for checkpoint in sorted(path.glob("checkpoint_*")):
                shutil.copytree(checkpoint, out / path.name / checkpoint.name)
    (out / "expected.json").write_text(json.dumps(expected(experiment_dir), indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("out", type=Path, help="the golden folder (tests/golden): OUT/<ray version>/ is written")
    args = parser.parse_args(argv)
    import ray

    target = args.out / ray.__version__
    if target.exists():
        shutil.rmtree(target)
    with tempfile.TemporaryDirectory(prefix="golden-") as storage:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        try:
            for name, setup in _experiments().items():
                keep(run(name, setup, Path(storage)), target / name)
        finally:
            ray.shutdown()
    for path in sorted(target.rglob("*")):
        if path.is_file():
            print(f"{path.stat().st_size:6d}  {path}")  # noqa: T201 - a script's report
    return 0


if __name__ == "__main__":
    sys.exit(main())
