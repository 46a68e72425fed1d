"""Settings: one default per key, agreeing with configs/base.toml [aggregate]; clear errors."""

from __future__ import annotations

import dataclasses

import pytest

from aggregate.settings import AggregateSettings, load_settings


def test_every_default_is_a_configs_base_toml_value() -> None:
    """Each field is an [aggregate] key (or one of the few named elsewhere), with the TOML value: no
    setting of the role lives only in code."""
    import tomllib

    from rcea.paths import configs_dir

    with (configs_dir() / "base.toml").open("rb") as fh:
        base = tomllib.load(fh)
    elsewhere = {"pass_k": ("passk", "n"), "passk_benchmark": ("passk", "benchmark"),
                 "failure_benchmark": ("eval", "trace_benchmark"),
                 "advantage_eps": ("covariance", "advantage_eps")}
    not_settings = {"failure"}  # the [failure] record (tested below)
    defaults = AggregateSettings()
    checked = 0
    for f in dataclasses.fields(defaults):
        if f.name in not_settings:
            continue
        section, key = elsewhere.get(f.name, ("aggregate", f.name))
        value = base[section][key]["value"]
        assert getattr(defaults, f.name) == (tuple(value) if isinstance(value, list) else value), f.name
        checked += 1
    assert checked == len(dataclasses.fields(defaults)) - len(not_settings)
    assert set(base["aggregate"]) - {f.name for f in dataclasses.fields(defaults)} == {"audit_seed"}  # the audit sample's seed, read by infer/audit


def test_overrides_and_unknown_keys() -> None:
    s = load_settings(None, min_k_r=2, bootstrap_resamples=None)
    assert s.min_k_r == 2 and s.bootstrap_resamples == 10_000
    assert load_settings("tiny", min_k_r=3).min_k_r == 3
    with pytest.raises(ValueError, match="aggregate has no setting .min_kr.; valid: bootstrap_resamples"):
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
