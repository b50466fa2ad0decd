"""The ``search_space`` and ``searcher`` sections, and the rules that tie the two together."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sweeps.config import space
from sweeps.config.reader import Reader, mlflow_name_errors


def parse_space(r: Reader) -> dict[str, dict[str, Any]]:
    space_cfg = r.cfg.get("search_space") or {}
    if not isinstance(space_cfg, Mapping):
        r.errors.append(f"search_space: expected a mapping of parameters, got {space_cfg!r}")
        return {}
    r.errors += space.validate_space(space_cfg)
    for pname in space_cfg:
        r.errors += mlflow_name_errors(f"search_space.{pname}", str(pname))
    return {k: dict(v) if isinstance(v, Mapping) else v for k, v in space_cfg.items()}


def parse_target(r: Reader, section: str) -> dict[str, Any]:
    """A ``_target_`` section (searcher, scheduler) as a plain dict."""
    node = dict(r.section(section))
    if "_target_" not in node:
        r.errors.append(f"{section}._target_: required (the Ray/Optuna/HyperOpt class to instantiate)")
    return node


def searcher_errors(searcher: Mapping[str, Any], space_cfg: Mapping[str, Any]) -> list[str]:
    """Grid search needs discrete parameters; model-based searchers cannot take grid axes."""
    errors: list[str] = []
    if searcher.get("name") == "grid":
        continuous = sorted(k for k, s in space_cfg.items() if isinstance(s, Mapping)
                            and s.get("dist") not in ("grid", "choice"))
        if continuous:
            errors.append(f"searcher=grid: parameters {', '.join(continuous)} are continuous; give them "
                          f"dist: grid or choice values, or use searcher=random|optuna|hyperopt")
    if not str(searcher.get("_target_", "")).endswith("BasicVariantGenerator") and space.has_grid(space_cfg):
        errors.append(f"search_space: dist=grid is only for searcher=random|grid, not "
                      f"searcher={searcher.get('name')}; use dist=choice")
    storage = searcher.get("storage")
    if storage is not None and not (isinstance(storage, str) and storage.startswith("sqlite:///")
                                    and str(searcher.get("_target_", "")).endswith("OptunaSearch")):
        errors.append(f"searcher.storage: {storage!r} is not a study database; OptunaSearch keeps its study in "
                      f"a SQLite file named as searcher.storage=sqlite:///PATH (the nightly sets one per schedule)")
    return errors
