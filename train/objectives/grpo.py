"""GRPO (Shao et al., arXiv 2402.03300) as TRL 0.29 computes it.

l_{i,t} = -min(rho A_i, clip(rho, 1 - eps, 1 + eps) A_i), rho = exp(logp - old_logp),
A_i = (r_i - mean_g r) / (std_g r + 1e-4); SEQ aggregation (loss_type='grpo'). No KL (beta = 0).
"""

from __future__ import annotations

from dataclasses import dataclass

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ClippedSettings
from train.objectives.common import CLIP_METRICS, STANDARD_METRICS, clip_fractions, ppo_clip_loss, standard_prepare


@dataclass(frozen=True)
class GRPOSettings(ClippedSettings):
    """GRPO: the PPO clip and the group advantage, nothing else."""


def prepare(rollout: dict, s: GRPOSettings) -> dict:
    return standard_prepare(rollout, s)


@register("grpo", GRPOSettings, prepare, metrics=STANDARD_METRICS + CLIP_METRICS)
def token_loss(tb: TokenBatch, s: ClippedSettings):
    log_ratio = tb.logp - tb.old_logp  # (B, T)
    per_token, _, _ = ppo_clip_loss(log_ratio, tb.advantages, s.epsilon, s.epsilon_high)
    metrics = clip_fractions(log_ratio, tb.advantages, s.epsilon, s.epsilon_high, tb.mask)
    return per_token, per_token.new_zeros(()), metrics
