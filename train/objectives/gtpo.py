"""GTPO (Simoni et al., arXiv 2508.03772; code winstonsmith1897/GTPO), README objective.

J = E[(1/G) sum_i delta_i (A_i - gamma <H>_i) / |o_i| sum_t r_{i,t} lambda_{i,t}], A_i = r_i - mean_g r.
Implemented (spec adaptation for 4 iterations): l = -min(rho Ahat lambda, clip(rho) Ahat lambda),
Ahat_i = delta_i (A_i - gamma <H>_i), SEQ aggregation.
  <H>_i: mean current-policy entropy (nats, detached) over completion i.
  delta_i: 1 if the first batch's mean entropy H_ini > ln 2, else 1[<H>_i <= ln 2].
  lambda (conflict weights, within a group, from token ids): the shared prefix / shared suffix that a
  completion has with a completion of opposite advantage sign gets W = 2 (A > 0) or 0 (A < 0);
  lambda = lambda_fwd * lambda_bwd * m; A = 0 rows get lambda = m.
Variants as settings: clip_ratio=false (README's plain ratio), loss_type='gtpo_code' (each completion's
SEQ loss / max(1, n_conf), summed; n_conf = max(prefix, suffix) as the code's OR does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ClippedSettings
from train.objectives.common import (CLIP_METRICS, LOSS_TYPES, STANDARD_METRICS, clip_fractions, ppo_clip_loss,
                                     standard_prepare)


@dataclass(frozen=True)
class GTPOSettings(ClippedSettings):
    LOSS_TYPES: ClassVar[tuple[str, ...]] = (*LOSS_TYPES, "gtpo_code")

    ent_scale: float  # gamma of A - gamma <H>
    w_raw: float  # conflict weight W
    ent_threshold: float  # entropy threshold (nats)
    initial_entropy_rule: bool  # filter only if the first rollout's mean entropy <= threshold
    clip_ratio: bool  # PPO-clip the ratio (false: plain ratio)


def mean_completion_entropy(entropy: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over completions with tokens of <H>_i (nats): GTPO's H_ini of a batch."""
    lengths = mask.sum(-1)
    per_row = (entropy * mask).sum(-1) / lengths.clamp(min=1)
    has = lengths > 0
    return float(per_row[has].mean()) if has.any() else 0.0


def _leading_conflicts(ids: torch.Tensor, valid: torch.Tensor, opposite: torch.Tensor) -> torch.Tensor:
    """(B, T) bool: leading run from t = 0 of positions where an opposite-side completion has the same id."""
    same = (ids.unsqueeze(1) == ids.unsqueeze(0)) & valid.unsqueeze(1) & valid.unsqueeze(0)  # (B, B, T)
    raw = (same & opposite.unsqueeze(-1)).any(dim=1)  # (B, T)
    return torch.cumprod(raw.long(), dim=1).bool()


def conflict_weights(
    ids: torch.Tensor, mask: torch.Tensor, adv: torch.Tensor, group_ids: torch.Tensor, w_raw: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """lambda (B, T) and n_conf (B,) of the official code's build_conflict_mask (right-padded rows)."""
    valid = mask > 0
    pos, neg = adv > 0, adv < 0
    same_group = group_ids.unsqueeze(1) == group_ids.unsqueeze(0)
    opposite = same_group & ((pos.unsqueeze(1) & neg.unsqueeze(0)) | (neg.unsqueeze(1) & pos.unsqueeze(0)))
    fwd = _leading_conflicts(ids, valid, opposite)
    # Backward: right-align each completion (k = steps back from its last valid token).
    lengths = valid.sum(-1, keepdim=True)  # (B, 1)
    k = torch.arange(ids.size(1), device=ids.device).unsqueeze(0)
    rev_idx = (lengths - 1 - k).clamp(min=0)  # (B, T); involution on the valid part
    rev_valid = k < lengths
    bwd_rev = _leading_conflicts(ids.gather(1, rev_idx), rev_valid, opposite)
    bwd = bwd_rev.gather(1, rev_idx) & valid
    side_w = torch.where(pos, torch.full_like(adv, w_raw), torch.zeros_like(adv)).unsqueeze(1)  # (B, 1)
    one = torch.ones_like(mask)
    lam = torch.where(fwd, side_w, one) * torch.where(bwd, side_w, one) * mask
    n_conf = torch.maximum(fwd.sum(-1), bwd_rev.sum(-1)).float()
    return lam, n_conf


def prepare(rollout: dict, s: GTPOSettings) -> dict:
    out = standard_prepare(rollout, s)
    lam, n_conf = conflict_weights(
        rollout["completion_ids"], rollout["mask"], out["advantages"], rollout["group_ids"], s.w_raw
    )
    out["gtpo_lambda"], out["gtpo_n_conf"] = lam, n_conf
    out["metrics"]["gtpo/conflict_token_frac"] = float(((lam != 1) & (rollout["mask"] > 0)).sum()) / max(
        float(rollout["mask"].sum()), 1.0
    )
    return out


@register("gtpo", GTPOSettings, prepare, initial_entropy=mean_completion_entropy,
          metrics=STANDARD_METRICS + ("gtpo/conflict_token_frac",) + CLIP_METRICS + ("gtpo/delta_mean", "gtpo/initial_entropy"))
def token_loss(tb: TokenBatch, s: GTPOSettings):
    mask = tb.mask
    ent = tb.entropy.detach()
    h_row = (ent * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # <H>_i (B,)
    thr = s.ent_threshold
    h_ini = float(tb.initial_entropy)
    if s.initial_entropy_rule and h_ini > thr:
        delta = torch.ones_like(h_row)
    else:
        delta = (h_row <= thr).float()
    a_hat = delta * (tb.advantages - s.ent_scale * h_row)  # (B,)
    adv_bt = a_hat.unsqueeze(1) * tb.extras["gtpo_lambda"]  # (B, T)
    log_ratio = tb.logp - tb.old_logp
    if s.clip_ratio:
        per_token, _, _ = ppo_clip_loss(log_ratio, adv_bt, s.epsilon, s.epsilon_high)
    else:
        per_token = -torch.exp(log_ratio) * adv_bt
    if s.loss_type == "gtpo_code":  # SEQ mean over B -> sum over completions of loss_i / max(1, n_conf)
        per_token = per_token * (per_token.size(0) / tb.extras["gtpo_n_conf"].clamp(min=1)).unsqueeze(1)
    metrics = clip_fractions(log_ratio, adv_bt, s.epsilon, s.epsilon_high, mask)
    metrics["gtpo/delta_mean"] = float(delta.mean())
    metrics["gtpo/initial_entropy"] = h_ini
    return per_token, per_token.new_zeros(()), metrics
