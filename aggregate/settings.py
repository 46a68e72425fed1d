"""Aggregation settings, typed and frozen (docs/estimators.md, its #choices table).

Every field takes its default from configs/base.toml (``_setting(key)``: never copied here, one
spelling: the field name is the TOML key of [aggregate], apart from the few read from another section, named
at the field), where its status and reason are documented (docs/settings.md).
``load_settings(scale)`` applies a scale's values; the CLI overrides fields (``AggregateSettings.replace``).
Status tags (copied from configs/base.toml, which decides): [S] stated in the paper, [E] a cited source's value,
[R] reconstructed, [C] our choice (docs/settings.md; report.md shows each with the value used).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rcea.config import BASE_METHOD, base_value, out_of_range

if TYPE_CHECKING:
    from rcea.stats import FailureThresholds


def _plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value  # TOML arrays as (hashable, frozen) tuples


def _setting(key: str):
    """A field whose default is `key`'s value in configs/base.toml; `load_settings` reads the same key
    from a scale's configuration, so the field-to-key map is written once, here."""
    return field(default_factory=lambda: _plain(base_value(key)), metadata={"key": key})


def _base_failure() -> "FailureThresholds":
    """The [failure] settings of configs/base.toml (rcea.stats imports numpy: loaded on first use only)."""
    from rcea.stats import FailureThresholds

    from rcea.records import names

    return FailureThresholds.from_config({f"failure.{k}": base_value(f"failure.{k}") for k in names(FailureThresholds)})


@dataclass(frozen=True)
class AggregateSettings:
    """Settings of the aggregation role."""

    bootstrap_resamples: int = _setting("aggregate.bootstrap_resamples")
    """[S] resamples for every bootstrap interval (paired ratio, retention)."""
    bootstrap_seed: int = _setting("aggregate.bootstrap_seed")
    """[C] seed of the bootstrap generators (the paper gives none)."""
    ci_level: float = _setting("aggregate.ci_level")
    """[S] percentile interval width, in percent."""
    min_k_r: int = _setting("aggregate.min_k_r")
    """[S] a reward-conditioned quantity is reported only if K_r >= min_k_r (lower it for tiny runs)."""
    rarefaction_seed: int = _setting("aggregate.rarefaction_seed")
    """[S] seed of the frozen rarefaction draws; keyed per (question, checkpoint)
    (docs/estimators.md#semantic-modes)."""
    rarefaction_draws: int = _setting("aggregate.rarefaction_draws")
    """[C] R, subsample draws per rarefied effective-mode count (docs/estimators.md#semantic-modes)."""
    min_mode_m: int = _setting("aggregate.min_mode_m")
    """[C] m_min: a (question, checkpoint) pair is retention-eligible iff min(n_base, n_c) >= m_min
    (docs/estimators.md#semantic-modes)."""
    uncertain_labels: tuple[str, ...] = _setting("aggregate.uncertain_labels")
    """[R] mode labels excluded from the mode population (the paper counts uncertain trajectories apart)."""
    q99_quantile: float = _setting("aggregate.q99_quantile")
    """[S] within-stratum cutoff quantile of the chosen-token covariance proxy."""
    quantile_method: str = _setting("aggregate.quantile_method")
    """[C] numpy quantile method (Hyndman-Fan type 7) (docs/estimators.md#covariance-proxy-and-q99-share)."""
    rank_budgets: tuple[float, ...] = _setting("aggregate.rank_budgets")
    """[S] equal-count upper-tail budgets of Table A8."""
    advantage_eps: float = _setting("covariance.advantage_eps")
    """[R] GRPO advantage denominator epsilon, covariance.advantage_eps (docs/estimators.md#covariance-proxy-and-q99-share)."""
    pass_k: int = _setting("passk.n")
    """[S] k of the reported pass@k (MATH500 pass@64)."""
    passk_benchmark: str = _setting("passk.benchmark")
    """[S] benchmark of the pass@k samples (MATH500; the toy world's own benchmark at the tiny scale)."""
    failure_benchmark: str = _setting("eval.trace_benchmark")
    """[S] benchmark of the dense greedy trace the failure detector reads."""
    failure: FailureThresholds | None = None
    """[S] thresholds of the failure detector: the [failure] settings (None: those of configs/base.toml)."""
    steps_per_epoch: dict[str, int] = _setting("aggregate.steps_per_epoch")
    """[S] raw steps in one epoch per scale (4,000 at 3B, 8,000 at 7B); other scales use the largest step seen."""
    smoothing_window: int = _setting("aggregate.smoothing_window")
    """[C] centred moving-average window for plotted traces (visual only)."""
    workers: int = _setting("aggregate.workers")
    """[C] worker processes for the bootstrap and the rarefaction (0: all available CPUs)."""
    benchmark_order: tuple[str, ...] = _setting("aggregate.benchmark_order")
    """[S] Table 1 column order (normalised benchmark names)."""
    failure_window: tuple[float, ...] = _setting("aggregate.failure_window")
    """[S] progress window of the failure-window statistics (the paper's 45-55%, around Clip-Cov-7B's onset)."""
    paper_methods: tuple[str, ...] = _setting("aggregate.paper_methods")
    """[S] the paper's six methods: the only trained methods inside a paper statistic; any other
    (Archer) is an extension, reported in its own rows (``is_extension``)."""

    def replace(self, **changes: Any) -> "AggregateSettings":
        """A copy with ``changes`` applied (None values ignored), built by rcea.records: an unknown name or a
        value of the wrong type raises ValueError naming it and the valid ones."""
        from rcea.records import build

        current = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return build(type(self), {**current, **{k: v for k, v in changes.items() if v is not None}},
                     where="aggregate")

    def is_extension(self, method: str) -> bool:
        """A trained method that is not one of the paper's methods (reported beside them, never pooled)."""
        return method != BASE_METHOD and method not in self.paper_methods

    def failure_thresholds(self) -> "FailureThresholds":
        return self.failure if self.failure is not None else _base_failure()

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (for summary.json provenance)."""
        return dataclasses.asdict(self)


FIELD_KEYS: dict[str, str] = {f.name: f.metadata["key"] for f in dataclasses.fields(AggregateSettings)
                              if "key" in f.metadata}
"""{field: configuration key} of every field read from the configuration (`_setting`)."""


def load_settings(scale: str | None = None, **overrides: Any) -> AggregateSettings:
    """Project settings: each field's key (``_setting``) and the [failure] record read from
    ``rcea.config.load_config(scale)`` (only when ``scale`` is given: the scale's values, e.g. pass@n with
    k = n and the toy world's dense trace benchmark), then ``overrides`` (CLI; None values ignored)."""
    base = AggregateSettings()
    if scale is not None:
        from rcea.config import load_config

        cfg = load_config(scale)
        known: dict[str, Any] = {name: cfg[key] for name, key in FIELD_KEYS.items()}
        from rcea.stats import FailureThresholds

        known["failure"] = FailureThresholds.from_config(cfg)
        base = base.replace(**known)
    for name, value in overrides.items():
        problem = out_of_range(FIELD_KEYS[name], value) if name in FIELD_KEYS and value is not None else ""
        if problem:  # the rule of the setting the option stands for (rcea.config.RANGES)
            raise ValueError(f"--{name.replace('_', '-')} {value}: {problem}")
    return base.replace(**overrides)
