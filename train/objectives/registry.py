"""The objective registry: one explicit dict, filled by the `register` decorator of each objective module.

An `Objective` bundles the two pure functions of a method with its settings record and what the trainer
must compute for it:
  settings: the method's typed, frozen record (train/objectives/settings.py), `s` below;
  prepare(rollout: dict, s) -> dict    once per rollout: advantages, row `keep`, extras, metrics;
  token_loss(tb: TokenBatch, s) -> (per_token (B, T), extra scalar, metrics)   per micro-batch;
  metrics: the names of the metrics its prepare and token_loss report (and no others): the trainer logs
  exactly these, so a step line never carries a metric the objective does not compute;
  initial_entropy: None, or the statistic of the first training rollout the objective freezes (GTPO's
  H_ini = mean completion entropy); the trainer and `batch_loss` both fill `TokenBatch.initial_entropy`
  from it, so no caller branches on a method name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from train.objectives.settings import ObjectiveSettings

REGISTRY: dict[str, "Objective"] = {}


@dataclass(frozen=True)
class Objective:
    name: str
    settings: type[ObjectiveSettings]
    prepare: Callable[[dict, ObjectiveSettings], dict]
    token_loss: Callable
    needs_ref: bool = False  # reference (adapter-disabled) log-probs at rollout time
    needs_rollout_entropy: bool = False  # rollout-policy entropies at rollout time
    filters_groups: bool = False  # may drop zero-variance groups (trainer refills)
    initial_entropy: Callable[[torch.Tensor, torch.Tensor], float] | None = None  # (entropy, mask) -> nats
    metrics: tuple[str, ...] = ()  # what prepare and token_loss report

    def check_metrics(self, reported) -> None:
        """A metric the objective reports but does not declare is a bug in the objective: say which."""
        unknown = set(reported) - set(self.metrics)
        if unknown:
            raise ValueError(f"objective {self.name} reports undeclared metrics {sorted(unknown)}; add them to "
                             "its register(..., metrics=...)")

    @property
    def needs_initial_entropy(self) -> bool:
        return self.initial_entropy is not None


def register(name: str, settings: type[ObjectiveSettings], prepare: Callable, **flags) -> Callable:
    """Decorator on a module's `token_loss`: registers `name` with its settings record, `prepare` and flags."""

    def wrap(token_loss: Callable) -> Callable:
        if name in REGISTRY:
            raise ValueError(f"objective {name!r} registered twice")
        if flags.get("filters_groups") and not {"dynamic_sampling", "max_num_gen_batches"} <= set(settings.names()):
            raise ValueError(f"{name} filters groups, so its settings need dynamic_sampling and max_num_gen_batches")
        REGISTRY[name] = Objective(name, settings, prepare, token_loss, **flags)
        return token_loss

    return wrap


def get(name: str) -> Objective:
    """The registered objective `name`; a miss names the valid ones."""
    if name not in REGISTRY:
        raise KeyError(f"unknown objective {name!r}; valid: {', '.join(REGISTRY)}")
    return REGISTRY[name]
