"""Settings: one default per key, agreeing with configs/base.toml [aggregate]; clear errors."""

from __future__ import annotations

import dataclasses

import pytest

from aggregate.settings import CONFIG_ALIASES, AggregateSettings, load_settings


def test_defaults_agree_with_project_config() -> None:
    from rcea.config import load_config

    cfg = load_config("3b")  # the paper scale; tiny.toml lowers some of them on purpose
    defaults = AggregateSettings()
    fields = {f.name for f in dataclasses.fields(defaults)}
    checked = 0
    for name in ("bootstrap_resamples", "bootstrap_seed", "rarefaction_seed", "min_k_r", "q99", "rank_budgets"):
        key = f"aggregate.{name}"
        if key not in cfg:
            continue
        field = CONFIG_ALIASES.get(name, name)
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
