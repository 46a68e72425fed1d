"""Chunked full-vocabulary entropy and log-probs against an independent fp64 log_softmax reference."""

import math

import numpy as np
import pytest
import torch

from infer.entropy import (chunked_stats_from_hidden, chunked_stats_from_logits, covariance_prediction,
                           naive_stats_from_logits)


def _reference(logits: np.ndarray, targets: np.ndarray):
    """fp64 numpy: log_softmax by hand, entropy = -sum p log p."""
    z = logits.astype(np.float64)
    logp = z - z.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    return logp[np.arange(len(targets)), targets], -(np.exp(logp) * logp).sum(-1)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_chunked_matches_reference_on_random_logits(chunk):
    g = torch.Generator().manual_seed(0)
    logits = 4.0 * torch.randn(53, 5003, generator=g)          # (T, V)
    logits[3] += 40.0 * (torch.arange(5003) == 17)             # one almost-deterministic position
    targets = torch.randint(0, 5003, (53,), generator=g)
    lp, ent = chunked_stats_from_logits(logits, targets, chunk=chunk)
    ref_lp, ref_ent = _reference(logits.numpy(), targets.numpy())
    np.testing.assert_allclose(lp.numpy(), ref_lp, atol=1e-5, rtol=0)
    np.testing.assert_allclose(ent.numpy(), ref_ent, atol=1e-5, rtol=0)
    assert ent[3] < 1e-3 and lp.dtype == torch.float64


def test_chunked_from_hidden_matches_naive_and_never_builds_full_logits(monkeypatch):
    g = torch.Generator().manual_seed(1)
    T, H, V, chunk = 300, 32, 2000, 64
    hidden, weight = torch.randn(T, H, generator=g), torch.randn(V, H, generator=g) / 4
    targets = torch.randint(0, V, (T,), generator=g)
    ref_lp, ref_ent = _reference((hidden.double() @ weight.double().T).numpy(), targets.numpy())

    shapes = []
    linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda *a: shapes.append(linear(*a).shape) or linear(*a))
    lp, ent = chunked_stats_from_hidden(hidden, weight, targets, chunk=chunk)
    assert shapes and max(s[0] for s in shapes) == chunk       # never more than `chunk` rows of (T, V)
    np.testing.assert_allclose(lp.numpy(), ref_lp, atol=1e-4)
    np.testing.assert_allclose(ent.numpy(), ref_ent, atol=1e-4)


def test_naive_reference_agrees_and_bounds_hold():
    V = 4096
    logits = torch.zeros(3, V)
    logits[1, 5] = 1e4                                          # one-hot
    logits[2] = torch.linspace(-3, 3, V)
    targets = torch.tensor([0, 5, 1])
    lp, ent = chunked_stats_from_logits(logits, targets, chunk=2)
    assert ent[0].item() == pytest.approx(math.log(V), abs=1e-9)   # uniform: log V exactly
    assert lp[0].item() == pytest.approx(-math.log(V), abs=1e-9)
    assert ent[1].item() == 0.0 and lp[1].item() == 0.0
    assert (ent >= 0).all() and (ent <= math.log(V) + 1e-9).all() and (lp <= 0).all()
    nlp, nent = naive_stats_from_logits(logits, targets)
    np.testing.assert_allclose(nent.numpy(), ent.numpy(), atol=1e-5)
    np.testing.assert_allclose(nlp.numpy(), lp.numpy(), atol=1e-5)


def test_covariance_prediction_worked_example():
    z = torch.tensor([[2.0, 1.0, 0.5, -1.0, -2.0]], dtype=torch.float64)
    dz = torch.tensor([[0.05, -0.02, 0.01, 0.0, -0.03]], dtype=torch.float64)
    pred, obs = covariance_prediction(z, z + dz)
    assert pred.item() == pytest.approx(-0.018639956, abs=1e-9)
    assert obs.item() == pytest.approx(-0.018960954, abs=1e-9)
    pred_shift, _ = covariance_prediction(z, z + dz + 3.0)        # softmax shift invariance
    assert pred_shift.item() == pytest.approx(pred.item(), abs=1e-12)
    _, ent = chunked_stats_from_logits(z, torch.tensor([0]))
    assert ent.item() == pytest.approx(1.063929368, abs=1e-7)   # fp32 logits, fp64 sums


def test_covariance_prediction_is_first_order_accurate():
    g = torch.Generator().manual_seed(3)
    z = 3 * torch.randn(8, 1000, generator=g)
    dz = torch.randn(8, 1000, generator=g)
    for eps in (1e-2, 1e-3):
        pred, obs = covariance_prediction(z, z + eps * dz)
        assert (pred - obs).abs().max() < 10 * eps ** 2 * obs.abs().max() / eps
