"""The README's user paths, each run as the README shows it, in one SWEEPS_HOME. Slow tier.

- the quickstart as shipped (its own size: 6 trials x 2 Train workers, 8 epochs, ASHA), watched from another shell
  with ``python -m sweeps status latest --watch`` on a terminal;
- the Python API as the README's "From Python" block calls it: ``sweeps.run``, ``extend``, ``confirm``,
  ``promote``, ``load``, in one fresh interpreter;
- ``python -m sweeps confirm latest --top-k 3 --seeds 5`` on that sweep;
- ``python -m sweeps ui --auth``: MLflow's basic-auth app in front of this home's store.

The sweeps after the shipped one run single-process trials in the trial's own process (``trainable.num_workers=1``):
their promises are about the API and confirm, not about worker groups. The Python operate verbs
(``sweeps.status/pause/unpause/stop``) run against a running sweep in ``tests/test_operate_slow.py``.
"""

from __future__ import annotations

import base64
import json
import os
import pty
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from conftest import SweepsEnv, module_env, wait_for
from harness import Sweep

pytestmark = pytest.mark.slow

SMALL = ["sweep.num_samples=4", "trainable.num_workers=1", "trainable.params.epochs=3", "scheduler=fifo"]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SweepsEnv]:
    yield from module_env(tmp_path_factory, "user-paths")


@pytest.fixture(scope="module")
def api(home: SweepsEnv) -> tuple[Sweep, dict]:
    """The README's "From Python" block, in a fresh interpreter: a sweep, 2 more trials, its top 2 confirmed over 2
    seeds, its best promoted, and the stored sweep loaded back. What each call returned, as JSON."""
    s = Sweep(home)
    code = f"""
import json, sweeps
result = sweeps.run("quickstart", overrides={SMALL!r})
first = dict(status=result.status, exit_code=result.exit_code, trials=len(result.trials), sweep_id=result.sweep_id)
more = sweeps.extend(result.sweep_id, 2)
conf = sweeps.confirm(result.sweep_id, top_k=2, seeds=2)
prom = sweeps.promote(result.sweep_id, model_name="digits-mlp")
back = sweeps.load("latest")
print("PY " + json.dumps(dict(
    first=first, extended=dict(status=more.status, exit_code=more.exit_code, total=more.record.counts["total"]),
    confirmed=[dict(digest=i.digest, n=i.n, pessimistic=i.pessimistic) for i in conf.intervals],
    promoted=dict(text=str(prom), version=str(prom.version), trial_id=prom.trial_id),
    loaded=dict(sweep_id=back.sweep_id, trials=len(back.trials), best=back.best.trial_id))))
"""
    return s, s.said(code, timeout=900)


class _Terminal:
    """A command on a pseudo-terminal (what ``--watch`` refreshes in place on), its output collected."""

    def __init__(self, env: SweepsEnv, *args: str) -> None:
        master, slave = pty.openpty()
        self.proc = subprocess.Popen([sys.executable, "-m", "sweeps", *args], cwd=env.root, env=env.env,
                                     stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        self.out = bytearray()
        self._reader = threading.Thread(target=self._read, args=(master,), daemon=True)
        self._reader.start()

    def _read(self, fd: int) -> None:
        try:
            while chunk := os.read(fd, 4096):
                self.out += chunk
        except OSError:  # EIO: the command ended and closed the terminal
            pass
        finally:
            os.close(fd)

    def text(self) -> str:
        return self.out.decode(errors="replace")


def test_the_shipped_quickstart_runs_at_its_size_and_status_watch_follows_it_to_its_end(home: SweepsEnv) -> None:
    """``python -m sweeps run +experiment=quickstart`` with nothing changed, and, from another shell,
    ``python -m sweeps status latest --watch`` on a terminal: it redraws in place every 2 s while the sweep runs and
    ends by itself, exit 0, when the sweep ends. Why its own sweep: the shipped size is the promise (the first
    command a user runs), paid once in the suite."""
    s = Sweep(home)
    started = time.monotonic()
    s.start("run", "+experiment=quickstart")
    wait_for(lambda: s.ids() and home.run("status", "latest", "--json", timeout=60).returncode == 0
             and json.loads(home.run("status", "latest", "--json", timeout=60).stdout).get("alive"),
             300, 1.0, "the quickstart's live status")
    watch = _Terminal(home, "status", "latest", "--watch")
    code, out = s.wait(timeout=900)
    assert code == 0, out[-4000:]
    watch.proc.wait(timeout=30)  # it notices the end at its next refresh (2 s)
    assert watch.proc.returncode == 0, watch.text()[-2000:]
    frames = [f for f in watch.text().split("\x1b[H\x1b[J") if f.strip()]
    assert len(frames) >= 2, ("--watch on a terminal redraws in place", watch.text()[-2000:])
    assert f"sweep {s.id}: running" in frames[0], frames[0]
    assert "trials   :" in frames[-1] and "of 6" in frames[-1], frames[-1]

    rec = s.record()
    cfg = rec["config"]
    assert (cfg["sweep"]["num_samples"], cfg["trainable"]["num_workers"], cfg["trainable"]["params"]["epochs"]) == \
        (6, 2, 8), "the shipped size"
    assert rec["status"] == "finished" and rec["counts"]["total"] == 6, rec["counts"]
    rows = s.rows()
    assert len(rows) == 6 and max(len(r) for r in rows.values()) == 8, {t: len(r) for t, r in rows.items()}
    assert rec["counts"].get("early_stopped", 0) >= 1, ("ASHA stopped a trial early", rec["counts"])
    runs = s.child_runs()
    assert len(runs) == 6 and {r.info.status for r in runs} == {"FINISHED"}, [r.info.status for r in runs]
    assert "## Leaderboard" in s.report() or "Leaderboard" in s.report()
    logging_wall = time.monotonic() - started
    print(f"the shipped quickstart: {rec['wall_s']:.1f} s of sweep wall, {logging_wall:.1f} s from the command")


def test_the_python_api_runs_extends_confirms_promotes_and_loads_as_the_readme_shows(api: tuple[Sweep, dict]) -> None:
    """Shares the API sweep (this module's ``api`` fixture) with the confirm test below."""
    s, got = api
    assert got["first"] == {"status": "finished", "exit_code": 0, "trials": 4, "sweep_id": s.id}, got["first"]
    assert got["extended"] == {"status": "finished", "exit_code": 0, "total": 6}, got["extended"]
    assert [c["n"] for c in got["confirmed"]] == [2, 2], got["confirmed"]
    bounds = [c["pessimistic"] for c in got["confirmed"]]
    assert bounds == sorted(bounds, reverse=s.record()["mode"] == "max"), "ranked by the pessimistic end"
    assert got["loaded"]["sweep_id"] == s.id and got["loaded"]["trials"] == 6, got["loaded"]
    (version,) = s.models("digits-mlp")
    champion = s.client().get_model_version_by_alias("digits-mlp", "champion")
    assert str(version.version) == str(champion.version) == got["promoted"]["version"], (version, champion)
    assert version.tags["trial_id"] == got["promoted"]["trial_id"] == got["loaded"]["best"], version.tags
    assert len(s.child_runs()) == 6 + 2 * 2, "each trial and each confirmation re-run is a run of the sweep"


def test_confirm_latest_top_3_over_5_seeds_from_the_cli(api: tuple[Sweep, dict]) -> None:
    """``python -m sweeps confirm latest --top-k 3 --seeds 5`` as the README shows, on the API's sweep (the newest
    in this home): 3 configurations x 5 fresh seeds, ranked by the pessimistic end of their 95% intervals."""
    s, _ = api
    proc = s.cli("confirm", "latest", "--top-k", "3", "--seeds", "5", timeout=900, check=True)
    rec = s.record()
    assert len(rec["confirm_dirs"]) == 2, rec["confirm_dirs"]
    # the API's confirm re-ran the top 2 over 2 seeds: their intervals pool those re-runs (2 + 5), and it says so
    earlier = {c["digest"] for c in api[1]["confirmed"]}
    assert sorted(row["n"] for row in rec["confirmed"]) == [5, 7, 7], rec["confirmed"]
    assert {row["digest"] for row in rec["confirmed"] if row["n"] == 7} == earlier, (earlier, rec["confirmed"])
    assert "also count(s) the re-runs of an earlier confirm (n above 5)" in proc.stdout, proc.stdout[-2000:]
    bounds = [row["pessimistic"] for row in rec["confirmed"]]
    assert bounds == sorted(bounds, reverse=rec["mode"] == "max"), "ranked by the pessimistic end"
    seeds: dict[str, set] = {}
    for d in s.trial_dirs("confirm_dirs"):
        if not str(d).startswith(rec["confirm_dirs"][1]):
            continue
        first = json.loads((d / "result.json").read_text().splitlines()[0])
        seeds.setdefault(json.dumps({k: v for k, v in first["config"].items() if k != "seed"}, sort_keys=True),
                         set()).add(first["config"].get("seed"))
    assert sorted(len(v) for v in seeds.values()) == [5, 5, 5], seeds
    assert rec["confirmed"][0]["digest"] in proc.stdout, proc.stdout[-3000:]


def test_ui_with_auth_asks_every_request_for_a_user_and_lets_the_admin_in(home: SweepsEnv) -> None:
    """``python -m sweeps ui --auth`` (first start: ``MLFLOW_AUTH_ADMIN_PASSWORD``): MLflow's basic-auth app on
    127.0.0.1; a request without a user is refused 401, the admin reads this home's experiments. Runs no sweep."""
    from sweeps.ports import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sweeps", "ui", "--auth", "--port", str(port)], cwd=home.root,
                            env={**home.env, "MLFLOW_AUTH_ADMIN_PASSWORD": "a-test-password-1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    url = f"http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search?max_results=50"

    def status(auth: str | None) -> tuple[int, bytes]:
        req = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"} if auth else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, b""
        except OSError:
            return 0, b""

    try:
        wait_for(lambda: status(None)[0] or proc.poll() is not None, 180, 0.5, "the UI to answer")
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert status(None)[0] == 401, "a request without a user is refused"
        assert status(base64.b64encode(b"admin:wrong").decode())[0] == 401
        code, body = status(base64.b64encode(b"admin:a-test-password-1").decode())
        assert code == 200, code
        assert "quickstart" in {e["name"] for e in json.loads(body).get("experiments", [])}, body[:500]
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=60)
