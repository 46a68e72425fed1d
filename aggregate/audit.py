"""Judge calibration, partition audit and mode-collapse variants (docs/estimators.md#semantic-modes,
#judge-calibration, #partition-audit).

These read inputs outside the sample schema (calibration verdicts, audit pair labels), so they are
library functions for the codebook/judge tooling and tests; the CLI does not call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np


def _f1(tp: int, fp: int, fn: int) -> float:
    return 2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else 1.0  # class absent in both: 1.0 [C]


def judge_calibration(valid: Sequence[bool], verdict: Sequence[bool | None]) -> dict[str, float | int]:
    """Positive class = valid; verdict True = judge accepts (predicts valid), None = no parseable verdict.
    Coverage over all items; every other metric over covered items (docs/estimators.md#judge-calibration)."""
    v = np.asarray(valid, dtype=bool)
    cov = np.array([x is not None for x in verdict])
    p = np.array([bool(x) if x is not None else False for x in verdict])
    v, p = v[cov], p[cov]
    tp, tn = int((v & p).sum()), int((~v & ~p).sum())
    fp, fn = int((~v & p).sum()), int((v & ~p).sum())
    n = int(cov.sum())
    return {"coverage": float(cov.mean()) if cov.size else float("nan"), "n": n, "tp": tp, "fn": fn, "fp": fp, "tn": tn,
            "accuracy": (tp + tn) / n if n else float("nan"),
            "macro_f1": 0.5 * (_f1(tp, fp, fn) + _f1(tn, fn, fp)),
            "precision": tp / (tp + fp) if tp + fp else float("nan"),
            "recall": tp / (tp + fn) if tp + fn else float("nan")}


def _pairs(labels: Sequence) -> list[bool | None]:
    """'different' (True) / 'same' (False) per within-question pair; None if either label is missing."""
    return [None if a is None or b is None else a != b for a, b in combinations(labels, 2)]


def pair_agreement(ref: Sequence[bool | None], pred: Sequence[bool | None]) -> dict[str, float | int]:
    """Macro-F1 over {different, same}, precision/recall of 'different' (ref = reference); pairs
    with a missing label on either side are skipped."""
    keep = [(r, p) for r, p in zip(ref, pred) if r is not None and p is not None]
    r = np.array([k[0] for k in keep], dtype=bool)
    p = np.array([k[1] for k in keep], dtype=bool)
    tp, tn = int((r & p).sum()), int((~r & ~p).sum())
    fp, fn = int((~r & p).sum()), int((r & ~p).sum())
    return {"n_pairs": len(keep), "macro_f1": 0.5 * (_f1(tp, fp, fn) + _f1(tn, fn, fp)),
            "different_precision": tp / (tp + fp) if tp + fp else float("nan"),
            "different_recall": tp / (tp + fn) if tp + fn else float("nan")}


def partition_audit(questions: Sequence[dict], hh_min: float = 0.85, auto_min: float = 0.85, gap_max: float = 0.05,
                    pr_min: float = 0.80, coverage_min: float = 0.95) -> dict:
    """Pool within-question pairs over questions; each question dict has trajectory label lists
    'A', 'B' (annotators), 'adjudicated' and 'auto' (None = no automatic mode). Gates:
    docs/estimators.md#partition-audit."""
    A, B, adj, auto, n_traj, n_auto = [], [], [], [], 0, 0
    for q in questions:
        A += _pairs(q["A"]); B += _pairs(q["B"]); adj += _pairs(q["adjudicated"]); auto += _pairs(q["auto"])
        n_traj += len(q["auto"]); n_auto += sum(x is not None for x in q["auto"])
    hh = pair_agreement(A, B)
    am = pair_agreement(adj, auto)
    cov = n_auto / n_traj if n_traj else float("nan")
    gap = hh["macro_f1"] - am["macro_f1"]
    gates = {"human_human": hh["macro_f1"] >= hh_min, "automatic": am["macro_f1"] >= auto_min, "gap": gap <= gap_max,
             "different_precision": am["different_precision"] >= pr_min,
             "different_recall": am["different_recall"] >= pr_min,
             "coverage": cov >= coverage_min}
    return {"human_human": hh, "automatic": am, "gap": gap, "coverage": cov, "gates": gates,
            "passed": all(gates.values())}


def majorizes(q_new: Sequence[float], q_old: Sequence[float]) -> bool:
    """q_new majorizes q_old (stricter, label-free collapse, docs/estimators.md#semantic-modes): sorted partial sums
    dominate."""
    n = max(len(q_new), len(q_old))
    a = np.sort(np.pad(np.asarray(q_new, float), (0, n - len(q_new))))[::-1].cumsum()
    b = np.sort(np.pad(np.asarray(q_old, float), (0, n - len(q_old))))[::-1].cumsum()
    return bool(np.all(a >= b - 1e-12))
