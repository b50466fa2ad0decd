"""Scheduled nightly sweeps (issue 7).

Fast: cron/time-zone/name validation, fire times across DST, the cron guard, crontab text, systemd calendar,
warm-start filtering, the regression rule, the lock between two real processes, CLI refusals.
Slow: `schedule add/list/remove` against the real `crontab` binary (the user's crontab is backed up and
restored, see ``user_crontab``), two concurrent `schedule run`s (exactly one sweeps), a second night that
warm-starts from the first, and the Optuna study kept in SQLite across nights.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from conftest import dead_holder

from sweeps.errors import BadInput, Regressed
from sweeps.ops import cron, nightly, schedule, units, warmstart

REPO = Path(__file__).resolve().parent.parent
TINY = ["+experiment=quickstart", "sweep.num_samples=2", "trainable.params.epochs=2", "scheduler.max_t=2",
        "scheduler.grace_period=1", "cluster.health_check_interval_s=0.1",
        "cluster.worker_start_timeout_s=60"]
NIGHT = [*TINY, "trainable.num_workers=1"]  # the real nights: 1 Train worker


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def entry(name: str, overrides: list[str], project: Path, **kw: Any) -> schedule.Entry:
    return schedule.Entry(name=name, overrides=overrides, cron=kw.pop("cron", "0 2 * * *"),
                          tz=kw.pop("tz", None), kind=kw.pop("kind", "cron"), project=str(project),
                          home=str(schedule.paths.home()),
                          env={"SWEEPS_HOME": str(schedule.paths.home()), "PATH": "/usr/bin:/bin"}, **kw)


# --- validation ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("expr, normalized", [
    ("0 2 * * *", "0 2 * * *"),
    ("  */15   * * * 1-5 ", "*/15 * * * 1-5"),
    ("30 3 1,15 jan-mar mon", "30 3 1,15 jan-mar mon"),
    ("@daily", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
    ("0 0 29 2 *", "0 0 29 2 *"),  # leap day: fires every four years, so it does fire
])
def test_valid_cron_expressions_are_normalized(expr: str, normalized: str) -> None:
    assert cron.validate_cron(expr) == normalized
    cron.check_fires(normalized, None, utc(2026, 3, 1))


@pytest.mark.parametrize("expr, says", [
    ("", "required"),
    ("0 2 * *", "not a cron expression"),
    ("0 2 * * * *", "not a cron expression"),  # croniter's seconds field: cron has none
    ("61 * * * *", "not valid"),
    ("0 25 * * *", "not valid"),
    ("0 0 L * *", "day of month field 'L'"),
    ("0 0 * * 1#2", "day of week field '1#2'"),
    ("0 0 * * funday", "day of week field 'funday'"),
    ("@reboot", "not a cron expression"),
])
def test_invalid_cron_expressions_are_refused_naming_cron(expr: str, says: str) -> None:
    with pytest.raises(BadInput, match="--cron") as err:
        cron.validate_cron(expr)
    assert says in str(err.value)


@pytest.mark.parametrize("expr", ["0 0 30 2 *", "0 0 31 4 *", "0 0 31 2,4,6,9,11 *"])
def test_expressions_that_never_fire_are_refused(expr: str) -> None:
    assert cron.next_fires(cron.validate_cron(expr), "Europe/Berlin", utc(2026, 1, 1), 1) == []
    with pytest.raises(BadInput, match=r"--cron: .* never fires"):
        cron.check_fires(expr, "Europe/Berlin", utc(2026, 1, 1))


@pytest.mark.parametrize("tz", ["Europe/Berlin", "UTC", "America/New_York", "Asia/Kolkata", None])
def test_known_time_zones_pass(tz: str | None) -> None:
    got = cron.validate_tz(tz)
    assert (got is None) if tz is None else (str(got) == tz)


@pytest.mark.parametrize("tz", ["Europe/Berln", "Mars/Olympus_Mons", "../../etc/passwd", "", "CEST+2"])
def test_unknown_time_zones_are_refused_naming_tz(tz: str) -> None:
    with pytest.raises(BadInput, match="--tz: unknown time zone"):
        cron.validate_tz(tz)


def test_unknown_zone_message_suggests_the_close_one() -> None:
    with pytest.raises(BadInput, match="did you mean Europe/Berlin"):
        cron.validate_tz("Europe/Berln")


@pytest.mark.parametrize("name, ok", [("nightly", True), ("digits_asha-2", True), ("a" * 64, True),
                                      ("bad.name", False), ("a b", False), ("../x", False), ("", False),
                                      ("a" * 65, False), ("nächtlich", False)])
def test_schedule_names(name: str, ok: bool) -> None:
    if ok:
        assert schedule.validate_name(name) == name
    else:
        with pytest.raises(BadInput, match="NAME"):
            schedule.validate_name(name)


# --- fire times ---------------------------------------------------------------------------------------------

def test_next_three_fire_times_from_a_fixed_start() -> None:
    fires = cron.next_fires("0 2 * * *", "Europe/Berlin", utc(2026, 1, 10, 12), 3)
    assert [f.isoformat() for f in fires] == ["2026-01-11T02:00:00+01:00", "2026-01-12T02:00:00+01:00",
                                              "2026-01-13T02:00:00+01:00"]
    assert cron.next_fires("0 2 * * *", "Europe/Berlin", utc(2026, 1, 11, 1), 1)[0] == utc(2026, 1, 12, 1)


def test_spring_forward_in_berlin_moves_a_skipped_time_past_the_jump() -> None:
    # 2026-03-29: 02:00 CET jumps to 03:00 CEST. 02:30 does not exist that night: it fires at 03:30 CEST.
    fires = cron.next_fires("30 2 * * *", "Europe/Berlin", utc(2026, 3, 27, 12), 3)
    assert [f.astimezone(UTC) for f in fires] == [utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 30),
                                                  utc(2026, 3, 30, 0, 30)]
    assert [f.strftime("%d %H:%M %Z") for f in fires] == ["28 02:30 CET", "29 03:30 CEST", "30 02:30 CEST"]


def test_fall_back_in_berlin_fires_a_repeated_time_once_but_hourly_jobs_every_hour() -> None:
    # 2026-10-25: 03:00 CEST falls back to 02:00 CET; 02:30 happens twice.
    daily = cron.next_fires("30 2 * * *", "Europe/Berlin", utc(2026, 10, 24, 12), 2)
    assert [f.astimezone(UTC) for f in daily] == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]
    hourly = cron.next_fires("0 * * * *", "Europe/Berlin", utc(2026, 10, 24, 22, 30), 5)
    assert [f.astimezone(UTC) for f in hourly] == [utc(2026, 10, 24, 23), utc(2026, 10, 25, 0),
                                                   utc(2026, 10, 25, 1), utc(2026, 10, 25, 2),
                                                   utc(2026, 10, 25, 3)]


def test_day_of_month_and_day_of_week_are_ored_like_cron() -> None:
    fires = cron.next_fires("0 0 13 * 5", "UTC", utc(2026, 2, 1), 4)  # the 13th or any Friday
    assert [f.day for f in fires] == [6, 13, 20, 27]


def test_the_cron_guard_is_due_only_in_the_minute_of_a_fire_time() -> None:
    at = utc(2026, 12, 1, 1, 0, 7).timestamp()  # 02:00:07 in Berlin (CET)
    assert cron.is_due("0 2 * * *", "Europe/Berlin", at)
    assert not cron.is_due("0 2 * * *", "Europe/Berlin", at + 60)
    assert not cron.is_due("0 2 * * *", "Europe/Berlin", at - 3600)  # 02:00 UTC is 03:00 in Berlin
    summer = utc(2026, 7, 1, 0, 0, 30).timestamp()  # 02:00:30 CEST
    assert cron.is_due("0 2 * * *", "Europe/Berlin", summer)


def test_crontab_fields_in_another_zone_fire_hourly_at_the_shifted_minute(monkeypatch: pytest.MonkeyPatch
                                                                          ) -> None:
    monkeypatch.setattr(cron, "system_zone", lambda: ZoneInfo("UTC"))
    start = utc(2026, 1, 1)
    assert cron.cron_fields("0 2 * * *", None, start) == ("0 2 * * *", False)
    assert cron.cron_fields("0 2 * * *", "UTC", start) == ("0 2 * * *", False)
    assert cron.cron_fields("0 2 * * *", "Europe/Berlin", start) == ("0 * * * *", True)
    assert cron.cron_fields("15,45 2 * * *", "Asia/Kolkata", start) == ("15,45 * * * *", True)  # +5:30
    assert cron.cron_fields("0 2 * * *", "Asia/Kolkata", start) == ("30 * * * *", True)
    assert cron.cron_fields("0 2 * * *", "Asia/Kathmandu", start) == ("15 * * * *", True)  # +5:45


# --- crontab and systemd text -------------------------------------------------------------------------------

def test_crontab_block_is_tagged_and_removal_keeps_every_other_line(sweeps_env: Any) -> None:
    e = entry("nightly", ["+experiment=quickstart"], sweeps_env.root, tz="Europe/Berlin", guarded=True)
    block = units.crontab_block(e, "/venv/bin/python", "0 * * * *")
    assert len(block) == 2 and all(line.endswith(units.tag("nightly", e.home)) for line in block)
    line = block[1]
    assert line.startswith("0 * * * * cd ")
    assert "-m sweeps schedule run nightly --fired-at \"$(date +\\%s)\"" in line  # % escaped for cron
    assert f">> {sweeps_env.root}/logs/schedules/nightly.log 2>&1" in line
    assert f"SWEEPS_HOME={e.home}" in line
    foreign = "MAILTO=me@example.com\n# my backup\n5 4 * * * /usr/bin/backup --all\n"
    other = units.crontab_block(entry("other", [], sweeps_env.root), "/py", "1 1 * * *")
    text = units.with_block(units.with_block(foreign, block), other)
    stripped, n = units.strip_block(text, "nightly", e.home)
    assert n == 2
    assert stripped == units.with_block(foreign, other)
    assert units.strip_block(stripped, "nightly", "/another/home") == (stripped, 0)


@pytest.mark.parametrize("expr, tz, expected", [
    ("30 2 * * *", "Europe/Berlin", ["*-*-* 02:30:00 Europe/Berlin"]),
    ("0 */6 * * 1-5", None, ["Mon,Tue,Wed,Thu,Fri *-*-* 00,06,12,18:00:00"]),
    ("0 3 1 1 *", "UTC", ["*-01-01 03:00:00 UTC"]),
    ("15 4 13 * 5", None, ["*-*-13 04:15:00", "Fri *-*-* 04:15:00"]),  # cron ORs the day fields
    ("0 0 * * 7", None, ["Sun *-*-* 00:00:00"]),
])
def test_cron_to_systemd_calendar(expr: str, tz: str | None, expected: list[str]) -> None:
    assert units.oncalendar(expr, tz) == expected


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze not installed")
@pytest.mark.parametrize("expr, tz", [("30 2 * * *", "Europe/Berlin"),
                                      ("*/20 9-17 * * mon-fri", "Asia/Kolkata"), ("0 0 1 */3 *", None)])
def test_systemd_agrees_with_our_next_fire_time(expr: str, tz: str | None) -> None:
    (cal,) = units.oncalendar(expr, tz)
    out = subprocess.run(["systemd-analyze", "calendar", "--iterations=3", cal], capture_output=True,
                         text=True, timeout=30, env={**os.environ, "TZ": "UTC"})
    assert out.returncode == 0, out.stderr
    stamps = re.findall(r"(?:Next elapse|Iter\. #\d): \w+ (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC", out.stdout)
    ours = [f.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") for f in
            cron.next_fires(expr, tz, datetime.now(UTC), 3)]
    assert stamps == ours


def test_systemd_units_run_the_schedule_from_the_project(sweeps_env: Any) -> None:
    e = entry("nightly", ["+experiment=quickstart"], sweeps_env.root, kind="systemd", tz="Europe/Berlin")
    files = units.systemd_units(e, "/venv/bin/python")
    service, timer = files["sweeps-nightly.service"], files["sweeps-nightly.timer"]
    assert f"WorkingDirectory={sweeps_env.root}" in service
    assert 'ExecStart="/venv/bin/python" -m sweeps schedule run nightly' in service
    assert f"StandardOutput=append:{sweeps_env.root}/logs/schedules/nightly.log" in service
    assert f'"SWEEPS_HOME={e.home}"' in service
    assert "OnCalendar=*-*-* 02:00:00 Europe/Berlin" in timer and "WantedBy=timers.target" in timer


# --- warm start and regression ------------------------------------------------------------------------------

SPACE = {"lr": {"dist": "loguniform", "low": 1e-3, "high": 1e-1},
         "hidden_size": {"dist": "choice", "values": [64, 128]},
         "layers": {"dist": "randint", "low": 1, "high": 4}}


def test_warm_points_keep_only_valid_keys_of_the_current_space() -> None:
    prev = [{"lr": 0.01, "hidden_size": 64, "layers": 2, "dropout": 0.3},  # dropout left the space
            {"lr": 0.5, "hidden_size": 128, "layers": 3},  # lr now out of bounds
            {"lr": 0.01, "hidden_size": 64, "layers": 2},  # a duplicate once dropout is gone
            {"lr": 0.02, "hidden_size": 256, "layers": 1},  # 256 no longer a choice
            {"lr": 0.03, "hidden_size": True, "layers": 1.5}]  # wrong types
    assert warmstart.fit_points(prev, SPACE, complete=True) == [{"lr": 0.01, "hidden_size": 64, "layers": 2}]
    assert warmstart.fit_points(prev, SPACE, complete=False) == [
        {"lr": 0.01, "hidden_size": 64, "layers": 2}, {"hidden_size": 128, "layers": 3},
        {"lr": 0.02, "layers": 1}, {"lr": 0.03}]


def test_mlflow_params_are_coerced_back_to_the_space_types() -> None:
    assert warmstart.coerce("128", SPACE["hidden_size"]) == 128
    assert warmstart.coerce("0.01", SPACE["lr"]) == 0.01
    layers = warmstart.coerce("2.0", SPACE["layers"])
    assert layers == 2 and isinstance(layers, int)
    assert warmstart.coerce("256", SPACE["hidden_size"]) is None
    assert warmstart.coerce("fast", SPACE["lr"]) is None


@pytest.mark.parametrize("prev, best, mode, tol, worse", [
    (0.90, 0.85, "max", 0.01, pytest.approx(0.05)),
    (0.90, 0.95, "max", 0.01, pytest.approx(-0.05)),
    (0.30, 0.40, "min", 0.05, pytest.approx(0.10)),
    (0.30, 0.40, "min", None, None),
    (float("nan"), 0.40, "min", 0.05, None),
])
def test_regression_respects_the_mode(prev: float, best: float, mode: str, tol: float | None,
                                      worse: Any) -> None:
    assert nightly.regression(prev, best, mode, tol) == worse


def test_regressed_beyond_tolerance_raises_with_both_values() -> None:
    prev = SimpleNamespace(sweep_id="q-1", metric="val/acc", mode="max", best={"value": 0.9})
    rec = SimpleNamespace(sweep_id="q-2", metric="val/acc", mode="max", best={"value": 0.8})
    nightly._check_regression("n", prev, rec, 0.2, {})  # within tolerance: fine
    with pytest.raises(Regressed, match=r"0\.8000 is 0\.1000 worse than the previous run's 0\.9000 \(q-1\)"):
        nightly._check_regression("n", prev, rec, 0.05, {})
    with pytest.raises(BadInput, match="schedule.regression_tolerance"):
        nightly.check_tolerance(-1)


# --- the lock between two real processes --------------------------------------------------------------------

HOLD = """
import sys, time
from sweeps.ops.lock import schedule_lock
with schedule_lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(120)
"""


def test_a_held_lock_makes_a_second_run_exit_5_naming_the_holder(sweeps_env: Any) -> None:
    schedule.save_entry(entry("nightly", TINY, sweeps_env.root))
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "nightly"], env=sweeps_env.env,
                              cwd=sweeps_env.root, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        t0 = time.monotonic()
        proc = sweeps_env.run("schedule", "run", "nightly", timeout=60)
        assert proc.returncode == 5, proc.stderr
        assert time.monotonic() - t0 < 30
        assert f"pid {holder.pid} on {socket.gethostname()}, started " in proc.stderr
        assert "holds the lock" in proc.stderr
        assert not (sweeps_env.home / "sweeps").exists()  # no sweep was started
        assert schedule.read_state("nightly") is None  # and the holder's state is not overwritten
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_stale_lock_of_a_dead_process_is_taken_over(sweeps_env: Any) -> None:
    # The run takes the lock, then fails fast on a bad experiment: proof it got past the lock, in a second.
    schedule.save_entry(entry("nightly", ["+experiment=no_such_experiment"], sweeps_env.root))
    dead = dead_holder()
    lock = schedule.locks_dir() / "nightly.lock"
    lock.parent.mkdir(parents=True)
    stale = {"pid": dead.pid, "host": dead.host, "token": dead.token, "proc": dead.proc,
             "started": time.time() - 3600}
    lock.write_text(json.dumps(stale))
    proc = sweeps_env.run("schedule", "run", "nightly", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"taking over a stale lock left by pid {dead.pid}" in proc.stderr
    assert "process is gone" in proc.stderr
    assert "experiment: unknown option 'no_such_experiment'" in proc.stderr
    assert lock.read_text() == ""  # released cleanly
    state = schedule.read_state("nightly")
    assert state is not None and state["exit_code"] == 2 and state["status"] == "error"


# --- CLI refusals (real subprocesses, nothing installed) ----------------------------------------------------

@pytest.mark.parametrize("argv, says", [
    (["nightly", "+experiment=quickstart", "--cron", "0 2 * *"],
     "--cron: '0 2 * *' is not a cron expression"),
    (["nightly", "+experiment=quickstart", "--cron", "0 0 30 2 *"], "--cron: '0 0 30 2 *' never fires"),
    (["nightly", "+experiment=quickstart", "--cron", "0 2 * * *", "--tz", "Mars/Base"],
     "--tz: unknown time zone"),
    (["bad.name", "+experiment=quickstart", "--cron", "0 2 * * *"], "NAME: 'bad.name' is not a valid"),
    (["nightly", "+experiment=nope", "--cron", "0 2 * * *"], "experiment: unknown option 'nope'"),
])
def test_schedule_add_refuses_bad_input_with_exit_2(sweeps_env: Any, argv: list[str], says: str) -> None:
    proc = sweeps_env.run("schedule", "add", *argv, timeout=120)
    assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert not (sweeps_env.home / "schedules").exists()
    assert not (sweeps_env.root / "logs").exists()


def test_schedule_add_refuses_an_existing_name_and_remove_an_unknown_one(sweeps_env: Any) -> None:
    schedule.save_entry(entry("nightly", TINY, sweeps_env.root))
    before = schedule.entry_path("nightly").read_text()
    proc = sweeps_env.run("schedule", "add", "nightly", "+experiment=quickstart", "--cron", "0 3 * * *")
    assert proc.returncode == 2 and "NAME: schedule 'nightly' already exists" in proc.stderr
    assert "--replace" in proc.stderr
    assert schedule.entry_path("nightly").read_text() == before
    proc = sweeps_env.run("schedule", "remove", "weekly")
    assert proc.returncode == 2 and "no schedule 'weekly'" in proc.stderr
    assert "schedules: nightly" in proc.stderr


def test_no_install_records_the_schedule_for_an_external_scheduler(sweeps_env: Any) -> None:
    proc = sweeps_env.run("schedule", "add", "k8s", *TINY, "--cron", "0 2 * * *", "--tz", "Europe/Berlin",
                          "--no-install", timeout=120)
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(schedule.entry_path("k8s").read_text())
    assert stored["kind"] == "external" and stored["overrides"] == TINY and not stored["guarded"]
    listed = sweeps_env.run("schedule", "list", check=True).stdout
    assert "k8s: cron '0 2 * * *' (Europe/Berlin)" in listed and "not installed here" in listed
    assert re.search(r"next     : \d{4}-\d\d-\d\d 02:00 CES?T, .+, .+\n", listed)
    both = sweeps_env.run("schedule", "add", "k8s2", *TINY, "--cron", "0 2 * * *", "--systemd",
                          "--no-install")
    assert both.returncode == 2 and "exclude each other" in both.stderr
    removed = sweeps_env.run("schedule", "remove", "k8s", check=True)
    assert "nothing was installed" in removed.stdout and not schedule.entry_path("k8s").exists()


# --- slow: the real crontab ---------------------------------------------------------------------------------

@pytest.fixture
def user_crontab() -> Iterator[str]:
    """This user's real crontab, restored afterwards exactly as it was (or removed if there was none).

    Why not a test-owned crontab: ``crontab -u USER`` needs a dedicated user (useradd, outside tmp_path) and
    Debian's crontab has no option for another spool file. The code only ever touches lines tagged with its
    schedule name *and* $SWEEPS_HOME (a tmp_path here), so the test also proves foreign lines survive.
    """
    if not shutil.which("crontab"):
        pytest.skip("no crontab binary (Debian: apt-get install cron)")
    got = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    before = got.stdout if got.returncode == 0 else None
    try:
        yield before or ""
    finally:
        if before is None:
            subprocess.run(["crontab", "-r"], capture_output=True)
        else:
            subprocess.run(["crontab", "-"], input=before, text=True, check=True)


def crontab_text() -> str:
    got = subprocess.run(["crontab", "-l"], capture_output=True, text=True)
    return got.stdout if got.returncode == 0 else ""


@pytest.mark.slow
def test_schedule_add_list_remove_against_the_real_crontab(sweeps_env: Any, user_crontab: str) -> None:
    foreign = "# foreign line kept by sweeps tests\n17 5 * * * /bin/true\n"
    subprocess.run(["crontab", "-"], input=user_crontab + foreign, text=True, check=True)
    # A long PATH (a CI runner's, 80 folders here) stays off the line: `schedule run` applies the stored one.
    sweeps_env.env["PATH"] = ":".join([*(f"/opt/tool{i}/bin" for i in range(80)), sweeps_env.env["PATH"]])
    home = str(sweeps_env.home)
    t = units.tag("nightly", home)
    expr = "0 3 1 1 *"  # 03:00 on New Year's Day in Berlin: never due while the test runs
    proc = sweeps_env.run("schedule", "add", "nightly", *TINY, "--cron", expr, "--tz", "Europe/Berlin",
                          timeout=120, check=True)
    assert "installed in the crontab" in proc.stdout
    text = crontab_text()
    assert text.startswith(user_crontab + foreign)
    ours = [line for line in text.splitlines() if line.endswith(t)]
    assert len(ours) == 2 and ours[0].startswith("# sweeps schedule nightly")
    fields, guarded = cron.cron_fields(expr, "Europe/Berlin", datetime.now(UTC))
    assert ours[1].startswith(f"{fields} cd {sweeps_env.root} && ")
    assert f"{sys.executable} -m sweeps schedule run nightly" in ours[1] and "PATH=" not in ours[1]
    assert f">> {sweeps_env.root}/logs/schedules/nightly.log 2>&1" in ours[1]
    stored = json.loads(schedule.entry_path("nightly").read_text())
    assert stored["overrides"] == TINY and stored["tz"] == "Europe/Berlin" and stored["guarded"] == guarded

    if guarded:  # the line runs as cron runs it (sh, bare env, % unescaped): not due now, so exits 0 at once
        command = ours[1][len(fields) + 1:].replace("\\%", "%")
        ran = subprocess.run(["/bin/sh", "-c", command], env={"HOME": str(sweeps_env.user_home),
                             "PATH": "/usr/bin:/bin", "SHELL": "/bin/sh"}, capture_output=True, text=True,
                             timeout=60)
        assert ran.returncode == 0, ran.stderr
        assert (sweeps_env.root / "logs" / "schedules" / "nightly.log").is_file()
        assert not (sweeps_env.home / "sweeps").exists()

    listed = sweeps_env.run("schedule", "list", check=True).stdout
    assert "nightly: cron '0 3 1 1 *' (Europe/Berlin)" in listed and "+experiment=quickstart" in listed
    y = datetime.now(UTC).year + (1 if datetime.now(UTC) >= datetime(datetime.now(UTC).year, 1, 1, 2,
                                                                        tzinfo=UTC) else 0)
    assert f"next     : {y}-01-01 03:00 CET, {y + 1}-01-01 03:00 CET, {y + 2}-01-01 03:00 CET" in listed
    assert "last run : never run" in listed and "installed: crontab;" in listed

    again = sweeps_env.run("schedule", "add", "nightly", *TINY, "--cron", "0 4 * * *")
    assert again.returncode == 2 and "already exists" in again.stderr
    assert crontab_text() == text
    sweeps_env.run("schedule", "add", "nightly", *TINY, "--cron", "0 4 * * *", "--replace", check=True)
    replaced = [line for line in crontab_text().splitlines() if line.endswith(t)]
    assert len(replaced) == 2 and replaced[1].startswith("0 4 * * * cd ")

    removed = sweeps_env.run("schedule", "remove", "nightly", check=True)
    assert "crontab lines removed" in removed.stdout
    assert crontab_text() == user_crontab + foreign
    assert not schedule.entry_path("nightly").exists()
    gone = sweeps_env.run("schedule", "remove", "nightly")
    assert gone.returncode == 2 and "no schedule 'nightly'" in gone.stderr


# --- slow: real scheduled sweeps ----------------------------------------------------------------------------

def sweep_records(home: Path) -> list[dict[str, Any]]:
    folder = home / "sweeps"
    out = [json.loads(p.read_text()) for p in folder.glob("[!.]*.json")] if folder.is_dir() else []
    return sorted(out, key=lambda r: r["created"])


def trials_in_order(rec: dict[str, Any]) -> list[dict[str, Any]]:
    from sweeps.reports.results import load_records

    records = load_records(rec["experiment_dirs"], rec["metric"], rec["mode"])
    return [r.params for r in sorted(records, key=lambda r: r.trial_id)]


@pytest.mark.slow
def test_two_nights_one_lock_and_a_warm_start_from_the_previous_top_k(sweeps_env: Any) -> None:
    # --systemd writes the unit files under the test's HOME: no crontab involved.
    """Two `schedule run`s at once (exactly one sweeps), then a second night that warm-starts from the first's top-k.
    Why its own sweeps: two nights of one schedule are the subject."""
    sweeps_env.run("schedule", "add", "nightly", *NIGHT, "--cron", "0 2 * * *", "--systemd", check=True,
                   timeout=120)
    assert (sweeps_env.user_home / ".config/systemd/user/sweeps-nightly.timer").is_file()

    # Night 1, started twice at once: exactly one sweeps, the other exits 5 at once.
    procs = [sweeps_env.popen("schedule", "run", "nightly") for _ in range(2)]
    t0 = time.monotonic()
    first = None
    while first is None and time.monotonic() - t0 < 120:
        first = next((p for p in procs if p.poll() is not None), None)
        time.sleep(0.2)
    assert first is not None, "neither run exited early: the lock did not refuse the second"
    loser_out = first.communicate()[0]
    assert first.returncode == 5, loser_out
    winner = procs[1] if first is procs[0] else procs[0]
    assert winner.poll() is None, "the loser exited only after the winner"
    assert f"pid {winner.pid}" in loser_out
    winner_out = winner.communicate(timeout=600)[0]
    assert winner.returncode == 0, winner_out[-6000:]
    (night1,) = sweep_records(sweeps_env.home)
    assert night1["schedule"] == "nightly" and night1["previous_sweep_id"] is None

    state = schedule.read_state("nightly")
    assert state is not None and state["sweep_id"] == night1["sweep_id"] and state["exit_code"] == 0

    # Night 2 warm-starts from night 1's top-k (quickstart's num_samples=2 < warm_start_top_k=3: both trials).
    from sweeps.reports.results import load_records
    from sweeps.reports.summary import collect

    top = collect(load_records(night1["experiment_dirs"], night1["metric"], night1["mode"]), night1["metric"],
                  night1["mode"], top_k=3).leaderboard
    assert top, "night 1 produced no ranked trial"
    proc = sweeps_env.run("schedule", "run", "nightly", timeout=600)
    assert proc.returncode == 0, proc.stderr[-6000:]  # no regression_tolerance set: never exit 4
    night2 = sweep_records(sweeps_env.home)[-1]
    assert night2["sweep_id"] != night1["sweep_id"]
    assert night2["previous_sweep_id"] == night1["sweep_id"] and night2["schedule"] == "nightly"
    assert trials_in_order(night2)[: len(top)] == [dict(r.params) for r in top]

    from tests.conftest import mlflow_client

    c = mlflow_client(sweeps_env.tracking_uri)
    parent = c.get_run(night2["parent_run_id"]).data
    assert parent.tags["schedule"] == "nightly" and parent.tags["previous_sweep_id"] == night1["sweep_id"]
    # Night 2 samples with seed + 1: without the warm start its first trials would be fresh draws, not these.
    assert c.get_run(night1["parent_run_id"]).data.params["seed"] == "0" and parent.params["seed"] == "1"

    report = sweeps_env.root / "reports" / "quickstart" / night2["sweep_id"]
    assert list((report / "vs_previous").glob("*.md"))
    listed = sweeps_env.run("schedule", "list", check=True).stdout
    assert f"last run : {night2['sweep_id']} finished, exit 0" in listed
    state = schedule.read_state("nightly")
    assert state is not None and state["previous_sweep_id"] == night1["sweep_id"]
    assert state["warm_start_points"] == [dict(r.params) for r in top]

    # Night 3 regresses (a learning rate that cannot learn in 2 epochs; the good warm-start points fall outside
    # the new space): `schedule run` exits 4 through the CLI and says by how much.
    sweeps_env.run("schedule", "add", "nightly", *NIGHT, "search_space.lr={dist: choice, values: [0.000001]}",
                   "sweep.num_samples=1", "schedule.regression_tolerance=0.01", "--cron", "0 2 * * *", "--systemd",
                   "--replace", check=True, timeout=120)
    proc = sweeps_env.run("schedule", "run", "nightly", timeout=600)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "worse than the previous run's" in proc.stderr and night2["sweep_id"] in proc.stderr
    state = schedule.read_state("nightly")
    assert state is not None and state["status"] == "regressed" and state["exit_code"] == 4


def test_optuna_study_is_kept_in_sqlite_across_nights(sweeps_env: Any) -> None:
    """No Ray cluster: Tune's OptunaSearch as the sweep builds it, fed by hand, then built again."""
    from sweeps.execution.tuning import searchers as tuner
    from sweeps.ops import prepare

    overrides = ["+experiment=digits_optuna", "++schedule.name=nightly"]
    spec = prepare.prepare(overrides)
    extra = nightly.optuna_overrides("nightly", spec)
    assert extra and spec.searcher_name == "optuna"
    spec = prepare.prepare([*overrides, *extra])

    def one_night(points: list[dict[str, Any]], n: int) -> Any:
        s = tuner.build_searcher(spec, 1, points)
        assert s.set_search_properties(spec.sweep.metric, spec.sweep.mode, tuner.param_space(spec))
        for i in range(n):
            cfg = s.suggest(f"t{i}")
            s.on_trial_complete(f"t{i}", {spec.sweep.metric: 0.5 + 0.01 * i, **cfg})
        return s

    first = one_night([], 3)
    assert len(first._ot_study.trials) == 3
    point = dict(first._ot_study.trials[0].params)
    second = one_night([point], 1)
    trials = second._ot_study.trials
    assert len(trials) == 4  # last night's 3 are in the study TPE samples from, plus tonight's
    assert trials[3].params == point  # tonight's first trial: the warm-start point
    assert (schedule.schedules_dir() / "nightly.optuna.db").is_file()


def test_the_champions_params_join_the_warm_start(sweeps_env: Any) -> None:
    """A real MLflow registry (SQLite under tmp_path): quickstart@champion points at a trial run's params."""
    from sweeps.ops import prepare
    from sweeps.tracking import client as tracking

    spec = prepare.prepare(["+experiment=quickstart"])
    assert warmstart.champion_params(spec) is None  # no registry entry yet
    c = tracking.client(spec.tracking.uri)
    exp = tracking.get_or_create_experiment(c, "quickstart", spec.tracking.uri)
    run = c.create_run(exp).info.run_id
    for k, v in {"lr": "0.02", "hidden_size": "128", "batch_size": "64", "epochs": "8"}.items():
        c.log_param(run, k, v)
    c.create_registered_model("quickstart")
    mv = c.create_model_version("quickstart", source=f"runs:/{run}/model", run_id=run)
    c.set_registered_model_alias("quickstart", "champion", mv.version)
    champion = {"lr": 0.02, "hidden_size": 128, "batch_size": 64}
    assert warmstart.champion_params(spec) == champion
    assert nightly.warm_points(None, spec) == [champion]


def test_a_crontab_line_cron_would_cut_is_refused_before_the_crontab_is_touched(tmp_path: Path) -> None:
    """Vixie cron truncates a command past ~1,000 characters: `schedule add` refuses such a line before it
    reads the crontab, naming the line's length, the limit and the way out (--systemd)."""
    from sweeps.ops import install

    deep = tmp_path / ("p" * 120) / ("q" * 120)  # the project path is on the line three times
    entry = schedule.Entry(name="nightly", overrides=[], cron="0 3 * * *", tz=None, kind="cron",
                           project=str(deep), home=str(tmp_path / "home"))
    with pytest.raises(BadInput, match=r"crontab line would be \d{3,4} characters \(cron cuts at 990\).*--systemd"):
        install.install_cron(entry, "0 3 * * *")


def test_the_crontab_line_carries_only_sweeps_home_and_schedule_run_applies_the_stored_env(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long PATH (a CI runner's, a conda user's) no longer reaches the crontab line: the line sets SWEEPS_HOME
    and `schedule run` applies the rest of the stored environment for a cron entry (not for an outside
    scheduler's, whose machine has its own PATH)."""
    from sweeps.ops import install

    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    long_path = ":".join(f"/opt/tool{i}/bin" for i in range(80)) + ":/usr/bin:/bin"
    stored = {"SWEEPS_HOME": str(tmp_path / "home"), "PATH": long_path,
              "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/night.db", "RAY_TMPDIR": str(tmp_path / "ray")}
    e = schedule.Entry(name="nightly", overrides=[], cron="0 3 * * *", tz=None, kind="cron",
                       project=str(tmp_path), home=stored["SWEEPS_HOME"], env=stored)
    line = units.command_line(e, sys.executable)
    assert f"SWEEPS_HOME={stored['SWEEPS_HOME']} " in line and "PATH=" not in line and "MLFLOW" not in line
    assert len(units.crontab_block(e, sys.executable, "0 3 * * *")[1]) < install.CRON_LINE_MAX < len(long_path)

    for key in ("PATH", "MLFLOW_TRACKING_URI", "RAY_TMPDIR"):
        monkeypatch.setenv(key, "from-the-shell")  # restored after the test
    monkeypatch.chdir(tmp_path)  # `schedule run` cds into the project
    seen: dict[str, dict[str, str]] = {}

    def record(entry: schedule.Entry) -> tuple[int, dict[str, Any]]:
        seen[entry.kind] = {k: os.environ[k] for k in ("PATH", "MLFLOW_TRACKING_URI", "RAY_TMPDIR")}
        return 0, {"status": "ok"}

    monkeypatch.setattr(nightly, "_run_locked", record)  # the sweep itself is the slow tier's
    for kind in ("external", "cron"):
        schedule.save_entry(dataclasses.replace(e, kind=kind))
        assert nightly.run("nightly") == 0
    assert seen["external"] == dict.fromkeys(("PATH", "MLFLOW_TRACKING_URI", "RAY_TMPDIR"), "from-the-shell")
    assert seen["cron"] == {k: stored[k] for k in ("PATH", "MLFLOW_TRACKING_URI", "RAY_TMPDIR")}
