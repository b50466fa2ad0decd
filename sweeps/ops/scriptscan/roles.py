"""The options with a role: the script's epoch budget, output folder, resume option and learning rate."""

from __future__ import annotations

from collections.abc import Iterable

from sweeps.ops.scriptscan.result import Param

EPOCH_NAMES = ("max_epochs", "num_train_epochs", "epochs", "n_epochs", "num_epochs")
OUTPUT_NAMES = ("output_dir", "out_dir", "save_dir", "checkpoint_dir", "default_root_dir", "log_dir", "ckpt_dir",
                "outdir")
VALUE_KINDS = frozenset({"str", "other"})
RESUME_RULES = (("resume_from_checkpoint", VALUE_KINDS), ("resume_from", VALUE_KINDS), ("ckpt_path", VALUE_KINDS),
                ("resume", VALUE_KINDS), ("checkpoint", frozenset({"str"})), ("resume", frozenset({"switch"})))
LR_NAMES = ("lr", "learning_rate")
SWITCHES = frozenset({"switch", "switch_off"})


def _key(param: Param) -> set[str]:
    """The names a Param answers to: its name and its flag's last part (--model.lr -> lr, --max-epochs)."""
    return {param.name, param.flag.lstrip("-").rsplit(".", 1)[-1].replace("-", "_").lower()}


def _pick(params: Iterable[Param], rules: Iterable[tuple[str, frozenset[str] | None]]) -> Param | None:
    params = list(params)
    for name, kinds in rules:
        for param in params:
            if name in _key(param) and (kinds is None or param.kind in kinds):
                return param
    return None


def _special(params: list[Param]) -> dict[str, Param | None]:
    not_switch = frozenset({"int", "float", "str", "bool", "other"})
    return {
        "epochs": _pick(params, ((n, not_switch) for n in EPOCH_NAMES)),
        "output": _pick(params, ((n, VALUE_KINDS) for n in OUTPUT_NAMES)),
        "resume": _pick(params, RESUME_RULES),
        "lr": _pick(params, ((n, not_switch) for n in LR_NAMES)),
    }
