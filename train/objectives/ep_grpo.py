"""EP-GRPO (Yu et al., arXiv 2605.04960): RECONSTRUCTION from the abstract (docs/objectives.md#ep-grpo).

l = -min(rho Ahat, clip(rho, 0.8, 1.2) Ahat), Ahat_{i,t} = g_{i,t} A_i + w d_i z_{i,t}, SEQ aggregation.
All from the rollout (old) policy, once per rollout:
  gate        g = (1 + alpha Hn) / mean_t(1 + alpha Hn), Hn = H / max_t H per response (0 if max is 0);
  position    bucket b = min(floor(K t / L), K - 1), t = 0..L-1 the token's index in its response of L tokens
              (the paper's "10 relative-position buckets", §11);
  process     s = c (logp_old - logp_ref), ref = base model (adapter disabled);
  normalised  z = (s - mean_{g,b}) / (popstd_{g,b} + 1e-4) over valid tokens of group g in bucket b,
              0 in cells with fewer than 2 tokens;
  anchor      d_i = 2 r_i - 1.
Not implemented: anything of the paper beyond its abstract (its full formulas are unpublished).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ClippedSettings
from train.objectives.common import CLIP_METRICS, STANDARD_METRICS, group_index, standard_prepare
from train.objectives.grpo import token_loss as grpo_token_loss


@dataclass(frozen=True)
class EPGRPOSettings(ClippedSettings):
    gate_coef: float  # alpha of the entropy gate
    num_buckets: int  # K relative-position buckets
    progress_weight: float  # w of the process term
    process_scale: float  # c of the implicit process signal
    z_eps: float  # epsilon of the progress-aligned normalisation


def entropy_gate(h: torch.Tensor, mask: torch.Tensor, alpha: float) -> torch.Tensor:
    """g (B, T): mean 1 over each response's valid tokens."""
    hm = h * mask
    hmax = hm.max(dim=-1, keepdim=True).values
    hn = torch.where(hmax > 0, hm / hmax.clamp(min=1e-30), torch.zeros_like(hm))
    raw = 1 + alpha * hn
    mean = (raw * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp(min=1)
    return raw / mean.clamp(min=1e-30) * mask


def progress_buckets(mask: torch.Tensor, k: int) -> torch.Tensor:
    """b (B, T) long: the relative-position bucket floor(k t / L) of token t (0-based) in a right-padded response
    of L valid tokens, in integers (no rounding at bucket edges); padding positions get k - 1 (masked anyway)."""
    length = mask.double().sum(-1, keepdim=True).round().long().clamp(min=1)   # (B, 1)
    t = torch.arange(mask.size(-1), device=mask.device).unsqueeze(0)    # (1, T)
    return torch.clamp(torch.div(k * t, length, rounding_mode="floor"), max=k - 1)


def bucket_zscores(s: torch.Tensor, buckets: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor,
                   k: int, eps: float) -> torch.Tensor:
    """z (B, T): s standardised within (group, bucket) cells over valid tokens (population std)."""
    gi, n_groups = group_index(group_ids)
    cell = (gi.unsqueeze(1) * k + buckets).flatten()  # (B*T,)
    valid = (mask > 0).flatten()
    sv = s.double().flatten()
    n_cells = n_groups * k
    zeros = torch.zeros(n_cells, dtype=torch.float64, device=s.device)
    count = zeros.index_add(0, cell[valid], torch.ones_like(sv[valid]))
    mean = zeros.index_add(0, cell[valid], sv[valid]) / count.clamp(min=1)
    dev = sv - mean[cell]
    var = zeros.index_add(0, cell[valid], dev[valid] ** 2) / count.clamp(min=1)
    z = dev / (var.sqrt()[cell] + eps)
    z = torch.where(valid & (count[cell] >= 2), z, torch.zeros_like(z))
    return z.view_as(s).to(s.dtype)


def prepare(rollout: dict, s: EPGRPOSettings) -> dict:
    out = standard_prepare(rollout, s)
    mask, h = rollout["mask"], rollout["old_entropy"]
    gate = entropy_gate(h, mask, s.gate_coef)
    buckets = progress_buckets(mask, s.num_buckets)
    signal = s.process_scale * (rollout["old_logp"] - rollout["ref_logp"])
    z = bucket_zscores(signal, buckets, mask, rollout["group_ids"], s.num_buckets, s.z_eps)
    anchor = 2 * rollout["rewards"].float() - 1  # (B,)
    out["advantages"] = (gate * out["advantages"].unsqueeze(1) + s.progress_weight * anchor.unsqueeze(1) * z) * mask
    out["metrics"]["ep_grpo/process_abs_mean"] = float((z.abs() * mask).sum() / mask.sum().clamp(min=1))
    return out


@register("ep_grpo", EPGRPOSettings, prepare, needs_ref=True, needs_rollout_entropy=True,
          metrics=STANDARD_METRICS + ("ep_grpo/process_abs_mean",) + CLIP_METRICS)
def token_loss(tb: TokenBatch, s: EPGRPOSettings):
    return grpo_token_loss(tb, s)
