"""Partition-audit metrics and gates against the worked example of docs/estimators.md#partition-audit."""

import itertools

import pytest

from infer.audit.metrics import audit_report
from rcea.stats import different_precision_recall as different_pr, macro_f1, pair_labels


def audit_worked_example():
    qs = {"q1": dict(A=[0, 0, 1, 1, 2], B=[0, 0, 1, 1, 1], auto=[0, 0, 1, 1, 1]),
          "q2": dict(A=[0, 0, 1, 1], B=[0, 0, 1, 1], auto=[0, 0, 1, None])}
    pairs, modes = [], {}
    for q, d in qs.items():
        ids = [f"{q}-{i}" for i in range(len(d["A"]))]
        for i, t in enumerate(ids):
            modes[t] = None if d["auto"][i] is None else f"m{d['auto'][i]}"
        for (i, a), (j, b) in itertools.combinations(enumerate(ids), 2):
            ha, hb = int(d["A"][i] != d["A"][j]), int(d["B"][i] != d["B"][j])
            # adjudicated = A: recorded only where the raters disagree
            pairs.append({"a": a, "b": b, "human_a": ha, "human_b": hb, "adjudicated": ha if ha != hb else None})
    return pairs, modes


def test_audit_worked_example_numbers_and_gates():
    pairs, modes = audit_worked_example()
    r = audit_report(pairs, modes)
    assert r["pairs"] == 16 and r["pairs_both_raters"] == 16
    assert r["hh_macro_f1"] == pytest.approx(0.854545455, abs=1e-9)
    assert r["pairs_scored_auto"] == 13
    assert r["auto_macro_f1"] == pytest.approx(0.819444444, abs=1e-9)
    assert r["different_precision"] == pytest.approx(1.0) and r["different_recall"] == pytest.approx(0.8)
    assert r["coverage"] == pytest.approx(8 / 9)
    assert r["gap"] == pytest.approx(0.854545455 - 0.819444444, abs=1e-9)
    assert r["gates"] == {"1_hh_macro_f1": True, "2_auto_macro_f1": False, "3_gap": True,
                          "4_different_precision_recall": True, "5_coverage": False}
    assert r["all_gates_pass"] is False
    assert r["pre_adjudication"]["auto_vs_B"] == pytest.approx(1.0)  # auto = B on every scored pair


def test_pending_adjudication_is_excluded_and_counted():
    pairs, modes = audit_worked_example()
    for p in pairs:
        p["adjudicated"] = None
    r = audit_report(pairs, modes)
    assert r["pairs_pending_adjudication"] == 2 and r["pairs_adjudicated"] == 14


def test_helpers():
    assert pair_labels(["x", "x", "y", None]) == [0, 1, None, 1, None, None]
    assert macro_f1([0, 0], [0, 0]) == 1.0  # class "different" absent from both: F1 1.0
    assert macro_f1([1, 0, 1, 0], [0, 1, 0, 1]) == 0.0
    p, r = different_pr([1, 1, 0, 0], [1, 0, 1, 0])
    assert (p, r) == (0.5, 0.5)
