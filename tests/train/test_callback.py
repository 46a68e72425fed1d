"""Issue 32, item 3: RCEACallback writes this project's step-log records for a plain TRL GRPOTrainer run."""

from __future__ import annotations

import json

import pytest
import torch

from train.callback import RCEACallback, step_row


def test_step_row_maps_trl_names_and_carries_the_rollout_forward():
    fresh = step_row(2, {"reward": 0.5, "entropy": 1.25, "frac_reward_zero_std": 0.25,
                         "completions/mean_length": 7.0, "learning_rate": 1e-5, "note": "x"}, {})
    assert fresh == {"step": 2, "reward": 0.5, "entropy": 1.25, "frac_reward_zero_std": 0.25, "response_length": 7.0,
                     "learning_rate": 1e-5, "frac_nonzero_var": 0.75, "frac_nonzero_var_sampled": 0.75,
                     "fresh_rollout": 1.0}
    reuse = step_row(3, {"loss": 0.1, "entropy": 1.0}, fresh)   # num_iterations > 1: no rollout fields logged
    assert reuse["step"] == 3 and reuse["fresh_rollout"] == 0.0 and reuse["entropy"] == 1.0
    assert reuse["reward"] == 0.5 and reuse["frac_nonzero_var"] == 0.75


def _length_reward(completions, **kw):
    return [float(len(c) % 3) for c in completions]   # varies within a group: nonzero reward variance


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    from rcea.tiny import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny"), layers=1, hidden=32, heads=2, kv_heads=1,
                            intermediate=64, vocab=300)


def plain_trl_run(base, out, steps: int = 2, save_steps: int = 1):
    """A plain TRL GRPOTrainer run (not this project's trainer) with a LoRA adapter and the callback."""
    import datasets
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(base, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    ds = datasets.Dataset.from_list([{"prompt": f"{i} + {i} ="} for i in range(8)])
    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=6, logging_steps=1, save_steps=save_steps, report_to=[],
                      use_cpu=True, learning_rate=1e-3, bf16=False, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[_length_reward], args=args, train_dataset=ds,
                          processing_class=tok, peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"],
                                                                       task_type="CAUSAL_LM"))
    trainer.add_callback(RCEACallback(out / "steps.jsonl"))
    trainer.train()
    return trainer


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
