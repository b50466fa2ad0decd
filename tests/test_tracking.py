"""The local SQLite store opened by several processes at once (real MLflow, real processes)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

OPEN_STORE = """
import sys, time
from sweeps.tracking import client as tracking
start = float(sys.argv[2])
while time.time() < start:
    time.sleep(0.001)
c = tracking.client(sys.argv[1])
print(tracking.get_or_create_experiment(c, "race", sys.argv[1]) is not None)
"""


def test_two_processes_opening_a_fresh_sqlite_store_at_once_both_get_it(tmp_path: Path) -> None:
    """Real MLflow: both processes create the store's tables at the same instant; the lock beside the store lets
    one migrate and the other find the tables (a client made outside the lock once migrated a second time:
    'duplicate column name: step')."""
    uri = f"sqlite:///{tmp_path / 'fresh' / 'mlflow.db'}"
    at = str(time.time() + 3)
    procs = [subprocess.Popen([sys.executable, "-c", OPEN_STORE, uri, at], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=100) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [err[-1500:] for _, err in outs]
