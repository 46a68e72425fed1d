"""rcea.stats against hand-computed numbers (the one implementation every role calls)."""

from fractions import Fraction

import numpy as np
import pytest

from rcea import stats
from rcea.config import load_config

T = stats.FailureThresholds(0.30, 0.05, 0.30)


def test_group_advantages_by_hand():
    # group a: rewards 1, 0, 0 -> mean 1/3, Bessel std sqrt(1/3); group b: all equal -> 0; group c: one row -> 0
    adv = stats.group_advantages([1, 0, 0, 1, 1, 0], ["a", "a", "a", "b", "b", "c"], 1e-4)
    s = np.sqrt(1 / 3)
    assert adv == pytest.approx([(2 / 3) / (s + 1e-4), (-1 / 3) / (s + 1e-4), (-1 / 3) / (s + 1e-4), 0, 0, 0])
    assert stats.group_advantages([1, 0, 0, 1], [0, 0, 1, 1], 1e-4, scale="none") == pytest.approx([0.5, -0.5, -0.5, 0.5])
    batch = stats.group_advantages([1, 0, 0, 1], [0, 0, 1, 1], 1e-4, scale="batch")
    assert batch == pytest.approx(np.array([0.5, -0.5, -0.5, 0.5]) / (np.sqrt(1 / 3) + 1e-4))
    with pytest.raises(ValueError, match="valid: group, batch, none"):
        stats.group_advantages([1], [0], 1e-4, scale="std")


def test_covariance_proxy_by_hand():
    cov = stats.covariance_proxy([1.0, 1.0, -1.0, -1.0], [-0.5, -1.5, -2.0, -4.0])  # means 0 and -2
    assert cov == pytest.approx([1.5, 0.5, 0.0, 2.0])
    assert stats.covariance_proxy([], []).size == 0


def test_failure_detector_inclusive_thresholds_on_floats_and_fractions():
    assert stats.failure_detector([0, 1, 2], [0.1, 0.35, 0.05], T)["fired"]  # drop 0.35 - 0.05 = 0.30 exactly
    assert stats.failure_detector([0, 1], [0.30, 0.0], T)["fired"]
    assert not stats.failure_detector([0, 1], [0.29, 0.0], T)["fired"]
    assert not stats.failure_detector([0, 1], [0.5, 0.06], T)["fired"]
    assert not stats.failure_detector([1, 0], [0.4, 0.0], T)["fired"]  # sorted by step: a rise, no collapse
    f = stats.failure_detector([0, 10, 20, 30], [Fraction(175, 500), Fraction(175, 500), 0.2, Fraction(25, 500)], T)
    assert f["fired"] and f["last_argmax_step"] == 10 and f["onset_step"] == 30 and f["drop"] == pytest.approx(0.3)
    assert stats.failure_detector([], [], T) == {"fired": False, "n_points": 0}


def test_failure_thresholds_come_from_the_configuration():
    cfg = load_config("tiny", overrides=["failure.peak_min=0.5"])
    t = stats.FailureThresholds.from_config(cfg)
    assert (t.peak_min, t.end_max, t.drop_min) == (0.5, 0.05, 0.30)
    assert not stats.failure_detector([0, 1], [0.4, 0.0], t)["fired"]


def test_binary_calibration_oracle():
    # TP = 56, FN = 2, FP = 3, TN = 56 (117 items)
    y = [True] * 58 + [False] * 59
    p = [True] * 56 + [False] * 2 + [True] * 3 + [False] * 56
    m = stats.binary_calibration(y, p)
    assert (m["tp"], m["fn"], m["fp"], m["tn"], m["n"], m["covered"]) == (56, 2, 3, 56, 117, 117)
    assert m["accuracy"] == pytest.approx(112 / 117)
    f_valid, f_invalid = 112 / (112 + 5), 112 / (112 + 5)
    assert m["macro_f1"] == pytest.approx((f_valid + f_invalid) / 2)
    assert m["accepted_valid_precision"] == pytest.approx(56 / 59) and m["valid_recall"] == pytest.approx(56 / 58)
    p[0] = p[-1] = None  # abstentions: out of every metric but coverage
    m = stats.binary_calibration(y, p)
    assert m["coverage"] == pytest.approx(115 / 117) and m["accuracy"] == pytest.approx(110 / 115)
    with pytest.raises(ValueError, match="117 labels but 3 verdicts"):
        stats.binary_calibration(y, p[:3])


def test_pair_metrics_and_gates():
    assert stats.pair_labels(["x", "x", "y", None]) == [0, 1, None, 1, None, None]
    assert stats.macro_f1([1, 0, 1, 0], [1, 0, 0, 0]) == pytest.approx((2 / 3 + 0.8) / 2)
    assert stats.different_precision_recall([1, 1, 0, 0], [1, 0, 1, 0]) == (0.5, 0.5)
    gates = stats.audit_gates(0.9, 0.85, 0.8, 0.8, 0.95)
    assert all(gates.values())  # every value exactly on its threshold passes
    assert not stats.audit_gates(0.95, 0.85, 0.8, 0.8, 0.95)["3_gap"]  # gap 0.10 > 0.05


def test_infer_probe_proxy_uses_question_groups_and_pooled_means():
    from infer.proxy import chosen_token_cov_proxy

    # question a: rewards 1, 0 -> A = +-(0.5 / (sqrt(0.5) + 1e-4)); question b: one sample -> A = 0
    a = 0.5 / (np.sqrt(0.5) + 1e-4)
    out = chosen_token_cov_proxy(["a", "a", "b"], [1, 0, 1], [np.array([-1.0, -2.0]), np.array([-3.0]), np.array([-6.0])], 1e-4)
    a_tok, l_tok = np.array([a, a, -a, 0.0]), np.array([-1.0, -2.0, -3.0, -6.0])
    expected = (a_tok - a_tok.mean()) * (l_tok - l_tok.mean())
    assert np.concatenate(out) == pytest.approx(expected) and [len(x) for x in out] == [2, 1, 1]
