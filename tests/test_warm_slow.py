"""A sweep on a Ray version whose internals sweeps was not checked against: Ray's public path, end to end.

``SWEEPS_TEST_RAY_VERSION`` makes the installed Ray look unchecked, so every private-surface lever stands down
(the warm start's lean trainer and pool, the loopback node address and rendezvous) and the sweep must still
run, with two workers per trial meeting over Train's own rendezvous, and say which path it took; its hours
budget (random search) counts, and its report finds every trial's best checkpoint. Why its own sweep: the
whole driver process, Ray included, must start on the public path. Slow tier.
"""

from __future__ import annotations

import json

import pytest
from conftest import FAST
from harness import Sweep

from sweeps import uris
from sweeps.execution.levers import core as levers_core

pytestmark = pytest.mark.slow


def test_an_unchecked_ray_runs_the_sweep_on_rays_public_path_and_says_so(sweep: Sweep) -> None:
    """Why its own sweep: the whole driver process, Ray included, must start on the public path."""
    env = sweep.env
    out = env.run("run", "+experiment=quickstart", "scheduler=fifo", "sweep.num_samples=2",
                  "trainable.num_workers=2", "sweep.budget.cpu_hours=5", *FAST,
                  extra_env={levers_core.TEST_RAY_VERSION: "2.61.0"}, timeout=600)
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-4000:]
    rec = Sweep.only(env).record()
    assert rec["counts"]["completed"] == 2, rec["counts"]
    # an hours budget with random search (the budget's gate, a public SearchAlgorithm wrapper) counted
    assert rec["hours"]["cpu_budget"] == 5 and rec["hours"]["cpu_used"] > 0, rec["hours"]
    # every trial's best checkpoint found through Tune's public Result, and logged as its model
    import pandas as pd
    table = pd.read_csv(env.root / "reports" / "quickstart" / rec["sweep_id"] / "trials.csv")
    assert table["model_id"].notna().all() and len(table) == 2, table.to_dict("records")
    assert rec["listeners"].startswith("the node's address, not loopback: Ray's public path"), rec["listeners"]
    assert "warm start: none" in said and "ray 2.61.0 is not a version it was checked against" in said
    assert "not only on loopback" in said
    exp = rec["experiment_dirs"][0]  # a storage URI: read through sweeps.uris, as the reports do
    files = [uris.join(exp, n, "result.json") for n in uris.listdir(exp)]
    rows = [json.loads(x) for f in files if uris.is_file(f) for x in uris.read_text(f).splitlines() if x.strip()]
    firsts = [r for r in rows if "sys/workers" in r]
    assert len(firsts) == 2 and all(r["sys/backend"] == "gloo" for r in firsts), firsts
    for r in firsts:  # two workers met over Train's own rendezvous, at Ray's node address
        assert len(json.loads(r["sys/workers"])) == 2 and r["sys/rendezvous"].split(":")[0] == r["node_ip"], r
