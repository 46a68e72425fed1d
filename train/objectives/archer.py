"""Archer (Wang et al., arXiv 2507.15778; code wizard-III/ArcherCodeR): dual-token constraints.

Per response i, tau_i = quantile_0.8 of the current-policy entropy over its valid tokens (linear
interpolation); high = H > tau_i. l = -min(rho A, clip(rho, 1 - eps, 1 + eps) A) with eps = 0.5 on high-
and 0.2 on low-entropy tokens, log-ratio clamped to [-20, 20]; dual clip l <- min(l, -c A) for A < 0.
Plus beta_low * mean_low(k3) + beta_high * mean_high(k3), k3 = e^x - x - 1, x = clamp(ref - logp, +-20),
k3 clamped to [-10, 10] (low_var_kl); each mean over its own token subset. Policy term TOK; GRPO advantage.
Groups with equal rewards are kept unless drop_zero_variance_groups (no refill).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ObjectiveSettings
from train.objectives.common import CLIP_METRICS, STANDARD_METRICS, mixed_groups, ppo_clip_loss, standard_prepare


@dataclass(frozen=True)
class ArcherSettings(ObjectiveSettings):
    epsilon: float  # clip on low-entropy tokens
    epsilon_high_entropy: float  # clip on high-entropy tokens
    entropy_quantile: float  # per-response quantile splitting low/high-entropy tokens
    clip_ratio_c: float  # dual clip for A < 0
    kl_loss_coef: float  # beta_low: KL weight on low-entropy tokens
    high_entropy_kl_loss_scale_coef: float  # beta_high: KL weight on high-entropy tokens
    drop_zero_variance_groups: bool  # drop groups whose rewards are all equal (no refill)


def prepare(rollout: dict, s: ArcherSettings) -> dict:
    out = standard_prepare(rollout, s)
    if s.drop_zero_variance_groups:
        out["keep"] = mixed_groups(rollout["rewards"], rollout["group_ids"])
    return out


def high_entropy_tokens(h: torch.Tensor, mask: torch.Tensor, q: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(high (B, T) bool, tau (B,)): tokens above their response's q-quantile entropy."""
    valid = mask > 0
    tau = torch.nanquantile(h.masked_fill(~valid, float("nan")), q, dim=1)  # (B,)
    return (h > tau.unsqueeze(1)) & valid, tau


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    x = torch.clamp(ref_logp - logp, -20, 20)
    return torch.clamp(torch.exp(x) - x - 1, -10, 10)


@register("archer", ArcherSettings, prepare, needs_ref=True,
          metrics=STANDARD_METRICS + CLIP_METRICS + ("archer/high_entropy_frac", "archer/kl_low"))
def token_loss(tb: TokenBatch, s: ArcherSettings):
    mask, adv = tb.mask, tb.advantages
    adv_bt = adv.unsqueeze(1) if adv.dim() == 1 else adv
    valid = mask > 0
    high, _ = high_entropy_tokens(tb.entropy.detach(), mask, s.entropy_quantile)
    f = dict(dtype=tb.logp.dtype, device=high.device)
    eps = torch.where(high, torch.tensor(s.epsilon_high_entropy, **f), torch.tensor(s.epsilon, **f))
    log_ratio = torch.clamp(tb.logp - tb.old_logp, -20, 20)
    per_token, _, _ = ppo_clip_loss(log_ratio, adv_bt, eps, eps)
    per_token = torch.where(adv_bt < 0, torch.minimum(per_token, -s.clip_ratio_c * adv_bt), per_token)
    kl = low_var_kl(tb.logp, tb.ref_logp)  # (B, T)
    low = valid & ~high
    extra = per_token.new_zeros(())
    for coef, subset in ((s.kl_loss_coef, low), (s.high_entropy_kl_loss_scale_coef, high)):
        if coef != 0 and subset.any():
            extra = extra + coef * (kl * subset).sum() / subset.sum()
    ratio = torch.exp(log_ratio.detach())
    low_clip = (ratio < 1 - eps) & (adv_bt < 0) & valid
    high_clip = (ratio > 1 + eps) & (adv_bt > 0) & valid
    n = max(float(valid.sum()), 1.0)
    metrics = {
        "clip_ratio/low": float(low_clip.sum()) / n,
        "clip_ratio/high": float(high_clip.sum()) / n,
        "clip_ratio/region": float((low_clip | high_clip).sum()) / n,
        "archer/high_entropy_frac": float(high.sum()) / n,
        "archer/kl_low": float((kl.detach() * low).sum() / max(float(low.sum()), 1.0)),
    }
    return per_token, extra, metrics
