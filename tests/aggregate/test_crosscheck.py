"""Our statistics against scipy on random inputs (where ours are not scipy calls themselves)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from aggregate import covariance, evals, modes


@pytest.mark.parametrize("seed", range(5))
def test_rank_correlation_regression_against_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=30), 1)  # rounding creates ties
    y = np.round(x * 0.7 + rng.normal(size=30), 1)
    f = covariance.fit_summary(x, y)
    lr = stats.linregress(x, y)
    assert f["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)
    assert (f["pearson"], f["slope"], f["intercept"]) == pytest.approx((lr.rvalue, lr.slope, lr.intercept), abs=1e-12)
    s = evals.spearman_with_p(x[:7], y[:7])
    ref = stats.spearmanr(x[:7], y[:7])
    assert s["spearman"] == pytest.approx(ref.statistic, abs=1e-12)
    assert s["p_t_approx"] == pytest.approx(ref.pvalue, rel=1e-9)


def test_chao_against_hypergeom() -> None:
    labels = np.array(["a"] * 9 + ["b"] * 5 + ["c"] * 2 + ["d"])
    X, n, m = np.array([9, 5, 2, 1]), 17, 10
    k = np.arange(1, m + 1)
    f = stats.hypergeom.pmf(k[:, None], n, X[None, :], m).sum(axis=1)
    assert modes.chao_rarefied_d1(labels, m) == pytest.approx(np.exp((-(k / m) * np.log(k / m) * f).sum()), rel=1e-12)
