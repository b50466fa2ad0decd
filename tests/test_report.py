"""Renderers (CSV, Markdown, HTML + PNG) and the report/list/compare commands. Fast tier (the real sweep end to
end: tests/test_promote.py)."""

from __future__ import annotations

import base64
import csv
import io
import json
import math
import re
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from sweeps import store
from sweeps.cli.main import main
from sweeps.reports import compare, formats, summary
from sweeps.reports import write as rwrite
from sweeps.reports.results import TrialRecord

M = "val/loss"
SPACE = {
    "lr": {"dist": "loguniform", "low": 1e-4, "high": 1e-1},
    "width": {"dist": "choice", "values": [16, 32]},
}
CONFIG = {
    "search_space": SPACE,
    "report": {"top_k": 3, "dir": "reports"},
    "trainable": {"num_workers": 2, "resources_per_worker": {"CPU": 1}, "params": {"epochs": 4}},
    "cluster": {"driver_cpus": 1},
    "sweep": {"metric": M, "mode": "min"},
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def trial(
    tid: str,
    values: list[float],
    *,
    status: str = "TERMINATED",
    early: bool = False,
    lr: float = 0.01,
    width: int = 16,
    path: str | None = None,
) -> TrialRecord:
    history = [
        {
            M: v,
            "epoch": float(i),
            "training_iteration": float(i),
            "time_total_s": 2.0 * i,
            "time/compute_s": 0.5,
            "time/data_s": 0.1,
            "time/data_frac": 0.1 / 0.6,
        }
        for i, v in enumerate(values, 1)
    ]
    return TrialRecord(
        tid,
        status,
        {"lr": lr, "width": width},
        history,
        early_stopped=early,
        error="ValueError: bad | pipe" if status == "ERROR" else None,
        path=path,
    )


def sweep_trials() -> list[TrialRecord]:
    return [
        trial("t_best", [0.9, 0.4, 0.3, 0.35], lr=0.01, width=32),
        trial("t_mid", [0.8, 0.6], early=True, lr=0.05, width=16),
        trial("t_nan", [0.7, math.nan], lr=0.09, width=32),
        trial("t_failed", [0.1], status="ERROR", lr=0.001, width=16),  # best value, but failed: not ranked
        trial("t_slow", [0.95, 0.9, 0.85, 0.8], lr=0.0002, width=16),
    ]


def sweep_record(sweep_id: str = "demo-20260101-000000-abcd", **kw: Any) -> store.SweepRecord:
    base: dict[str, Any] = dict(
        sweep_id=sweep_id,
        experiment="demo",
        created=1767225600.0,
        status="finished",
        storage_path="/nonexistent",
        experiment_dirs=[f"/nonexistent/{sweep_id}"],
        tracking_uri="sqlite:///x.db",
        config=CONFIG,
        metric=M,
        mode="min",
        searcher="random",
        scheduler="asha",
        wall_s=20.0,
        slots=2,
    )
    base.update(kw)
    return store.SweepRecord(**base)


def collected(records: list[TrialRecord] | None = None) -> summary.Summary:
    return summary.collect(
        records if records is not None else sweep_trials(),
        M,
        "min",
        top_k=3,
        max_epochs=4,
        wall_s=20.0,
        slots=2,
    )


class Page(HTMLParser):
    """Collects what a reader of report.html sees: headings, table rows, images."""

    def __init__(self) -> None:
        super().__init__()
        self.h2: list[str] = []
        self.rows: list[list[str]] = []
        self.imgs: list[str] = []
        self.links: list[str] = []
        self._tag: str | None = None
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        if tag == "tr":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._row.append("")
        elif tag == "img":
            self.imgs.append(dict(attrs).get("src") or "")
        elif tag == "a":
            self.links.append(dict(attrs).get("href") or "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr" and self._row is not None:
            if self._row:
                self.rows.append(self._row)
            self._row = None
        self._tag = None

    def handle_data(self, data: str) -> None:
        if self._tag == "h2":
            self.h2.append(data)
        elif self._row is not None and self._row and self._tag in ("td", "b"):
            self._row[-1] += data


# ------------------------------------------------------------------------------------------ renderers


def test_csv_has_one_row_per_trial_ranked_first_with_nan_as_nan() -> None:
    text = formats.csv_text(collected())
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["trial_id"] for r in rows] == ["t_best", "t_mid", "t_nan", "t_slow", "t_failed"]
    assert [r["rank"] for r in rows] == ["1", "2", "3", "4", ""]
    by_id = {r["trial_id"]: r for r in rows}
    assert by_id["t_nan"][f"final/{M}"] == "NaN" and by_id["t_nan"]["nonfinite"] == "True"
    assert float(by_id["t_best"][f"best/{M}"]) == 0.3 and by_id["t_best"]["best_iteration"] == "3"
    assert by_id["t_failed"]["status"] == "ERROR" and by_id["t_failed"]["error"] == "ValueError: bad | pipe"
    assert by_id["t_mid"]["early_stopped"] == "True" and by_id["t_mid"]["epochs_run"] == "2"
    assert by_id["t_best"]["param/width"] == "32" and float(by_id["t_best"]["param/lr"]) == 0.01
    for col in ("wall_s", "cpu_s", "gpu_s", "epochs"):
        assert col in rows[0]


def test_csv_cpu_seconds_after_completion_from_the_sweep_config() -> None:
    recs = sweep_trials()
    s = rwrite.complete(sweep_record(), recs, collected(recs))
    rows = {r["trial_id"]: r for r in csv.DictReader(io.StringIO(formats.csv_text(s)))}
    # 3 CPUs per trial (1 driver + 2 workers x 1), wall = time_total_s of the last row (2 s x 4 epochs)
    assert float(rows["t_best"]["cpu_s"]) == pytest.approx(3 * 8.0)
    assert float(rows["t_best"]["gpu_s"]) == 0.0


def md_tables(text: str, heading: str) -> list[list[str]]:
    """The rows of the first pipe table under ``## heading`` (without header and separator)."""
    section = text.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln)[1:-1]] for ln in lines[2:]]


def test_markdown_leaderboard_failed_and_nan_sections() -> None:
    text = formats.markdown(sweep_record(), collected())
    assert "trial **t_best**: val/loss = 0.3 (min), reached at iteration 3" in text
    board = md_tables(text, "Leaderboard")
    assert [r[1] for r in board] == ["t_best", "t_mid", "t_nan ⚠NaN"]  # top_k = 3, failed never there
    assert board[0][2] == "0.3" and board[2][2] == "0.7" and board[2][4] == "NaN"
    failed = md_tables(text, "Failed trials")
    assert failed[0][0] == "t_failed" and "ValueError: bad \\| pipe" in failed[0][4]
    nan = md_tables(text, "Trials that reported NaN/inf")
    assert nan == [["t_nan", "TERMINATED", "0.7", "NaN"]]
    status = dict((r[0], r[1]) for r in md_tables(text, "Trials by status"))
    assert status["failed"] == "1" and status["early-stopped"] == "1" and status["total"] == "5"
    assert "compute saved by early stopping: 10% of the budget (2 epochs" in text
    assert "efficiency = T_ideal / T_observed" in text
    assert "training time over all trials: " in text and "(the trainable's own time/compute_s + time/data_s)" in text
    tune_clock = [TrialRecord("t", "TERMINATED", {"lr": 0.1}, [{M: 0.5, "training_iteration": 1.0,
                                                                "time_this_iter_s": 3.0}])]
    assert "(Tune's time between reports: checkpoint saves included" in formats.markdown(
        sweep_record(), collected(tune_clock))


def test_the_parent_run_and_the_report_say_what_the_loopback_promise_rests_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user's own GLOO_SOCKET_IFNAME: the sweep's parent run (tag sweeps.listeners), its record and its report
    say that the loopback promise depends on it. A record of an older version says nothing."""
    from sweeps.execution.cluster import loopback
    from sweeps.ops.prepare import prepare
    from sweeps.ops.run import new_record
    from sweeps.tracking.parent import RUN_TAG_LISTENERS, open_parent

    if loopback.loopback_interface() is None:
        pytest.skip("no loopback interface on this machine")
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth7")
    spec = prepare(["+experiment=quickstart", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"])
    note = loopback.listeners(spec.cluster.mode)
    assert "GLOO_SOCKET_IFNAME=eth7" in note and "depends on it" in note
    c, exp_id, run_id = open_parent(spec, "quickstart-1", [], None, None, listeners=note)
    assert c.get_run(run_id).data.tags[RUN_TAG_LISTENERS] == note
    rec = new_record(spec, "quickstart-1", [], exp_id, run_id, 2, None, None)
    assert rec.listeners == note
    assert f"- listeners: {note}" in formats.markdown(rec, collected())
    assert "listeners:" not in formats.markdown(sweep_record(), collected())


def test_markdown_without_any_finite_value_has_no_best() -> None:
    s = collected([trial("a", [math.nan]), trial("b", [0.2], status="ERROR")])
    text = formats.markdown(sweep_record(), s)
    assert "none: no trial reported a finite value of val/loss" in text
    assert "no ranked trial" in text
    assert md_tables(text, "Failed trials")[0][0] == "b"


def test_write_all_html_is_self_contained_with_plots(tmp_path: Path) -> None:
    recs = [*sweep_trials(), trial("t_more", [0.6, 0.5], lr=0.003, width=32)]
    written = rwrite.write_all(sweep_record(), recs, collected(recs), tmp_path)
    names = {p.name for p in written}
    assert {
        "trials.csv",
        "summary.md",
        "report.html",
        "learning_curves.png",
        "metric_vs_params.png",
        "importance.png",
        "parallel_coordinates.png",
    } <= names
    page = Page()
    page.feed((tmp_path / "report.html").read_text())
    assert {"Overview", "Best trial", "Compute", "Hyperparameter importance", "Plots"} <= set(page.h2)
    leader = [r for r in page.rows if r and r[0] == "1"]
    assert leader and leader[0][1] == "t_best"
    assert len(page.imgs) == 4
    assert page.links == ["trials.csv", "summary.md"]
    for src in page.imgs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_MAGIC
    assert all((tmp_path / n).read_bytes()[:8] == PNG_MAGIC for n in names if n.endswith(".png"))


def test_write_only_the_requested_format(tmp_path: Path) -> None:
    written = rwrite.write(sweep_record(), sweep_trials(), collected(), tmp_path / "csv", ("csv",))
    assert [p.name for p in written] == ["trials.csv"]
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == ["trials.csv"]
    written = rwrite.write(sweep_record(), sweep_trials(), collected(), tmp_path / "html", ("html",))
    assert written[0].name == "report.html" and all(p.suffix == ".png" for p in written[1:])
    assert not (tmp_path / "html" / "summary.md").exists()
    page = Page()
    page.feed(written[0].read_text())
    assert page.links == [] and len(page.imgs) == len(written) - 1


def test_importance_is_skipped_with_a_note_below_three_trials(tmp_path: Path) -> None:
    recs = [trial("a", [0.3]), trial("b", [0.2], lr=0.02)]
    rwrite.write(sweep_record(), recs, collected(recs), tmp_path, ("md", "html"))
    text = (tmp_path / "summary.md").read_text()
    assert "importance: not computed: needs at least 3 finished trials" in text
    assert not (tmp_path / "importance.png").exists()
    assert (tmp_path / "learning_curves.png").exists()


def test_pbt_schedules_from_result_files_reach_the_report(tmp_path: Path) -> None:
    recs = []
    for tid, lrs in (("p0", [0.1, 0.1, 0.01, 0.01]), ("p1", [0.05, 0.05, 0.05, 0.05]), ("p2", [0.02] * 4)):
        d = tmp_path / "ray" / tid
        d.mkdir(parents=True)
        (d / "result.json").write_text(
            "\n".join(
                json.dumps({"training_iteration": i, "config": {"lr": lr}}) for i, lr in enumerate(lrs, 1)
            )
        )
        recs.append(trial(tid, [0.5, 0.4, 0.3, 0.2], lr=lrs[-1], path=str(d)))
    out = tmp_path / "out"
    rwrite.write_all(sweep_record(), recs, collected(recs), out)
    rows = md_tables((out / "summary.md").read_text(), "Hyperparameter schedules")
    assert rows == [["p0", "lr", "1→0.1, 3→0.01"]]
    assert (out / "schedules.png").read_bytes()[:8] == PNG_MAGIC
    csv_rows = {r["trial_id"]: r for r in csv.DictReader((out / "trials.csv").open())}
    assert csv_rows["p0"]["schedule"] == "lr: 1→0.1, 3→0.01" and csv_rows["p1"]["schedule"] == ""


# --------------------------------------------------------------------------------------- compare / list


def test_compare_from_the_index_when_results_are_gone(tmp_path: Path) -> None:
    a = sweep_record(
        "demo-a",
        best={"trial_id": "x", "value": 0.30, "params": {"lr": 0.01, "width": 32}},
        counts={"total": 5, "completed": 3, "early_stopped": 1, "failed": 1},
    )
    b_cfg = {
        **CONFIG,
        "search_space": {**SPACE, "lr": {"dist": "loguniform", "low": 1e-3, "high": 1e-1}},
        "sweep": {"metric": M, "mode": "min", "num_samples": 8},
    }
    b = sweep_record(
        "demo-b", config=b_cfg, best={"trial_id": "y", "value": 0.25, "params": {"lr": 0.02, "width": 32}}
    )
    md = compare.write_comparison(a, b, tmp_path)
    text = md.read_text()
    assert md == tmp_path / "compare.md" and (tmp_path / "compare.html").is_file()
    assert "B is better: best val/loss 0.25 vs 0.3 (min; B − A = -0.05)" in text
    side = {r[0]: r for r in md_tables(text, "Comparison")}
    assert side["best metric"][1:] == ["0.3", "0.25", "-0.05"]
    params = {r[0]: r for r in md_tables(text, "Best configuration, per parameter")}
    assert params["lr"][3] == "yes" and params["width"][3] == ""
    space = {r[0]: r for r in md_tables(text, "Search space, per parameter")}
    assert space["lr"][3] == "yes" and space["width"][3] == ""
    other = md_tables(text, "Other configuration differences")
    assert ["sweep.num_samples", "(absent)", "8"] in other


def test_list_report_and_compare_reject_unknown_ids(
    sweeps_env: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list"]) == 0
    assert "no sweeps yet" in capsys.readouterr().out
    store.save(
        sweep_record(
            "demo-old", created=time.time() - 60, best={"trial_id": "x", "value": 0.5}, counts={"total": 3}
        )
    )
    store.save(sweep_record("demo-new", created=time.time(), status="interrupted", counts={"total": 2}))
    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["sweep_id", "experiment", "date", "status", "best", "trials"]
    assert lines[1].split()[0] == "demo-old" and "val/loss=0.5" in lines[1] and lines[1].split()[-1] == "3"
    assert lines[2].split()[0] == "demo-new" and "interrupted" in lines[2] and " - " in lines[2]
    assert main(["list", "--experiment", "nope"]) == 2
    assert "experiments with sweeps: demo" in capsys.readouterr().err
    assert main(["report", "no-such-sweep"]) == 2
    assert "no sweep 'no-such-sweep'" in capsys.readouterr().err
    assert main(["compare", "demo-old", "no-such-sweep"]) == 2
    assert "no sweep 'no-such-sweep'" in capsys.readouterr().err
    assert main(["report", "latest"]) == 1  # demo-new: neither Ray results nor an MLflow store
    assert "demo-new: its Ray results (/nonexistent/demo-new) and its MLflow store" in capsys.readouterr().err
    assert not (sweeps_env.root / "reports").exists()


# ------------------------------------------------------------------------------------------- end to end
# One real sweep end to end (the report's files, its MLflow artifacts, `report` rebuilt from the stored results and
# from the MLflow runs alone, `list`, `report --format html`, `report.dir`/`report.top_k`, `compare` of two real
# sweeps): tests/test_promote.py, on the good and the worse sweeps it runs anyway (one shape, run once).
