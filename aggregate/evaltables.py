"""Aggregates of the ``greedy``, ``passk`` and ``covariance`` tables (Table 1, Table A7, Table A9,
Figure 6) and the per-run failure detector (docs/estimators.md#covariance-prediction, #failure-detector, #passk)."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from aggregate import evals
from aggregate.io import group_keys, numeric
from aggregate.settings import AggregateSettings
from rcea.config import BASE_METHOD

CANONICAL = (("aime24", ("aime24", "aime2024")), ("aime25", ("aime25", "aime2025")),
             ("math500", ("math500", "math")), ("amc23", ("amc23", "amc")), ("minerva", ("minerva",)))


def canonical_benchmark(name: str) -> str:
    """Normalised benchmark name: 'AIME_2024' -> 'aime24', 'minerva_math' -> 'minerva', 'MATH-500' -> 'math500'."""
    s = re.sub(r"[^a-z0-9]", "", str(name).lower())
    for canon, prefixes in CANONICAL:
        if any(s.startswith(p) for p in prefixes):
            return canon
    return s


def greedy_summary(greedy: pa.Table) -> list[dict]:
    """Per (scale, method, step, benchmark): n, correct, accuracy, boxed rate, mean length."""
    gid, keys = group_keys(greedy, ["scale", "method", "step", "benchmark"])
    G = len(keys["step"])
    cnt = np.bincount(gid, minlength=G)
    corr = np.bincount(gid, weights=numeric(greedy.column("correct"), np.float64), minlength=G)
    boxed = np.bincount(gid, weights=numeric(greedy.column("boxed"), np.float64), minlength=G)
    length = np.bincount(gid, weights=numeric(greedy.column("n_tokens"), np.float64), minlength=G)
    return [{"scale": str(keys["scale"][g]), "method": str(keys["method"][g]), "step": int(keys["step"][g]),
             "benchmark": canonical_benchmark(keys["benchmark"][g]), "benchmark_raw": str(keys["benchmark"][g]),
             "n": int(cnt[g]), "correct": int(round(corr[g])), "accuracy": corr[g] / cnt[g],
             "boxed_rate": boxed[g] / cnt[g], "mean_length": length[g] / cnt[g]} for g in range(G)]


def passk_summary(passk: pa.Table, k: int) -> list[dict]:
    """Per (scale, method, step): mean unbiased pass@k and pass@1 over questions (NaN if any n < k)."""
    gid, keys = group_keys(passk, ["scale", "method", "step"])
    n = numeric(passk.column("n"), np.int64)
    c = numeric(passk.column("c"), np.int64)
    pk, p1 = evals.pass_at_k(n, c, k), evals.pass_at_k(n, c, 1)
    G = len(keys["step"])
    out = []
    for g in range(G):
        m = gid == g
        out.append({"scale": str(keys["scale"][g]), "method": str(keys["method"][g]), "step": int(keys["step"][g]),
                    f"pass_at_{k}": float(pk[m].mean()), "pass_at_1": float(p1[m].mean()),
                    "n_questions": int(m.sum()), "min_n": int(n[m].min())})
    return out


def transitions(cov: pa.Table) -> list[dict]:
    """Per transition (scale, method, step_from, step_to): P and O = means over its rows (token-pooled,
    docs/estimators.md#covariance-prediction)."""
    gid, keys = group_keys(cov, ["scale", "method", "step_from", "step_to"])
    G = len(keys["step_from"])
    cnt = np.bincount(gid, minlength=G)
    P = np.bincount(gid, weights=numeric(cov.column("predicted_delta")), minlength=G) / cnt
    O = np.bincount(gid, weights=numeric(cov.column("observed_delta")), minlength=G) / cnt
    return [{"scale": str(keys["scale"][g]), "method": str(keys["method"][g]), "step_from": int(keys["step_from"][g]),
             "step_to": int(keys["step_to"][g]), "predicted": float(P[g]), "observed": float(O[g]), "rows": int(cnt[g])}
            for g in range(G)]


def detect_failures(greedy_rows: list[dict], settings: AggregateSettings) -> dict[tuple[str, str], dict]:
    """Failure detector on every run's raw dense trace of ``settings.failure_benchmark``."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for r in greedy_rows:
        if r["benchmark"] == canonical_benchmark(settings.failure_benchmark) and r["method"] != BASE_METHOD:
            runs.setdefault((r["scale"], r["method"]), []).append(r)
    out = {}
    for key, rows in sorted(runs.items()):
        rows = sorted(rows, key=lambda r: r["step"])
        out[key] = evals.failure_detector([r["step"] for r in rows], [r["correct"] for r in rows],
                                          [r["n"] for r in rows], settings.failure_thresholds())
    return out


def _questions_per_benchmark(t: pa.Table) -> dict[str, int]:
    pairs = pa.table({"b": pc.cast(t.column("benchmark"), pa.string()),
                      "q": pc.cast(t.column("question_id"), pa.string())}).group_by(["b", "q"]).aggregate([])
    counts = pairs.group_by("b").aggregate([("q", "count")])
    out: dict[str, int] = {}
    for b, n in zip(counts.column("b").to_pylist(), counts.column("q_count").to_pylist()):
        key = canonical_benchmark(b)
        out[key] = out.get(key, 0) + int(n)
    return out


def eval_inventory(ds, st) -> dict[str, dict[str, int]]:
    """benchmark -> {"greedy": questions, "probe": questions, "passk": questions} as found in the tables."""
    inv: dict[str, dict[str, int]] = {}
    for table, col in (("greedy", "greedy"), ("samples", "probe")):
        if ds.has(table):
            for b, n in _questions_per_benchmark(ds.tables[table]).items():
                inv.setdefault(b, {})[col] = n
    if ds.has("passk"):
        t = ds.tables["passk"]
        if "benchmark" in t.column_names:  # the optional column says what was measured
            for b, n in _questions_per_benchmark(t).items():
                inv.setdefault(b, {})["passk"] = n
        else:
            n = len(set(pc.cast(t.column("question_id"), pa.string()).to_pylist()))
            inv.setdefault(canonical_benchmark(st.passk_benchmark), {})["passk"] = n
    return inv
