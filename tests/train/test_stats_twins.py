"""The trainer's torch statistics against the one NumPy implementation (rcea.stats) on random batches."""

import numpy as np
import pytest

from rcea import stats
from tests.train.batches import random_batch
from train.objectives.clip_cov import centred_cov
from train.objectives.common import group_advantages


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_group_advantages_equal_rcea_stats(seed, scale):
    b = random_batch(seed, groups=4, G=5)
    b["rewards"][:5] = 1.0  # one all-correct group
    ours = group_advantages(b["rewards"], b["group_ids"], scale, 1e-4).numpy()
    ref = stats.group_advantages(b["rewards"].numpy(), b["group_ids"].numpy(), eps=1e-4, scale=scale)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_clip_cov_covariance_equals_the_proxy_over_valid_tokens(seed):
    b = random_batch(seed, allow_empty=True)
    adv = group_advantages(b["rewards"], b["group_ids"], "group", 1e-4)
    cov = centred_cov(adv, b["logp"], b["mask"])
    valid = b["mask"] > 0
    a_tok = adv.unsqueeze(1).expand_as(b["logp"])[valid].numpy()
    ref = stats.covariance_proxy(a_tok, b["logp"][valid].numpy())
    np.testing.assert_allclose(cov[valid].numpy(), ref, rtol=0, atol=1e-12)
    assert float(cov[~valid].abs().sum()) == 0.0
