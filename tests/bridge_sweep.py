"""Run one sweep's Tuner in this process with a deliberately slow Tune callback (tests/test_bridge_slow.py).

    python tests/bridge_sweep.py DELAY_S OVERRIDE...

Builds the real Tuner (``sweeps.execution.run.owner.Run.new``) on the embedded Ray and adds a Tune
``Callback`` whose ``on_trial_result`` sleeps DELAY_S: the driver falls behind the Train run, which is what
MLflow calls over a slow network do. Prints ``RESULT {json}`` with each trial's error, its folder and the
storage folder.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from ray import tune

from sweeps.execution.run.owner import Run
from sweeps.ops.launch import launched
from sweeps.ops.prepare import prepare


class SlowDriver(tune.Callback):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any],
                        **info: Any) -> None:
        time.sleep(self.delay_s)


def main() -> None:
    delay, overrides = float(sys.argv[1]), sys.argv[2:]
    spec = prepare(overrides)
    with launched(spec) as (the_plan, _client):
        grid = Run.new(spec, the_plan, "bridgetest", [SlowDriver(delay)]).tuner.fit()
        out = {"storage": spec.storage_path, "experiment": grid.experiment_path,
               "trials": [{"error": str(r.error) if r.error else None, "path": r.path} for r in grid]}
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
