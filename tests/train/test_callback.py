"""Issue 32, item 3: RCEACallback writes this project's step-log records for a plain TRL GRPOTrainer run."""

from __future__ import annotations

import json

import pytest

from tests.train.plain_trl import plain_trl_run
from train.callback import step_row


def test_step_row_maps_trl_names_and_carries_the_rollout_forward():
    fresh = step_row(2, {"reward": 0.5, "entropy": 1.25, "frac_reward_zero_std": 0.25,
                         "completions/mean_length": 7.0, "learning_rate": 1e-5, "note": "x"}, {})
    assert fresh == {"step": 2, "reward": 0.5, "entropy": 1.25, "frac_reward_zero_std": 0.25, "response_length": 7.0,
                     "learning_rate": 1e-5, "frac_nonzero_var": 0.75, "frac_nonzero_var_sampled": 0.75,
                     "fresh_rollout": 1.0}
    reuse = step_row(3, {"loss": 0.1, "entropy": 1.0}, fresh)   # num_iterations > 1: no rollout fields logged
    assert reuse["step"] == 3 and reuse["fresh_rollout"] == 0.0 and reuse["entropy"] == 1.0
    assert reuse["reward"] == 0.5 and reuse["frac_nonzero_var"] == 0.75


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    from rcea.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=1, hidden=32, heads=2, kv_heads=1,
                            intermediate=64, vocab=300)


def test_callback_writes_one_line_per_step_with_trls_values(tiny_base, tmp_path):
    trainer = plain_trl_run(tiny_base, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    logged = [h for h in trainer.state.log_history if "train_runtime" not in h]
    assert [r["step"] for r in rows] == [h["step"] for h in logged] == [1, 2]
    for r, h in zip(rows, logged):
        assert r["entropy"] == pytest.approx(h["entropy"]) and r["reward"] == pytest.approx(h["reward"])
        assert r["frac_nonzero_var"] == pytest.approx(1 - h["frac_reward_zero_std"])
        assert r["fresh_rollout"] == 1.0
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def test_a_resumed_run_drops_the_lines_past_its_checkpoint(tmp_path):
    from types import SimpleNamespace

    from train.callback import RCEACallback

    log = tmp_path / "steps.jsonl"
    log.write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in (1, 2, 3, 4)) + '{"step": 5, "rew')
    cb, args = RCEACallback(log), SimpleNamespace(process_index=0)
    cb.on_train_begin(args, SimpleNamespace(global_step=2), None)   # resumed from checkpoint-2
    cb.on_log(args, SimpleNamespace(global_step=3), None, logs={"loss": 0.5})   # a step reusing rollout 2
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1] == {"step": 3, "reward": 0.2, "loss": 0.5, "fresh_rollout": 0.0}
