"""The RLVR objectives as pure tensor functions, in a registry (registry.py): one module each, found here.

Each objective module defines
  its settings record (a frozen dataclass, train/objectives/settings.py; the values: configs/objectives.toml),
  prepare(rollout, s) -> dict   group-level work once per rollout (advantages, row `keep`, extras), and
  token_loss(tb: TokenBatch, s) -> (per_token (B, T), extra scalar, metrics)   per micro-batch,
with `s` that record. `objective_loss` (loss.py) is the one
loss function: `batch_loss` runs prepare + objective_loss on one micro-batch that holds whole groups; the
TRL subclass (train/trainer.py) runs them at the two TRL hooks.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import torch

from rcea.config import METHODS, Config, objective_defaults
from train.objectives.loss import Normalisers, TokenBatch, objective_loss
from train.objectives.registry import REGISTRY, Objective, get
from train.objectives.settings import ObjectiveSettings, SettingsError

# The objective modules are found, not named: every module of this package but its helpers registers one method.
HELPERS = ("common", "loss", "registry", "settings")
MODULES = tuple(m.name for m in pkgutil.iter_modules(__path__) if m.name not in HELPERS and not m.name.startswith("_"))
for _module in MODULES:
    importlib.import_module(f"{__name__}.{_module}")
if set(REGISTRY) != set(METHODS):  # the method list lives in configs/objectives.toml; each has one module here
    _fix = [f"no module registers {m}: add train/objectives/{m}.py with its register({m!r}, ...)"
            for m in METHODS if m not in REGISTRY]
    _fix += [f"{m} has no section: add [{m}] with its label and settings to configs/objectives.toml"
             for m in REGISTRY if m not in METHODS]
    raise ImportError("train/objectives/ and configs/objectives.toml disagree: " + "; ".join(_fix))
_registered = dict(REGISTRY)   # in the method order (configs/objectives.toml), whatever order the modules loaded
REGISTRY.clear()
REGISTRY.update((m, _registered[m]) for m in METHODS)
NAMES = METHODS

__all__ = ["NAMES", "REGISTRY", "Normalisers", "Objective", "ObjectiveSettings", "SettingsError", "TokenBatch",
           "batch_loss", "default_settings", "get", "objective_loss", "resolve_settings", "settings_for", "token_batch"]


def default_settings(name: str) -> ObjectiveSettings:
    """The objective's record with the values of configs/objectives.toml (the reproduction values), read by
    the same reader as the run configuration (rcea.config)."""
    return get(name).settings.from_values(name, objective_defaults(name))


def resolve_settings(name: str, overrides: dict[str, Any] | None = None) -> ObjectiveSettings:
    """The defaults with `overrides` applied; an unknown name or a wrong type names the valid ones."""
    s = default_settings(name)
    return s.replace(name, **overrides) if overrides else s


def settings_for(cfg: Config) -> ObjectiveSettings:
    """The record of a run: its objective's settings after scale files and overrides. DAPO's overlong
    shaping measures against the run's completion budget (train.max_completion_tokens)."""
    values = cfg.objective()
    if "max_completion_length" in values:
        values["max_completion_length"] = cfg["train.max_completion_tokens"]
    return get(cfg.method).settings.from_values(cfg.method, values)


ROLLOUT_KEYS = ("rewards", "group_ids", "mask", "completion_ids", "old_logp", "ref_logp", "old_entropy")
TOKEN_KEYS = ("logp", "old_logp", "entropy", "mask", "completion_ids", "advantages", "ref_logp")


def token_batch(values: dict[str, Any], initial_entropy: float | None = None) -> TokenBatch:
    """A TokenBatch from a dict of tensors: the named fields, every other (B, ...) tensor into `extras`."""
    known = {k: values.get(k) for k in TOKEN_KEYS}
    extras = {k: v for k, v in values.items() if k not in TOKEN_KEYS and isinstance(v, torch.Tensor)}
    return TokenBatch(**known, initial_entropy=initial_entropy, extras=extras)


def batch_loss(name: str, batch: dict[str, torch.Tensor], **settings) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss the trainer would minimise on one micro-batch of whole groups (one process, no GA).

    batch: logp, old_logp, ref_logp, entropy, old_entropy, mask (all (B, T)), completion_ids (B, T),
    rewards (B,) 0/1 verifier outcome, group_ids (B,); optional initial_entropy (the objective's frozen
    first-rollout statistic; default: computed from this batch's entropies, as on a first rollout).
    """
    obj, s = get(name), resolve_settings(name, settings)
    mask = batch["mask"].to(batch["logp"].dtype)
    rollout = {k: batch[k] for k in ROLLOUT_KEYS if k in batch}
    rollout["mask"] = mask
    prep = obj.prepare(rollout, s)
    metrics = dict(prep.pop("metrics", {}))
    keep = prep.pop("keep")
    h_ini = batch.get("initial_entropy")
    if h_ini is None and obj.needs_initial_entropy:
        h_ini = obj.initial_entropy(batch["entropy"], mask)
    fields = {k: v for k, v in batch.items() if k not in ROLLOUT_KEYS or k in TOKEN_KEYS}
    fields.pop("initial_entropy", None)
    tb = token_batch({**fields, **prep, "mask": mask * keep.to(mask.dtype).unsqueeze(1)},
                     None if h_ini is None else float(h_ini))
    loss, m = objective_loss(obj, tb, s)
    metrics.update(m)
    return loss, metrics
