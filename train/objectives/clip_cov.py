"""Clip-Cov (Cui et al., arXiv 2505.22617; verl `compute_policy_loss_clip_cov`).

Per micro-batch over its N valid tokens: Cov_{i,t} = (A_i - mean A) (logp_{i,t} - mean logp), both means
over valid tokens, logp detached. Candidates: valid, not already PPO-clipped, lb < Cov < ub.
n = max(floor(r N), 1) of them drawn uniformly without replacement (torch global RNG) get their loss
and gradient removed; every other token keeps plain PPO clipping. TOK aggregation, GRPO advantage.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ClippedSettings
from train.objectives.common import CLIP_METRICS, STANDARD_METRICS, clip_fractions, ppo_clip_loss, standard_prepare


@dataclass(frozen=True)
class ClipCovSettings(ClippedSettings):
    clip_cov_ratio: float  # fraction of valid tokens detached
    clip_cov_lb: float  # covariance lower bound (strict)
    clip_cov_ub: float  # covariance upper bound (strict)


def prepare(rollout: dict, s: ClipCovSettings) -> dict:
    return standard_prepare(rollout, s)


def centred_cov(adv: torch.Tensor, logp: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """(A - mean A)(logp - mean logp) over valid tokens, (B, T); zero where invalid."""
    adv_bt = adv.unsqueeze(1).expand_as(logp) if adv.dim() == 1 else adv
    n = valid.sum().clamp(min=1)
    lp = logp.detach()
    a_bar = (adv_bt * valid).sum() / n
    l_bar = (lp * valid).sum() / n
    return (adv_bt - a_bar) * (lp - l_bar) * valid


@register("clip_cov", ClipCovSettings, prepare,
          metrics=STANDARD_METRICS + CLIP_METRICS + ("cov_selected_frac", "clip_cov/candidates", "cov_mask_empty"))
def token_loss(tb: TokenBatch, s: ClipCovSettings):
    mask, adv = tb.mask, tb.advantages
    log_ratio = tb.logp - tb.old_logp  # (B, T)
    per_token, unclipped, clipped = ppo_clip_loss(log_ratio, adv, s.epsilon, s.epsilon_high)
    valid = mask > 0
    cov = centred_cov(adv, tb.logp, valid.float())
    cand = valid & ~(clipped.detach() > unclipped.detach()) & (cov > s.clip_cov_lb) & (cov < s.clip_cov_ub)
    n_valid = int(valid.sum())
    n_pick = max(int(s.clip_cov_ratio * n_valid), 1)
    idx = cand.flatten().nonzero().squeeze(1)
    if idx.numel() > n_pick:
        idx = idx[torch.randperm(idx.numel())[:n_pick].to(idx.device)]
    keep = torch.ones(mask.numel(), dtype=per_token.dtype, device=mask.device)
    keep[idx] = 0.0
    per_token = per_token * keep.view_as(mask)
    metrics = clip_fractions(log_ratio, adv, s.epsilon, s.epsilon_high, mask)
    metrics["cov_selected_frac"] = idx.numel() / max(n_valid, 1)
    metrics["cov_mask_empty"] = float(idx.numel() == 0)  # per update: the paper's failure-window statistic
    metrics["clip_cov/candidates"] = float(cand.sum())
    return per_token, per_token.new_zeros(()), metrics
