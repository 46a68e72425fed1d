"""The TRL seam: the pinned trl 0.29.0 private methods we override or rely on must not change."""

import inspect

import trl
from trl import GRPOTrainer

from train.trainer import TRL_PINNED, TRL_VERSION, ObjectiveGRPOTrainer, trl_method_hashes


def test_trl_version_is_pinned():
    assert trl.__version__ == TRL_VERSION


def test_overridden_trl_methods_unchanged():
    changed = [name for name, digest in trl_method_hashes().items() if TRL_PINNED[name] != digest]
    assert not changed, (
        f"trl {trl.__version__} changed {changed}; re-check docs/objectives.md#trl-integration against the new source, "
        "adapt train/trainer.py, then update TRL_PINNED"
    )


def test_overrides_keep_trl_signatures():
    for name in ("_generate_and_score_completions", "_compute_loss", "_calculate_rewards", "_save_checkpoint"):
        ours, theirs = getattr(ObjectiveGRPOTrainer, name), getattr(GRPOTrainer, name)
        assert ours is not theirs, f"{name} is expected to be overridden"
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters), name
    src = inspect.getsource(GRPOTrainer._compute_loss)
    assert "self._get_per_token_logps_and_entropies(" in src and 'inputs["num_items_in_batch"]' in src
