"""Per-question entropies, Proposition 1 and reward-conditioned ratios (docs/estimators.md#per-question-entropies,
#reward-decomposition, #reward-conditioned-ratios, #sign-test).

All functions take flat per-trajectory arrays plus an integer question-group code ``group`` (0..G-1)
and return per-question arrays of length G, computed with ``np.bincount`` (no Python loop over
questions). Entropies in nats. A conditional quantity is NaN when K_r < min_k_r, never 0 [S].
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest


def binary_entropy(p: np.ndarray) -> np.ndarray:
    """h_b(p) = -p log p - (1-p) log(1-p), with h_b(0) = h_b(1) = 0 (Proposition 1)."""
    p = np.asarray(p, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where(p > 0, -p * np.log(np.where(p > 0, p, 1.0)), 0.0)
        b = np.where(p < 1, -(1 - p) * np.log(np.where(p < 1, 1 - p, 1.0)), 0.0)
    return a + b


@dataclass
class QuestionStats:
    """Per-question estimates (arrays of length G; docs/estimators.md#per-question-entropies)."""

    K: np.ndarray  # samples per question
    K1: np.ndarray  # successes
    p_hat: np.ndarray  # K1/K
    H_seq: np.ndarray  # -(1/K) sum_k log pi(y_k|x)
    H_seq_pos: np.ndarray  # H(Y|x,R=1) with +log p_hat; NaN if K1 < min_k_r
    H_seq_neg: np.ndarray  # H(Y|x,R=0) with +log(1-p_hat); NaN if K0 < min_k_r
    H_tok: np.ndarray  # (1/K) sum_k hbar_k
    H_tok_pos: np.ndarray  # success stratum mean of hbar_k; NaN if K1 < min_k_r
    H_tok_neg: np.ndarray  # failure stratum mean of hbar_k; NaN if K0 < min_k_r
    residual: np.ndarray  # Proposition 1 reconstruction residual, all samples (docs/estimators.md#reward-decomposition)
    chain_rule: np.ndarray  # (1/K) sum_k sum_t h_kt (diagnostic only)

    @property
    def K0(self) -> np.ndarray:
        return self.K - self.K1


def question_stats(
    group: np.ndarray,
    reward: np.ndarray,
    logprob_sum: np.ndarray,
    token_entropy_mean: np.ndarray,
    n_tokens: np.ndarray | None = None,
    n_groups: int | None = None,
    min_k_r: int = 8,
) -> QuestionStats:
    """Per-question p_hat, H_seq, H_r (+log p_hat_r shift, docs/estimators.md#per-question-entropies), token
    entropies and residual.

    ``group`` (N,) int codes; ``reward`` (N,) in {0,1}; ``logprob_sum`` (N,) = sum_t log pi (nats);
    ``token_entropy_mean`` (N,) = hbar_k, the within-trajectory mean of full-vocabulary entropies.
    Averaging order (docs/estimators.md#per-question-entropies): within trajectory, then within question.
    """
    group = np.asarray(group, dtype=np.int64)
    r = np.asarray(reward, dtype=np.float64)
    if np.any((r != 0) & (r != 1)):
        raise ValueError("reward must be binary (0/1)")
    G = int(n_groups if n_groups is not None else (group.max() + 1 if group.size else 0))
    nll = -np.asarray(logprob_sum, dtype=np.float64)
    hbar = np.asarray(token_entropy_mean, dtype=np.float64)

    def s(w: np.ndarray | None = None) -> np.ndarray:
        return np.bincount(group, weights=w, minlength=G).astype(np.float64)

    K, K1 = s(), s(r)
    K0 = K - K1
    S, S1 = s(nll), s(nll * r)
    T, T1 = s(hbar), s(hbar * r)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = K1 / K
        m1 = np.where(K1 > 0, S1 / K1, np.nan)
        m0 = np.where(K0 > 0, (S - S1) / K0, np.nan)
        H1 = m1 + np.log(p)
        H0 = m0 + np.log1p(-p)
        H_seq = S / K
        # Prop. 1 reconstruction over all samples; a term with weight 0 is dropped
        # (docs/estimators.md#reward-decomposition).
        recon = binary_entropy(p) + np.where(K1 > 0, p * H1, 0.0) + np.where(K0 > 0, (1 - p) * H0, 0.0)
        tok1 = np.where(K1 > 0, T1 / K1, np.nan)
        tok0 = np.where(K0 > 0, (T - T1) / K0, np.nan)
        chain = s(hbar * np.asarray(n_tokens, dtype=np.float64)) / K if n_tokens is not None else np.full(G, np.nan)
    ok1, ok0 = K1 >= min_k_r, K0 >= min_k_r
    return QuestionStats(
        K=K.astype(np.int64), K1=K1.astype(np.int64), p_hat=p, H_seq=H_seq,
        H_seq_pos=np.where(ok1, H1, np.nan), H_seq_neg=np.where(ok0, H0, np.nan),
        H_tok=T / K, H_tok_pos=np.where(ok1, tok1, np.nan), H_tok_neg=np.where(ok0, tok0, np.nan),
        residual=H_seq - recon, chain_rule=chain,
    )


def nanmean(x: np.ndarray) -> float:
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else float("nan")


def reward_ratios(h_pos: np.ndarray, h_neg: np.ndarray) -> dict[str, float | int]:
    """Broad and paired failed-to-success ratios of macro means (docs/estimators.md#reward-conditioned-ratios).

    ``h_pos``/``h_neg``: per-question stratum token entropies over ALL probe questions (NaN where
    K_r < min_k_r). Broad uses Q_1 and Q_0 separately; paired uses Q_c = Q_0 & Q_1.
    """
    h_pos = np.asarray(h_pos, dtype=np.float64)
    h_neg = np.asarray(h_neg, dtype=np.float64)
    n = h_pos.size
    c1, c0 = ~np.isnan(h_pos), ~np.isnan(h_neg)
    both = c1 & c0
    mean_pos, mean_neg = nanmean(h_pos), nanmean(h_neg)
    pp, pn = h_pos[both], h_neg[both]
    with np.errstate(divide="ignore", invalid="ignore"):
        broad = mean_neg / mean_pos if c1.any() and c0.any() else float("nan")
        paired = float(pn.mean() / pp.mean()) if both.any() else float("nan")
        mean_of_ratios = float(np.mean(pn / pp)) if both.any() else float("nan")
    return {
        "n_questions": int(n),
        "coverage_success": float(c1.mean()) if n else float("nan"),
        "coverage_failure": float(c0.mean()) if n else float("nan"),
        "n_success": int(c1.sum()), "n_failure": int(c0.sum()),
        "success_entropy_mean": mean_pos, "failure_entropy_mean": mean_neg,
        "broad_ratio": float(broad), "paired_ratio": paired, "paired_n": int(both.sum()),
        "paired_success_mean": float(pp.mean()) if both.any() else float("nan"),
        "paired_failure_mean": float(pn.mean()) if both.any() else float("nan"),
        "paired_mean_of_ratios": mean_of_ratios,
    }


def sign_test(h_pos: np.ndarray, h_neg: np.ndarray) -> dict[str, float | int]:
    """One-sided exact sign test on Q_c: P(Bin(n, 1/2) >= wins) (scipy binomtest), ties dropped
    (docs/estimators.md#sign-test, Table A5)."""
    h_pos = np.asarray(h_pos, dtype=np.float64)
    h_neg = np.asarray(h_neg, dtype=np.float64)
    both = ~np.isnan(h_pos) & ~np.isnan(h_neg)
    d = h_neg[both] - h_pos[both]
    wins, ties = int((d > 0).sum()), int((d == 0).sum())
    n = int(d.size) - ties
    p = float(binomtest(wins, n, 0.5, alternative="greater").pvalue) if n > 0 else float("nan")
    return {"sign_wins": wins, "sign_n": n, "sign_ties": ties,
            "failure_higher_fraction": wins / n if n else float("nan"), "sign_test_p": p}
