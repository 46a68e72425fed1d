"""Reward-stratified chosen-token covariance proxy, per token (docs/estimators.md#covariance-proxy-and-q99-share).

cov_i = (A_i - mean A) * (l_i - mean l), where l_i is the chosen-token log-prob (nats) and the means are
token-level over all eligible tokens of the batch (here: one probe job, every question and sample).
A is the common binary GRPO advantage of the trajectory within its question's group of K samples
(rcea.stats.group_advantages: ddof=1 std + `eps`, covariance.advantage_eps; 0 for a group of one or with
equal rewards).
"""

from __future__ import annotations

import numpy as np

from rcea.stats import covariance_proxy, group_advantages


def chosen_token_cov_proxy(groups: list[str], rewards: list[int], logprobs: list[np.ndarray], eps: float
                           ) -> list[np.ndarray]:
    """Per-sample lists in one batch: question id, reward (0/1) and chosen-token log-probs (T_k,).

    Returns cov (T_k,) per sample, pooled centering over all tokens of the batch.
    """
    lengths = [len(lp) for lp in logprobs]
    if sum(lengths) == 0:
        return [np.zeros(0) for _ in logprobs]
    adv = group_advantages(np.asarray(rewards, dtype=np.float64), np.asarray(groups), eps=eps)
    a_tok = np.repeat(adv, lengths)                                   # (N,) advantage of each token
    l_tok = np.concatenate([np.asarray(lp, dtype=np.float64) for lp in logprobs])  # (N,) nats
    return np.split(covariance_proxy(a_tok, l_tok), np.cumsum(lengths)[:-1])
