"""GRPO (Shao et al., arXiv 2402.03300) as TRL 0.29 computes it.

l_{i,t} = -min(rho A_i, clip(rho, 1 - eps, 1 + eps) A_i), rho = exp(logp - old_logp),
A_i = (r_i - mean_g r) / (std_g r + 1e-4); SEQ aggregation (loss_type='grpo'). No KL (beta = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ClippedSettings, ObjectiveSettings
from train.objectives.common import clip_fractions, group_advantages, mixed_groups, ppo_clip_loss


@dataclass(frozen=True)
class GRPOSettings(ClippedSettings):
    """GRPO: the PPO clip and the group advantage, nothing else."""


def standard_prepare(rollout: dict, s: ObjectiveSettings, rewards: torch.Tensor | None = None) -> dict:
    """Group advantages (B,) on `rewards` (default the verifier reward); every row kept."""
    r = rollout["rewards"] if rewards is None else rewards
    adv = group_advantages(r, rollout["group_ids"], s.scale_rewards, s.adv_eps).to(rollout["mask"].dtype)
    mixed = mixed_groups(rollout["rewards"], rollout["group_ids"])
    return {
        "advantages": adv,
        "keep": torch.ones_like(adv, dtype=torch.bool),
        "metrics": {"frac_nonzero_var": float(mixed.float().mean())},
    }


def prepare(rollout: dict, s: GRPOSettings) -> dict:
    return standard_prepare(rollout, s)


@register("grpo", GRPOSettings, prepare)
def token_loss(tb: TokenBatch, s: ClippedSettings):
    log_ratio = tb.logp - tb.old_logp  # (B, T)
    per_token, _, _ = ppo_clip_loss(log_ratio, tb.advantages, s.epsilon, s.epsilon_high)
    metrics = clip_fractions(log_ratio, tb.advantages, s.epsilon, s.epsilon_high, tb.mask)
    return per_token, per_token.new_zeros(()), metrics
