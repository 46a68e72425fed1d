"""Semantic modes: effective mode count, rarefaction, retention (docs/estimators.md#semantic-modes, Table 1, Table A6).

D_1 = exp(H_M) with count-based q(m|x) = n_m/n (Hill number of order 1). Rarefaction to a common
size m = min(n_base, n_c) with R frozen draws per (question, checkpoint), keyed RNG from seed 2030
(docs/estimators.md#semantic-modes). Retention = 100 * mean_x rho(x), rho = D1~_c / D1~_base.
"""

from __future__ import annotations

import math
import zlib

import numpy as np


def stable_key(text: str) -> int:
    """Order-independent integer key of a string (CRC-32), for ``default_rng([seed, key, ...])``."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return zlib.crc32(str(text).encode("utf-8"))


def effective_mode_count(labels: np.ndarray) -> float:
    """D_1 = exp(-sum q log q) of the empirical label distribution; NaN for no labels."""
    labels = np.asarray(labels)
    if labels.size == 0:
        return float("nan")
    _, counts = np.unique(labels, return_counts=True)
    q = counts / counts.sum()
    return float(np.exp(-(q * np.log(q)).sum()))


def _row_d1(draws: np.ndarray, n_labels: int) -> np.ndarray:
    """D_1 of each row of an (R, m) matrix of integer label codes in [0, n_labels)."""
    R, m = draws.shape
    counts = np.bincount((np.arange(R)[:, None] * n_labels + draws).ravel(), minlength=R * n_labels)
    q = counts.reshape(R, n_labels) / m
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(q > 0, q * np.log(np.where(q > 0, q, 1.0)), 0.0).sum(axis=1)
    return np.exp(h)


def rarefied_d1(labels: np.ndarray, m: int, rng: np.random.Generator,
                n_draws: int = 100) -> tuple[float, np.ndarray | None]:
    """Mean D_1 over ``n_draws`` size-m subsamples without replacement (one ``rng.choice(n, m,
    replace=False)`` call per draw, the stream of the worked example in tests/aggregate/test_estimators.py). If n ==
    m the sample itself is used and
    no draws are made. Returns (value, drawn indices (R, m) or None) - the frozen draws."""
    labels = np.asarray(labels)
    n = labels.size
    if m > n or m < 1:
        raise ValueError(f"rarefaction size m={m} must be in [1, n={n}]")
    _, codes = np.unique(labels, return_inverse=True)
    L = int(codes.max()) + 1
    if m == n:
        return float(_row_d1(codes[None, :], L)[0]), None
    draws = np.stack([rng.choice(n, m, replace=False) for _ in range(n_draws)])
    return float(_row_d1(codes[draws], L).mean()), draws


def chao_rarefied_d1(labels: np.ndarray, m: int) -> float:
    """Deterministic cross-check exp(E[H_m]) (Chao et al. 2014; iNEXT), hypergeometric f_k(m)."""
    _, X = np.unique(np.asarray(labels), return_counts=True)
    n = int(X.sum())
    denom = math.comb(n, m)
    eh = 0.0
    for k in range(1, m + 1):
        f_k = sum(math.comb(int(x), k) * math.comb(n - int(x), m - k) for x in X) / denom  # E[# modes seen k times]
        eh += -(k / m) * math.log(k / m) * f_k
    return float(math.exp(eh))


def retention_pairs(
    base_labels: dict[str, np.ndarray],
    trained_labels: dict[str, np.ndarray],
    checkpoint_key: int,
    base_key: int,
    seed: int = 2030,
    n_draws: int = 100,
    m_min: int = 8,
) -> dict[str, np.ndarray | list]:
    """Per-question rarefied retention ratios rho(x) for one trained checkpoint against the base.

    ``*_labels``: question_id -> mode labels of its process-valid successes. Eligible iff
    m = min(n_base, n_c) >= m_min. RNG per subsampled sample: default_rng([seed, question_key,
    checkpoint_key]) (base uses ``base_key``), so results do not depend on processing order.
    """
    qids, rho, ms, d_base, d_tr = [], [], [], [], []
    for qid in sorted(set(base_labels) & set(trained_labels)):
        b, t = base_labels[qid], trained_labels[qid]
        m = min(b.size, t.size)
        if m < m_min:
            continue
        qk = stable_key(qid)
        db, _ = rarefied_d1(b, m, np.random.default_rng([seed, qk, base_key]), n_draws)
        dt, _ = rarefied_d1(t, m, np.random.default_rng([seed, qk, checkpoint_key]), n_draws)
        qids.append(qid)
        ms.append(m)
        d_base.append(db)
        d_tr.append(dt)
        rho.append(dt / db)
    return {"question_id": qids, "m": np.array(ms, dtype=np.int64), "d1_base": np.array(d_base),
            "d1_trained": np.array(d_tr), "rho": np.array(rho, dtype=np.float64)}
