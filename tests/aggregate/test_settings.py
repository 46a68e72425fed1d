"""Settings: one default per key, agreeing with configs/base.toml [aggregate]; clear errors."""

from __future__ import annotations

import dataclasses

import pytest

from aggregate.settings import AggregateSettings, load_settings


def test_defaults_agree_with_project_config() -> None:
    from rcea.config import load_config

    cfg = load_config("3b")  # the paper scale; tiny.toml lowers some of them on purpose
    defaults = AggregateSettings()
    fields = {f.name for f in dataclasses.fields(defaults)}
    checked = 0
    for name in ("bootstrap_resamples", "bootstrap_seed", "rarefaction_seed", "min_k_r", "q99_quantile", "rank_budgets",
                 "min_mode_m"):
        key = f"aggregate.{name}"
        if key not in cfg:
            continue
        field = name
        assert field in fields
        value = cfg[key]
        assert getattr(defaults, field) == (tuple(value) if isinstance(value, list) else value), name
        checked += 1
    assert checked >= 4


def test_overrides_and_unknown_keys() -> None:
    s = load_settings(None, min_k_r=2, bootstrap_resamples=None)
    assert s.min_k_r == 2 and s.bootstrap_resamples == 10_000
    assert load_settings("tiny", min_k_r=3).min_k_r == 3
    with pytest.raises(ValueError, match="unknown aggregate setting.*valid"):
        AggregateSettings().replace(min_kr=3)


def test_the_dense_trace_benchmark_follows_what_the_scale_evaluates() -> None:
    """The paper traces greedy MATH500; the toy world evaluates only `toy`, so its trace (Figure 1's
    accuracy panel, the failure detector) reads that instead of an empty MATH500 trace: the same
    `eval.trace_benchmark` the planner schedules the dense trace on."""
    assert load_settings("3b").failure_benchmark == "math500"
    assert load_settings("tiny").failure_benchmark == "toy"
    assert load_settings("tiny", failure_benchmark="math500").failure_benchmark == "math500"


def test_failure_thresholds_are_the_configured_ones() -> None:
    from rcea.config import load_config
    from rcea.stats import FailureThresholds

    assert AggregateSettings().failure_thresholds() == FailureThresholds.from_config(load_config("7b"))
    assert load_settings("tiny").failure == FailureThresholds(0.30, 0.05, 0.30)
