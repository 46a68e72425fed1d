"""Objectives against the hand-computed worked example (docs/objectives.md#worked-example), edge cases
and equivalences."""

import math

import pytest
import torch

from tests.train.batches import oracle_batch
from train.objectives import NAMES, SettingsError, batch_loss, default_settings, get
from train.objectives.archer import high_entropy_tokens
from train.objectives.clip_cov import centred_cov
from train.objectives.common import group_advantages, overlong_penalty
from train.objectives.ep_grpo import bucket_zscores, progress_buckets
from train.objectives.gtpo import conflict_weights, mean_completion_entropy

ORACLES = [  # (name, settings, loss), computed independently with numpy
    ("grpo", {}, -0.0175781),
    ("dapo", {}, -0.1881964),
    ("dapo", {"dynamic_sampling": False}, -0.0855438),
    ("clip_cov", {"clip_cov_lb": 0.1, "clip_cov_ub": 5.0, "clip_cov_ratio": 0.5}, -0.0128332),
    ("clip_cov", {}, -0.0804019),
    ("kl_cov", {"ppo_kl_coef": 0.5, "kl_cov_ratio": 0.2}, -0.0779143),
    ("gtpo", {}, -0.1685493),
    ("gtpo", {"loss_type": "gtpo_code"}, -0.6741972),
    ("gtpo", {"clip_ratio": False}, -0.1797773),
    ("ep_grpo", {}, -0.0573999),
    ("archer", {}, -0.0887042),
]


@pytest.mark.parametrize("name,settings,expected", ORACLES)
def test_worked_example_losses(oracle, name, settings, expected):
    loss, _ = batch_loss(name, oracle, **settings)
    assert float(loss) == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("name,settings", [(n, s) for n, s, _ in ORACLES])
def test_each_objective_reports_exactly_its_declared_metrics(oracle, name, settings):
    """Issue 23 item 6: an objective owns its metric names; nothing pads another objective's (KL-Cov has no clip,
    so no clip ratios; GRPO selects no covariance tokens)."""
    _, metrics = batch_loss(name, oracle, **settings)
    assert set(metrics) == set(get(name).metrics)
    has_clip = name != "kl_cov"
    assert ("clip_ratio/low" in metrics) == has_clip and ("cov_selected_frac" in metrics) == (name in ("kl_cov", "clip_cov"))


def test_an_undeclared_metric_is_refused():
    with pytest.raises(ValueError, match=r"kl_cov reports undeclared metrics \['clip_ratio/low'\]"):
        get("kl_cov").check_metrics({"cov_selected_frac": 0.1, "clip_ratio/low": 0.0})


def test_registry_lists_valid_names():
    assert set(NAMES) == {"grpo", "dapo", "clip_cov", "kl_cov", "ep_grpo", "gtpo", "archer"}
    with pytest.raises(KeyError, match="valid: grpo, dapo"):
        get("ppo")
    with pytest.raises(SettingsError, match="no setting 'eps'; valid: loss_type, scale_rewards, adv_eps, epsilon"):
        batch_loss("grpo", oracle_batch(), eps=0.1)
    with pytest.raises(SettingsError, match="gtpo.loss_type='seq'; valid: grpo, dapo, gtpo_code"):
        batch_loss("gtpo", oracle_batch(), loss_type="seq")
    with pytest.raises(SettingsError, match="dapo.dynamic_sampling must be bool, got 1"):
        batch_loss("dapo", oracle_batch(), dynamic_sampling=1)
    partial = {k: v for k, v in default_settings("kl_cov").as_dict().items() if k != "kl_cov_ratio"}
    with pytest.raises(SettingsError, match=r"kl_cov settings lack kl_cov_ratio \(configs/objectives.toml \[kl_cov\]\)"):
        get("kl_cov").settings.from_values("kl_cov", partial)


def test_reproduction_defaults_match_decisions():
    assert default_settings("dapo").epsilon_high == 0.28
    assert default_settings("kl_cov").kl_cov_ratio == 2e-3 and default_settings("kl_cov").ppo_kl_coef == 0.5
    assert default_settings("clip_cov").clip_cov_ratio == 2e-4
    ep = default_settings("ep_grpo")
    assert (ep.num_buckets, ep.gate_coef, ep.progress_weight, ep.process_scale) == (10, 3.0, 0.2, 1.0)
    assert default_settings("gtpo").ent_threshold == pytest.approx(math.log(2))
    ar = default_settings("archer")
    assert (ar.epsilon, ar.epsilon_high_entropy, ar.kl_loss_coef) == (0.2, 0.5, 0.001)


def test_trl_advantages_and_overlong(oracle):
    adv = group_advantages(oracle["rewards"], oracle["group_ids"], "group", 1e-4)
    assert adv.tolist() == pytest.approx([0.707007, -0.707007, 0, 0], abs=1e-6)
    pen = overlong_penalty(torch.tensor([700.0, 800, 900, 1000, 1100]), 1000, 0.2, 1.0)
    assert pen.tolist() == pytest.approx([0, 0, -0.5, -1, -1])


def test_gtpo_intermediates(oracle):
    m = oracle["mask"]
    h = ((oracle["entropy"] * m).sum(-1) / m.sum(-1)).tolist()
    assert h == pytest.approx([0.6, 0.8, 0.4833333, 0.6333333], abs=1e-6)
    assert mean_completion_entropy(oracle["entropy"], m) == pytest.approx(0.6291667, abs=1e-6)
    adv = group_advantages(oracle["rewards"], oracle["group_ids"], "none", 1e-4)
    lam, n_conf = conflict_weights(oracle["completion_ids"], m, adv, oracle["group_ids"], 2.0)
    assert lam[0].tolist() == [2, 1, 2] and lam[1].tolist() == [0, 0, 0]
    assert lam[2].tolist() == [1, 1, 1] and n_conf.tolist() == [1, 1, 0, 0]
    _, metrics = batch_loss("gtpo", oracle)
    assert metrics["gtpo/delta_mean"] == 0.75  # delta = [1, 0, 1, 1]


def test_gtpo_prefix_and_suffix_overlap_gives_four():
    ids = torch.tensor([[3, 3], [3, 3]])
    lam, _ = conflict_weights(ids, torch.ones(2, 2), torch.tensor([1.0, -1.0]), torch.tensor([0, 0]), 2.0)
    assert lam[0].tolist() == [4, 4] and lam[1].tolist() == [0, 0]


def test_archer_intermediates(oracle):
    high, tau = high_entropy_tokens(oracle["entropy"], oracle["mask"], 0.8)
    assert tau.tolist() == pytest.approx([0.98, 1.04, 0.76, 0.96], abs=1e-6)
    assert sorted(map(tuple, high.nonzero().tolist())) == [(0, 1), (1, 0), (2, 1), (3, 2)]


def test_ep_grpo_intermediates(oracle):
    b = progress_buckets(oracle["mask"], 10)   # floor(10 t / L): L = 3 -> 0, 3, 6; L = 2 -> 0, 5 (pad: 9)
    assert b.tolist() == [[0, 3, 6], [0, 5, 9], [0, 3, 6], [0, 3, 6]]
    s = oracle["old_logp"] - oracle["ref_logp"]
    z = bucket_zscores(s, b, oracle["mask"], oracle["group_ids"], 10, 1e-4)
    assert float(z[2, 2]) == pytest.approx(-0.999, abs=1e-3) and float(z[3, 2]) == pytest.approx(0.999, abs=1e-3)
    prep = get("ep_grpo").prepare({**oracle}, default_settings("ep_grpo"))
    assert float(prep["advantages"][2, 2]) == pytest.approx(-0.1998, abs=1e-4)
    assert float(prep["advantages"][3, 2]) == pytest.approx(0.1998, abs=1e-4)


def test_clip_cov_intermediate(oracle):
    adv = group_advantages(oracle["rewards"], oracle["group_ids"], "group", 1e-4)
    cov = centred_cov(adv, oracle["logp"], oracle["mask"])
    assert float(cov[0, 2]) == pytest.approx(0.4032, abs=1e-4)
    _, m = batch_loss("clip_cov", oracle, clip_cov_lb=0.1, clip_cov_ratio=0.5)
    assert m["clip_cov/candidates"] == 2 and m["cov_selected_frac"] == pytest.approx(2 / 11)
    assert m["cov_mask_empty"] == 0.0


def test_the_covariance_mask_is_empty_on_all_failed_groups(oracle):
    """The paper's failure window: uniformly failed groups give A = 0, so Cov = 0 and no token is in
    (lb, ub); the per-update flag the report's failure-window statistic averages says so."""
    _, m = batch_loss("clip_cov", oracle, clip_cov_lb=1e-6, clip_cov_ratio=0.5)
    assert m["cov_mask_empty"] == 0.0  # mixed groups: some token has Cov in (1e-6, 5)
    _, m = batch_loss("clip_cov", {**oracle, "rewards": torch.zeros(4)}, clip_cov_lb=1e-6, clip_cov_ratio=0.5)
    assert m["cov_selected_frac"] == 0 and m["cov_mask_empty"] == 1.0


def test_kl_cov_selects_top_k(oracle):
    _, m = batch_loss("kl_cov", oracle, kl_cov_ratio=0.2)
    assert m["cov_selected_frac"] == pytest.approx(2 / 11) and m["cov_mask_empty"] == 0.0


# ---- edge cases -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_all_equal_rewards_give_zero_policy_gradient(oracle, name):
    b = {k: v.clone() for k, v in oracle.items()}
    b["rewards"] = torch.ones(4)
    b["logp"] = b["logp"].clone().requires_grad_(True)
    loss, _ = batch_loss(name, b)
    assert torch.isfinite(loss)
    if name in ("grpo", "dapo", "clip_cov"):  # KL-Cov's |log-ratio| penalty acts even at A = 0
        assert loss.requires_grad  # the loss still depends on logp (times A = 0): a real, all-zero gradient
        loss.backward()
        grad = b["logp"].grad
        assert grad is not None and grad.shape == b["logp"].shape and float(grad.abs().max()) == 0.0


def test_ep_grpo_keeps_gradient_in_zero_variance_groups(oracle):
    b = {**oracle, "rewards": torch.ones(4), "logp": oracle["logp"].clone().requires_grad_(True)}
    loss, _ = batch_loss("ep_grpo", b)
    loss.backward()
    assert float(b["logp"].grad.abs().max()) > 0


@pytest.mark.parametrize("name", NAMES)
def test_empty_masks_and_one_token_completions(name):
    from tests.train.batches import random_batch

    b = random_batch(5, T_max=1)  # every completion is one token long
    loss, _ = batch_loss(name, b)
    assert torch.isfinite(loss)
    b = random_batch(6)
    b["mask"] = torch.zeros_like(b["mask"])
    loss, _ = batch_loss(name, b)
    assert float(loss) == 0.0


def test_clip_cov_without_candidate_equals_ppo_tok(oracle):
    cc, m = batch_loss("clip_cov", oracle)  # defaults: no candidate in (1, 5)
    assert m["cov_selected_frac"] == 0 and m["cov_mask_empty"] == 1.0
    ppo, _ = batch_loss("grpo", oracle, loss_type="dapo")
    assert float(cc) == pytest.approx(float(ppo), abs=1e-12)


def test_archer_without_entropy_split_or_kl_equals_grpo_tok():
    from tests.train.batches import random_batch

    for seed in range(5):
        b = random_batch(seed)
        a, _ = batch_loss("archer", b, epsilon_high_entropy=0.2, kl_loss_coef=0.0, clip_ratio_c=1e9)
        g, _ = batch_loss("grpo", b, loss_type="dapo")
        assert float(a) == pytest.approx(float(g), abs=1e-12)


def test_ep_grpo_without_process_or_gate_equals_grpo():
    from tests.train.batches import random_batch

    b = random_batch(3)
    e, _ = batch_loss("ep_grpo", b, progress_weight=0.0, gate_coef=0.0)
    g, _ = batch_loss("grpo", b)
    assert float(e) == pytest.approx(float(g), abs=1e-12)


def test_dapo_without_filter_or_shaping_equals_grpo_tok_with_clip_higher():
    from tests.train.batches import random_batch

    b = random_batch(4)
    d, _ = batch_loss("dapo", b, dynamic_sampling=False)
    g, _ = batch_loss("grpo", b, loss_type="dapo", epsilon_high=0.28)
    assert float(d) == pytest.approx(float(g), abs=1e-12)


def test_clip_cov_draws_exactly_n_candidates():
    from tests.train.batches import random_batch

    b = random_batch(11, groups=6, T_max=20)
    _, m = batch_loss("clip_cov", b, clip_cov_lb=-10.0, clip_cov_ub=10.0, clip_cov_ratio=0.1)
    n_valid = int(b["mask"].sum())
    assert m["cov_selected_frac"] * n_valid == pytest.approx(max(int(0.1 * n_valid), 1))


def test_dapo_shaping_default_is_trl_s_soft_overlong_punishment():
    """The default reading (factor 1.0): the penalty TRL 0.29's get_soft_overlong_punishment adds to the 0/1
    verifier reward (the paper's stack), per length, including past the budget."""
    from trl.rewards import get_soft_overlong_punishment

    factor = default_settings("dapo").overlong_penalty_factor
    assert factor == 1.0
    lengths = [10, 700, 800, 801, 950, 1000, 1001, 1500]
    trl = get_soft_overlong_punishment(max_completion_len=1000, soft_punish_cache=200)([[1] * n for n in lengths])
    ours = overlong_penalty(torch.tensor(lengths, dtype=torch.float64), 1000, 0.2, factor)
    torch.testing.assert_close(ours, torch.tensor(trl, dtype=torch.float64), rtol=0, atol=1e-12)


def test_dapo_shaping_at_0_5_on_the_01_reward_has_verl_s_strength_on_the_pm1_reward():
    """The other reading, one override away: DAPO's verl recipe adds R_len (down to -1) to a +/-1 reward; on
    the 0/1 reward factor 0.5 gives the same group-normalised advantages (std epsilon taken tiny here)."""
    factor = 0.5
    r = torch.tensor([1.0, 0, 1, 0, 1, 1, 0, 0])
    lengths = torch.tensor([700.0, 950, 1100, 820, 990, 600, 1000, 870])
    g = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    ours = group_advantages(r + overlong_penalty(lengths, 1000, 0.2, factor), g, "group", 1e-12)
    theirs = group_advantages((2 * r - 1) + overlong_penalty(lengths, 1000, 0.2, 1.0), g, "group", 1e-12)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_batch_loss_defaults_are_the_run_configuration_s(name):
    from rcea.config import load_config

    record = default_settings(name)
    assert record.as_dict() == load_config("7b", name).objective()
    assert type(record) is get(name).settings


@pytest.mark.parametrize("name", NAMES)
def test_settings_records_are_typed_frozen_and_carry_no_default(name):
    import dataclasses

    from rcea.config import objective_defaults

    record = default_settings(name)
    assert set(type(record).names()) == set(objective_defaults(name))  # one field per TOML key, no more
    for f in dataclasses.fields(record):
        assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, f.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.loss_type = "dapo"
    assert isinstance(record.adv_eps, float)
    changed = record.replace(name, adv_eps=1)  # an int where a float is due is taken as that float
    assert changed.adv_eps == 1.0 and isinstance(changed.adv_eps, float) and record.adv_eps != 1.0
