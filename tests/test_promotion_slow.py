"""A real ``scheduler=asha_promote`` sweep on one slot pauses trials at their rungs and promotes them, and a
promoted trial continues from its rung's epoch, never from 0; stopped by SIGTERM and resumed, it decides as the
straight run (the replay of it); each trial's MLflow run counts its pauses and promotions; the report counts the
rungs from the state the sweep saved (issue 50). Slow tier.

It needs its own sweep: the subject is Tune's PAUSE path with the project's scheduler, one trial at a time, over
the deterministic loop of :mod:`decisions` (its own checkpoint says which epoch it resumes from), stopped and
resumed, and no other slow test runs this scheduler. Its decisions over fixed curves are tests/test_promotion.py's.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from conftest import mlflow_client, trial_dirs, wait_for
from decisions import LRS, Project, score

pytestmark = pytest.mark.slow


def _reported(p: Project) -> int:
    """Result rows the sweep's trials wrote so far (every epoch of every trial)."""
    rec = p.record()
    if not rec:
        return 0
    return sum(len([x for x in (t / "result.json").read_text().splitlines() if x.strip()])
               for t in trial_dirs(rec["experiment_dirs"][0]) if (t / "result.json").is_file())


def test_asha_promote_on_one_slot_pauses_promotes_stops_resumes_and_decides_as_the_replay(tmp_path: Path) -> None:
    """Stopped by SIGTERM halfway (6 of the straight run's 13 epochs reported), then resumed: every lr trains
    the epochs the replay of the straight run gives it, each trial's reported epochs never restart, and each
    trial's MLflow run counts the promotions it got, across the stop."""
    p = Project(tmp_path)
    args = ("+experiment=detloop", "scheduler=asha_promote", "scheduler.grace_period=1",
            "scheduler.reduction_factor=2")
    proc = p.start("run", *args)
    wait_for(lambda: _reported(p) >= 6 or proc.poll() is not None, 300, 0.25, "6 epochs reported")
    assert proc.poll() is None, "the sweep ended before it could be stopped"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    p.env.kill_ray()
    rec = p.record()
    assert rec and rec["status"] == "interrupted", out[-3000:]
    done = p.run("resume", "latest", timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    assert "the scheduler PromotionASHA continues from its state" in said, said[-3000:]
    rec = p.record()
    epochs: dict[float, list[int]] = {}
    for trial in trial_dirs(rec["experiment_dirs"][0]):
        rows = [json.loads(x) for x in (trial / "result.json").read_text().splitlines() if x.strip()] \
            if (trial / "result.json").is_file() else []
        if rows:
            epochs[float(rows[-1]["config"]["lr"])] = [int(r["epoch"]) for r in rows]
    assert sorted(epochs) == sorted(LRS)
    straight, promotions = _replayed()
    for lr, seen in epochs.items():
        assert seen == list(range(len(seen))), (lr, seen, "a promoted trial goes on from its rung's epoch")
        # a trial waiting for promotion at the stop is requeued by Tune and pauses again at its first result
        assert len(seen) - straight[lr] in (0, 1), (lr, len(seen), straight, "the straight run's epochs, or one more")
    assert len(epochs[0.05]) == 6, ("the best lr is trained to max_t", epochs)
    assert sum(map(len, epochs.values())) < 6 * len(LRS), "trials were paused and never promoted"

    # each trial's run: the promotions the straight run gives it, counted across the stop; a pause at each
    client = mlflow_client(p.env.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("detloop").experiment_id],
                              "tags.`sweeps.kind` = 'trial'")
    assert len(runs) == len(LRS)
    for run in runs:
        lr, tags = float(run.data.params["lr"]), run.data.tags
        assert int(tags.get("sweeps.promotions", 0)) == promotions[lr], (lr, tags, promotions)
        assert int(tags.get("sweeps.pauses", 0)) >= promotions[lr] + (lr != 0.05), (lr, tags)
        assert run.info.status == "FINISHED", (lr, run.info.status)

    p.env.run("report", "latest", "--format", "md", "--out", str(tmp_path / "rep"), cwd=p.root, check=True)
    md = (tmp_path / "rep" / "summary.md").read_text()
    total = sum(map(len, epochs.values()))
    assert "## Rungs" in md and f"epochs trained to reach the rungs: {sum(straight.values())} " in md, md[-3000:]
    if total > sum(straight.values()):  # the waiting trials' epoch after the resume: said, not hidden
        assert f"epochs the trials trained in all: {total} ({total - sum(straight.values())} past" in md, md[-3000:]


def _replayed() -> tuple[dict[float, int], dict[float, int]]:
    """Epochs and promotions per lr that benchmarks/promotion.py's replay gives the same scheduler on one slot,
    grid order: the straight run's decisions."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from promotion import Replay

    from sweeps.execution.tuning.promotion import PromotionASHA

    curves = [[score(lr, e) for e in range(6)] for lr in LRS]
    sched = PromotionASHA(max_t=6, grace_period=1, reduction_factor=2)
    replay = Replay(sched, curves, list(range(len(LRS))), 1, "score", "max").run(6)
    promoted = [tid for rung in sched.ladder.promoted for tid in rung]
    return ({LRS[i]: max(e for j, e in replay.reach if j == i) for i in range(len(LRS))},
            {LRS[i]: promoted.count(f"t{i}") for i in range(len(LRS))})
