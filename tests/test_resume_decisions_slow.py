"""A resumed sweep makes the same decisions as one that never stopped: scheduler state saved and restored.

Trials run one at a time over a fixed grid of a deterministic loop (:mod:`decisions`), so a straight sweep's
decisions are known (Tune's own scheduler classes fed the same results in the same order); each sweep here is
stopped after some trials (SIGTERM, SIGKILL of the driver), resumed, and must give every configuration the
same epochs. Each scheduler needs its own sweep: the stop is the subject (ASHA's sweep is stopped twice, SIGTERM
then SIGKILL, and extended; then it carries the unhappy paths of a stop: refusals while live, SIGTERM then
Ctrl-C, a damaged ``tuner.pkl`` with no good copy, an extension stopped before it started). HyperBand has no
sweep here: with trials one at a time over this grid Tune's HyperBand fills its no-stopping bracket first and
never pauses or stops a trial, so a straight and a resumed sweep agree whatever was saved; its state comes back
through the lever in tests/test_schedstate.py. Slow tier.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import mlflow_client, trial_dirs, wait_for
from decisions import LRS, Project, epochs_by_lr, overlapping, stop_after, straight_epochs

from sweeps import uris

pytestmark = pytest.mark.slow
EPOCHS = 6


def _asha() -> object:
    from ray.tune.schedulers import ASHAScheduler

    return ASHAScheduler(time_attr="training_iteration", max_t=EPOCHS, grace_period=1, reduction_factor=2,
                         brackets=1)


ASHA = ["+experiment=detloop", "scheduler=asha", "scheduler.grace_period=1", "scheduler.reduction_factor=2"]


def _said(proc: subprocess.CompletedProcess[str] | str) -> str:
    return proc if isinstance(proc, str) else proc.stdout + proc.stderr


def _final_counts_line(said: str) -> str:
    return [line for line in said.splitlines() if "trials:" in line and "done" in line][-1]


def test_asha_stopped_twice_sigterm_then_sigkill_decides_as_the_straight_run_and_extend_judges_by_the_old(
        tmp_path: Path) -> None:
    """One sweep, stopped twice. SIGTERM after 2 trials, then tuner.pkl and the scheduler's saved state truncated
    (a driver killed mid-write): the resume puts both back (the scheduler's state from the set kept with the
    experiment state: nothing lost). SIGKILL of the resumed driver after 4 trials (its last saved state up to a
    checkpoint old), resumed again. Every lr gets the straight run's epochs, one trial at a time; the status line
    after each resume ranks the best trial before the stop first and counts as the final summary does. Then
    `extend --more-trials 2` adds exactly 2 trials, judged against the rungs of the 6 before them.

    Then the same sweep down its unhappy paths (:func:`_stopped_extension_and_the_ways_out`): a third run (an
    extension) is refused to sync, resume and extend while it is live, stopped by SIGTERM then Ctrl-C, its
    ``tuner.pkl`` cut short with no good copy (resume says so in one line, extend is the way out), and an
    extension stopped before Tune started leaves the sweep as it was.
    Why its own sweep: the stops are the subject; the unhappy paths of an extension share it."""
    p = Project(tmp_path)
    try:
        # epochs of 0.3 s: a stop waits for the checkpoints in flight, and with instant epochs the trials after
        # the second could all end meanwhile, leaving the resume nothing to run (seen here)
        out = stop_after(p, p.start("run", *ASHA, "trainable.params.epoch_sleep_s=0.3"), 2, signal.SIGTERM)
        rec = p.record()
        assert rec and rec["status"] == "interrupted", out[-3000:]
        exp = Path(rec["experiment_dirs"][0])
        best_before = json.loads((exp / "sweeps-live" / "status.json").read_text())["best"]
        assert best_before["params"]["lr"] == 0.05, best_before
        for damaged in (exp / "tuner.pkl", sorted(exp.glob("callback-states-*.pkl"))[-1]):
            damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])
        # after 4 trials in all, and at least one of the resumed run's own (it has said what it put back by then)
        said = first = stop_after(p, p.start("resume", "latest"), max(4, p.ended() + 1), signal.SIGKILL)
        assert "tuner.pkl was damaged: put back" in said, said[-3000:]
        assert "was damaged: put back from the copy kept with the experiment state it belongs to (nothing is lost)" \
            in said, said[-3000:]
        assert "the scheduler AsyncHyperBandScheduler continues from its state" in said, said[-3000:]
        resumed = p.run("resume", "latest")
        said = _said(resumed)
        assert resumed.returncode == 0, said[-4000:]
        rec = p.record()
        assert epochs_by_lr(rec["experiment_dirs"]) == straight_epochs(_asha(), LRS, EPOCHS)
        assert overlapping(rec["experiment_dirs"]) == 1, "sweep.max_concurrent_trials=1 held after each resume"
        bests = [line.split("| best ", 1)[1] for line in (first + said).splitlines() if "| best " in line]
        assert bests and all(b.startswith(f"score {best_before['value']:.4g} (trial {best_before['trial_id']}")
                             for b in bests), ("the best after the resume is the best before the stop", bests)
        c = rec["counts"]
        assert f"{c['completed'] + c['early_stopped']} done ({c['early_stopped']} stopped early)" in \
            _final_counts_line(said), (_final_counts_line(said), c)

        extended = p.run("extend", "latest", "--more-trials", "2")
        said = _said(extended)
        assert extended.returncode == 0, said[-4000:]
        rec = p.record()
        added = _lrs_in_order(rec["experiment_dirs"][-1])
        assert len(added) == 2, ("--more-trials 2 adds 2 trials, not 2 passes over the grid", added)
        oracle = _asha()
        straight_epochs(oracle, LRS, EPOCHS)  # ASHA's rungs as the first six trials left them
        expected = [straight_epochs(oracle, [lr], EPOCHS)[lr] for lr in added]  # then each added trial, in order
        carried = [ln for ln in said.splitlines() if "scheduler" in ln.lower()]
        assert any("the scheduler AsyncHyperBandScheduler continues from its state" in ln for ln in carried), carried
        assert _epochs_in_order(rec["experiment_dirs"][-1]) == expected, (added, expected, carried, [
            n for n in uris.listdir(rec["experiment_dirs"][0]) if n.startswith("callback-states-")])
        c = rec["counts"]
        assert c["total"] == 8 and f"8 done ({c['early_stopped']} stopped early)" in _final_counts_line(said), \
            ("the extension's status line counts every trial of the sweep", _final_counts_line(said), c)
        ext_status = json.loads((Path(rec["experiment_dirs"][-1]) / "sweeps-live" / "status.json").read_text())
        assert ext_status["best"]["trial_id"] == best_before["trial_id"], ext_status["best"]
        _stopped_extension_and_the_ways_out(p, rec)
    finally:
        p.env.cleanup()


def _runs(rec: dict, status: str | None = None) -> list:
    """The sweep's MLflow runs (its parent and every trial's), with ``status`` only that status."""
    where = f"tags.`sweeps.sweep_id` = '{rec['sweep_id']}'" + (f" and attributes.status = '{status}'" if status else "")
    return mlflow_client(rec["tracking_uri"]).search_runs([rec["mlflow_experiment_id"]], where, max_results=500)


EXTEND_INTERRUPTED = textwrap.dedent("""
    import sys
    from sweeps.execution.run import assembly

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    assembly.new_tuner = interrupted  # Ctrl-C while the extension starts, before Tune saved any state
    from sweeps.cli.main import main
    sys.exit(main(["extend", sys.argv[1], "--more-trials", "1"]))
""")


def _stopped_extension_and_the_ways_out(p: Project, rec: dict) -> None:
    """A finished sweep's third run, an extension whose trial sleeps in its first epoch: while it holds its lease,
    sync, resume and extend (at once) are refused; SIGTERM, then Ctrl-C a second later (an impatient user), stop
    it like Ctrl-C, within 25 s (a 30 s grace period would kill it), with nothing half-written and no MLflow run
    left RUNNING. Then its ``tuner.pkl`` is cut short (a full disk) with no good copy: resume says so in one line
    naming the way out, ``extend``, which continues the search in a new experiment. Last, an extension stopped
    (Ctrl-C) before Tune saved any state leaves the sweep as it was: finished, its parent run FINISHED."""
    sweep_id, dirs = rec["sweep_id"], len(rec["experiment_dirs"])
    proc = p.start("extend", sweep_id, "trainable.params.epoch_sleep_s=10", "--more-trials", "1")

    def claimed() -> Path | None:  # the extension's own experiment, once its driver holds the sweep
        dirs_now = (p.record() or {}).get("experiment_dirs", [])
        return Path(dirs_now[-1]) if len(dirs_now) > dirs else None

    tail = wait_for(lambda: claimed() or proc.poll() is not None, 300, 0.2, "the extension to hold the sweep")
    assert proc.poll() is None, "the extension ended before it could be checked"
    commands = (["sync", sweep_id], ["resume", sweep_id], ["extend", sweep_id, "--more-trials", "1"])
    refusals = [p.start(*cmd) for cmd in commands]  # at once: all three while the driver holds its lease
    for cmd, r in zip(commands, refusals, strict=True):
        said = r.communicate(timeout=120)[0]
        assert r.returncode == 2 and "still running" in said, (cmd, said[-1000:])
    wait_for(lambda: trial_dirs(tail) or proc.poll() is not None, 300, 0.2, "the extension's trial to start")
    assert proc.poll() is None, "the extension ended before it could be stopped: make its epoch longer"
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)  # then Ctrl-C (an impatient user): must not half-write anything
    out, _ = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    p.env.kill_ray()
    assert proc.returncode == 130, out[-3000:]
    assert took <= 25, f"shutdown after SIGTERM took {took:.1f} s (a 30 s grace period would kill it)"
    rec = p.record()
    assert rec["status"] == "interrupted" and rec["lease_expires"] is None, rec
    assert not _runs(rec, "RUNNING"), "SIGTERM left MLflow runs RUNNING"
    assert {r.info.status for r in _runs(rec)} <= {"KILLED", "FINISHED"}

    # tuner.pkl cut short (a full disk) and no good copy of it: resume cannot continue this experiment; it says so
    # in one line naming the sweep and the way out, `extend`, which continues the search in a new one
    (tail / "tuner.pkl").write_bytes((tail / "tuner.pkl").read_bytes()[:40])
    (tail / "sweeps-good" / "tuner.pkl").unlink()
    resumed = p.run("resume", "latest")
    lines = [x for x in resumed.stderr.splitlines() if x.strip()]
    assert resumed.returncode == 2 and len(lines) == 1, _said(resumed)[-3000:]
    assert "tuner.pkl is damaged and no good copy was kept" in lines[0] and \
        f"`python -m sweeps extend {sweep_id} --more-trials N`" in lines[0], lines
    extended = p.run("extend", "latest", "--more-trials", "1")
    assert extended.returncode == 0, _said(extended)[-4000:]
    rec = p.record()
    assert rec["status"] == "finished" and len(rec["experiment_dirs"]) == dirs + 2, rec
    assert len(_lrs_in_order(rec["experiment_dirs"][-1])) == 1, "the way out ran its one trial"
    assert (tail / "damaged-tuner.pkl").exists() and not _runs(rec, "RUNNING")

    stopped = subprocess.run([sys.executable, "-c", EXTEND_INTERRUPTED, sweep_id], cwd=p.root, env=p.env.env,
                             capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 130, stopped.stdout[-2000:] + stopped.stderr[-2000:]
    after = p.record()
    assert after["status"] == "finished" and after["experiment_dirs"] == rec["experiment_dirs"], \
        "an extension stopped before Tune started leaves the sweep as it was"
    assert mlflow_client(rec["tracking_uri"]).get_run(rec["parent_run_id"]).info.status == "FINISHED"


def _trials_in_order(experiment_dir: str) -> list[list[dict]]:
    rows = []
    for trial in Path(experiment_dir).iterdir():
        f = trial / "result.json"
        if f.is_file():
            rows.append([json.loads(x) for x in f.read_text().splitlines() if x.strip()])
    return sorted((r for r in rows if r), key=lambda r: r[0]["wall"])


def _lrs_in_order(experiment_dir: str) -> list[float]:
    return [float(r[0]["config"]["lr"]) for r in _trials_in_order(experiment_dir)]


def _epochs_in_order(experiment_dir: str) -> list[int]:
    return [int(max(x["training_iteration"] for x in r)) for r in _trials_in_order(experiment_dir)]


def test_the_median_rule_resumed_after_sigterm_decides_as_the_straight_run(tmp_path: Path) -> None:
    """The median stopping rule's sweep, stopped by SIGTERM after 3 trials and resumed, gives every configuration
    the straight run's epochs. Why its own sweep: a sweep has one scheduler, and the stop is the subject."""
    from ray.tune.schedulers import MedianStoppingRule

    p = Project(tmp_path)
    try:
        args = ["+experiment=detloop", "scheduler=median", "scheduler.grace_period=1"]
        stop_after(p, p.start("run", *args), 3, signal.SIGTERM)
        resumed = p.run("resume", "latest")
        said = resumed.stdout + resumed.stderr
        assert resumed.returncode == 0, said[-4000:]
        oracle = MedianStoppingRule(time_attr="training_iteration", grace_period=1, min_samples_required=2,
                                    min_time_slice=10**9, hard_stop=True)
        assert epochs_by_lr(p.record()["experiment_dirs"]) == straight_epochs(oracle, LRS, EPOCHS)
        assert "the scheduler MedianStoppingRule continues from its state" in said, said[-3000:]
    finally:
        p.env.cleanup()


def test_pbt_resumed_after_sigterm_has_the_population_it_had_before_the_stop_and_runs_two_at_once(
        tmp_path: Path) -> None:
    """PBT's population (each trial's last score and last perturbation) as saved with the stopped sweep's state
    is the one the resumed run decides from; and the resumed run runs trials two at a time, as the first run did
    (sweep.max_concurrent_trials=2), never more: counted from the sweep's live status while it runs. Why its own
    sweep: a sweep has one scheduler, and the stop is the subject."""
    import ray.cloudpickle as cloudpickle
    from ray.tune import ExperimentAnalysis
    from ray.tune.schedulers import PopulationBasedTraining

    from sweeps.execution.levers import scheduler_state

    p = Project(tmp_path)
    args = ["+experiment=detloop", "scheduler=pbt", "searcher=random", "sweep.num_samples=4",
            "sweep.max_concurrent_trials=2", "trainable.params.epochs=6", "trainable.params.epoch_sleep_s=0.3",
            "checkpoint.num_to_keep=10", "scheduler.perturbation_interval=3",
            "scheduler.hyperparam_mutations={lr: {dist: choice, values: [0.05, 0.02, 0.005]}}"]
    try:
        stop_after(p, p.start("run", *args), 1, signal.SIGTERM)
        exp = p.record()["experiment_dirs"][0]
        (newest,) = sorted(Path(exp).glob("callback-states-*.pkl"))[-1:]
        (saved,) = [s for s in cloudpickle.loads(newest.read_bytes()).values() if s and s.get("how") == "lever"]
        before = PopulationBasedTraining(hyperparam_mutations={"lr": [1]})
        scheduler_state.load(before, saved["data"], {t.trial_id: t for t in ExperimentAnalysis(exp).trials})
        expected = {k: list(v) for k, v in sorted(scheduler_state.population(before).items())}
        status = Path(exp) / "sweeps-live" / "status.json"
        status.unlink()  # the resumed run's own
        resumed = p.start("resume", "latest")
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.append(resumed.stdout.read()))  # a full pipe would block it
        reader.start()
        at_once = []
        while resumed.poll() is None:
            try:
                at_once.append(json.loads(status.read_text())["trials"]["running"])
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.3)
        reader.join(timeout=60)
        said = "".join(output)
        assert resumed.returncode == 0, said[-4000:]
        assert max(at_once, default=0) == 2, ("two trials at once after the resume, never more", at_once)
        line = next(x for x in said.splitlines() if "the scheduler PopulationBasedTraining continues" in x)
        assert json.loads(line.split("; population ", 1)[1]) == expected, (line, expected)
    finally:
        p.env.cleanup()
