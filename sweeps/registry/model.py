"""From a checkpoint to a model: verify the folder, rebuild the trainable's model, evaluate it."""

from __future__ import annotations

import inspect
from typing import Any

from sweeps import uris
from sweeps.config import security
from sweeps.config.targets import TargetRefused, resolve
from sweeps.errors import BadInput
from sweeps.registry.gate import score


# -- checks against the sweep's files -----------------------------------------------------------------------
def verify_checkpoint(path: str | None, trial_id: str) -> str:
    """The checkpoint folder, or BadInput when it is missing or incomplete (nothing is loaded yet)."""
    from trainables.common import CHECKPOINT_FILES

    if not path:
        raise BadInput(f"checkpoint: trial {trial_id} has no checkpoint left on disk; promote another trial "
                       f"(--trial) or rerun the sweep")
    if not uris.is_dir(path):
        raise BadInput(f"checkpoint: {path} (trial {trial_id}) is missing")
    bad = [f for f in CHECKPOINT_FILES
           if not uris.is_file(uris.join(path, f)) or uris.size(uris.join(path, f)) == 0]
    if bad:
        raise BadInput(f"checkpoint: {path} (trial {trial_id}) is incomplete: missing or empty "
                       f"{', '.join(bad)}; expected {', '.join(CHECKPOINT_FILES)}")
    return path


def _builder(rec: Any) -> tuple[str, dict[str, Any]]:
    """The trainable's dotted builder path and fixed params from the sweep's composed config."""
    t = (rec.config or {}).get("trainable") or {}
    builder = t.get("builder")
    if not isinstance(builder, str) or not builder:
        raise BadInput(f"trainable.builder: sweep {rec.sweep_id}'s trainable {t.get('name')!r} declares no "
                       f"builder (build_model(config) -> nn.Module); promote needs one")
    return builder, dict(t.get("params") or {})


def _allowed(rec: Any) -> tuple[str, ...]:
    """The allowlist the sweep ran under (its extras re-checked: the index record is only a file)."""
    extra = ((rec.config or {}).get("security") or {}).get("allowed_targets") or []
    errors = security.extra_errors(extra)
    if errors:
        raise BadInput(*errors)
    return security.prefixes(extra)


def rebuild(rec: Any, trial: Any, checkpoint: str) -> tuple[Any, Any, Any]:
    """(model in eval mode, x_val, y_val): the trainable's builder + the checkpoint's weights + its data."""
    from trainables.common import load_checkpoint

    builder, params = _builder(rec)
    module = builder.replace(":", ".").rpartition(".")[0]
    allowed = _allowed(rec)
    try:
        build = resolve(builder, allowed)
        validation_data = resolve(f"{module}.validation_data", allowed)
    except TargetRefused as exc:
        raise BadInput(f"trainable.builder: cannot import {builder!r} and {module}.validation_data() "
                       f"({exc}); a trainable exposes both for promotion") from None
    config = {**params, **trial.params}
    model = build(config)
    try:
        with uris.local_copy(checkpoint) as folder:
            state, _, _ = load_checkpoint(folder)
        model.load_state_dict(state)
    except Exception as exc:  # truncated file, foreign pickle (weights_only refuses it), shape mismatch
        raise BadInput(f"checkpoint: {checkpoint} cannot be loaded into {builder}'s model ({exc})") from None
    model.eval()
    # validation_data(config) when the trainable takes its settings (e.g. a data path), else validation_data()
    x_val, y_val = validation_data(config) if inspect.signature(validation_data).parameters else validation_data()
    return model, x_val, y_val


def evaluate(model: Any, x: Any, y: Any) -> dict[str, float]:
    import torch

    with torch.no_grad():
        out = model(x)
    return score(out.numpy(), y.numpy())


def requirements() -> list[str]:
    """Pinned runtime requirements (MLflow's inference loads the model in a subprocess: slow on 2 cores)."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for pkg in ("torch", "numpy", "cloudpickle"):
        try:
            out.append(f"{pkg}=={version(pkg)}")
        except PackageNotFoundError:
            out.append(pkg)
    return out
