"""Per-stage trial start-up from ``$SWEEPS_STAGE_LOG`` stamps (sweeps/execution/train/stages.py) and Tune's state.

Every figure is seconds after the trial's Tune start (status RUNNING, the same clock the old "start -> first
epoch" used), on one host's wall clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

STAGES = ("trial_up", "controller_up", "pg_ready", "workers_up", "process_group_ready", "loop_start",
          "first_report")
TRAIN_LOG = {"Placement group ready": "pg wait", "worker actors created": "worker actors created",
             "Train context initialized on workers": "train context init",
             "after_worker_group_start callbacks completed": "process group (backend on_start)",
             "Worker group startup completed": "worker group start (total)"}


def read_stamps(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def per_trial(stamps: list[dict[str, Any]], starts: dict[str, float]) -> dict[str, dict[str, float]]:
    """``{trial_id: {stage: seconds after its Tune start}}`` for each trial's first start."""
    out: dict[str, dict[str, float]] = {}
    for trial, t0 in starts.items():
        rows = [s for s in stamps if s["trial"] == trial]
        first: dict[str, dict[str, Any]] = {}
        for s in rows:
            key = s["stage"] if s["stage"] != "train_log" else "log:" + s.get("what", "")
            if key == "loop_start":
                first[key] = max(first.get(key, s), s, key=lambda r: r["t"])  # the last rank to get there
            else:
                first.setdefault(key, s)
        stages: dict[str, float] = {k: first[k]["t"] - t0 for k in STAGES if k in first}
        if "pg_requested" in first:
            wait = next((v["seconds"] for k, v in first.items() if k.startswith("log:Placement group ready")), None)
            if wait is not None:
                stages["pg_ready"] = first["pg_requested"]["t"] - t0 + wait
        for k, v in first.items():
            for needle, label in TRAIN_LOG.items():
                if k.startswith("log:") and needle in k:
                    stages[f"train: {label}"] = float(v["seconds"])
        if "trial_up" in first and first["trial_up"].get("proc_start"):
            stages["trial actor process age"] = first["trial_up"]["t"] - first["trial_up"]["proc_start"]
        out[trial] = stages
    return out


def landing(stamps: list[dict[str, Any]]) -> dict[str, str]:
    """Process reuse: trial actors whose process already ran an earlier trial (Tune's ``reuse_actors``), and
    any Train controller or worker process seen in two trials (never expected: they exit with their run)."""
    seen: set[int] = set()
    reused = 0
    trials = [s for s in stamps if s["stage"] == "trial_up"]
    for s in sorted(trials, key=lambda r: r["t"]):
        reused += s["pid"] in seen
        seen.add(s["pid"])
    train = [s["pid"] for s in stamps if s["stage"] == "controller_up"]
    train += [p for s in stamps if s["stage"] == "workers_up" for p in s.get("pids") or []]
    return {"trial actors reused": f"{reused}/{len(trials)}",
            "Train processes in two runs": str(len(train) - len(set(train)))}
