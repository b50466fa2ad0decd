"""From a checkpoint to a servable model: find the folder, call the trainable's loader, read its validation data.

The loader is ``trainable.load_model`` (``load_model(checkpoint_dir, config) -> ServableModel | nn.Module``):
the trainable alone knows its checkpoint layout, so promotion reads nothing in the folder itself. A trainable
that names only a ``builder`` is read the common way (``model.pt`` into ``builder(config)``) and served as a
bare module.
"""

from __future__ import annotations

import inspect
from typing import Any

from sweeps import uris
from sweeps.config import security, stored, trust
from sweeps.config.targets import TargetRefused, resolve
from sweeps.errors import BadInput


def verify_checkpoint(path: str | None, trial_id: str) -> str:
    """The checkpoint folder, or BadInput when it is gone (what files it holds is the loader's business)."""
    if not path:
        raise BadInput(f"checkpoint: trial {trial_id} has no checkpoint left on disk; promote another trial "
                       f"(--trial) or rerun the sweep")
    if not uris.is_dir(path):
        raise BadInput(f"checkpoint: {path} (trial {trial_id}) is missing")
    return path


def hook(rec: Any) -> tuple[str, str]:
    """(config key, dotted path) of the trainable's loader: ``load_model``, else the ``builder`` fallback."""
    trainable = stored.read(rec.config).trainable
    if trainable.loader:
        return trainable.loader
    raise BadInput(f"trainable.load_model: sweep {rec.sweep_id}'s trainable {trainable.name!r} names no loader "
                   f"(load_model(checkpoint_dir, config) -> trainables.common.ServableModel); promote needs one")


def _allowed(rec: Any) -> tuple[str, ...]:
    """The allowlist the sweep's conf files gave (re-checked: the index record is only a file), plus what
    ``$SWEEPS_ALLOWED_TARGETS`` adds now: the same two trusted sources a sweep reads."""
    extra = stored.read(rec.config).allowed_targets
    env = trust.env_targets()
    errors = security.extra_errors(extra) + security.extra_errors(env, trust.ENV)
    if errors:
        raise BadInput(*errors)
    return security.prefixes([*extra, *env])


def _builder_loader(build: Any) -> Any:
    """The fallback loader for a trainable with a builder only: the common layout's ``model.pt``."""
    from trainables.common import load_weights

    return lambda folder, config: load_weights(folder, build(config))


def load(rec: Any, trial: Any, checkpoint: str) -> tuple[Any, Any, Any, str]:
    """(what the loader returned, raw validation inputs, targets, the loader's config key).

    A loader whose result carries ``examples`` (the script adapter's: the rows the script validated on, kept
    in the checkpoint) gives its own validation rows; any other names ``validation_data`` beside itself.
    """
    key, dotted = hook(rec)
    module = dotted.replace(":", ".").rpartition(".")[0]
    allowed = _allowed(rec)
    try:
        target = resolve(dotted, allowed)
        validation_data = resolve(f"{module}.validation_data", allowed)
    except TargetRefused as exc:
        raise BadInput(f"{key}: cannot import {dotted!r} and {module}.validation_data() ({exc}); a trainable "
                       f"exposes both for promotion") from None
    loader = target if key == "trainable.load_model" else _builder_loader(target)
    stored_trainable = stored.read(rec.config).trainable
    config = {**stored_trainable.params, **trial.params}
    config.update(_script_extras(stored_trainable))
    try:
        with uris.local_copy(checkpoint) as folder:
            obj = loader(folder, config)
    except Exception as exc:  # a missing file, a foreign pickle (weights_only refuses it), a shape mismatch
        raise BadInput(f"checkpoint: {checkpoint} (trial {trial.trial_id}) cannot be loaded by {dotted} "
                       f"({type(exc).__name__}: {exc})") from None
    examples = getattr(obj, "examples", None)
    if examples is not None:
        return obj.module, examples[0], examples[1], key
    # validation_data(config) when the trainable takes its settings (e.g. a data path), else validation_data()
    x_val, y_val = validation_data(config) if inspect.signature(validation_data).parameters else validation_data()
    return obj, x_val, y_val, key


def _script_extras(trainable: Any) -> dict[str, Any]:
    """A script trainable's spec, as its trials' loops had it (the loader rebuilds the model from it)."""
    if not trainable.script:
        return {}
    from sweeps.config.sections.script import SPEC_KEY

    return {SPEC_KEY: dict(trainable.script)}
