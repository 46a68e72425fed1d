"""The one loss function: a typed token batch in, the scalar the optimizer minimises out.

Both `train.objectives.batch_loss` (the oracle tests' entry) and the trainer's `_compute_loss` call
`objective_loss`; they differ only in the `Normalisers` they pass (one micro-batch of whole groups vs one
of GA micro-batches of an optimizer batch).

Shapes: B rows (completions) of the micro-batch, T completion positions; log-probs, entropies in nats.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from train.objectives.common import aggregate
from train.objectives.registry import Objective
from train.objectives.settings import ObjectiveSettings


@dataclass
class TokenBatch:
    """One micro-batch as the per-token loss sees it; every tensor (B, T) unless noted."""

    logp: torch.Tensor  # current-policy log-probs (carries the gradient)
    old_logp: torch.Tensor  # rollout-policy log-probs (= logp.detach() with one iteration per rollout)
    entropy: torch.Tensor  # current-policy entropies
    mask: torch.Tensor  # float; 1 = the token enters the loss (completion mask x row keep)
    completion_ids: torch.Tensor  # long
    advantages: torch.Tensor  # (B,) or (B, T), from the objective's prepare
    ref_logp: torch.Tensor | None = None  # base model (adapter disabled), at rollout time
    initial_entropy: float | None = None  # the objective's frozen first-rollout statistic (GTPO H_ini)
    extras: dict[str, torch.Tensor] = field(default_factory=dict)  # other prepare outputs, leading dim B


@dataclass(frozen=True)
class Normalisers:
    """How a micro-batch's per-token loss is scaled so that GA micro-batches add up to the batch loss.

    tok: valid tokens of the whole optimizer batch (TOK aggregation, loss_type 'dapo');
    ga: micro-batches per optimizer step; SEQ aggregation (loss_type 'grpo', 'gtpo_code') and the extra
    term are micro-batch means divided by ga (TRL 0.29's arithmetic, equal-sized micro-batches).
    """

    tok: torch.Tensor | float | None = None  # None: this micro-batch's own valid tokens
    ga: int = 1


def aggregation(loss_type: str) -> str:
    """The reduction of a loss_type: GTPO's 'gtpo_code' scales inside token_loss, then reduces as SEQ."""
    return "dapo" if loss_type == "dapo" else "grpo"


def objective_loss(obj: Objective, tb: TokenBatch, s: ObjectiveSettings, norm: Normalisers = Normalisers()
                   ) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of one micro-batch and the objective's metrics."""
    per_token, extra, metrics = obj.token_loss(tb, s)
    if aggregation(s.loss_type) == "dapo":
        tok = None if norm.tok is None else torch.as_tensor(norm.tok, dtype=per_token.dtype).clamp(min=1.0)
        loss = aggregate(per_token, tb.mask, "dapo", tok_norm=tok)
    else:
        loss = aggregate(per_token, tb.mask, "grpo") / norm.ga
    return loss + extra / norm.ga, metrics
