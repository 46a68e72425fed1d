"""Worked examples of every estimator in docs/estimators.md, hand-computed independently, plus property tests."""

from __future__ import annotations

import numpy as np
import pytest

from aggregate import bootstrap, covariance, entropy, evals, modes
from rcea.stats import FailureThresholds

TOL = 1e-9


# ---- worked example: per-question entropies and the reward decomposition ------------------------------------------
TOY_R = np.array([1, 1, 1, 0, 0])
TOY_LP = np.array([-10.0, -12, -14, -30, -26])
TOY_TOK = [[0.5, 0.1, 0.3], [0.2, 0.4], [0.6, 0, 0.3, 0.3], [1.2, 0.8, 1.0], [0.9, 1.1]]


def _toy(min_k_r: int) -> entropy.QuestionStats:
    hbar = np.array([np.mean(t) for t in TOY_TOK])
    n_tok = np.array([len(t) for t in TOY_TOK])
    return entropy.question_stats(np.zeros(5, int), TOY_R, TOY_LP, hbar, n_tok, min_k_r=min_k_r)


def test_per_question_entropies_worked_example() -> None:
    q = _toy(2)
    assert q.p_hat[0] == pytest.approx(0.6, abs=TOL)
    assert q.H_seq[0] == pytest.approx(18.4, abs=TOL)
    assert q.H_seq_pos[0] == pytest.approx(11.489174376, abs=TOL)
    assert q.H_seq_neg[0] == pytest.approx(27.083709268, abs=TOL)
    assert q.H_tok[0] == pytest.approx(0.58, abs=TOL)
    assert q.H_tok_pos[0] == pytest.approx(0.30, abs=TOL)
    assert q.H_tok_neg[0] == pytest.approx(1.00, abs=TOL)
    assert q.chain_rule[0] == pytest.approx(1.54, abs=TOL)
    pooled = np.concatenate(TOY_TOK).mean()  # token-pooled mean differs: averaging order matters
    assert pooled == pytest.approx(0.55, abs=TOL) and abs(pooled - q.H_tok[0]) > 0.02


def test_conditional_entropies_below_k_min_are_nan_not_zero() -> None:
    q = _toy(8)
    for v in (q.H_seq_pos, q.H_seq_neg, q.H_tok_pos, q.H_tok_neg):
        assert np.isnan(v[0])
    # residual uses all samples (docs/estimators.md#reward-decomposition)
    assert q.residual[0] == pytest.approx(0.0, abs=TOL)


def test_reward_decomposition_worked_example_closes_exactly() -> None:
    pi = np.array([0.4, 0.2, 0.3, 0.1])
    R = np.array([1, 1, 0, 0])
    H = -(pi * np.log(pi)).sum()
    p = pi[R == 1].sum()
    c1, c0 = pi[R == 1] / p, pi[R == 0] / (1 - p)
    H1, H0 = -(c1 * np.log(c1)).sum(), -(c0 * np.log(c0)).sum()
    assert H == pytest.approx(1.279854226, abs=1e-9)
    assert (H1, H0) == pytest.approx((0.636514168, 0.562335145), abs=1e-9)
    assert entropy.binary_entropy(p) + p * H1 + (1 - p) * H0 == pytest.approx(H, abs=1e-12)


def test_decomposition_residual_property() -> None:
    rng = np.random.default_rng(1)
    g = np.repeat(np.arange(300), 32)
    r = rng.random(g.size) < rng.random(300)[g]
    lp = -rng.gamma(5, 40, g.size)
    q = entropy.question_stats(g, r, lp, rng.random(g.size), min_k_r=8)
    assert np.all(np.abs(q.residual) <= 1e-9 * q.H_seq)
    # all-success / all-failure questions (h_b = 0, one empty stratum dropped)
    g2 = np.repeat([0, 1], 4)
    q2 = entropy.question_stats(g2, np.r_[[1] * 4, [0] * 4], -np.arange(1.0, 9), np.ones(8), min_k_r=1)
    assert np.abs(q2.residual).max() < 1e-12
    # mixture identity for token entropy
    m = (q.K1 >= 8) & (q.K0 >= 8)
    mix = q.p_hat * q.H_tok_pos + (1 - q.p_hat) * q.H_tok_neg
    assert np.allclose(mix[m], q.H_tok[m], atol=1e-12)


# ---- worked example: ratios, sign test, bootstrap ---------------------------------------------------------
HP = np.array([0.30, 0.25, np.nan, 0.40, np.nan, 0.35])
HN = np.array([0.45, np.nan, 0.80, 0.50, 0.90, 0.33])


def test_broad_and_paired_ratios_and_sign_test_worked_example() -> None:
    r = entropy.reward_ratios(HP, HN)
    assert r["coverage_success"] == pytest.approx(4 / 6) and r["coverage_failure"] == pytest.approx(5 / 6)
    assert r["paired_n"] == 3
    assert r["broad_ratio"] == pytest.approx(1.833846154, abs=TOL)
    assert r["paired_ratio"] == pytest.approx(1.219047619, abs=TOL)
    assert r["paired_mean_of_ratios"] == pytest.approx(1.230952381, abs=TOL)
    s = entropy.sign_test(HP, HN)
    assert (s["sign_wins"], s["sign_n"], s["sign_test_p"]) == (2, 3, pytest.approx(0.5))


@pytest.mark.parametrize("wins,n,p", [(37, 52, 0.0015926), (33, 45, 0.0012295), (40, 57, 0.0016008),
                                      (38, 52, 0.0005976), (21, 42, 0.5611928), (29, 44, 0.0243834),
                                      (35, 51, 0.0054868), (23, 40, 0.2147953), (45, 56, 2.69e-6),
                                      (43, 56, 3.67e-5), (47, 57, 3.76e-7)])
def test_sign_test_reproduces_table_a5(wins: int, n: int, p: float) -> None:
    hp = np.zeros(n)
    hn = np.r_[np.ones(wins), -np.ones(n - wins)]
    assert entropy.sign_test(hp, hn)["sign_test_p"] == pytest.approx(p, rel=5e-3)


def test_sign_test_drops_ties() -> None:
    s = entropy.sign_test(np.array([1.0, 1, 1, 1]), np.array([2.0, 2, 1, 0]))
    assert (s["sign_wins"], s["sign_n"], s["sign_ties"]) == (2, 3, 1)


def test_ratios_invariant_to_question_order() -> None:
    rng = np.random.default_rng(3)
    hp = np.where(rng.random(200) < 0.5, rng.random(200), np.nan)
    hn = np.where(rng.random(200) < 0.8, rng.random(200) + 0.3, np.nan)
    perm = rng.permutation(200)
    a, b = entropy.reward_ratios(hp, hn), entropy.reward_ratios(hp[perm], hn[perm])
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-12, nan_ok=True)
    assert entropy.sign_test(hp, hn) == entropy.sign_test(hp[perm], hn[perm])


BS_S = [[.30, .28, .35, .31], [.40, .42, .38], [.35, .37, .30], [.22, .25, .27, .20]]
BS_F = [[.50, .44, .41], [.52, .47, .55, .49], [.33, .39, .31], [.29, .35, .26]]


def test_naive_bootstrap_reproduces_the_worked_interval_exactly() -> None:
    point = np.mean([np.mean(f) for f in BS_F]) / np.mean([np.mean(s) for s in BS_S])
    assert point == pytest.approx(1.245784695, abs=1e-9)
    reps = bootstrap.paired_ratio_bootstrap_naive(BS_S, BS_F, 10_000, np.random.default_rng(2027))
    assert bootstrap.percentile_ci(reps) == pytest.approx((1.061963, 1.418359), abs=1e-6)


def test_vectorised_bootstrap_matches_naive_distribution() -> None:
    fast = bootstrap.paired_ratio_bootstrap(BS_S, BS_F, 10_000, np.random.default_rng(2027))
    lo, hi = bootstrap.percentile_ci(fast)
    assert lo == pytest.approx(1.061963, abs=0.01) and hi == pytest.approx(1.418359, abs=0.01)
    assert fast.mean() == pytest.approx(1.2458, abs=0.01)
    # deterministic for a seed, different for another
    again = bootstrap.paired_ratio_bootstrap(BS_S, BS_F, 10_000, np.random.default_rng(2027))
    assert np.array_equal(fast, again)


def test_bootstrap_holds_strata_sizes_degenerate_questions() -> None:
    # constant values inside each stratum and failure = 1.5 x success per question: every replicate is 1.5
    s = [np.full(8, 0.2), np.full(9, 0.4)]
    f = [np.full(10, 0.3), np.full(8, 0.6)]
    reps = bootstrap.paired_ratio_bootstrap(s, f, 500, np.random.default_rng(0))
    assert np.allclose(reps, 1.5, rtol=1e-6)
    with pytest.raises(ValueError, match="at least one success"):
        bootstrap.paired_ratio_bootstrap([np.array([])], [np.array([1.0])], 10, np.random.default_rng(0))


# ---- worked example: modes ---------------------------------------------------------------------------------
BASE = np.array(["m0"] * 5 + ["m1"] * 3 + ["m2"] * 2 + ["m3"] * 2)
TRAINED = np.array(["m0"] * 16 + ["m1"] * 3 + ["m2"])


def test_effective_mode_count_and_rarefaction_worked_example() -> None:
    assert modes.effective_mode_count(BASE) == pytest.approx(3.701008638, abs=TOL)
    assert modes.effective_mode_count(TRAINED) == pytest.approx(1.845720013, abs=TOL)
    v, draws = modes.rarefied_d1(TRAINED, 12, np.random.default_rng([2030, 7, 3]), 100)
    assert v == pytest.approx(1.746556617, abs=TOL) and draws.shape == (100, 12)
    vb, none = modes.rarefied_d1(BASE, 12, np.random.default_rng(0), 100)
    assert none is None and vb == pytest.approx(3.701008638, abs=TOL)
    assert v / vb == pytest.approx(0.471913683, abs=TOL)
    assert modes.chao_rarefied_d1(TRAINED, 12) == pytest.approx(1.760294084, abs=TOL)


def test_retention_and_question_bootstrap_worked_example() -> None:
    rho = np.array([0.4719137, 1.0, 0.8, 1.1, 0.9])
    assert 100 * rho.mean() == pytest.approx(85.438274, abs=1e-6)
    reps = bootstrap.question_bootstrap_mean(rho, 10_000, np.random.default_rng(2027))
    assert bootstrap.percentile_ci(reps) == pytest.approx((64.314821, 102.0), abs=1e-6)


def test_retention_pairs_keyed_and_identity() -> None:
    rng = np.random.default_rng(5)
    labels = {f"q{i}": rng.choice(["a", "b", "c"], size=rng.integers(8, 30)) for i in range(20)}
    res = modes.retention_pairs(labels, labels, checkpoint_key=11, base_key=11, m_min=8)
    assert len(res["rho"]) == 20 and np.allclose(res["rho"], 1.0)  # identical draws -> 100%
    # order independence: reversed insertion order gives identical rho
    rev = dict(reversed(list(labels.items())))
    shifted = {k: np.roll(v, 0) for k, v in labels.items()}
    a = modes.retention_pairs(labels, shifted, 3, 1)
    b = modes.retention_pairs(rev, dict(reversed(list(shifted.items()))), 3, 1)
    assert np.array_equal(a["rho"], b["rho"])
    small = modes.retention_pairs({"x": np.array(["a"] * 7)}, {"x": np.array(["a"] * 20)}, 1, 2)
    assert len(small["rho"]) == 0  # m = 7 < m_min


# ---- worked example: covariance prediction and fit ----------------------------------------------------------
def test_covariance_prediction_worked_example() -> None:
    z = np.array([2, 1, 0.5, -1, -2.0])
    dz = np.array([0.05, -0.02, 0.01, 0, -0.03])
    assert covariance.entropy_from_logits(z) == pytest.approx(1.063929368, abs=TOL)
    pred, obs = covariance.covariance_prediction(z, z + dz)
    assert pred == pytest.approx(-0.018639956, abs=TOL) and obs == pytest.approx(-0.018960954, abs=TOL)
    assert covariance.covariance_prediction(z, z + dz + 3)[0] == pytest.approx(pred, abs=1e-14)
    # gradient -pi_b (l_b + H) sums to zero and matches the hand-computed values
    lp = z - np.log(np.exp(z).sum())
    grad = -np.exp(lp) * (lp + covariance.entropy_from_logits(z))
    assert grad == pytest.approx([-0.336111, 0.098084, 0.126735, 0.073291, 0.038002], abs=1e-6)
    assert abs(grad.sum()) < 1e-15


def test_covariance_fit_statistics_worked_example() -> None:
    f = covariance.fit_summary([-.020, -.012, -.030, .004, -.008, -.015], [-.018, -.014, -.027, -.001, -.009, -.016])
    assert f["sign_agreement"] == pytest.approx(5 / 6)
    assert f["spearman"] == pytest.approx(1.0)
    assert f["pearson"] == pytest.approx(0.995116534, abs=TOL)
    assert f["slope"] == pytest.approx(0.760488177, abs=TOL)
    assert f["intercept"] == pytest.approx(-0.003900076, abs=TOL)
    assert f["r2"] == pytest.approx(0.990256917, abs=TOL)
    assert f["r2_identity"] == pytest.approx(0.885067479, abs=TOL)
    assert f["median_abs_error"] == pytest.approx(0.002, abs=TOL)
    assert f["median_rel_error"] == pytest.approx(0.111111111, abs=TOL)


# ---- worked example: q99 share and rank budget ---------------------------------------------------------------
def test_q99_share_keeps_ties_worked_example() -> None:
    F = np.r_[[-0.2] * 59, [0.1] * 20, [0.5] * 120, [2.0]]
    for method in ("linear", "higher", "inverted_cdf"):
        s = covariance.q99_share(F, 0.99, method)
        assert s["cutoff"] == 0.5 and s["selected_fraction"] == pytest.approx(0.605)
        assert s["share"] == pytest.approx(0.96875)
    expect = {0.01: (2, 0.0390625), 0.025: (5, 0.0625), 0.05: (10, 0.1015625)}
    for b, (k, share) in expect.items():
        r = covariance.rank_budget_share(F, b)
        assert r["k"] == k and r["share"] == pytest.approx(share, abs=TOL)


def test_q99_cut_under_each_quantile_method() -> None:
    S = np.arange(1, 101.0)
    lin = covariance.q99_share(S, 0.99, "linear")
    assert lin["cutoff"] == pytest.approx(99.01) and lin["selected_fraction"] == 0.01
    assert lin["share"] == pytest.approx(0.0198020, abs=1e-7)
    assert covariance.q99_share(S, 0.99, "higher")["selected_fraction"] == 0.01
    inv = covariance.q99_share(S, 0.99, "inverted_cdf")
    assert inv["cutoff"] == 99 and inv["share"] == pytest.approx(0.0394059, abs=1e-7)


def test_covariance_proxy_end_to_end_worked_example() -> None:
    lps = [[-.1, -.5], [-.2, -1.5, -.3], [-2, -.7, -.1, -.4], [-.4, -3, -.2, -.6, -.1],
           [0, 0, -.9], [0, -.2, 0], [-1.2, 0], [0, 0, -.6, 0]]
    r = np.array([1, 1, 0, 0, 0, 0, 0, 0])
    A = covariance.grpo_advantage(r, np.array([0, 0, 0, 0, 1, 1, 1, 1]), 1e-4)
    assert A[:4] == pytest.approx([0.865875, 0.865875, -0.865875, -0.865875], abs=1e-6) and np.all(A[4:] == 0)
    lens = [len(x) for x in lps]
    At, rt, l = np.repeat(A, lens), np.repeat(r, lens), np.concatenate(lps)
    assert l.size == 26 and At.mean() == pytest.approx(-0.133211605, abs=TOL) and l.mean() == pytest.approx(-0.5)
    cov = covariance.covariance_proxy(At, l)
    zero_q2 = (rt == 0) & (l == 0) & (At == 0)
    assert zero_q2.sum() == 8 and np.allclose(cov[zero_q2], 0.066606, atol=1e-6)
    assert covariance.q99_share(cov[rt == 1], 0.99, "linear")["share"] == pytest.approx(0.444444, abs=1e-6)
    assert covariance.q99_share(cov[rt == 0], 0.99, "linear")["share"] == pytest.approx(0.491950, abs=1e-6)
    rb = covariance.rank_budget_share(cov[rt == 0], 0.25)
    assert rb["k"] == 5 and rb["share"] == pytest.approx(0.864043, abs=1e-6)


def test_q99_no_positive_mass_is_nan() -> None:
    assert np.isnan(covariance.q99_share(-np.ones(10), 0.99, "linear")["share"])


# ---- worked examples: failure detector, pass@k, smoothing, macro average ------------------------------
FT = FailureThresholds(0.30, 0.05, 0.30)  # the paper's: peak >= 30%, endpoint <= 5%, drop >= 30 points


def test_failure_detector_worked_examples() -> None:
    f = evals.failure_detector([0, 1000, 2400, 3600, 4000, 8000], [180, 383, 383, 304, 1, 1], 500, FT)
    assert f["fired"] and f["peak"] == pytest.approx(0.766) and f["endpoint"] == pytest.approx(0.002)
    assert f["last_argmax_step"] == 2400 and f["onset_step"] == 4000
    assert not evals.failure_detector([0, 1, 2, 3], [180, 300, 350, 359], 500, FT)["fired"]
    assert evals.failure_detector([0, 1], [175, 25], 500, FT)["fired"]  # exact boundary
    assert not evals.failure_detector([0, 1], [170, 25], 500, FT)["fired"]


@pytest.mark.parametrize("c,expected", [(0, (0, 0, 0)), (1, (0.015625, 0.125, 1)), (5, (0.078125, 0.4990084611, 1)),
                                        (32, (0.5, 0.9976236089, 1)), (63, (0.984375, 1, 1)), (64, (1, 1, 1))])
def test_unbiased_pass_at_k_worked_examples(c: int, expected: tuple) -> None:
    got = [evals.pass_at_k([64], [c], k)[0] for k in (1, 8, 64)]
    assert got == pytest.approx(list(expected), abs=1e-9)


def test_pass_at_k_monotone_in_k_and_nan_when_k_exceeds_n() -> None:
    rng = np.random.default_rng(0)
    n = np.full(300, 64)
    c = rng.integers(0, 65, 300)
    vals = np.stack([evals.pass_at_k(n, c, k) for k in range(1, 65)])
    assert np.all(np.diff(vals, axis=0) >= -1e-15)
    assert np.isnan(evals.pass_at_k([4], [1], 8)[0])


def test_smoothing_and_progress_grid_worked_example() -> None:
    y = [.9, .7, .8, .4, .5, .3, .35]
    assert evals.centered_moving_average(y, 5) == pytest.approx([0.8, 0.7, 0.66, 0.54, 0.47, 0.3875, 0.383333],
                                                                abs=1e-6)
    assert evals.debiased_ema(y, 0.6) == pytest.approx([0.9, 0.775, 0.787755, 0.609559, 0.562040, 0.452095, 0.410081],
                                                       abs=1e-6)
    got = evals.interpolate_on_progress([0, 100, 350, 500], [1, .8, .5, .45], 4000, np.array([0.05, 0.10]))
    assert got == pytest.approx([0.68, 0.483333], abs=1e-6)


def test_macro_average_and_spearman_worked_example() -> None:
    assert evals.macro_average([100 * 4 / 30, 100 / 30, 48.6, 35, 15]) == pytest.approx(23.0533, abs=1e-4)
    assert round(evals.macro_average([13.3, 3.3, 48.6, 35.0, 15.0]), 2) == 23.04  # rounded cells differ
    s3 = evals.spearman_with_p([94.2, 91.1, 96.0, 94.8, 99.9, 83.7], [93.0, 91.2, 93.2, 93.6, 93.2, 85.6])
    assert s3["spearman"] == pytest.approx(0.811679, abs=1e-6)
    assert s3["p_t_approx"] == pytest.approx(0.04986, abs=1e-5) and s3["p_exact"] == pytest.approx(0.07222, abs=1e-5)
    s7 = evals.spearman_with_p([89.6, 88.8, 92.3, 96.2, 85.9], [93.0, 92.6, 94.0, 94.8, 89.6])
    assert s7["spearman"] == pytest.approx(1.0) and s7["p_exact"] == pytest.approx(2 / 120)
    assert np.isnan(s7["p_t_approx"])


def test_table_a7_sign_agreement_fractions() -> None:
    for k, n, pct in ((42, 44, 95.45), (23, 24, 95.83), (19, 20, 95.0)):
        P = np.r_[-np.ones(k), np.ones(n - k)]
        O = -np.ones(n)
        assert round(100 * covariance.fit_summary(P, O)["sign_agreement"], 2) == pct
