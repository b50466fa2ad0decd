"""A real ``scheduler=asha_promote`` sweep on one slot pauses trials at their rungs and promotes them, and a
promoted trial continues from its rung's epoch, never from 0, and the report counts the rungs from the state the
sweep saved (issue 50). Slow tier.

It needs its own sweep: the subject is Tune's PAUSE path with the project's scheduler, one trial at a time, over
the deterministic loop of :mod:`decisions` (its own checkpoint says which epoch it resumes from), and no other
slow test runs this scheduler. Its decisions over fixed curves are tests/test_promotion.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SweepsEnv, trial_dirs
from decisions import LRS, project, score

pytestmark = pytest.mark.slow


def test_asha_promote_on_one_slot_pauses_promotes_and_resumes_from_the_rung(tmp_path: Path) -> None:
    env = SweepsEnv(tmp_path)
    root = tmp_path / "proj"
    env.env["SWEEPS_CONF_DIR"] = str(project(root))
    done = env.run("run", "+experiment=detloop", "scheduler=asha_promote", "scheduler.grace_period=1",
                   "scheduler.reduction_factor=2", cwd=root, timeout=300)
    said = done.stdout + done.stderr
    assert done.returncode == 0, said[-4000:]
    rec = json.loads(next((env.home / "sweeps").glob("[!.]*.json")).read_text())
    epochs: dict[float, list[int]] = {}
    for trial in trial_dirs(rec["experiment_dirs"][0]):
        rows = [json.loads(x) for x in (trial / "result.json").read_text().splitlines() if x.strip()] \
            if (trial / "result.json").is_file() else []
        if rows:
            epochs[float(rows[-1]["config"]["lr"])] = [int(r["epoch"]) for r in rows]
    assert sorted(epochs) == sorted(LRS)
    for lr, seen in epochs.items():
        assert seen == list(range(len(seen))), (lr, seen, "a promoted trial goes on from its rung's epoch")
    promoted = {lr: len(seen) for lr, seen in epochs.items() if len(seen) > 1}
    assert promoted, ("some trial was promoted past the first rung", epochs)
    assert len(epochs[0.05]) == 6, ("the best lr is trained to max_t", epochs)
    assert sum(map(len, epochs.values())) < 6 * len(LRS), "trials were paused and never promoted"
    assert {lr: len(seen) for lr, seen in epochs.items()} == _replayed(), "the replay decides as the sweep"
    env.run("report", "latest", "--format", "md", "--out", str(tmp_path / "rep"), cwd=root, check=True)
    md = (tmp_path / "rep" / "summary.md").read_text()
    total = sum(map(len, epochs.values()))
    assert "## Rungs" in md and f"epochs trained to reach the rungs: {total} " in md, md[-3000:]


def _replayed() -> dict[float, int]:
    """Epochs per lr that benchmarks/promotion.py's replay gives the same scheduler on one slot, grid order."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from promotion import Replay

    from sweeps.execution.tuning.promotion import PromotionASHA

    curves = [[score(lr, e) for e in range(6)] for lr in LRS]
    sched = PromotionASHA(max_t=6, grace_period=1, reduction_factor=2)
    replay = Replay(sched, curves, list(range(len(LRS))), 1, "score", "max").run(6)
    return {LRS[i]: max(e for j, e in replay.reach if j == i) for i in range(len(LRS))}
