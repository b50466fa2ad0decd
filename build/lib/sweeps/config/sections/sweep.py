"""The ``sweep`` section: name, objective, trial count, concurrency, time budget, seed, warm-start points."""

from __future__ import annotations

import re

from sweeps.config.reader import Reader, mlflow_name_errors
from sweeps.config.spec import BudgetCfg, SweepCfg

MODES = ("min", "max")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$")  # names folders: no leading dot, so no "." or ".."
MAX_SAMPLES = 1_000_000


def parse(r: Reader) -> SweepCfg:
    name = r.get("sweep", "name", "str")
    metric = r.get("sweep", "metric", "str")
    mode = r.get("sweep", "mode", "str", choices=MODES)
    if metric is None or mode is None:
        r.errors.append("sweep.metric/sweep.mode: the searcher and scheduler need the metric to optimize and "
                        "its mode (min or max)")
    num_samples = r.get("sweep", "num_samples", "int")
    max_conc = r.get("sweep", "max_concurrent_trials", "int", default=0)
    budget = r.get("sweep", "time_budget_s", "num", default=None)
    stall = r.get("sweep", "stall_timeout_s", "num", default=None)
    if stall is not None and stall < 0:
        r.errors.append(f"sweep.stall_timeout_s: must be >= 0 seconds (0 = never; null = derived), got {stall}")
    seed = r.get("sweep", "seed", "int", default=0)
    points = r.get("sweep", "points_to_evaluate", "list", default=[])
    if isinstance(num_samples, int):
        if num_samples == 0 or num_samples < -1:
            r.errors.append(f"sweep.num_samples: must be >= 1, or -1 (unbounded, with sweep.time_budget_s); "
                            f"got {num_samples}")
        elif num_samples > MAX_SAMPLES:
            r.errors.append(f"sweep.num_samples: {num_samples} trials is more than {MAX_SAMPLES}; use -1 with "
                            f"sweep.time_budget_s for an open-ended sweep")
        elif num_samples == -1 and budget is None:
            r.errors.append("sweep.num_samples: -1 (unbounded) needs sweep.time_budget_s, or the sweep never "
                            "ends")
    if isinstance(max_conc, int) and max_conc < 0:
        r.errors.append(f"sweep.max_concurrent_trials: must be >= 0 (0 = as many as fit), got {max_conc}")
    if budget is not None and budget <= 0:
        r.errors.append(f"sweep.time_budget_s: must be > 0 seconds, got {budget}")
    if isinstance(name, str) and not NAME.match(name):
        r.errors.append(f"sweep.name: {name[:120]!r} may only hold letters, digits, _ . - (at most 100, starting "
                        f"with a letter or digit: it names folders)")
    if isinstance(metric, str):
        r.errors += mlflow_name_errors("sweep.metric", metric)
    from sweeps.config.sections import objectives as mo

    return SweepCfg(name, metric, mode, num_samples, max_conc, float(budget) if budget else None, seed,
                    tuple(dict(p) for p in points or []), resource_budget(r), mo.objectives(r, metric, mode),
                    mo.constraints(r), float(stall) if stall is not None else None)


def resource_budget(r: Reader) -> BudgetCfg:
    """``sweep.budget: {cpu_hours: 2.0, gpu_hours: 8.0}``: each a positive number or null."""
    node = r.get("sweep", "budget", "map", default={}) or {}
    unknown = sorted(set(node) - {"cpu_hours", "gpu_hours"})
    if unknown:
        r.errors.append(f"sweep.budget: unknown key(s) {', '.join(unknown)}; allowed: cpu_hours, gpu_hours")
    hours: dict[str, float | None] = {}
    for key in ("cpu_hours", "gpu_hours"):
        value = node.get(key)
        ok = value is None or (isinstance(value, int | float) and not isinstance(value, bool) and value > 0)
        if not ok:
            r.errors.append(f"sweep.budget.{key}: must be a number of hours > 0 (or null), got {value!r}")
        hours[key] = float(value) if ok and value is not None else None
    return BudgetCfg(hours["cpu_hours"], hours["gpu_hours"])
