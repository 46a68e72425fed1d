"""Benchmark-side estimators (Table 1, Table A9, Figures 3 and 7; docs/estimators.md#failure-detector,
#passk, #traces-and-progress, #greedy-accuracy).

Unbiased pass@k, the Clip-Cov-7B failure detector, Table 1's macro average, the fixed visual
smoothing of traces, the normalised-progress grid and Spearman with an exact permutation p.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from rcea import stats


def pass_at_k(n: np.ndarray, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k = 1 - C(n-c, k)/C(n, k) per question (Chen et al. 2021), stable product form:
    1 if n - c < k else 1 - prod_{i=n-c+1}^{n} (1 - k/i). NaN where n < k (never silently skipped)."""
    n = np.atleast_1d(np.asarray(n, dtype=np.int64))
    c = np.atleast_1d(np.asarray(c, dtype=np.int64))
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("pass@k needs 0 <= c <= n")
    out = np.empty(n.shape, dtype=np.float64)
    pairs, inv = np.unique(np.stack([n, c], axis=1), axis=0, return_inverse=True)
    vals = np.empty(len(pairs))
    for j, (nn, cc) in enumerate(pairs):
        if nn < k:
            vals[j] = np.nan
        elif nn - cc < k:
            vals[j] = 1.0
        else:
            vals[j] = 1.0 - float(np.prod(1.0 - k / np.arange(nn - cc + 1, nn + 1)))
    out[:] = vals[inv.ravel()]
    return out


def failure_detector(steps: np.ndarray, correct: np.ndarray, total: np.ndarray | int,
                     thresholds: stats.FailureThresholds) -> dict:
    """rcea.stats.failure_detector on a dense greedy trace of correct / total counts (exact fractions)."""
    correct = np.asarray(correct, dtype=np.int64)
    total = np.broadcast_to(np.asarray(total, dtype=np.int64), correct.shape)
    return stats.failure_detector(steps, [Fraction(int(c), int(t)) for c, t in zip(correct, total)], thresholds)


def macro_average(values: np.ndarray) -> float:
    """Unweighted mean of the benchmark accuracies, from unrounded values (Table 1 'Average')."""
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()) if v.size and not np.isnan(v).any() else float("nan")


def centered_moving_average(y: np.ndarray, window: int = 5) -> np.ndarray:
    """Equal-weight centred moving average, truncated (shrinking) at the edges (visual only)."""
    y = np.asarray(y, dtype=np.float64)
    h = window // 2
    c = np.concatenate([[0.0], np.cumsum(y)])
    i = np.arange(y.size)
    lo, hi = np.maximum(i - h, 0), np.minimum(i + h + 1, y.size)
    return (c[hi] - c[lo]) / (hi - lo)


def debiased_ema(y: np.ndarray, w: float = 0.6) -> np.ndarray:
    """s_t = w s_{t-1} + (1-w) y_t, output s_t / (1 - w^t) (the alternative smoother,
    docs/estimators.md#traces-and-progress)."""
    out, s = np.empty(len(y)), 0.0
    for t, v in enumerate(np.asarray(y, dtype=np.float64), start=1):
        s = w * s + (1 - w) * v
        out[t - 1] = s / (1 - w**t)
    return out


def progress(steps: np.ndarray, steps_per_epoch: float) -> np.ndarray:
    """Normalised one-epoch progress = raw step / steps per epoch (docs/estimators.md#traces-and-progress)."""
    return np.asarray(steps, dtype=np.float64) / float(steps_per_epoch)


def interpolate_on_progress(steps: np.ndarray, values: np.ndarray, steps_per_epoch: float,
                            grid: np.ndarray) -> np.ndarray:
    """np.interp of a logged trace onto normalised-progress points (docs/estimators.md#traces-and-progress)."""
    return np.interp(grid, progress(steps, steps_per_epoch), np.asarray(values, dtype=np.float64))


def spearman_with_p(x: np.ndarray, y: np.ndarray, exact_max_n: int = 8) -> dict[str, float | int]:
    """Spearman rho (average ranks), its t-approximation p (two-sided) and the exact two-sided
    permutation p = #{perm : |rho_perm| >= |rho|} / n! for n <= exact_max_n (RQ3,
    docs/estimators.md#greedy-accuracy); scipy."""
    from scipy.stats import permutation_test, rankdata, spearmanr

    from aggregate.covariance import paired_finite

    x, y = paired_finite(x, y)
    n = int(x.size)
    nan = float("nan")
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"n": n, "spearman": nan, "p_t_approx": nan, "p_exact": nan}
    res = spearmanr(x, y)
    rho = float(res.statistic)
    p_exact = nan
    if n <= exact_max_n:
        rx = rankdata(x) - (n + 1) / 2

        def abs_rho(yy, axis=-1):  # |Pearson of the ranks|, vectorised over permutations of y
            ry = rankdata(yy, axis=axis)
            ry = ry - ry.mean(axis=axis, keepdims=True)
            return np.abs((ry * rx).sum(axis) / np.sqrt((rx**2).sum() * (ry**2).sum(axis)))

        perm = permutation_test((y,), abs_rho, permutation_type="pairings", vectorized=True,
                                n_resamples=math.factorial(n), alternative="greater")
        p_exact = float(perm.pvalue)
    p_t = float(res.pvalue) if abs(rho) < 1 - 1e-12 else nan  # the t approximation degenerates at |rho| = 1
    return {"n": n, "spearman": rho, "p_t_approx": p_t, "p_exact": p_exact}
