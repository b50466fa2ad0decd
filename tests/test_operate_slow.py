"""Operating a real running sweep from a second process: status, pause/unpause, trial stop, stop, stop --now, from
the CLI and from the Python API (``sweeps.status/pause/unpause/stop_trial/stop``).

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
from decisions import Project
from harness import Sweep

pytestmark = pytest.mark.slow
# The stall watchdog is armed above the longest quiet a running trial shows (its start-up to the first report: up to
# 16 s seen with this box's 2 cores under a load of 8) and below the pause: a pause must not count as a stall.
# 20 epochs of 0.4 s: a trial runs ~8 s after its first report, time for `trial stop` (a CLI process, then the
# driver's poll) to reach it before its last epoch (at 15 epochs one landed on the last report, a full run).
EPOCHS = 20
STALL_S = 25
ARGS = ["+experiment=detloop", f"trainable.params.epochs={EPOCHS}", "trainable.params.epoch_sleep_s=0.4",
        f"sweep.stall_timeout_s={STALL_S}"]
# The pause is held, with nothing running, until a watchdog that counted it would have fired and said so: the
# stall arm after the last trial ended, plus one write of the live status (every 2 s) and a poll's slack.
PAUSE_S = STALL_S + 2 + 1


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


def _refused(out: subprocess.CompletedProcess[str], why: str) -> None:
    """Exit 2 with one line, nothing else printed."""
    lines = [x for x in out.stderr.splitlines() if x.strip()]
    assert out.returncode == 2 and len(lines) == 1 and not out.stdout.strip(), (why, out.stdout, out.stderr)


def _child_runs(p: Project) -> list:
    rec = p.record()
    c = mlflow_client(p.env.tracking_uri)
    return c.search_runs([rec["mlflow_experiment_id"]], f"tags.`mlflow.parentRunId` = '{rec['parent_run_id']}'")


def _python(p: Project, code: str) -> dict:
    """``python -c CODE`` in the project, as a user's script runs; the JSON it printed after ``PY ``."""
    return Sweep(p.env, cwd=p.root).said(code, timeout=300)


def _running_trial(p: Project) -> str:
    """The trial with the newest report that has not reached its last epoch."""
    live = [t for t in _trials(p) if t[-1]["training_iteration"] < EPOCHS]
    return max(live, key=lambda t: t[-1]["wall"])[0]["trial_id"]


def test_every_verb_against_a_running_sweep_from_another_process(tmp_path: Path) -> None:
    """Every verb, from the CLI and from the Python API, in turn on one sweep while it runs. Why its own sweep: the
    verbs act on a sweep while it runs and change what it does."""
    from sweeps.ops import operate

    p = Project(tmp_path)
    try:
        driver = p.start("run", *ARGS)
        wait_for(lambda: _status(p)["trials"].get("running") == 1 if p.record() and
                 (Path(p.record()["experiment_dirs"][0]) / "sweeps-live" / "status.json").is_file() else False,
                 300, 1.0, "a running trial")
        exp = p.record()["experiment_dirs"][0]
        t0 = time.monotonic()
        s = operate.status(exp)  # from a process with only the storage URI
        assert time.monotonic() - t0 < 2 and time.time() - s["updated"] < 5, "status within 2 s, and fresh"
        assert s["state"] == "running" and s["alive"], s
        assert s["driver"]["launched_by"] == "cli" and s["held"]["CPU"] == 1.0 and s["trials"]["planned"] == 6, s

        # pause: the running trial goes on and ends; none starts while paused (PAUSE_S with nothing running, longer
        # than the stall watchdog's arm: a pause is not a stall); unpause: they start again
        assert "applied" in _ok(p.run("pause", "latest"))
        assert _status(p)["paused"]["by"], "status says who paused it"
        _refused(p.run("pause", "latest"), "a second pause")
        wait_for(lambda: operate.status(exp)["trials"]["running"] == 0, 120, 0.3,
                 "the running trial to end while paused")
        seen, paused_at = {t[0]["trial_id"] for t in _trials(p)}, time.monotonic()
        _refused(p.run("trial", "stop", "latest", "no_such_trial"), "an unknown trial")  # while nothing runs
        while time.monotonic() - paused_at < PAUSE_S:  # watched throughout: a stall or a start fails at once
            s = operate.status(exp)
            assert s["state"] == "paused" and driver.poll() is None, ("a pause is not a stall", s)
            assert s["trials"]["running"] == 0 and {t[0]["trial_id"] for t in _trials(p)} == seen, \
                "no trial started while the sweep was paused"
            time.sleep(0.5)
        assert _status(p)["state"] == "paused", "the CLI's status says so too"
        before = {t[0]["trial_id"] for t in _trials(p)}
        assert "applied" in _ok(p.run("unpause", "latest"))

        # trial stop: that trial ends early at its next report; the next one starts within 10 s
        victim = wait_for(lambda: next((t[0]["trial_id"] for t in _trials(p) if t[0]["trial_id"] not in before),
                                       None), 120, 0.5, "a trial started after unpause to report")
        stopped = _ok(p.run("trial", "stop", "latest", victim))
        assert "applied" in stopped, stopped
        applied_at = time.time()
        wait_for(lambda: any(t[0]["trial_id"] not in before | {victim} for t in _trials(p)), 120, 0.5,
                 "the next trial's first report")
        first = min((t[0] for t in _trials(p) if t[0]["trial_id"] not in before | {victim}), key=lambda r: r["wall"])
        started = first["wall"] - first["startup/total_s"]  # when Tune took it up: the start's own figure
        assert started - applied_at < 10, ("the next trial started within 10 s of the stop", started - applied_at)

        # the same verbs from Python, as a script or a notebook calls them (README: sweeps.status/pause/unpause/
        # stop_trial), in one fresh interpreter: each answer as the API returns it
        said = _python(p, """
import json, sweeps
s = sweeps.status("latest")
paused, unpaused = sweeps.pause("latest"), sweeps.unpause("latest")
try:
    sweeps.stop_trial("latest", "no_such_trial")
    refused = ""
except sweeps.BadInput as e:
    refused = str(e)
print("PY " + json.dumps(dict(state=s["state"], alive=s["alive"], sweep=s["sweep_id"], paused=paused["state"],
                              unpaused=unpaused["state"], refused=refused)))
""")
        assert (said["state"], said["alive"], said["sweep"]) == ("running", True, p.record()["sweep_id"]), said
        assert (said["paused"], said["unpaused"]) == ("applied", "applied"), said
        assert "no_such_trial" in said["refused"], said

        # stop: graceful; the command waits until it applies; a second stop while it is pending is refused; the
        # trial that ran reported again with a checkpoint; the driver exits 130 with every run closed at once
        running, asked = _running_trial(p), time.time()
        stop = p.start("stop", "latest")
        wait_for(lambda: _status(p)["state"] in ("stopping", "interrupted"), 60, 0.3, "the stop to be accepted")
        _refused(p.run("stop", "latest"), "a second stop while one is pending (or after it applied)")
        said, _ = stop.communicate(timeout=120)
        assert stop.returncode == 0 and (": applied (" in said or "  applied: " in said), said
        driver.communicate(timeout=180)
        assert driver.returncode == 130
        again = next(t for t in _trials(p) if t[0]["trial_id"] == running)
        assert any(r["wall"] >= asked and r.get("checkpoint_dir_name") for r in again), \
            ("the running trial reported again, with a checkpoint, before the sweep stopped", again[-1])
        assert "RUNNING" not in {r.info.status for r in _child_runs(p)}, "every run closed when the driver exits"
        s = _status(p)
        assert s["state"] == "interrupted" and not s["held"] and s["stopping"] is None and s["stopped"]["by"], s
        _refused(p.run("pause", "latest"), "a sweep that is not running")

        # stop --now on the resumed sweep: its running trial's run KILLED at once; then a resume that finishes it:
        # every trial once in MLflow, none RUNNING
        since = time.time()
        resumed = p.start("resume", "latest")
        # a trial with 10 epochs (4 s) still to go: the stop lands while it runs (a resumed trial near its end once
        # finished before the stop reached it, and a later trial was the one killed)
        killed = wait_for(lambda: next((t[0]["trial_id"] for t in _trials(p) if t[-1]["wall"] > since
                                        and t[-1]["training_iteration"] <= EPOCHS - 10), None), 300,
                          0.2, "a trial of the resumed run with 10 epochs to go")
        now = _python(p, 'import json, sweeps; print("PY " + json.dumps(sweeps.stop("latest", now=True)))')
        assert now["state"] == "applied" and now["verb"] == "stop_now", now  # from Python (the CLI's --now: run owner)
        resumed.communicate(timeout=180)
        assert resumed.returncode == 130
        status_now = {r.data.tags["sweeps.trial_id"]: r.info.status for r in _child_runs(p)}
        assert status_now[killed] == "KILLED" and "RUNNING" not in status_now.values(), status_now
        _ok(p.run("resume", "latest"))
        rec = p.record()
        assert rec["status"] == "finished" and rec["counts"]["total"] == 6, rec["counts"]
        s = _status(p)
        assert s["state"] == "finished" and not s["alive"] and s["best"]["trial_id"] == rec["best"]["trial_id"], s
        assert s["trials"]["done"] + s["trials"]["stopped_early"] == 6 and s["trials"]["running"] == 0, s
        _refused(p.run("status", "nosuch-sweep"), "an unknown sweep")
        runs = _child_runs(p)
        assert len(runs) == 6 and len({r.data.tags["sweeps.trial_id"] for r in runs}) == 6, "each trial once"
        assert {r.info.status for r in runs} == {"FINISHED"}, [r.info.status for r in runs]
        (stopped_run,) = [r for r in runs if r.data.tags["sweeps.trial_id"] == victim]
        assert "@" in stopped_run.data.tags.get("sweeps.stopped_by", "") and \
            stopped_run.data.tags.get("early_stopped") == "true", stopped_run.data.tags
    finally:
        p.env.cleanup()
