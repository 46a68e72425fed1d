"""Covariance diagnostics (docs/estimators.md#covariance-prediction and #covariance-proxy-and-q99-share;
paper Eq. (10), Figure 6, Tables 2, A7, A8).

* ``covariance_prediction``: first-order entropy change -Cov_{a~pi}(log pi(a), dz(a)) at one prefix.
* ``fit_summary``: agreement of predicted P and observed O over transitions (Table A7).
* ``grpo_advantage`` / ``covariance_proxy``: chosen-token proxy cov_i = (A_i - mean A)(l_i - mean l)
  with batch-pooled token means (docs/estimators.md#covariance-proxy-and-q99-share).
* ``q99_share`` (ties retained, Table 2) and ``rank_budget_share`` (equal count, Table A8).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import spearmanr

from rcea import stats


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def entropy_from_logits(z: np.ndarray) -> np.ndarray:
    """H(softmax z) in nats over the last axis, fp64."""
    lp = _log_softmax(z)
    return -(np.exp(lp) * lp).sum(axis=-1)


def covariance_prediction(z_from: np.ndarray, z_to: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(pred, obs) per prefix for logits (..., V) of checkpoints t and t+50 (Eq. (10),
    docs/estimators.md#covariance-prediction).

    pred = -sum_a pi_a l_a dz_a + (sum_a pi_a l_a)(sum_a pi_a dz_a), pi and l from z_from;
    obs = H(softmax z_to) - H(softmax z_from). Invariant to adding a constant to dz.
    """
    lp = _log_softmax(z_from)
    pi = np.exp(lp)
    dz = np.asarray(z_to, dtype=np.float64) - np.asarray(z_from, dtype=np.float64)
    pred = -(pi * lp * dz).sum(-1) + (pi * lp).sum(-1) * (pi * dz).sum(-1)
    obs = entropy_from_logits(z_to) - entropy_from_logits(z_from)
    return pred, obs


def paired_finite(x, y) -> tuple[np.ndarray, np.ndarray]:
    """Both as float64, keeping only the pairs where neither is NaN."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    ok = ~np.isnan(x) & ~np.isnan(y)
    return x[ok], y[ok]


def fit_summary(P: np.ndarray, O: np.ndarray) -> dict[str, float | int]:
    """Sign agreement, Spearman (average ranks), Pearson, OLS of O on P (slope, intercept, R^2 = r^2),
    identity-line R^2, median |P-O| and median |P-O|/|O| (O = 0 skipped and counted;
    docs/estimators.md#covariance-prediction)."""
    P, O = paired_finite(P, O)
    n = int(P.size)
    nan = float("nan")
    out: dict[str, float | int] = {"n": n, "sign_agreement": nan, "spearman": nan, "pearson": nan, "slope": nan,
                                   "intercept": nan, "r2": nan, "r2_identity": nan, "median_abs_error": nan,
                                   "median_rel_error": nan, "rel_error_skipped": 0}
    if n == 0:
        return out
    err = np.abs(P - O)
    nz = O != 0
    out.update(sign_agreement=float(np.mean(np.sign(P) == np.sign(O))), median_abs_error=float(np.median(err)),
               rel_error_skipped=int((~nz).sum()),
               median_rel_error=float(np.median(err[nz] / np.abs(O[nz]))) if nz.any() else nan)
    if n >= 3 and np.ptp(P) > 0 and np.ptp(O) > 0:
        pc, oc = P - P.mean(), O - O.mean()
        sxx, syy, sxy = float((pc**2).sum()), float((oc**2).sum()), float((pc * oc).sum())
        r = sxy / math.sqrt(sxx * syy)
        slope = sxy / sxx
        out.update(spearman=float(spearmanr(P, O).statistic), pearson=r, slope=slope,
                   intercept=float(O.mean() - slope * P.mean()), r2=r * r,
                   r2_identity=float(1 - ((O - P) ** 2).sum() / syy))
    return out


def grpo_advantage(reward: np.ndarray, group: np.ndarray, eps: float) -> np.ndarray:
    """Per-trajectory GRPO advantage (r - mean_g) / (std_g(ddof=1) + eps); 0 when c in {0, G} (rcea.stats)."""
    return stats.group_advantages(reward, group, eps=eps)


def covariance_proxy(advantage: np.ndarray, logprob: np.ndarray) -> np.ndarray:
    """cov_i = (A_i - mean A)(l_i - mean l) with means over every token of the batch (rcea.stats)."""
    return stats.covariance_proxy(advantage, logprob)


def q99_share(cov: np.ndarray, q: float, method: str) -> dict[str, float | int]:
    """Within-stratum tail share with ties retained: T = {cov >= quantile(cov, q)};
    share = sum_T max(cov,0) / sum max(cov,0) (NaN without positive mass); also |T|/|S| (Table 2)."""
    c = np.asarray(cov, dtype=np.float64)
    nan = float("nan")
    if c.size == 0:
        return {"share": nan, "selected_fraction": nan, "cutoff": nan, "n": 0}
    cut = float(np.quantile(c, q, method=method))
    sel = c >= cut
    pos = np.maximum(c, 0.0)
    total = float(pos.sum())
    return {"share": float(pos[sel].sum() / total) if total > 0 else nan,
            "selected_fraction": float(sel.mean()), "cutoff": cut, "n": int(c.size)}


def rank_budget_share(cov: np.ndarray, budget: float) -> dict[str, float | int]:
    """Top-k share with k = max(1, floor(budget * n)) (Table A8); independent of tie-breaking."""
    c = np.asarray(cov, dtype=np.float64)
    n = c.size
    if n == 0:
        return {"share": float("nan"), "k": 0}
    k = max(1, math.floor(budget * n + 1e-9))
    pos = np.maximum(c, 0.0)
    total = float(pos.sum())
    top = np.partition(pos, n - k)[n - k :]
    return {"share": float(top.sum() / total) if total > 0 else float("nan"), "k": int(k)}


def rank_budget_shares(cov: np.ndarray, budgets: tuple[float, ...]) -> dict[float, dict[str, float | int]]:
    """``rank_budget_share`` for several budgets with one partition (same values, Table A8)."""
    c = np.asarray(cov, dtype=np.float64)
    n = c.size
    if n == 0:
        return {b: {"share": float("nan"), "k": 0} for b in budgets}
    ks = {b: max(1, math.floor(b * n + 1e-9)) for b in budgets}
    kmax = max(ks.values())
    pos = np.maximum(c, 0.0)
    total = float(pos.sum())
    top = np.sort(np.partition(pos, n - kmax)[n - kmax :])[::-1]
    csum = np.cumsum(top)
    return {b: {"share": float(csum[k - 1] / total) if total > 0 else float("nan"), "k": int(k)} for b, k in ks.items()}
