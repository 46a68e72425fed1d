"""Reward-stratified chosen-token covariance proxy, per token (docs/estimators.md#covariance-proxy-and-q99-share).

cov_i = (A_i - mean A) * (l_i - mean l), where l_i is the chosen-token log-prob (nats) and the means are
token-level over all eligible tokens of the batch (here: one probe job, every question and sample).
A is the common binary GRPO advantage of the trajectory: A_k = (r_k - mean_g r) / (std_g(r, ddof=1) + 1e-4)
within the question's group of K samples, 0 when the group has one sample or equal rewards.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-4


def group_advantages(rewards: np.ndarray) -> np.ndarray:
    """rewards (K,) of one question's samples -> advantages (K,)."""
    r = np.asarray(rewards, dtype=np.float64)
    if len(r) < 2:
        return np.zeros_like(r)
    return (r - r.mean()) / (r.std(ddof=1) + EPS)


def chosen_token_cov_proxy(groups: list[str], rewards: list[int], logprobs: list[np.ndarray]) -> list[np.ndarray]:
    """Per-sample lists in one batch: question id, reward (0/1) and chosen-token log-probs (T_k,).

    Returns cov (T_k,) per sample, pooled centering over all tokens of the batch.
    """
    adv = np.zeros(len(rewards))
    for g in set(groups):
        idx = [i for i, q in enumerate(groups) if q == g]
        adv[idx] = group_advantages(np.array([rewards[i] for i in idx]))
    lengths = [len(lp) for lp in logprobs]
    if sum(lengths) == 0:
        return [np.zeros(0) for _ in logprobs]
    a_tok = np.repeat(adv, lengths)                                   # (N,) advantage of each token
    l_tok = np.concatenate([np.asarray(lp, dtype=np.float64) for lp in logprobs])  # (N,) nats
    cov = (a_tok - a_tok.mean()) * (l_tok - l_tok.mean())
    return np.split(cov, np.cumsum(lengths)[:-1])
