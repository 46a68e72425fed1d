"""Worked examples of docs/estimators.md#judge-calibration and #partition-audit, and the majorization
variant of #semantic-modes."""

from __future__ import annotations

import pytest

from aggregate import audit


def _calibration_items() -> tuple[list[bool], list[bool | None]]:
    # TP first and TN last so that abstaining on them removes two correct items
    valid = [True] * 56 + [True] * 2 + [False] * 3 + [False] * 56
    verdict: list[bool | None] = [True] * 56 + [False] * 2 + [True] * 3 + [False] * 56
    return valid, verdict


def test_judge_calibration_worked_example_has_a_unique_confusion_matrix() -> None:
    m = audit.judge_calibration(*_calibration_items())
    assert (m["tp"], m["fn"], m["fp"], m["tn"]) == (56, 2, 3, 56) and m["coverage"] == 1.0
    assert m["accuracy"] == pytest.approx(0.957264957, abs=1e-9)
    assert m["macro_f1"] == pytest.approx(0.957264957, abs=1e-9)
    assert m["precision"] == pytest.approx(0.949152542, abs=1e-9)
    assert m["recall"] == pytest.approx(0.965517241, abs=1e-9)
    valid, verdict = _calibration_items()
    verdict[0] = verdict[-1] = None
    m2 = audit.judge_calibration(valid, verdict)
    assert m2["coverage"] == pytest.approx(0.982905983, abs=1e-9) and m2["accuracy"] == pytest.approx(0.956521739,
                                                                                                      abs=1e-9)


def test_partition_audit_worked_example() -> None:
    qs = [{"A": [0, 0, 1, 1, 2], "B": [0, 0, 1, 1, 1], "adjudicated": [0, 0, 1, 1, 2], "auto": [0, 0, 1, 1, 1]},
          {"A": [0, 0, 1, 1], "B": [0, 0, 1, 1], "adjudicated": [0, 0, 1, 1], "auto": [0, 0, 1, None]}]
    r = audit.partition_audit(qs)
    assert r["human_human"]["n_pairs"] == 16 and r["human_human"]["macro_f1"] == pytest.approx(0.854545455, abs=1e-9)
    a = r["automatic"]
    assert a["n_pairs"] == 13 and a["macro_f1"] == pytest.approx(0.819444444, abs=1e-9)
    assert a["different_precision"] == 1.0 and a["different_recall"] == pytest.approx(0.8)
    assert r["coverage"] == pytest.approx(8 / 9) and r["gap"] == pytest.approx(0.035101, abs=1e-6)
    assert r["gates"] == {"human_human": True, "automatic": False, "gap": True, "different_precision": True,
                          "different_recall": True, "coverage": False}
    assert not r["passed"]
    # symmetric in the two human raters
    swapped = [dict(q, A=q["B"], B=q["A"]) for q in qs]
    assert audit.partition_audit(swapped)["human_human"]["macro_f1"] == pytest.approx(r["human_human"]["macro_f1"])


def test_majorization() -> None:
    assert audit.majorizes([0.8, 0.15, 0.05], [0.5, 0.3, 0.2])
    assert not audit.majorizes([0.5, 0.3, 0.2], [0.8, 0.15, 0.05])
    assert audit.majorizes([1.0], [0.5, 0.5])  # support loss
    assert not audit.majorizes([0.6, 0.1, 0.3], [0.5, 0.45, 0.05])  # crossing partial sums: neither
    assert not audit.majorizes([0.5, 0.45, 0.05], [0.6, 0.1, 0.3])
