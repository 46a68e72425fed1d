"""Seven RLVR objectives as pure tensor functions, registered by name.

Each objective module defines
  prepare(rollout, s) -> dict   group-level work once per rollout (advantages, row `keep`, extras), and
  token_loss(tb, s) -> (per_token (B, T), extra scalar, metrics)   per micro-batch,
with `s` its settings from configs/objectives.toml (one default each). `aggregate` (common.py) reduces
the per-token loss by the objective's `loss_type`. `batch_loss` runs both on one micro-batch that holds
whole groups; the TRL subclass (train/trainer.py) runs them at the two TRL hooks.
"""

from __future__ import annotations

import importlib
import tomllib
from dataclasses import dataclass
from typing import Any, Callable

import torch

from rcea.paths import configs_dir
from train.objectives.common import aggregate

NAMES = ("grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo", "gtpo", "archer")
REGISTRY: dict[str, "Objective"] = {}


@dataclass(frozen=True)
class Objective:
    name: str
    prepare: Callable[[dict, dict], dict]
    token_loss: Callable[[dict, dict], tuple]
    needs_ref: bool = False  # reference (adapter-disabled) log-probs at rollout time
    needs_rollout_entropy: bool = False  # rollout-policy entropies at rollout time
    filters_groups: bool = False  # may drop zero-variance groups (trainer refills)


def register(name: str, **flags) -> Callable:
    """Decorator on a module's `token_loss`; `prepare` is looked up in the same module."""

    def wrap(token_loss: Callable) -> Callable:
        module = importlib.import_module(token_loss.__module__)
        REGISTRY[name] = Objective(name, module.prepare, token_loss, **flags)
        return token_loss

    return wrap


def get(name: str) -> Objective:
    if len(REGISTRY) < len(NAMES):
        for n in NAMES:
            importlib.import_module(f"train.objectives.{n}")
    if name not in REGISTRY:
        raise KeyError(f"unknown objective {name!r}; valid: {', '.join(NAMES)}")
    return REGISTRY[name]


def default_settings(name: str) -> dict[str, Any]:
    """The objective's defaults from configs/objectives.toml (the reproduction values)."""
    get(name)
    with (configs_dir() / "objectives.toml").open("rb") as fh:
        table = tomllib.load(fh)
    return {k: v["value"] for k, v in table[name].items()}


def resolve_settings(name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    s = default_settings(name)
    for key, value in (overrides or {}).items():
        if key not in s:
            raise KeyError(f"{name} has no setting {key!r}; valid: {', '.join(sorted(s))}")
        s[key] = value
    return s


ROLLOUT_KEYS = ("rewards", "group_ids", "mask", "completion_ids", "old_logp", "ref_logp", "old_entropy")


def batch_loss(name: str, batch: dict[str, torch.Tensor], **settings) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss the trainer would minimise on one micro-batch of whole groups (one process, no GA).

    batch: logp, old_logp, ref_logp, entropy, old_entropy, mask (all (B, T)), completion_ids (B, T),
    rewards (B,) 0/1 verifier outcome, group_ids (B,); optional initial_entropy (GTPO, scalar).
    """
    obj, s = get(name), resolve_settings(name, settings)
    mask = batch["mask"].to(batch["logp"].dtype)
    rollout = {k: batch[k] for k in ROLLOUT_KEYS if k in batch}
    rollout["mask"] = mask
    prep = obj.prepare(rollout, s)
    metrics = dict(prep.pop("metrics", {}))
    eff_mask = mask * prep["keep"].float().unsqueeze(1)
    tb = {**batch, **prep, "mask": eff_mask}
    if name == "gtpo" and tb.get("initial_entropy") is None:
        from train.objectives.gtpo import mean_completion_entropy

        tb["initial_entropy"] = mean_completion_entropy(batch["entropy"], mask)
    per_token, extra, m = obj.token_loss(tb, s)
    metrics.update(m)
    loss = aggregate(per_token, eff_mask, s["loss_type"] if s["loss_type"] != "gtpo_code" else "grpo") + extra
    return loss, metrics
