"""batch_loss against an independent per-sample loop implementation, on unseen random batches."""

import pytest

from tests.train import reference as ref
from tests.train.batches import random_batch
from train.objectives import batch_loss

SEEDS = range(100, 108)

CASES = [
    ("grpo", {}, lambda b: ref.grpo(b)),
    ("grpo_tok", {"loss_type": "dapo"}, lambda b: ref.grpo(b, loss_type="dapo")),
    ("dapo", {}, lambda b: ref.dapo(b)),
    ("dapo_shaped", {"max_completion_length": 8}, lambda b: ref.dapo(b, L_max=8, factor=1.0)),  # default: TRL's
    ("dapo_shaped_verl", {"max_completion_length": 8, "overlong_penalty_factor": 0.5},
     lambda b: ref.dapo(b, L_max=8, factor=0.5)),
    ("clip_cov", {"clip_cov_lb": -0.05, "clip_cov_ub": 0.3, "clip_cov_ratio": 1.0},
     lambda b: ref.clip_cov_all_candidates(b, -0.05, 0.3)),
    ("kl_cov", {"kl_cov_ratio": 0.1}, lambda b: ref.kl_cov(b, 0.1, 0.5)),
    ("gtpo", {}, lambda b: ref.gtpo(b)),
    ("gtpo_ini", {"initial_entropy": 0.9}, lambda b: ref.gtpo(b, h_ini=0.9)),
    ("ep_grpo", {}, lambda b: ref.ep_grpo(b)),
    ("archer", {}, lambda b: ref.archer(b)),
]


@pytest.mark.parametrize("case,settings,independent", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("seed", SEEDS)
def test_batch_loss_matches_independent_implementation(case, settings, independent, seed):
    name = case.split("_")[0] if case not in ("clip_cov", "kl_cov", "ep_grpo") else case
    name = {"grpo": "grpo", "dapo": "dapo", "gtpo": "gtpo"}.get(name, name)
    b = random_batch(seed, allow_empty=seed % 2 == 0)
    settings = dict(settings)
    if "initial_entropy" in settings:
        b["initial_entropy"] = settings.pop("initial_entropy")
    loss, _ = batch_loss(name, b, **settings)
    assert float(loss) == pytest.approx(independent(b), abs=1e-9)
