"""DAPO (Yu et al., arXiv 2503.14476): clip-higher, TOK aggregation, dynamic sampling, overlong shaping.

l = -min(rho A, clip(rho, 1 - 0.2, 1 + 0.28) A); A group-normalised on R_i = verifier_i + R_len(|o_i|);
groups whose verifier rewards are all equal are dropped (`keep` = False; the trainer refills them from
fresh prompts, batch_loss simply drops them). No KL.
"""

from __future__ import annotations

from dataclasses import dataclass

from train.objectives.loss import TokenBatch
from train.objectives.registry import register
from train.objectives.settings import ClippedSettings
from train.objectives.common import completion_lengths, mixed_groups, overlong_penalty
from train.objectives.common import CLIP_METRICS, STANDARD_METRICS, standard_prepare
from train.objectives.grpo import token_loss as grpo_token_loss


@dataclass(frozen=True)
class DAPOSettings(ClippedSettings):
    dynamic_sampling: bool  # keep only groups with 0 < #correct < G; the trainer refills
    max_num_gen_batches: int  # refill rounds per rollout
    overlong_buffer_ratio: float  # L_cache / L_max
    overlong_penalty_factor: float  # strength of the overlong shaping
    max_completion_length: int  # L_max (the trainer sets train.max_completion_tokens)


def prepare(rollout: dict, s: DAPOSettings) -> dict:
    lengths = completion_lengths(rollout["mask"])  # (B,)
    shaped = rollout["rewards"].double() + overlong_penalty(
        lengths, s.max_completion_length, s.overlong_buffer_ratio, s.overlong_penalty_factor
    )
    out = standard_prepare(rollout, s, rewards=shaped)
    if s.dynamic_sampling:
        out["keep"] = mixed_groups(rollout["rewards"], rollout["group_ids"])
    out["metrics"]["dapo/frac_kept"] = float(out["keep"].float().mean())
    out["metrics"]["dapo/overlong_penalty_mean"] = float((shaped - rollout["rewards"].double()).mean())
    return out


@register("dapo", DAPOSettings, prepare, filters_groups=True,
          metrics=STANDARD_METRICS + ("dapo/frac_kept", "dapo/overlong_penalty_mean") + CLIP_METRICS)
def token_loss(tb: TokenBatch, s: DAPOSettings):
    return grpo_token_loss(tb, s)
