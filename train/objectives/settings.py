"""Each objective's settings as its own typed, frozen record.

The values live once, in configs/objectives.toml (with their status and why); the records here only say
which names each objective has and what type each is, so no default is written in code. A record is built
from the table of its method (`from_values`): a missing name, an unknown one, a wrong type or an invalid
choice stops with a message naming what is valid. Objective modules declare their record next to their
functions and hand it to `register`; `train.objectives.settings_for(cfg)` and `resolve_settings(name, ...)`
build it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from rcea import records
from train.objectives.common import ADV_SCALES, LOSS_TYPES


class SettingsError(records.RecordError):
    """An objective's settings do not fit its record; the message names what is valid."""


@dataclass(frozen=True)
class ObjectiveSettings:
    """What every objective has: the loss aggregation and the group advantage."""

    loss_type: str  # "grpo" (SEQ) or "dapo" (TOK); GTPO adds "gtpo_code"
    scale_rewards: str  # "group", "batch" or "none"
    adv_eps: float  # std epsilon of the group advantage

    LOSS_TYPES: ClassVar[tuple[str, ...]] = LOSS_TYPES

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return records.names(cls)

    @classmethod
    def from_values(cls, method: str, values: Mapping[str, Any]):
        """The record of `method` from its {name: value} table (rcea.records.build: every name present, none
        unknown, each of its type), then its own rules."""
        record = records.build(cls, values, where=method, source=f"configs/objectives.toml [{method}]",
                               error=SettingsError)
        record._check(method)
        return record

    def replace(self, method: str, **changes):
        """A copy with `changes` applied, checked like `from_values`."""
        return type(self).from_values(method, {**dataclasses.asdict(self), **changes})

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def _check(self, method: str) -> None:
        if self.loss_type not in self.LOSS_TYPES:
            raise SettingsError(f"{method}.loss_type={self.loss_type!r}; valid: {', '.join(self.LOSS_TYPES)}")
        if self.scale_rewards not in ADV_SCALES:
            raise SettingsError(f"{method}.scale_rewards={self.scale_rewards!r}; valid: {', '.join(ADV_SCALES)}")


@dataclass(frozen=True)
class ClippedSettings(ObjectiveSettings):
    """Objectives with the PPO clip term: ratio clipped to [1 - epsilon, 1 + epsilon_high]."""

    epsilon: float
    epsilon_high: float
