"""Bootstrap intervals (docs/estimators.md#hierarchical-bootstrap and #semantic-modes).

* ``paired_ratio_bootstrap``: hierarchical bootstrap of the paired failed-to-success ratio
  (Table A4, Figure 5). Level 1 resamples questions of Q_c; level 2 resamples, within each drawn
  question, its success h̄ values (K_1 draws) and its failure h̄ values (K_0 draws), holding K_r
  fixed. Vectorised: one draw call per (chunk, question); its draw order differs from the
  naive loop, so it matches the worked example's interval only statistically.
* ``paired_ratio_bootstrap_naive``: the per-resample Python loop, questions then outcomes in draw
  order (reproduces the worked example in tests/aggregate/test_estimators.py exactly); the reference and the
  benchmark baseline.
* ``question_bootstrap_mean``: question bootstrap of 100 * mean(rho) (Table A6), one
  ``rng.integers(0, n, n)`` per replicate (identical stream as a single (B, n) call).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def percentile_ci(reps: np.ndarray, level: float = 95.0) -> tuple[float, float]:
    """Linear percentile interval (np.percentile default), ignoring NaN replicates."""
    reps = np.asarray(reps, dtype=np.float64)
    reps = reps[~np.isnan(reps)]
    if reps.size == 0:
        return (float("nan"), float("nan"))
    a = (100.0 - level) / 2.0
    lo, hi = np.percentile(reps, [a, 100.0 - a])
    return (float(lo), float(hi))


def _inner_means(values: Sequence[np.ndarray], q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Level 2 of the hierarchical bootstrap: for every slot of ``q`` (question indices, any shape),
    the mean of len(values[q]) with-replacement draws from values[q], each slot independent.

    Slots are grouped by question, so each question's draws are one (count_q, K_q) ``rng.integers``
    call without padding; the t-th slot of question q (in C order) gets its t-th resample.
    """
    flat = q.ravel()
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=len(values))
    out_sorted = np.empty(flat.size, dtype=np.float64)
    pos = 0
    for qi, c in enumerate(counts):
        if c == 0:
            continue
        v = values[qi]
        k = v.size
        idx = rng.integers(0, k, size=(int(c), k), dtype=np.uint8 if k < 256 else np.int64)
        out_sorted[pos : pos + c] = v[idx].sum(axis=1, dtype=np.float64) / k  # float32 values, float64 sums
        pos += c
    out = np.empty(flat.size, dtype=np.float64)
    out[order] = out_sorted
    return out.reshape(q.shape)


def paired_ratio_bootstrap(
    success: Sequence[np.ndarray],
    failure: Sequence[np.ndarray],
    n_resamples: int,
    rng: np.random.Generator,
    chunk: int = 2500,
) -> np.ndarray:
    """(B,) bootstrap replicates of mean_q mean(failure_q) / mean_q mean(success_q)
    (docs/estimators.md#hierarchical-bootstrap).

    ``success[q]``/``failure[q]``: the h̄_k of question q's successes/failures (question in Q_c).
    """
    n = len(success)
    if n != len(failure):
        raise ValueError("success and failure lists must have one entry per paired question")
    if n == 0:
        return np.full(n_resamples, np.nan)
    # The h̄ values are gathered as float32 (half the memory traffic; they carry ~1e-7 relative rounding), and
    # every mean accumulates in float64 (`_inner_means`).
    succ = [np.asarray(v, dtype=np.float32) for v in success]
    fail = [np.asarray(v, dtype=np.float32) for v in failure]
    if any(v.size == 0 for v in succ) or any(v.size == 0 for v in fail):
        raise ValueError("every paired question needs at least one success and one failure")
    out = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        q = rng.integers(0, n, size=(b, n))
        ms = _inner_means(succ, q, rng).mean(axis=1)
        mf = _inner_means(fail, q, rng).mean(axis=1)
        out[start : start + b] = mf / ms
    return out


def paired_ratio_bootstrap_naive(
    success: Sequence[np.ndarray],
    failure: Sequence[np.ndarray],
    n_resamples: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Per-resample loop in the reference draw order (docs/estimators.md#hierarchical-bootstrap): questions, then per
    drawn question
    its K_1 success draws and its K_0 failure draws, all with ``rng.integers``."""
    n = len(success)
    succ = [np.asarray(s, dtype=np.float64) for s in success]
    fail = [np.asarray(f, dtype=np.float64) for f in failure]
    out = np.empty(n_resamples, dtype=np.float64)
    for b in range(n_resamples):
        qs = rng.integers(0, n, n)
        ms, mf = [], []
        for q in qs:
            s, f = succ[q], fail[q]
            ms.append(s[rng.integers(0, len(s), len(s))].mean())
            mf.append(f[rng.integers(0, len(f), len(f))].mean())
        out[b] = np.mean(mf) / np.mean(ms)
    return out


def question_bootstrap_mean(
    values: np.ndarray, n_resamples: int, rng: np.random.Generator, scale: float = 100.0, chunk: int = 2000
) -> np.ndarray:
    """(B,) replicates of scale * mean(values[resampled questions]) (docs/estimators.md#semantic-modes, Table A6)."""
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    if n == 0:
        return np.full(n_resamples, np.nan)
    out = np.empty(n_resamples, dtype=np.float64)
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        out[start : start + b] = scale * v[rng.integers(0, n, size=(b, n))].mean(axis=1)
    return out
