"""Operating a real running sweep from a second process: status, pause/unpause, trial stop, stop, stop --now.

One sweep of the deterministic project (:mod:`decisions`), one trial at a time, is operated through every verb
in turn, each from its own ``python -m sweeps`` process, and each effect is read from what the sweep left
(result rows, the driver's exit code, MLflow run statuses), never from a sleep alone. Why its own sweep: the
verbs are the subject, and they act on a sweep while it runs. Slow tier.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from conftest import mlflow_client, wait_for
from test_resume_decisions_slow import Project

pytestmark = pytest.mark.slow
ARGS = ["+experiment=detloop", "trainable.params.epochs=15", "trainable.params.epoch_sleep_s=0.4"]


def _trials(p: Project) -> list[list[dict]]:
    rec = p.record()
    out = []
    for exp in rec["experiment_dirs"] if rec else []:
        for trial in Path(exp).iterdir():
            f = trial / "result.json"
            if f.is_file():
                out.append([json.loads(x) for x in f.read_text().splitlines() if x.strip()])
    return [t for t in out if t]


def _status(p: Project) -> dict:
    out = p.run("status", "latest", "--json", timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def _ok(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_every_verb_against_a_running_sweep_from_another_process(tmp_path: Path) -> None:
    p = Project(tmp_path)
    try:
        driver = p.start("run", *ARGS)
        wait_for(lambda: _status(p)["trials"].get("running") == 1 if p.record() and
                 (Path(p.record()["experiment_dirs"][0]) / "sweeps-live" / "status.json").is_file() else False,
                 300, 1.0, "a running trial")
        t0 = time.monotonic()
        s = _status(p)
        assert time.monotonic() - t0 < 10 and s["state"] == "running" and s["alive"], s
        assert s["driver"]["launched_by"] == "cli" and s["held"]["CPU"] == 2.0 and s["trials"]["planned"] == 6, s

        # pause: the running trial goes on and ends; none starts while paused (15 s); unpause: they start again
        assert "applied" in _ok(p.run("pause", "latest"))
        assert _status(p)["paused"]["by"], "status says who paused it"
        assert p.run("pause", "latest").returncode == 2, "a second pause is refused"
        wait_for(lambda: _status(p)["trials"]["running"] == 0, 120, 1.0, "the running trial to end while paused")
        seen = {t[0]["trial_id"] for t in _trials(p)}
        time.sleep(15)
        assert {t[0]["trial_id"] for t in _trials(p)} == seen and _status(p)["trials"]["running"] == 0, \
            "no trial started while the sweep was paused"
        assert _status(p)["state"] == "paused" and driver.poll() is None, "a pause is not a stall"
        before = {t[0]["trial_id"] for t in _trials(p)}
        assert "applied" in _ok(p.run("unpause", "latest"))

        # trial stop: that trial ends early at its next report; the next one starts within 10 s
        victim = wait_for(lambda: next((t[0]["trial_id"] for t in _trials(p) if t[0]["trial_id"] not in before),
                                       None), 120, 0.5, "a trial started after unpause to report")
        assert p.run("trial", "stop", "latest", "no_such_trial").returncode == 2, "an unknown trial is refused"
        stopped = _ok(p.run("trial", "stop", "latest", victim))
        assert "applied" in stopped, stopped
        applied_at = time.time()
        wait_for(lambda: any(t[0]["trial_id"] not in before | {victim} for t in _trials(p)), 120, 0.5,
                 "the next trial's first report")
        first = min((t[0] for t in _trials(p) if t[0]["trial_id"] not in before | {victim}), key=lambda r: r["wall"])
        started = first["wall"] - first["startup/total_s"]  # when Tune took it up: the start's own figure
        assert started - applied_at < 10, ("the next trial started within 10 s of the stop", started - applied_at)

        # stop: graceful; a second stop while it is pending is refused; the driver exits 130, resumable
        # the answer is `accepted` while a trial still runs to its next report, or already `applied` when none
        # did (between two trials the driver stops at once, before the command reads its answer)
        said = _ok(p.run("stop", "latest"))
        assert ": accepted (" in said or ": applied (" in said, said
        assert p.run("stop", "latest").returncode == 2, "a second stop while one is pending is refused"
        driver.communicate(timeout=180)
        assert driver.returncode == 130
        assert _status(p)["state"] == "interrupted" and p.run("pause", "latest").returncode == 2, \
            "a sweep that is not running refuses a verb"

        # stop --now on the resumed sweep, then a resume that finishes it: every trial once in MLflow, none RUNNING
        resumed = p.start("resume", "latest")
        wait_for(lambda: _status(p)["alive"] and _status(p)["trials"]["running"] == 1, 300, 1.0, "a resumed trial")
        assert "applied" in _ok(p.run("stop", "latest", "--now"))
        resumed.communicate(timeout=180)
        assert resumed.returncode == 130
        _ok(p.run("resume", "latest"))
        rec = p.record()
        assert rec["status"] == "finished" and rec["counts"]["total"] == 6, rec["counts"]
        assert p.run("status", "nosuch-sweep").returncode == 2, "an unknown sweep is refused"
        c = mlflow_client(p.env.tracking_uri)
        runs = c.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")
        assert len(runs) == 6 and len({r.data.tags["sweeps.trial_id"] for r in runs}) == 6, "each trial once"
        assert {r.info.status for r in runs} == {"FINISHED"}, [r.info.status for r in runs]
        (stopped_run,) = [r for r in runs if r.data.tags["sweeps.trial_id"] == victim]
        assert "@" in stopped_run.data.tags.get("sweeps.stopped_by", "") and \
            stopped_run.data.tags.get("early_stopped") == "true", stopped_run.data.tags
    finally:
        p.env.cleanup()
