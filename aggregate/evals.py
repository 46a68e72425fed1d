"""Benchmark-side estimators (Table 1, Table A9, Figures 3 and 7; docs/estimators.md#failure-detector,
#passk, #traces-and-progress, #greedy-accuracy).

Unbiased pass@k, the Clip-Cov-7B failure detector, Table 1's macro average, the fixed visual
smoothing of traces, the normalised-progress grid and Spearman with an exact permutation p.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np


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
                     peak_min: float = 0.30, end_max: float = 0.05, drop_min: float = 0.30) -> dict:
    """Fire iff peak >= 30% and endpoint <= 5% and peak - endpoint >= 30 pp (inclusive), on the raw,
    unsmoothed dense trace sorted by step; compared as exact integer fractions (docs/estimators.md#failure-detector).
    Also returns the last-argmax step and the onset (first step after the last peak with acc <= 5%)."""
    steps = np.asarray(steps, dtype=np.int64)
    order = np.argsort(steps, kind="stable")
    steps = steps[order]
    correct = np.asarray(correct, dtype=np.int64)[order]
    total = np.broadcast_to(np.asarray(total, dtype=np.int64), correct.shape)[order]
    if steps.size == 0:
        return {"fired": False, "n_points": 0}
    acc = [Fraction(int(a), int(b)) for a, b in zip(correct, total)]
    peak = max(acc)
    last_arg = max(i for i, a in enumerate(acc) if a == peak)
    end = acc[-1]
    fr = lambda x: Fraction(str(x))  # noqa: E731 - exact decimal thresholds
    fired = peak >= fr(peak_min) and end <= fr(end_max) and peak - end >= fr(drop_min)
    onset = next((int(steps[i]) for i in range(last_arg + 1, len(acc)) if acc[i] <= fr(end_max)), None)
    return {"fired": bool(fired), "peak": float(peak), "endpoint": float(end), "drop": float(peak - end),
            "last_argmax_step": int(steps[last_arg]), "final_step": int(steps[-1]),
            "onset_step": onset if fired else None, "n_points": int(steps.size)}


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
    """Spearman rho (average ranks), its t-approximation p (two-sided, scipy) and the exact two-sided
    permutation p = #{perm : |rho_perm| >= |rho|} / n! for n <= exact_max_n (RQ3,
    docs/estimators.md#greedy-accuracy)."""
    from aggregate.covariance import paired_finite, pearson, rankdata

    x, y = paired_finite(x, y)
    n = int(x.size)
    nan = float("nan")
    if n < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {"n": n, "spearman": nan, "p_t_approx": nan, "p_exact": nan}
    rx, ry = rankdata(x), rankdata(y)
    rho = pearson(rx, ry)
    p_exact = nan
    if n <= exact_max_n:
        perms = np.array(list(itertools.permutations(range(n))))
        ryp = ry[perms]
        rxc, rypc = rx - rx.mean(), ryp - ry.mean()
        r = (rypc * rxc).sum(1) / math.sqrt((rxc**2).sum() * (rypc[0] ** 2).sum())
        p_exact = float(np.mean(np.abs(r) >= abs(rho) - 1e-12))
    p_t = nan  # t approximation, two-sided; degenerate at |rho| = 1
    if abs(rho) < 1 - 1e-12:
        from scipy.special import stdtr

        t = rho * math.sqrt((n - 2) / (1 - rho * rho))
        p_t = float(2 * stdtr(n - 2, -abs(t)))
    return {"n": n, "spearman": rho, "p_t_approx": p_t, "p_exact": p_exact}
