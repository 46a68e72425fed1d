"""Pieces shared by every objective: group advantages and the standard prepare, the PPO clip term, aggregation.

Shapes: B completions, T completion positions. Log-probs and entropies in nats. `mask` is float (B, T),
1 for a generated token that enters the loss.
"""

from __future__ import annotations

import torch

ADV_SCALES = ("group", "batch", "none")
LOSS_TYPES = ("grpo", "dapo")
# Metric names the shared pieces report; each objective declares the full list of its own (registry.register).
STANDARD_METRICS = ("frac_nonzero_var",)  # standard_prepare
CLIP_METRICS = ("clip_ratio/low", "clip_ratio/high", "clip_ratio/region")  # clip_fractions


def group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids (B,) to 0..P-1 (order of first appearance is not kept; sorted ids)."""
    uniq, inv = torch.unique(group_ids, return_inverse=True)
    return inv, int(uniq.numel())


def group_stats(values: torch.Tensor, group_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group mean, unbiased group std and group size, each (B,). Size-1 groups get std 0."""
    inv, n_groups = group_index(group_ids)
    v = values.double()
    count = torch.zeros(n_groups, dtype=torch.float64, device=v.device).index_add_(0, inv, torch.ones_like(v))
    mean = torch.zeros_like(count).index_add_(0, inv, v) / count
    sq = torch.zeros_like(count).index_add_(0, inv, (v - mean[inv]) ** 2)
    std = torch.where(count > 1, (sq / (count - 1).clamp(min=1)).sqrt(), torch.zeros_like(sq))
    return mean[inv].to(values.dtype), std[inv].to(values.dtype), count[inv].to(values.dtype)


def group_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, scale_rewards: str, adv_eps: float
) -> torch.Tensor:
    """TRL advantage A_i = (r_i - mean_g r) / (std + eps), (B,). std: Bessel-corrected, group or batch."""
    if scale_rewards not in ADV_SCALES:
        raise ValueError(f"scale_rewards={scale_rewards!r}; valid: {', '.join(ADV_SCALES)}")
    rewards = rewards.double()
    mean, std, _ = group_stats(rewards, group_ids)
    adv = rewards - mean
    if scale_rewards == "group":
        adv = adv / (std + adv_eps)
    elif scale_rewards == "batch":
        batch_std = rewards.std() if rewards.numel() > 1 else rewards.new_zeros(())
        adv = adv / (batch_std + adv_eps)
    return adv  # float64; callers cast to the log-prob dtype


def mixed_groups(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """(B,) bool: the row's group has non-zero reward variance (0 < #correct < G for 0/1 rewards)."""
    _, std, _ = group_stats(rewards.float(), group_ids)
    return std > 0


def standard_prepare(rollout: dict, s, rewards: torch.Tensor | None = None) -> dict:
    """Group advantages (B,) on `rewards` (default the verifier reward); every row kept. `s`: the objective's
    settings record (its scale_rewards and adv_eps; settings.py imports this module, so no type import here)."""
    r = rollout["rewards"] if rewards is None else rewards
    adv = group_advantages(r, rollout["group_ids"], s.scale_rewards, s.adv_eps).to(rollout["mask"].dtype)
    mixed = mixed_groups(rollout["rewards"], rollout["group_ids"])
    return {
        "advantages": adv,
        "keep": torch.ones_like(adv, dtype=torch.bool),
        "metrics": {"frac_nonzero_var": float(mixed.float().mean())},
    }


def ppo_clip_loss(
    log_ratio: torch.Tensor, adv: torch.Tensor, eps_low, eps_high
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """l = -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A).

    log_ratio (B, T); adv (B,) or (B, T); eps scalars or (B, T). Returns (loss, unclipped, clipped),
    each (B, T): the two candidate losses -rho A and -clip(rho) A.
    """
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    ratio = torch.exp(log_ratio)
    lo = 1 - torch.as_tensor(eps_low, dtype=ratio.dtype, device=ratio.device)
    hi = 1 + torch.as_tensor(eps_high, dtype=ratio.dtype, device=ratio.device)
    clipped_ratio = torch.minimum(torch.maximum(ratio, lo), hi)
    unclipped = -ratio * adv
    clipped = -clipped_ratio * adv
    return torch.maximum(unclipped, clipped), unclipped, clipped


def clip_fractions(log_ratio, adv, eps_low, eps_high, mask) -> dict[str, float]:
    """TRL's clip ratios: low = rho < 1 - eps & A < 0, high = rho > 1 + eps & A > 0, over valid tokens."""
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    ratio = torch.exp(log_ratio.detach())
    low = (ratio < 1 - torch.as_tensor(eps_low)) & (adv < 0)
    high = (ratio > 1 + torch.as_tensor(eps_high)) & (adv > 0)
    return {
        "clip_ratio/low": masked_mean(low.float(), mask),
        "clip_ratio/high": masked_mean(high.float(), mask),
        "clip_ratio/region": masked_mean((low | high).float(), mask),
    }


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> float:
    n = mask.sum()
    return float((x * mask).sum() / n) if n > 0 else 0.0


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: str, tok_norm=None, seq_norm=None):
    """Reduce a per-token loss (B, T) to a scalar.

    grpo (SEQ): sum_i [sum_t m l / max(1, |o_i|)] / seq_norm, seq_norm defaults to B.
    dapo (TOK): sum_{i,t} m l / tok_norm, tok_norm defaults to max(1, sum m).
    The trainer passes the normalisers of the whole optimizer batch so GA micro-batches add up.
    """
    if loss_type == "grpo":
        per_row = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_row.sum() / (per_token.size(0) if seq_norm is None else seq_norm)
    if loss_type == "dapo":
        denom = mask.sum().clamp(min=1.0) if tok_norm is None else tok_norm
        return (per_token * mask).sum() / denom
    raise ValueError(f"loss_type={loss_type!r}; valid: {', '.join(LOSS_TYPES)}")


def completion_lengths(mask: torch.Tensor) -> torch.Tensor:
    """|o_i| = sum_t m, (B,) float."""
    return mask.sum(-1)


def overlong_penalty(lengths: torch.Tensor, max_len: int, buffer_ratio: float, factor: float) -> torch.Tensor:
    """DAPO soft overlong punishment R_len(|y|), (B,): 0 up to L_max - L_cache, then linear to -1, -1 beyond."""
    cache = buffer_ratio * max_len
    expected = max_len - cache
    pen = torch.clamp(-(lengths.double() - expected) / cache * factor, max=0.0)
    pen = torch.where(lengths.double() > max_len, torch.full_like(pen, -factor), pen)
    return pen  # float64
