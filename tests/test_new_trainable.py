"""``sweeps new trainable``: the scaffold's files, its refusals, and a real sweep of it from a clean copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FAST, REPO, SweepsEnv

from sweeps.errors import BadInput
from sweeps.ops import scaffold


def _clone(dest: Path) -> Path:
    """The checkout's tracked (and new, not ignored) files: what a clean clone holds."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True,
                            text=True, check=True).stdout.splitlines()
    for rel in listed:
        src, dst = REPO / rel, dest / rel
        if not src.exists() and not src.is_symlink():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        else:
            shutil.copy2(src, dst)
    return dest


@pytest.mark.parametrize(("name", "source", "says"), [
    ("Bad-Name", None, "not a trainable name"),
    ("digits", None, "exists already"),
    ("mine", "not a path", "--from"),
])
def test_scaffold_refusals_name_the_argument(name: str, source: str | None, says: str) -> None:
    with pytest.raises(BadInput, match=says):
        scaffold.plan(name, source, root=REPO)


def test_scaffold_from_a_user_function_allows_and_points_at_its_package(tmp_path: Path) -> None:
    root = _clone(tmp_path / "clone")
    plan = scaffold.plan("mine", "mypkg.train:train_func", root=root)
    texts = {p.relative_to(root).as_posix(): t for p, t in plan.files.items()}
    assert "trainables/mine.py" not in texts, "the user's code stays in their package"
    assert "loop: mypkg.train.train_func" in texts["conf/trainable/mine.yaml"]
    assert "allowed_targets: [mypkg]" in texts["conf/experiment/mine.yaml"]


@pytest.mark.slow
def test_new_trainable_then_run_it_from_a_clean_clone(tmp_path: Path) -> None:
    root = _clone(tmp_path / "clone")
    env = SweepsEnv(tmp_path / "run")
    env.env.pop("SWEEPS_CONF_DIR")
    env.env["PYTHONPATH"] = str(root)  # the clone's packages, as an install of the clone would give
    try:
        made = subprocess.run([sys.executable, "-m", "sweeps", "new", "trainable", "foo"], cwd=root, env=env.env,
                              capture_output=True, text=True, timeout=300)
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
        assert "wrote" in made.stdout and "yes resume" in made.stdout and "next: python -m sweeps run" in made.stdout
        ran = subprocess.run([sys.executable, "-m", "sweeps", "run", "+experiment=foo", "sweep.num_samples=2",
                              "trainable.params.epochs=2", "scheduler=fifo", "report.enabled=false", *FAST],
                             cwd=root, env=env.env, capture_output=True, text=True, timeout=600)
        assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
        (rec_path,) = list((env.home / "sweeps").glob("[!.]*.json"))
        rec = json.loads(rec_path.read_text())
        assert rec["status"] == "finished" and rec["counts"]["completed"] == 2, rec["counts"]
    finally:
        env.cleanup()
