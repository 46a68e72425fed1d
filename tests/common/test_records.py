"""rcea.records.build, the one way a typed settings record is built (objectives, aggregation, the LLM endpoints,
the codebook, the failure detector): strict about names, checked and converted by type."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from rcea.records import RecordError, build, fits, names

if TYPE_CHECKING:
    from rcea.stats import FailureThresholds


@dataclass(frozen=True)
class Example:
    rate: float
    steps: int
    flag: bool = False
    labels: tuple[str, ...] = ()
    budgets: tuple[float, ...] = (0.5,)
    per_scale: dict[str, int] = field(default_factory=dict)
    name: str | None = None
    nested: FailureThresholds | None = None   # imported for type checkers only: not checked here


def test_a_record_from_its_values_with_defaults_and_conversions():
    r = build(Example, {"rate": 1, "steps": 3, "labels": ["a", "b"], "budgets": [1, 0.25], "per_scale": {"3b": 4}},
              where="example")
    assert r == Example(1.0, 3, False, ("a", "b"), (1.0, 0.25), {"3b": 4}, None, None)
    assert isinstance(r.rate, float) and isinstance(r.budgets[0], float)   # an int given for a float is that float
    assert names(Example) == ("rate", "steps", "flag", "labels", "budgets", "per_scale", "name", "nested")


@pytest.mark.parametrize("values,message", [
    ({"rate": 1.0, "steps": 3, "stpes": 4}, "example has no setting 'stpes'; valid: rate, steps, flag, labels"),
    ({"rate": 1.0}, "example settings lack steps (configs/x.toml [example])"),
    ({"rate": 1.0, "steps": True}, "example.steps must be int, got True"),            # a bool is not a number
    ({"rate": "fast", "steps": 3}, "example.rate must be float, got 'fast'"),
    ({"rate": 1.0, "steps": 2.5}, "example.steps must be int, got 2.5"),
    ({"rate": 1.0, "steps": 3, "flag": 1}, "example.flag must be bool, got 1"),
    ({"rate": 1.0, "steps": 3, "labels": "ab"}, "example.labels must be tuple[str, ...], got 'ab'"),
    ({"rate": 1.0, "steps": 3, "per_scale": {"3b": "4"}}, "example.per_scale must be dict[str, int]"),
    ({"rate": 1.0, "steps": 3, "name": 7}, "example.name must be str | None, got 7"),
])
def test_what_does_not_fit_is_an_error_naming_it(values, message):
    with pytest.raises(RecordError) as exc:
        build(Example, values, where="example", source="configs/x.toml [example]")
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_keys_another_reader_owns_are_named_not_dropped():
    values = {"rate": 1.0, "steps": 3, "induce_seed": 5}
    assert build(Example, values, where="codebook", others=("induce_seed",)).steps == 3
    with pytest.raises(RecordError, match="codebook has no setting 'induce_seed'"):
        build(Example, values, where="codebook")


def test_the_caller_s_error_class_is_raised():
    class SettingsError(RecordError):
        pass

    with pytest.raises(SettingsError):
        build(Example, {"rate": 1.0}, where="x", error=SettingsError)


def test_fits_reads_generic_types():
    assert fits(tuple[int, str], (1, "a")) and not fits(tuple[int, str], (1, 2)) and not fits(tuple[int, str], (1,))
    assert fits(list[float], [1, 2.5]) and not fits(list[float], [True])
    assert fits(int | None, None) and not fits(int, None)


def test_the_project_s_records_are_built_by_it():
    """The failure detector's thresholds and the aggregation settings come through build (strict)."""
    from rcea.config import load_config
    from rcea.stats import FailureThresholds

    cfg = load_config("tiny")
    assert FailureThresholds.from_config(cfg) == FailureThresholds(0.30, 0.05, 0.30)
    assert FailureThresholds.from_config({"failure.peak_min": 1, "failure.end_max": 0.0, "failure.drop_min": 0.5}) \
        == FailureThresholds(1.0, 0.0, 0.5)
    with pytest.raises(RecordError, match="failure has no setting 'peak'; valid: peak_min, end_max, drop_min"):
        FailureThresholds.from_config({"failure.peak": 0.3, "failure.end_max": 0.05, "failure.drop_min": 0.3})
    assert dataclasses.is_dataclass(FailureThresholds)
