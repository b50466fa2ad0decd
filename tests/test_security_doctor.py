"""Target allowlisting, secret redaction, and `sweeps doctor` (fast tier)."""

from __future__ import annotations

import pytest

from sweeps.cli import main as cli_main
from sweeps.config import security


@pytest.mark.parametrize(
    ("target", "allowed"),
    [
        ("ray.tune.schedulers.ASHAScheduler", True),
        ("ray.tune.search.optuna.OptunaSearch", True),
        ("optuna.samplers.TPESampler", True),
        ("torch.optim.AdamW", True),
        ("trainables.digits.train_loop", True),
        ("os.system", False),
        ("subprocess.Popen", False),
        ("ray.train.torch.TorchTrainer", False),  # only ray.tune is allowed
        ("optuna_evil.x", False),  # a prefix must end at a dot
        ("builtins.eval", False),
    ],
)
def test_target_allowlist(target: str, allowed: bool) -> None:
    errors = security.check_targets({"scheduler": {"_target_": target}})
    assert (errors == []) is allowed, errors
    if not allowed:
        assert "scheduler._target_" in errors[0] and "security.allowed_targets" in errors[0]


def test_allowlist_extends_by_config(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    (tmp_path / "mypkg_ext").mkdir()
    (tmp_path / "mypkg_ext" / "__init__.py").write_text("class Custom:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = {"searcher": {"_target_": "mypkg_ext.Custom", "inner": {"_target_": "os.system"}}}
    errors = security.check_targets(cfg, extra=["mypkg_ext"])
    assert len(errors) == 1 and "searcher.inner._target_" in errors[0]


def test_redaction_is_recursive_and_collects_values() -> None:
    seen: set[str] = set()
    out = security.redact({"tracking": {"password": "hunter22", "uri": "x"},
                           "params": {"api_key": "k-123456", "MY_TOKEN": "t-999999", "lr": 0.1},
                           "list": [{"client_secret": "s-777777"}]}, seen)
    assert out["tracking"]["password"] == security.REDACTED and out["tracking"]["uri"] == "x"
    assert out["params"]["api_key"] == security.REDACTED and out["params"]["MY_TOKEN"] == security.REDACTED
    assert out["params"]["lr"] == 0.1 and out["list"][0]["client_secret"] == security.REDACTED
    assert seen == {"hunter22", "k-123456", "t-999999", "s-777777"}
    assert security.scrub("failed with k-123456 at x", seen) == f"failed with {security.REDACTED} at x"


def test_spec_redacts_env_secrets(monkeypatch: pytest.MonkeyPatch, sweeps_env) -> None:  # noqa: ANN001
    from sweeps.ops import prepare

    monkeypatch.setenv("SWEEPS_T_SECRET", "zz-secret-value")
    spec = prepare.prepare(["+tracking.password=${oc.env:SWEEPS_T_SECRET}"])
    assert spec.raw["tracking"]["password"] == "zz-secret-value"  # the run itself may need it
    assert "zz-secret-value" not in str(spec.redacted())


def test_doctor_reports_ok_and_failures(capsys: pytest.CaptureFixture[str], sweeps_env) -> None:  # noqa: ANN001
    assert cli_main.main(["doctor"]) == 0
    out = capsys.readouterr().out
    for name in ("ray[default]", "torch", "mlflow", "MLflow store", "storage", "crontab", "GPU", "Ray token auth"):
        assert name in out
    assert "all required checks passed" in out
    assert cli_main.main(["doctor", "--tracking-uri", "http://127.0.0.1:9"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] MLflow store" in out and "fix:" in out


def test_doctor_says_where_the_embedded_ray_would_listen(capsys: pytest.CaptureFixture[str], sweeps_env,  # noqa: ANN001
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from sweeps.execution.levers import core as levers_core

    assert cli_main.main(["doctor"]) == 0
    assert "[ok  ] embedded Ray listeners  loopback only" in capsys.readouterr().out
    monkeypatch.setenv(levers_core.TEST_RAY_VERSION, "2.61.0")
    assert cli_main.main(["doctor"]) == 0, "a warning, not a failure: the sweep still runs"
    out = capsys.readouterr().out
    assert "[warn] embedded Ray listeners  the node's address, not loopback: Ray's public path" in out
    assert "install Ray 2.60 (the release the loopback_node lever was checked on" in out
