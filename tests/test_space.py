"""The search-space translation table: YAML spec -> Tune domain, and its validation."""

from __future__ import annotations

import pytest
from ray import tune
from ray.tune.search.sample import Categorical, Float, Integer, Normal

from sweeps.config import space


@pytest.mark.parametrize(
    ("spec", "kind", "check"),
    [
        ({"dist": "uniform", "low": 0.1, "high": 0.5}, Float, lambda d: (d.lower, d.upper) == (0.1, 0.5)),
        ({"dist": "quniform", "low": 0.0, "high": 1.0, "q": 0.25}, Float, lambda d: d.sampler.q == 0.25),
        ({"dist": "loguniform", "low": 1e-4, "high": 1e-1}, Float,
         lambda d: (d.lower, d.upper) == (1e-4, 1e-1) and "LogUniform" in type(d.sampler).__name__),
        ({"dist": "qloguniform", "low": 1e-4, "high": 1e-1, "q": 1e-4}, Float, lambda d: d.sampler.q == 1e-4),
        ({"dist": "randint", "low": 1, "high": 4}, Integer, lambda d: (d.lower, d.upper) == (1, 4)),
        ({"dist": "qrandint", "low": 16, "high": 128, "q": 16}, Integer, lambda d: d.sampler.q == 16),
        ({"dist": "lograndint", "low": 1, "high": 1024}, Integer, lambda d: d.upper == 1024),
        ({"dist": "randn", "mean": 0.0, "sd": 2.0}, Float, lambda d: isinstance(d.sampler, Normal)),
        ({"dist": "choice", "values": [32, 64]}, Categorical, lambda d: list(d.categories) == [32, 64]),
    ],
)
def test_translation_table(spec: dict, kind: type, check) -> None:  # noqa: ANN001
    assert space.validate_param("search_space.x", spec) == []
    domain = space.to_domain(spec)
    assert isinstance(domain, kind)
    assert check(domain)
    sample = domain.sample()
    if "low" in spec:
        assert spec["low"] <= sample <= spec["high"]


def test_grid_and_grid_choices() -> None:
    assert space.to_domain({"dist": "grid", "values": [1, 2]}) == tune.grid_search([1, 2])
    assert space.to_domain({"dist": "choice", "values": [1, 2]}, grid_choices=True) == tune.grid_search([1, 2])
    out = space.to_tune({"a": {"dist": "grid", "values": [1]}, "b": {"dist": "uniform", "low": 0, "high": 1}})
    assert set(out) == {"a", "b"} and space.has_grid({"a": {"dist": "grid", "values": [1]}})


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"dist": "gaussian", "low": 0, "high": 1}, "unknown distribution 'gaussian'"),
        ({"dist": "uniform", "low": 1, "high": 1}, "low (1) must be < high (1)"),
        ({"dist": "uniform", "low": 2, "high": 1}, "must be < high"),
        ({"dist": "loguniform", "low": 0, "high": 1}, "loguniform needs low > 0"),
        ({"dist": "loguniform", "low": -1, "high": 1}, "needs low > 0"),
        ({"dist": "choice", "values": []}, "non-empty list"),
        ({"dist": "uniform", "low": "a", "high": 1}, "must be a finite number"),
        ({"dist": "uniform", "low": 0}, "high: required"),
        ({"dist": "randint", "low": 0.5, "high": 3}, "integer bounds"),
        ({"dist": "quniform", "low": 0, "high": 1, "q": 0}, "q: must be > 0"),
        ({"dist": "uniform", "low": 0, "high": 1, "step": 2}, "unknown field(s) step"),
        ("0.1", "expected a mapping"),
    ],
)
def test_bad_params_name_the_key(spec: object, needle: str) -> None:
    errors = space.validate_param("search_space.lr", spec)
    assert errors, spec
    assert any(needle in e for e in errors), errors
    assert all(e.startswith("search_space.lr") for e in errors)


def test_empty_space_is_refused() -> None:
    (msg,) = space.validate_space({})
    assert "search space is empty" in msg
