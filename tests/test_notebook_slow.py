"""The Python API in a real Jupyter kernel (nbclient + ipykernel): examples/quickstart.ipynb runs a sweep and reads
its DataFrame with one status line updated in place; a kernel interrupt stops a sweep cleanly, raises
KeyboardInterrupt in the cell, gives the kernel its handlers back, and the sweep resumes to the end.

The kernel inherits the test's environment (SWEEPS_HOME, RAY_TMPDIR, HOME in tmp_path: conftest's sweeps_env) and
runs in tmp_path, so reports/ lands there too.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, SLOW_EPOCHS, mlflow_client, wait_for

pytestmark = pytest.mark.slow
NOTEBOOK = REPO / "examples" / "quickstart.ipynb"

BEFORE = """import signal
_before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}"""

CHECK = """import json, signal
import pandas as pd
on_disk = pd.read_csv(result.report_path.parent / "trials.csv")
print(json.dumps({
    "status": result.status, "exit_code": result.exit_code, "sweep_id": result.sweep_id,
    "rows": len(result.trials), "columns": list(result.trials.columns),
    "trial_ids": list(result.trials["trial_id"]), "statuses": sorted(result.trials["status"]),
    "same_as_trials_csv": bool(on_disk.equals(result.trials)),
    "load_same": bool(sweeps.load(result.sweep_id).trials.equals(result.trials)),
    "best": [result.best.trial_id, result.best.metric, result.best.value],
    "parent_run_id": result.parent_run_id, "mlflow_url": result.mlflow_url,
    "handlers_kept": all(signal.getsignal(s) is h for s, h in _before.items()),
}))"""


def _client(nb: Any, root: Path) -> Any:
    from nbclient import NotebookClient

    return NotebookClient(nb, kernel_name="python3", timeout=900, resources={"metadata": {"path": str(root)}})


def _text(output: Any) -> str:
    if output.get("output_type") == "stream":
        return str(output.get("text", ""))
    return str((output.get("data") or {}).get("text/plain", ""))


def _stdout(cell: Any) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream" and
                   o.get("name") == "stdout")


def test_the_quickstart_notebook_runs_a_sweep_and_reads_its_dataframe(sweeps_env: Any) -> None:
    """examples/quickstart.ipynb in a real Jupyter kernel: its sweep finishes and its DataFrame is trials.csv.
    Why its own sweep: it runs inside the kernel's process, which no CLI sweep shares."""
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    run_at = next(i for i, c in enumerate(nb.cells) if "sweeps.run(" in c.source)
    nb.cells.insert(run_at, nbformat.v4.new_code_cell(BEFORE))
    nb.cells.append(nbformat.v4.new_code_cell(CHECK))
    _client(nb, sweeps_env.root).execute()

    facts = json.loads(_stdout(nb.cells[-1]).strip().splitlines()[-1])
    assert (facts["status"], facts["exit_code"], facts["rows"]) == ("finished", 0, 2), facts
    assert facts["statuses"] == ["TERMINATED", "TERMINATED"]
    assert facts["same_as_trials_csv"] and facts["load_same"], "result.trials is not the report's trials.csv"
    assert facts["columns"][:3] == ["trial_id", "rank", "status"] and "best/val/acc" in facts["columns"]
    assert facts["best"][0] == facts["trial_ids"][0] and facts["best"][1] == "val/acc" and facts["best"][2] > 0.5
    assert facts["handlers_kept"], "the sweep left the kernel's signal handlers changed"
    assert facts["mlflow_url"].endswith(f"/runs/{facts['parent_run_id']}")
    parent = mlflow_client(sweeps_env.tracking_uri).get_run(facts["parent_run_id"])
    assert parent.info.status == "FINISHED"

    run_cell = nb.cells[run_at + 1]
    lines = [o for o in run_cell.outputs if "[sweeps] trials:" in _text(o)]
    assert len(lines) == 1 and lines[0]["output_type"] == "display_data", \
        f"the status line should be one output updated in place: {[_text(o) for o in lines]}"
    assert _text(lines[0]).count("trials:") == 1 and "2 done" in _text(lines[0]), _text(lines[0])
    assert f"SweepResult(sweep_id='{facts['sweep_id']}', status='finished'" in _text(run_cell.outputs[-1])
    table = next(c for c in nb.cells if c.source == "result.trials").outputs[0]["data"]
    assert "<table" in table["text/html"] and "best/val/acc" in table["text/html"]


INTERRUPTED = f"""import os, signal, sweeps
try:
    sweeps.run("quickstart", overrides=["sweep.num_samples=2", "trainable.num_workers=1",
                                        "trainable.params.epochs=8", "{SLOW_EPOCHS[0]}"])
except KeyboardInterrupt as exc:
    stopped = exc
print(type(stopped).__name__, isinstance(stopped, sweeps.SweepInterrupted), stopped.result.status,
      stopped.result.exit_code, stopped.result.sweep_id)
print("sigint handler is Python's default:", signal.getsignal(signal.SIGINT) is signal.default_int_handler)"""

STOPPED = """again = sweeps.resume(stopped.result.sweep_id)  # `sweeps stop` from a shell ends it: returned, not raised
print(type(again).__name__, again.status, again.exit_code, again.record.stop_reason)"""

RESUMED = """resumed = sweeps.resume(stopped.result.sweep_id)
c = resumed.record.counts
print(resumed.status, resumed.exit_code, c["total"], c["unfinished"], *sorted(set(resumed.trials["status"])))"""


def _reported(home: Path) -> bool:
    """A trial reported an epoch (the sweep's event log names an iteration)."""
    logs = home / "logs"
    return logs.is_dir() and any('"iteration"' in p.read_text(errors="replace") for p in logs.glob("*.log"))


def test_a_kernel_interrupt_stops_the_sweep_cleanly_and_it_resumes(sweeps_env: Any) -> None:
    """A kernel interrupt mid-sweep raises SweepInterrupted after a clean stop; resumed, `sweeps stop` from a
    shell ends it again and the cell gets a SweepResult (status interrupted, no exception); sweeps.resume
    finishes it. Why its own sweep: it must be interrupted, which the notebook's own sweep must not be."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in (INTERRUPTED, STOPPED, RESUMED)])
    client = _client(nb, sweeps_env.root)
    failures: list[BaseException] = []

    def interrupt() -> None:  # Kernel > Interrupt: jupyter_client sends SIGINT to the kernel's process group
        try:
            wait_for(lambda: _reported(sweeps_env.home), 600, interval=0.5, what="a reported epoch")
            os.killpg(client.km.provisioner.pgid, signal.SIGINT)
        except BaseException as exc:  # noqa: BLE001 - reported to the test's thread
            failures.append(exc)

    with client.setup_kernel():
        sender = threading.Thread(target=interrupt)
        sender.start()
        client.execute_cell(nb.cells[0], 0)
        sender.join()
        assert not failures, failures
        said = _stdout(nb.cells[0]).splitlines()
        assert said[0].split()[:5] == ["SweepInterrupted", "True", "interrupted", "130", said[0].split()[-1]], said
        assert said[1].endswith("True"), said
        sweep_id = said[0].split()[-1]
        rec = json.loads((sweeps_env.home / "sweeps" / f"{sweep_id}.json").read_text())
        assert rec["status"] == "interrupted" and rec["lease_expires"] is None
        runs = mlflow_client(sweeps_env.tracking_uri).search_runs([rec["mlflow_experiment_id"]])
        assert runs and {r.info.status for r in runs} <= {"KILLED", "FINISHED"}, [r.info.status for r in runs]
        stopper = threading.Thread(target=_stop_when_running, args=(sweeps_env, sweep_id, failures))
        stopper.start()
        client.execute_cell(nb.cells[1], 1)
        stopper.join()
        assert not failures, failures
        assert _stdout(nb.cells[1]).split() == ["SweepResult", "interrupted", "130", "stopped"], _stdout(nb.cells[1])
        client.execute_cell(nb.cells[2], 2)
    assert _stdout(nb.cells[2]).split() == ["finished", "0", "2", "0", "TERMINATED"], _stdout(nb.cells[2])


def _stop_when_running(env: Any, sweep_id: str, failures: list[BaseException]) -> None:
    """`sweeps stop` from another process once the resumed run is live (it refuses a sweep not running)."""
    try:
        def stopped() -> bool:
            rec = json.loads((env.home / "sweeps" / f"{sweep_id}.json").read_text())
            return rec["status"] == "running" and env.run("stop", sweep_id, timeout=120).returncode == 0

        wait_for(stopped, 600, interval=1.0, what="`sweeps stop` accepted by the resumed sweep")
    except BaseException as exc:  # noqa: BLE001 - reported to the test's thread
        failures.append(exc)
