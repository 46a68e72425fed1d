"""KL-Cov (Cui et al., arXiv 2505.22617; verl `compute_policy_loss_kl_cov`).

Unclipped policy gradient l = -rho A on every token; on the top-k tokens by centred covariance
Cov = (A - mean A)(logp - mean logp) (valid tokens of the micro-batch, logp detached, k = max(1,
floor(kappa N))) add beta |logp - old_logp| (absolute log-ratio to the rollout policy, not the reference).
TOK aggregation, GRPO advantage.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ObjectiveSettings
from train.objectives.clip_cov import centred_cov
from train.objectives.common import STANDARD_METRICS, standard_prepare


@dataclass(frozen=True)
class KLCovSettings(ObjectiveSettings):
    """KL-Cov has no clip: the plain ratio on every token."""

    kl_cov_ratio: float  # top-k fraction of valid tokens
    ppo_kl_coef: float  # coefficient of |logp - old_logp| on the selected tokens


def prepare(rollout: dict, s: KLCovSettings) -> dict:
    return standard_prepare(rollout, s)


@register("kl_cov", KLCovSettings, prepare, metrics=STANDARD_METRICS + ("cov_selected_frac", "cov_mask_empty"))
def token_loss(tb: TokenBatch, s: KLCovSettings):
    mask, adv = tb.mask, tb.advantages
    adv_bt = adv.unsqueeze(1) if adv.dim() == 1 else adv
    log_ratio = tb.logp - tb.old_logp  # (B, T)
    per_token = -torch.exp(log_ratio) * adv_bt
    valid = mask > 0
    n_valid = int(valid.sum())
    selected = torch.zeros_like(valid)
    if n_valid > 0:
        k = min(max(int(s.kl_cov_ratio * n_valid), 1), n_valid)
        cov = centred_cov(adv, tb.logp, valid.float()).masked_fill(~valid, float("-inf"))
        top = torch.topk(cov.flatten(), k).indices
        selected.view(-1)[top] = True
    per_token = per_token + s.ppo_kl_coef * log_ratio.abs() * selected
    metrics = {"cov_selected_frac": float(selected.sum()) / max(n_valid, 1),
               "cov_mask_empty": float(not bool(selected.any()))}  # per update (the failure-window statistic)
    return per_token, per_token.new_zeros(()), metrics
