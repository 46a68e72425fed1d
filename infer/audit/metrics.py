"""Partition-audit metrics and the five predeclared gates (docs/estimators.md#partition-audit; paper supplement §12).

Pairs are within-question trajectory pairs; label 1 = "different" strategy, 0 = "same". The automatic
label comes from the frozen mode partition; a pair with a trajectory without an automatic mode
(uncertain or missing) is excluded from the automatic F1 and counts against coverage.
"""

from __future__ import annotations

import itertools
import logging
from typing import Iterable, Sequence

log = logging.getLogger(__name__)

GATES = {"hh_macro_f1": 0.85, "auto_macro_f1": 0.85, "max_gap": 0.05, "different_precision": 0.80,
         "different_recall": 0.80, "coverage": 0.95}
EPS = 1e-12  # boundary values (e.g. recall exactly 0.80) pass


def pair_labels(modes: Sequence) -> list[int | None]:
    """All i<j pairs of one question's trajectories: 1 = different, 0 = same, None = a mode missing."""
    return [None if a is None or b is None else int(a != b) for a, b in itertools.combinations(modes, 2)]


def _f1(tp: int, fp: int, fn: int) -> float | None:
    return 2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else None


def macro_f1(ref: Iterable[int], other: Iterable[int]) -> float:
    """Mean of the F1 of class "different" (1) and class "same" (0); symmetric in the two vectors.
    A class absent from both vectors scores 1.0 (logged)."""
    pairs = list(zip(ref, other))
    scores = []
    for c in (1, 0):
        tp = sum(a == c and b == c for a, b in pairs)
        fp = sum(a != c and b == c for a, b in pairs)
        fn = sum(a == c and b != c for a, b in pairs)
        f = _f1(tp, fp, fn)
        if f is None:
            log.info("class %s absent from both label vectors; its F1 is taken as 1.0", c)
            f = 1.0
        scores.append(f)
    return sum(scores) / 2


def different_pr(ref: Iterable[int], pred: Iterable[int]) -> tuple[float, float]:
    """Precision and recall of class "different" with `ref` (adjudicated humans) as reference."""
    pairs = list(zip(ref, pred))
    tp = sum(a == 1 and b == 1 for a, b in pairs)
    fp = sum(a == 0 and b == 1 for a, b in pairs)
    fn = sum(a == 1 and b == 0 for a, b in pairs)
    return (tp / (tp + fp) if tp + fp else float("nan"), tp / (tp + fn) if tp + fn else float("nan"))


def audit_report(pairs: list[dict], trajectory_modes: dict[str, str | None]) -> dict:
    """`pairs`: dicts with a, b (trajectory ids), human_a, human_b (0/1 or None), adjudicated (0/1 or None);
    adjudicated falls back to the raters' common label when they agree.
    `trajectory_modes`: automatic mode (or None) of every audit trajectory."""
    for p in pairs:
        ma, mb = trajectory_modes.get(p["a"]), trajectory_modes.get(p["b"])
        p["auto"] = None if ma is None or mb is None else int(ma != mb)
        if p.get("adjudicated") is None and p.get("human_a") is not None and p["human_a"] == p.get("human_b"):
            p["adjudicated"] = p["human_a"]
    both = [p for p in pairs if p.get("human_a") is not None and p.get("human_b") is not None]
    final = [p for p in pairs if p.get("adjudicated") is not None]
    scored = [p for p in final if p["auto"] is not None]
    hh = macro_f1([p["human_a"] for p in both], [p["human_b"] for p in both]) if both else float("nan")
    auto = macro_f1([p["adjudicated"] for p in scored], [p["auto"] for p in scored]) if scored else float("nan")
    prec, rec = different_pr([p["adjudicated"] for p in scored], [p["auto"] for p in scored])
    n_traj = len(trajectory_modes)
    cov = sum(m is not None for m in trajectory_modes.values()) / n_traj if n_traj else float("nan")
    pre = {}
    for who in ("human_a", "human_b"):
        sc = [p for p in pairs if p.get(who) is not None and p["auto"] is not None]
        f1 = macro_f1([p[who] for p in sc], [p["auto"] for p in sc]) if sc else float("nan")
        pre[f"auto_vs_{who[-1].upper()}"] = f1
    gap = hh - auto
    gates = {
        "1_hh_macro_f1": hh >= GATES["hh_macro_f1"] - EPS,
        "2_auto_macro_f1": auto >= GATES["auto_macro_f1"] - EPS,
        "3_gap": gap <= GATES["max_gap"] + EPS,
        "4_different_precision_recall": (prec >= GATES["different_precision"] - EPS
                                         and rec >= GATES["different_recall"] - EPS),
        "5_coverage": cov >= GATES["coverage"] - EPS,
    }
    return {
        "pairs": len(pairs), "pairs_both_raters": len(both), "pairs_adjudicated": len(final),
        "pairs_pending_adjudication": sum(1 for p in both
                                          if p["human_a"] != p["human_b"] and p.get("adjudicated") is None),
        "pairs_scored_auto": len(scored), "trajectories": len(trajectory_modes),
        "hh_macro_f1": hh, "auto_macro_f1": auto, "gap": gap, "different_precision": prec, "different_recall": rec,
        "coverage": cov, "pre_adjudication": pre, "gates": gates, "all_gates_pass": all(gates.values()),
        "thresholds": GATES,
    }
