"""One NumPy implementation of each statistic more than one role computes.

Every role calls these (the trainer's torch twins in train/objectives/common.py are tested against them):
  group_advantages      GRPO advantage (r - mean_g r) / (std_g r + eps), Bessel std, per row;
  covariance_proxy      chosen-token proxy (A - mean A)(l - mean l), means over every token of the batch;
  failure_detector      the collapse detector on an accuracy trace, thresholds from the [failure] settings;
  binary_calibration    a judge's verdicts against labels (coverage, accuracy, macro-F1, precision, recall);
  pair_labels, macro_f1, different_precision_recall, audit_gates   the semantic-partition audit.
NumPy only (no SciPy, no torch), so every role environment can import it.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

SCALES = ("group", "batch", "none")


# ---- GRPO advantage and the covariance proxy ---------------------------------------------------------

def group_advantages(rewards, groups, eps: float, scale: str = "group") -> np.ndarray:
    """Advantage of each row (B,) float64: r - mean of its group, divided by (group std + eps) ('group'),
    by (std of all rows + eps) ('batch') or not at all ('none'). Std with Bessel's correction; a group of
    one row has std 0 (its advantage is 0). `groups` (B,) any hashable labels."""
    if scale not in SCALES:
        raise ValueError(f"scale={scale!r}; valid: {', '.join(SCALES)}")
    r = np.asarray(rewards, dtype=np.float64)
    if r.size == 0:
        return r.copy()
    _, g = np.unique(np.asarray(groups), return_inverse=True)
    g = g.ravel()
    cnt = np.bincount(g).astype(np.float64)
    mean = np.bincount(g, weights=r) / cnt
    adv = r - mean[g]
    if scale == "group":
        ss = np.bincount(g, weights=adv**2)
        std = np.sqrt(np.divide(ss, cnt - 1, out=np.zeros_like(ss), where=cnt > 1))
        adv = adv / (std[g] + eps)
    elif scale == "batch":
        adv = adv / ((r.std(ddof=1) if r.size > 1 else 0.0) + eps)
    return adv


def covariance_proxy(advantage, logprob) -> np.ndarray:
    """cov_i = (A_i - mean A)(l_i - mean l) per token, means over every token given (float64).
    advantage: the token's trajectory advantage; logprob: its chosen-token log-prob (nats)."""
    a = np.asarray(advantage, dtype=np.float64)
    lp = np.asarray(logprob, dtype=np.float64)
    if a.size == 0:
        return a.copy()
    return (a - a.mean()) * (lp - lp.mean())


# ---- the failure detector ------------------------------------------------------------------------

@dataclass(frozen=True)
class FailureThresholds:
    """Fires iff peak >= peak_min, endpoint <= end_max and peak - endpoint >= drop_min (inclusive)."""

    peak_min: float
    end_max: float
    drop_min: float

    @classmethod
    def from_config(cls, cfg) -> "FailureThresholds":
        """From the [failure] settings of a Config (or a {"failure.<name>": value} mapping): the one place they
        are read, built by rcea.records (an unknown [failure] key is an error naming it)."""
        from rcea import records

        section = cfg.section("failure") if hasattr(cfg, "section") else {
            k.partition(".")[2]: v for k, v in cfg.items() if k.startswith("failure.")}
        return records.build(cls, section, where="failure")


def _exact(x) -> Fraction:
    """An accuracy as an exact fraction: an int ratio stays exact; a float is read as the nearest
    fraction with denominator <= 1e9 (a mean over fewer items is recovered exactly, 0.3 -> 3/10)."""
    return x if isinstance(x, Fraction) else Fraction(str(x)).limit_denominator(10**9)


def failure_detector(steps: Sequence[int], accuracy: Sequence, thresholds: FailureThresholds) -> dict:
    """The detector on a raw (unsmoothed) accuracy trace: accuracy[i] at steps[i], in 0..1, as floats or
    Fractions (correct / total). Compared exactly against the decimal thresholds. Also reports the last
    step holding the peak and the onset (first step after it at or below end_max, when fired)."""
    pairs = sorted(zip((int(s) for s in steps), accuracy), key=lambda p: p[0])
    if not pairs:
        return {"fired": False, "n_points": 0}
    acc = [_exact(a) for _, a in pairs]
    peak, end = max(acc), acc[-1]
    last = max(i for i, a in enumerate(acc) if a == peak)
    t = {k: Fraction(str(v)) for k, v in vars(thresholds).items()}
    fired = peak >= t["peak_min"] and end <= t["end_max"] and peak - end >= t["drop_min"]
    onset = next((pairs[i][0] for i in range(last + 1, len(acc)) if acc[i] <= t["end_max"]), None)
    return {"fired": bool(fired), "peak": float(peak), "endpoint": float(end), "drop": float(peak - end),
            "last_argmax_step": pairs[last][0], "final_step": pairs[-1][0],
            "onset_step": onset if fired else None, "n_points": len(acc)}


# ---- binary agreement: judge calibration and the partition audit ----------------------------------

def f1(tp: int, fp: int, fn: int) -> float:
    """2TP / (2TP + FP + FN); a class absent from both label vectors scores 1.0 (our convention)."""
    return 2 * tp / (2 * tp + fp + fn) if (2 * tp + fp + fn) else 1.0


def _confusion(truth: np.ndarray, pred: np.ndarray) -> tuple[int, int, int, int]:
    return (int((truth & pred).sum()), int((~truth & ~pred).sum()), int((~truth & pred).sum()),
            int((truth & ~pred).sum()))


def binary_calibration(truth: Sequence[bool], verdict: Sequence[bool | None]) -> dict[str, float | int]:
    """A judge's verdicts (True = accepts, None = abstains) against labels (True = valid, the positive class).

    coverage = covered / n over all items; every other metric over the covered items:
    accuracy = (TP+TN)/covered, macro_f1 = mean of F1(valid) and F1(invalid),
    accepted_valid_precision = TP/(TP+FP), valid_recall = TP/(TP+FN) (NaN without a denominator).
    """
    n = len(truth)
    if len(verdict) != n:
        raise ValueError(f"{n} labels but {len(verdict)} verdicts")
    covered = [i for i, v in enumerate(verdict) if v is not None and v == v]  # v == v: not NaN
    t = np.array([bool(truth[i]) for i in covered], dtype=bool)
    p = np.array([bool(verdict[i]) for i in covered], dtype=bool)
    tp, tn, fp, fn = _confusion(t, p)
    c = len(covered)
    nan = float("nan")
    return {"n": n, "covered": c, "coverage": c / n if n else nan,
            "accuracy": (tp + tn) / c if c else nan,
            "macro_f1": 0.5 * (f1(tp, fp, fn) + f1(tn, fn, fp)),
            "accepted_valid_precision": tp / (tp + fp) if tp + fp else nan,
            "valid_recall": tp / (tp + fn) if tp + fn else nan,
            "tp": tp, "fn": fn, "fp": fp, "tn": tn}


def pair_labels(modes: Sequence) -> list[int | None]:
    """All i < j pairs of one question's trajectories: 1 = different modes, 0 = same, None = one missing."""
    return [None if a is None or b is None else int(a != b) for a, b in itertools.combinations(modes, 2)]


def macro_f1(ref: Iterable[int], other: Iterable[int]) -> float:
    """Mean of the F1 of class 1 ('different') and class 0 ('same'); symmetric in the two vectors."""
    r = np.array(list(ref), dtype=bool)
    o = np.array(list(other), dtype=bool)
    tp, tn, fp, fn = _confusion(r, o)
    return 0.5 * (f1(tp, fp, fn) + f1(tn, fn, fp))


def different_precision_recall(ref: Iterable[int], pred: Iterable[int]) -> tuple[float, float]:
    """Precision and recall of class 1 ('different') with `ref` as the reference (NaN without a denominator)."""
    r = np.array(list(ref), dtype=bool)
    p = np.array(list(pred), dtype=bool)
    tp, _, fp, fn = _confusion(r, p)
    return (tp / (tp + fp) if tp + fp else float("nan"), tp / (tp + fn) if tp + fn else float("nan"))


GATE_NAMES = ("hh_macro_f1", "auto_macro_f1", "max_gap", "different_precision", "different_recall", "coverage")


def audit_gate_values(cfg=None) -> dict[str, float]:
    """The gates' thresholds: the [audit] settings of configs/base.toml (stated in the paper's §12: 0.85, 0.85,
    0.05, 0.80, 0.80, 0.95; docs/settings.md), or of `cfg` (a Config or an {"audit.<name>": value} mapping)."""
    if cfg is None:
        from rcea.config import base_value

        return {k: float(base_value(f"audit.{k}")) for k in GATE_NAMES}
    return {k: float(cfg[f"audit.{k}"]) for k in GATE_NAMES}


_EDGE = 1e-12  # a value exactly on a threshold (recall 0.80) passes


def audit_gates(hh: float, auto: float, precision: float, recall: float, coverage: float,
                gates: Mapping[str, float] | None = None) -> dict[str, bool]:
    """The five predeclared gates of the partition audit (human-human and automatic macro-F1, their gap,
    'different' precision and recall, coverage); NaN fails every gate it enters. `gates`: the thresholds
    (default `audit_gate_values()`, the [audit] settings)."""
    gates = audit_gate_values() if gates is None else gates
    return {
        "1_hh_macro_f1": hh >= gates["hh_macro_f1"] - _EDGE,
        "2_auto_macro_f1": auto >= gates["auto_macro_f1"] - _EDGE,
        "3_gap": hh - auto <= gates["max_gap"] + _EDGE,
        "4_different_precision_recall": (precision >= gates["different_precision"] - _EDGE
                                         and recall >= gates["different_recall"] - _EDGE),
        "5_coverage": coverage >= gates["coverage"] - _EDGE,
    }
