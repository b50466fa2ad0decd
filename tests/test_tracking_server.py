"""Tracking against a real ``mlflow server`` process, ``python -m sweeps ui``, and the MLflow UI in a real browser.

The slow tests read the session's ``served_sweep`` (conftest): one lean server (SQLite + proxied artifacts) and one
tiny sweep logged to it over HTTP; they assert the run tree through ``MlflowClient``, and the ``browser`` tests
look at the same runs in the real MLflow 3.17 UI in headless Debian Chromium (Selenium; screenshots land in
``.../browser0/shots/*.png``: open them when a test fails). One file, so the slow tier's two processes build
that server and sweep once (``--dist loadfile`` keeps a file in one process). The unmarked tests cover the pure
helpers of :mod:`sweeps.mlflow_server` and :mod:`sweeps.ui`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import SERVED_EPOCHS, SERVED_TINY, SERVED_TRIALS, ServedSweep, SweepsEnv, mlflow_client, model_files, race

from sweeps.tracking import client as tracking
from sweeps.tracking import server as mlflow_server
from sweeps.tracking import ui

EPOCHS = SERVED_EPOCHS
TRIALS = SERVED_TRIALS
TINY = SERVED_TINY
SAMPLED = ("lr", "hidden_size", "batch_size")


# -- pure helpers (fast tier) ----------------------------------------------------------------------
def _parsed(cmd: list[str]) -> dict[str, Any]:
    """What MLflow's own ``mlflow server`` command line parser makes of the arguments (nothing is started)."""
    from mlflow.cli import cli

    assert cmd[:4] == [sys.executable, "-m", "mlflow", "server"], cmd  # this interpreter's MLflow, its server
    return dict(cli.commands["server"].make_context("server", cmd[4:]).params)


def test_server_command_is_lean_and_keeps_artifacts_where_asked() -> None:
    params = _parsed(mlflow_server.server_command("sqlite:////d/mlflow.db", "127.0.0.1", 5123,
                                                  artifacts_destination="/d/art",
                                                  default_artifact_root="file:///d/art"))
    assert (params["backend_store_uri"], params["host"], params["port"]) == ("sqlite:////d/mlflow.db", "127.0.0.1",
                                                                             5123)
    assert int(params["workers"]) == 1, "one uvicorn worker"
    assert params["default_artifact_root"] == "file:///d/art" and params["artifacts_destination"] == "/d/art"
    assert params["serve_artifacts"] and not params["artifacts_only"]
    # a destination alone: new experiments get mlflow-artifacts:/ locations, uploads go through the server
    proxied = _parsed(mlflow_server.server_command("sqlite:////d/mlflow.db", "::1", 80,
                                                   artifacts_destination="s3://b/art", app_name="basic-auth"))
    assert (proxied["host"], proxied["port"], proxied["artifacts_destination"]) == ("::1", 80, "s3://b/art")
    assert proxied["default_artifact_root"] is None and proxied["serve_artifacts"]
    assert proxied["app_name"] == "basic-auth"


def test_server_env_disables_job_runners_unless_the_caller_set_them() -> None:
    assert mlflow_server.server_env({})["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "false"
    assert mlflow_server.server_env({"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "true"})[
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] == "true"


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("localhost", True), ("::1", True), ("127.0.1.1", True),
    ("0.0.0.0", False), ("192.168.1.4", False), ("::", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert mlflow_server.is_loopback(host) is loopback


def test_ui_artifacts_for_sqlite_match_where_sweeps_logs_them(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    opts = ui.artifact_options(uri)
    assert opts["default_artifact_root"] == tracking.artifact_root(uri) == (tmp_path / "mlartifacts").as_uri()
    assert opts["artifacts_destination"] == opts["default_artifact_root"]


@pytest.mark.parametrize("uri", ["ftp://x", "mlflow.db", "localhost:5000"])
def test_ui_rejects_a_uri_without_a_supported_scheme(uri: str) -> None:
    from sweeps.errors import BadInput

    with pytest.raises(BadInput, match="--tracking-uri"):
        ui.store_uri(uri)


def test_port_free_sees_a_listening_socket() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not mlflow_server.port_free("127.0.0.1", port)
    assert mlflow_server.port_free("127.0.0.1", port)


# -- one server, one tiny sweep over HTTP (slow tier) ----------------------------------------------
@dataclass
class Logged:
    env: SweepsEnv
    server: mlflow_server.Server
    artifacts: Path
    sweep_id: str
    git_head: str
    client: Any
    parent: Any
    children: list[Any]


@pytest.fixture(scope="module")
def logged(served_sweep: ServedSweep) -> Logged:
    s = served_sweep
    c = mlflow_client(s.url)
    exp = c.get_experiment_by_name("quickstart")
    runs = c.search_runs([exp.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get(tracking.RUN_TAG_KIND) == "sweep"]
    assert len(parents) == 1, [r.data.tags for r in runs]
    children = [r for r in runs if r.info.run_id != parents[0].info.run_id]
    return Logged(s.env, s.server, s.artifacts, s.sweep_id, s.git_head, c, parents[0], children)


@pytest.mark.slow
def test_server_runs_lean(logged: Logged) -> None:
    """One uvicorn worker under the launcher and no huey job runners: at most 2 processes in its group."""
    pgid = logged.server.proc.pid
    group = [p for p in Path("/proc").glob("[0-9]*") if _pgrp(p) == pgid]
    assert 1 <= len(group) <= 2, [(p.name, (p / "cmdline").read_bytes()[:120]) for p in group]


def _pgrp(proc_dir: Path) -> int | None:
    try:
        stat = (proc_dir / "stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[2])


@pytest.mark.slow
def test_parent_run_names_the_sweep_and_its_outcome(logged: Logged) -> None:
    import ray

    p = logged.parent
    tags = p.data.tags
    assert p.info.run_name == logged.sweep_id == tags[tracking.RUN_TAG_SWEEP]
    assert p.info.status == "FINISHED"
    assert tags["experiment"] == "quickstart" and tags["scheduler"] == "asha" and tags["searcher"] == "random"
    assert tags["metric"] == "val/acc" and tags["mode"] == "max"
    assert tags["git_commit"] == logged.git_head
    assert tags["ray_version"] == ray.__version__
    assert tags["count.total"] == str(TRIALS)
    assert int(tags["count.completed"]) + int(tags["count.early_stopped"]) == TRIALS
    assert tags["count.failed"] == "0"
    trial_ids = {r.data.tags[tracking.RUN_TAG_TRIAL] for r in logged.children}
    assert tags["best_trial_id"] in trial_ids
    best_child = next(r for r in logged.children if r.info.run_id == tags["best_run_id"])
    assert best_child.data.tags[tracking.RUN_TAG_TRIAL] == tags["best_trial_id"]
    best_seen = max(m.value for r in logged.children
                    for m in logged.client.get_metric_history(r.info.run_id, "val/acc"))
    assert float(tags["best_metric"]) == pytest.approx(best_seen)


@pytest.mark.slow
def test_parent_artifacts_hold_config_and_search_space(logged: Logged, tmp_path: Path) -> None:
    c, run_id = logged.client, logged.parent.info.run_id
    names = {a.path for a in c.list_artifacts(run_id)}
    assert {"config.yaml", "search_space.json"} <= names
    space = json.loads(Path(c.download_artifacts(run_id, "search_space.json", str(tmp_path))).read_text())
    assert set(space) == set(SAMPLED)
    config = Path(c.download_artifacts(run_id, "config.yaml", str(tmp_path))).read_text()
    assert "name: quickstart" in config and f"epochs: {EPOCHS}" in config


@pytest.mark.slow
def test_one_child_run_per_trial_nested_under_the_parent(logged: Logged) -> None:
    assert len(logged.children) == TRIALS
    for r in logged.children:
        tags = r.data.tags
        assert tags[tracking.PARENT_TAG] == logged.parent.info.run_id
        assert tags[tracking.RUN_TAG_KIND] == "trial" and tags[tracking.RUN_TAG_SWEEP] == logged.sweep_id
        assert r.info.status == "FINISHED", (r.info.run_name, r.info.status)
    assert len({r.data.tags[tracking.RUN_TAG_TRIAL] for r in logged.children}) == TRIALS


@pytest.mark.slow
def test_child_params_are_the_sampled_hyperparameters_and_fixed_settings(logged: Logged) -> None:
    for r in logged.children:
        sampled = json.loads((Path(r.data.tags["trial_dir"]) / "params.json").read_text())
        assert set(sampled) == set(SAMPLED)
        for k in SAMPLED:
            assert r.data.params[k] == str(sampled[k])
        assert 1e-3 <= float(r.data.params["lr"]) <= 1e-1
        assert r.data.params["hidden_size"] in ("64", "128")
        assert r.data.params["epochs"] == str(EPOCHS)
        assert r.data.params["num_layers"] == "1"


@pytest.mark.slow
def test_metric_histories_have_one_point_per_training_iteration(logged: Logged) -> None:
    for r in logged.children:
        history = logged.client.get_metric_history(r.info.run_id, "val/acc")
        steps = sorted(m.step for m in history)
        early = r.data.tags["early_stopped"] == "true"
        assert steps == list(range(1, len(steps) + 1)), steps
        assert len(steps) == EPOCHS or (early and 1 <= len(steps) < EPOCHS)
        assert all(0.0 <= m.value <= 1.0 for m in history)
        assert sorted(m.step for m in logged.client.get_metric_history(r.info.run_id, "train/loss")) == steps


@pytest.mark.slow
def test_best_checkpoint_is_each_childs_logged_model_stored_once(logged: Logged, tmp_path: Path) -> None:
    """Each trial's best checkpoint is a LoggedModel whose source run is the trial's run; its files are stored
    once in the artifact store (TRIALS copies of model.pt, none beside the runs); the models ordered by the
    metric are the report's ranking (values), and each model's metrics are its best step's."""
    import mlflow.artifacts
    import torch

    c = logged.client
    for r in logged.children:
        assert "model.pt" in model_files(c, r)
        assert 1 <= int(r.data.tags["best_checkpoint_iteration"]) <= EPOCHS
        assert r.data.tags["best_model"].startswith("models:/m-")
    exp = logged.parent.info.experiment_id
    ordered = c.search_logged_models([exp], order_by=[{"field_name": "metrics.val/acc", "ascending": False}])
    trial_models = [m for m in ordered if m.tags.get("sweeps.model_kind") == "trial"]
    assert len(trial_models) == TRIALS
    values = [next(x.value for x in m.metrics if x.key == "val/acc") for m in trial_models]
    assert values == sorted(values, reverse=True)
    assert sorted(int(m.tags["sweeps.rank"]) for m in trial_models) == list(range(1, TRIALS + 1))
    assert trial_models[0].tags["sweeps.rank"] == "1", "MLflow's best by the metric is the report's first"
    assert logged.parent.data.tags["sweeps.best_model_id"] == trial_models[0].model_id
    local = mlflow.artifacts.download_artifacts(artifact_uri=f"{trial_models[0].artifact_location}/model.pt",
                                                tracking_uri=logged.server.url, dst_path=str(tmp_path))
    state = torch.load(local, weights_only=True)
    assert state and all(isinstance(v, torch.Tensor) for v in state.values())
    # proxied through the server: the files sit in its artifacts destination, once each, not in the sweep's cwd
    assert len(list(logged.artifacts.rglob("model.pt"))) == TRIALS
    assert not (logged.env.root / "mlartifacts").exists() and not (logged.env.root / "mlruns").exists()


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_the_leaderboard_is_the_reports_ranking_and_the_artifact_store_holds_each_checkpoint_once(
        logged: Logged) -> None:
    """MLflow's order of the trials' models by the metric is trials.csv's ranking, trial for trial (with the
    model ids the report names); the bytes of the artifact store's model folders are the bytes of the best
    checkpoints, once, and no run's artifacts hold a checkpoint file."""
    import csv

    c, exp = logged.client, logged.parent.info.experiment_id
    ordered = [m for m in c.search_logged_models([exp], order_by=[{"field_name": "metrics.val/acc",
                                                                    "ascending": False}])
               if m.tags.get("sweeps.model_kind") == "trial"]
    record = json.loads((logged.env.home / "sweeps" / f"{logged.sweep_id}.json").read_text())
    with open(Path(record["report_dir"]) / "trials.csv") as f:
        rows = sorted((r for r in csv.DictReader(f) if r["rank"]), key=lambda r: int(r["rank"]))
    assert [m.tags["sweeps.trial_id"] for m in ordered] == [r["trial_id"] for r in rows]
    assert [m.model_id for m in ordered] == [r["model_id"] for r in rows]
    summary_md = (Path(record["report_dir"]) / "summary.md").read_text()
    assert all(m.model_id in summary_md for m in ordered), "summary.md names the models where it ranks them"
    checkpoints = sum(_bytes(Path(m.tags["sweeps.checkpoint"])) for m in ordered)
    assert all(m.artifact_location.startswith("mlflow-artifacts:/") for m in ordered)  # proxied by the server
    stored = sum(_bytes(logged.artifacts / m.artifact_location.removeprefix("mlflow-artifacts:/"))
                 for m in ordered)
    assert stored == checkpoints > 0, (stored, checkpoints)
    run_files = [p for r in [logged.parent, *logged.children] for p in
                 (logged.artifacts / exp / r.info.run_id).rglob("*") if p.is_file()]
    assert not [p for p in run_files if p.name in ("model.pt", "optimizer.pt")], run_files
    print(f"artifact store: {stored} bytes of models for {checkpoints} bytes of best checkpoints; "
          f"{sum(p.stat().st_size for p in run_files)} bytes of run artifacts (config, report)")


@pytest.mark.slow
def test_no_run_is_left_running(logged: Logged) -> None:
    exp = logged.client.get_experiment_by_name("quickstart")
    running = logged.client.search_runs([exp.experiment_id], filter_string="attributes.status = 'RUNNING'")
    assert running == []


# -- bad tracking URIs fail fast, before anything is written ---------------------------------------
@pytest.mark.slow
def test_unreachable_server_fails_fast_naming_tracking_uri(sweeps_env: SweepsEnv) -> None:
    uri = f"http://127.0.0.1:{mlflow_server.free_port()}"
    t0 = time.monotonic()
    proc = sweeps_env.run("run", *TINY, f"tracking.uri={uri}", timeout=120)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "tracking.uri" in proc.stderr and uri in proc.stderr
    # the probe itself answers in well under a second (MLflow's own client would retry for minutes); the
    # rest is interpreter start + Hydra compose, which a loaded 2-core box can stretch to ~15 s
    assert elapsed < 30, elapsed
    assert not (sweeps_env.home / "sweeps").exists() and not (sweeps_env.home / "ray").exists()


@pytest.mark.slow
def test_client_gives_up_on_a_dead_server_within_seconds(tmp_path: Path) -> None:
    """tracking.configure_client_env: MLflow's defaults would retry a dead server for minutes."""
    uri = f"http://127.0.0.1:{mlflow_server.free_port()}"
    code = ("import sys, time\nfrom sweeps.tracking import client as tracking\nc = tracking.client(sys.argv[1])\n"
            "t = time.monotonic()\ntry:\n    c.search_experiments()\nexcept Exception as e:\n"
            "    print(type(e).__name__, round(time.monotonic() - t, 1))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_HTTP_")}
    proc = subprocess.run([sys.executable, "-c", code, uri], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=env)
    name, seconds = proc.stdout.split()
    assert name == "MlflowException", proc.stdout + proc.stderr[-2000:]
    assert float(seconds) < 10


# -- python -m sweeps ui ---------------------------------------------------------------------------
def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310
        body = resp.read()
    return json.loads(body) if body[:1] in (b"{", b"[") else body


@pytest.mark.slow
def test_ui_serves_the_sqlite_store_with_its_artifacts_until_ctrl_c(sweeps_env: SweepsEnv) -> None:
    uri = sweeps_env.tracking_uri
    c = tracking.client(uri)
    exp_id = tracking.get_or_create_experiment(c, "ui-check", uri)
    run_id = c.create_run(exp_id, run_name="logged-by-sweeps").info.run_id
    tracking.write_text_artifact(c, run_id, "hello.txt", "artifact body")
    c.set_terminated(run_id)

    port = mlflow_server.free_port()
    proc = sweeps_env.popen("ui", "--port", str(port))
    try:
        url = _read_ui_url(proc, timeout_s=240)
        assert url == f"http://127.0.0.1:{port}/#/experiments"
        base = f"http://127.0.0.1:{port}"
        found = _get(f"{base}/ajax-api/2.0/mlflow/experiments/get-by-name?experiment_name=ui-check")
        assert found["experiment"]["experiment_id"] == exp_id
        listed = _get(f"{base}/ajax-api/2.0/mlflow/artifacts/list?run_uuid={run_id}")
        assert [f["path"] for f in listed["files"]] == ["hello.txt"]
        assert _get(f"{base}/get-artifact?path=hello.txt&run_uuid={run_id}") == b"artifact body"
        proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)  # the server's stop is bounded at ~20 s
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR2)  # `sweeps ui` dumps its threads' stacks (faulthandler)
            time.sleep(3)
            proc.kill()
            out, _ = proc.communicate()
            pytest.fail(f"`sweeps ui` still ran 60 s after Ctrl-C; its output and stacks:\n{out[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "MLflow UI stopped" in out
    assert not mlflow_server.healthy(base, timeout_s=2)
    assert mlflow_server.port_free("127.0.0.1", port)


def _read_ui_url(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("MLflow UI: "):
            return line.split(": ", 1)[1].strip()
    raise AssertionError(f"no 'MLflow UI: URL' line; output:\n{''.join(seen)}")


@pytest.mark.slow
def test_ui_on_a_busy_port_is_bad_input(sweeps_env: SweepsEnv) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = sweeps_env.run("ui", "--port", str(port), timeout=60)
    assert proc.returncode == 2
    assert f"--port {port}" in proc.stderr and "already in use" in proc.stderr
    assert not (sweeps_env.home / "mlflow.db").exists()


@pytest.mark.slow
def test_ui_for_a_server_store_only_prints_its_url(sweeps_env: SweepsEnv) -> None:
    proc = sweeps_env.run("ui", "--tracking-uri", "http://127.0.0.1:5999/", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "http://127.0.0.1:5999/#/experiments" in proc.stdout
    assert not sweeps_env.home.exists()


# -- the champion gate through the server: two promote processes at once -----------------------------------
@pytest.mark.slow
def test_two_concurrent_promotions_through_the_server_leave_the_better_one_at_the_alias(
        served_sweep: ServedSweep) -> None:
    race(served_sweep.env, served_sweep.sweep_id, "served-race", served_sweep.url)


# -- the MLflow UI in headless Chromium (browser tier), on the same served sweep ------------------------------
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
         "--window-size=1600,1000"]
WAIT_S = 60


def chromium_and_driver() -> tuple[str, str]:
    """The ``chromium`` and ``chromedriver`` on PATH, found as .ci/run finds them (``command -v``); a skip, naming
    what is missing, where one is not there (in CI a skip fails the run: tests/conftest.py)."""
    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        missing = [name for name, path in (("chromium", chromium), ("chromedriver", chromedriver)) if path is None]
        pytest.skip(f"{' and '.join(missing)} not on PATH (Debian: apt-get install chromium chromium-driver)")
    return chromium, chromedriver


@dataclass
class Site:
    url: str
    experiment_id: str
    sweep_id: str
    parent_id: str
    children: dict[str, str]  # run name -> run id
    full_child: tuple[str, str]  # (name, id) of a child with one val/acc point per epoch
    shots: Path
    printed_runs_url: str  # the link the sweep's end-of-run summary printed


@pytest.fixture(scope="module")
def site(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Site:
    chromium_and_driver()  # before the served sweep: without a browser it is not worth starting
    served = request.getfixturevalue("served_sweep")  # the session's server and sweep (see conftest)
    c = mlflow_client(served.url)
    exp_id = c.get_experiment_by_name("quickstart").experiment_id
    runs = c.search_runs([exp_id])
    parent = next(r for r in runs if r.data.tags.get(tracking.RUN_TAG_KIND) == "sweep")
    children = {r.info.run_name: r.info.run_id for r in runs
                if r.data.tags.get(tracking.PARENT_TAG) == parent.info.run_id}
    assert parent.info.run_name == served.sweep_id and len(children) == TRIALS
    full = next((name, rid) for name, rid in sorted(children.items())
                if len(c.get_metric_history(rid, "val/acc")) == EPOCHS)
    shots = tmp_path_factory.mktemp("browser") / "shots"
    shots.mkdir()
    printed = re.search(r"MLflow\s*:\s*(\S+/#/experiments/\S+/runs)\s", served.stdout)
    assert printed, served.stdout[-2000:]
    return Site(served.url, exp_id, served.sweep_id, parent.info.run_id, children, full, shots, printed.group(1))


@pytest.fixture(scope="module")
def browser(site: Site) -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = chromium_and_driver()
    opts = Options()
    opts.binary_location = chromium
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={site.shots.parent / 'chromium-profile'}")
    driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(driver: Any, condition: Any, shot: Path, what: str) -> Any:
    """Wait for ``condition``; on timeout save a screenshot and fail saying what was awaited."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, WAIT_S).until(condition)
    except TimeoutException:
        driver.save_screenshot(str(shot))
        body = driver.find_element("tag name", "body").text[:1500]
        pytest.fail(f"timed out waiting for {what} at {driver.current_url}; screenshot {shot}\npage:\n{body}")


def _visible_link(text: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return (By.XPATH, f"//a[normalize-space()={json.dumps(text)}]")


@pytest.mark.slow
@pytest.mark.browser
def test_runs_table_shows_the_parent_with_its_children_nested(site: Site, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    # the link the sweep printed (not MLflow's GenAI overview page an experiment opens on)
    assert site.printed_runs_url == f"{site.url}/#/experiments/{site.experiment_id}/runs", site.printed_runs_url
    browser.get(site.printed_runs_url)
    parent = _wait(browser, ec.visibility_of_element_located(_visible_link(site.sweep_id)),
                   site.shots / "runs-table-timeout.png", f"the parent run {site.sweep_id}")
    assert parent.get_attribute("href").endswith(f"/runs/{site.parent_id}")
    # collapsed: only the parent row is shown, but the count includes its nested children
    assert not any(link.is_displayed() for name in site.children
                   for link in browser.find_elements(*_visible_link(name)))
    _wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "body"), f"{TRIALS + 1} matching runs"),
          site.shots / "count-timeout.png", f"'{TRIALS + 1} matching runs'")
    browser.save_screenshot(str(site.shots / "runs-collapsed.png"))

    row = parent.find_element(By.XPATH, "./ancestor::div[@role='gridcell']")
    row.find_element(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']").click()
    for name, run_id in site.children.items():
        child = _wait(browser, ec.visibility_of_element_located(_visible_link(name)),
                      site.shots / "expand-timeout.png", f"child run {name} after expanding the parent")
        assert child.get_attribute("href").endswith(f"/runs/{run_id}")
    browser.save_screenshot(str(site.shots / "runs-expanded.png"))


def _switch_workflow(browser: Any, site: Site, label: str) -> None:
    """Click MLflow's sidebar switch (GenAI | Model training); the browser remembers the choice."""
    browser.get(f"{site.url}/#/experiments")
    button = _wait(browser, lambda d: next((b for b in d.find_elements("xpath", f"//div[@role='button' and "
                                                                          f"normalize-space()={json.dumps(label)}]")
                                            if b.is_displayed()), False),
                   site.shots / "switch-timeout.png", f"the sidebar's {label!r} switch")
    button.click()


def _click_until_it_navigates(browser: Any, site: Site, locator: Any, to: str, tries: int = 3) -> None:
    """Click the link; a click that lands while the list is still re-rendering (it refetches after the
    sidebar switch) does nothing, so click again, as a user would, until the URL holds ``to``."""
    from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    for _ in range(tries):
        link = _wait(browser, ec.element_to_be_clickable(locator), site.shots / "experiment-list-timeout.png",
                     "the sweep's experiment in MLflow's experiment list")
        try:
            link.click()
            WebDriverWait(browser, WAIT_S / tries).until(lambda d: to in d.current_url)
            return
        except (StaleElementReferenceException, TimeoutException):
            continue
    browser.save_screenshot(str(site.shots / "experiment-click-timeout.png"))
    pytest.fail(f"{tries} clicks on the experiment's link left the page at {browser.current_url}")


@pytest.mark.slow
@pytest.mark.browser
def test_experiment_list_opens_the_sweeps_experiment_on_its_runs_table(site: Site, browser: Any) -> None:
    """From MLflow's experiment list, in the Model training view, the sweep's experiment opens on its runs.

    MLflow 3.17.2 picks the page an experiment opens on from the sidebar's GenAI | Model training switch alone
    (default GenAI: the "Traces 0" overview); it reads no experiment's ``mlflow.experimentKind`` while that
    switch exists (a kindless experiment lands the same way in both views). So this test cannot tell the tag
    sweeps sets (tests/test_tracking_lifecycle.py checks that); it proves the path a user takes to the runs.
    """
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    _switch_workflow(browser, site, "Model training")
    try:
        browser.get(f"{site.url}/#/experiments")
        _click_until_it_navigates(browser, site, _visible_link("quickstart"), f"/experiments/{site.experiment_id}")
        parent = _wait(browser, ec.visibility_of_element_located(_visible_link(site.sweep_id)),
                       site.shots / "experiment-landing-timeout.png", f"the runs table with the parent {site.sweep_id}")
        assert f"/experiments/{site.experiment_id}/runs" in browser.current_url, browser.current_url
        row = parent.find_element(By.XPATH, "./ancestor::div[@role='gridcell']")
        expand = row.find_element(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']")
        assert expand.is_displayed(), "the parent run's expand control"
        browser.save_screenshot(str(site.shots / "experiment-landing.png"))
    finally:
        _switch_workflow(browser, site, "GenAI")  # the other browser tests share this profile


@pytest.mark.slow
@pytest.mark.browser
def test_child_run_page_names_its_parent(site: Site, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    name, run_id = sorted(site.children.items())[0]
    browser.get(f"{site.url}/#/experiments/{site.experiment_id}/runs/{run_id}")
    _wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "body"), "Parent run"),
          site.shots / "child-timeout.png", f"the run page of {name}")
    link = _wait(browser, ec.visibility_of_element_located(_visible_link(site.sweep_id)),
                 site.shots / "child-parent-timeout.png", "the parent run's link on the child's page")
    assert link.get_attribute("href").endswith(f"/runs/{site.parent_id}")
    body = browser.find_element(By.TAG_NAME, "body").text
    assert name in body and "val/acc" in body and "hidden_size" in body
    browser.save_screenshot(str(site.shots / "child-run.png"))


@pytest.mark.slow
@pytest.mark.browser
def test_child_metric_chart_plots_val_acc_over_steps(site: Site, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    name, run_id = site.full_child
    browser.get(f"{site.url}/#/experiments/{site.experiment_id}/runs/{run_id}/model-metrics")
    search = _wait(browser, ec.element_to_be_clickable((By.CSS_SELECTOR,
                                                         "input[placeholder='Search metric charts']")),
                   site.shots / "metrics-timeout.png", "the model-metrics page")
    search.send_keys("val/acc")
    legend = f"{name} (val/acc)"
    _wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "body"), legend),
          site.shots / "chart-timeout.png", f"the chart legend {legend!r}")
    lines = browser.find_elements(By.CSS_SELECTOR, ".js-plotly-plot path.js-line")
    drawn = [p.get_attribute("d") or "" for p in lines]
    # one point per step: a polyline "M x,y L x,y ..." with at least two points
    assert any(d.startswith("M") and "L" in d for d in drawn), drawn
    assert "Step" in browser.find_element(By.CSS_SELECTOR, ".js-plotly-plot").text
    browser.save_screenshot(str(site.shots / "val-acc-chart.png"))


@pytest.mark.slow
@pytest.mark.browser
def test_models_tab_lists_the_sweeps_models_and_the_best_leads_back_to_its_trial(site: Site, browser: Any) -> None:
    """The experiment's Models tab (Model training view) lists one model per trial; the best by the sweep's
    metric (MLflow's own ``search_logged_models`` order, the report's ranking) opens on its metrics at the best
    step and its source run, and that link lands on the trial's run. (The open-source UI of MLflow 3.17/3.18 sorts
    this tab by creation time only: its metric sort is switched off in these builds; docs/mlflow.md says so.)"""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec

    c = mlflow_client(site.url)
    ordered = [m for m in c.search_logged_models([site.experiment_id],
                                                 order_by=[{"field_name": "metrics.val/acc", "ascending": False}])
               if m.tags.get("sweeps.model_kind") == "trial"]
    assert len(ordered) == TRIALS and ordered[0].tags["sweeps.rank"] == "1"
    best = ordered[0]
    _switch_workflow(browser, site, "Model training")
    try:
        browser.get(f"{site.url}/#/experiments/{site.experiment_id}/models")
        for m in ordered:
            _wait(browser, ec.visibility_of_element_located(_visible_link(m.name)),
                  site.shots / "models-tab-timeout.png", f"the model {m.name} in the Models tab")
        runs = {r.info.run_id: r.info.run_name for r in c.search_runs([site.experiment_id])}
        body = browser.find_element(By.TAG_NAME, "body").text
        assert all(runs[m.source_run_id] in body for m in ordered), body[:1500]
        browser.save_screenshot(str(site.shots / "models-tab.png"))
        _click_until_it_navigates(browser, site, _visible_link(best.name), f"/models/{best.model_id}")
        best_acc = next(x.value for x in best.metrics if x.key == "val/acc")
        _wait(browser, ec.text_to_be_present_in_element((By.TAG_NAME, "body"), str(best_acc)),
              site.shots / "model-page-timeout.png", f"val/acc {best_acc} on {best.name}'s page")
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "Source run" in body and best.model_id in body and "hidden_size" in body
        browser.save_screenshot(str(site.shots / "best-model.png"))
        source = next(a for a in browser.find_elements(By.XPATH, f"//a[normalize-space()="
                                                                 f"{json.dumps(runs[best.source_run_id])}]")
                      if a.is_displayed())
        assert source.get_attribute("href").endswith(f"/runs/{best.source_run_id}")
        assert site.children[runs[best.source_run_id]] == best.source_run_id, "the source run is the trial's run"
    finally:
        _switch_workflow(browser, site, "GenAI")  # the other browser tests share this profile
