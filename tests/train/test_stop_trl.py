"""Issue 29, item 2: TRL's rollout sampler ends each completion at the run's stop set (data.stop_tokens), so at
<|im_end|> although the policy tokenizer's EOS is <|endoftext|> (Qwen2.5 base's convention, and the tiny
model's), in both of TRL 0.29.0's generation paths, driven through the project's trainer:

* transformers (`model.generate`, the tiny scale): train.run.grpo_config hands the stop ids to TRL's
  GenerationConfig as its EOS list; the trainer cuts each row after its first stop token (TRL's own mask keeps a
  row up to the tokenizer's EOS, which here is the padding after <|im_end|>);
* colocated vLLM (the real scales): the stop ids reach vLLM's SamplingParams as `stop_token_ids` (recorded on
  the vLLM stand-in of tests/train/vllm_standin.py, which stops where vLLM does).

The model is the scripted bigram model of tests/common/stop_script.py: `4 2 <|im_end|>`, then an invented turn
`<|im_start|> 7 7 ...`. Before the fix the sampler stopped at <|endoftext|> only: every rollout ran to the token
budget and its reward read the invented turn (the last test shows it)."""

from __future__ import annotations

import pytest
import torch

from rcea.config import load_config
from tests.common.stop_script import PROMPT, build_scripted_model

BUDGET = 8
OVERRIDES = ["train.per_device_batch=4", "train.num_generations=4", "train.grad_accum=1",
             f"train.max_completion_tokens={BUDGET}", "train.num_iterations=1", "data.draw_size=4"]


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    return build_scripted_model(tmp_path_factory.mktemp("scripted"))


def _LONG_SHORT(ids):
    """The two answers of the scripted model, each ending at <|im_end|>, as the seeded rollout draws them."""
    long, short = [ids["four"], ids["two"], ids["im_end"]], [ids["two"], ids["im_end"]]
    return [long, short, long, long]


def _trainer(path, tmp_path, use_vllm: bool, with_stops: bool = True):
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from train.objectives import settings_for
    from train.run import grpo_config, lora_config, synthetic
    from train.trainer import ObjectiveGRPOTrainer

    cfg = load_config("tiny", "grpo", OVERRIDES + [f"train.use_vllm={str(use_vllm).lower()}"])
    tok = AutoTokenizer.from_pretrained(path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    ds = datasets.Dataset.from_list([{"prompt": PROMPT, "answer": "6"}] * 4)
    args = grpo_config(cfg, tmp_path / "out", tok if with_stops else None)
    return ObjectiveGRPOTrainer(model=model, reward_funcs=[synthetic], args=args, train_dataset=ds,
                                processing_class=tok, peft_config=lora_config(cfg), objective="grpo",
                                objective_settings=settings_for(cfg))


def _rollout(trainer):
    """The trained rows of one rollout: completion ids under the completion mask, and the logged metrics."""
    torch.manual_seed(3)   # rows `4 2 <|im_end|>` and `2 <|im_end|>` both occur (TRL samples with torch's RNG)
    inputs = [{"prompt": PROMPT, "answer": "6"} for _ in range(4)]
    out = trainer._generate_and_score_completions(inputs)
    rows = [ids[m.bool()].tolist() for ids, m in zip(out["completion_ids"], out["completion_mask"])]
    return rows, {k: v[-1] for k, v in trainer._metrics["train"].items() if v}


def test_trl_transformers_path_cuts_at_im_end(scripted, tmp_path):
    path, ids = scripted
    trainer = _trainer(path, tmp_path, use_vllm=False)
    assert trainer.generation_config.eos_token_id == [ids["im_end"], ids["endoftext"]]
    rows, metrics = _rollout(trainer)
    # a short row is padded with <|endoftext|> (the tokenizer's EOS) in TRL's batch: none of it is kept
    assert sorted(rows) == sorted(_LONG_SHORT(ids)), rows
    assert metrics["truncation_rate"] == 0.0
    # TRL 0.29.0 itself logs these four with "terminated" = ends at <|endoftext|> or padding: clipped_ratio 1.0
    # and terminated lengths 0 here; the trainer rewrites them with the stop set's meaning (correct_trl_clipped)
    assert metrics["completions/clipped_ratio"] == 0.0
    assert metrics["completions/mean_terminated_length"] == (3 + 2 + 3 + 3) / 4
    assert (metrics["completions/min_terminated_length"], metrics["completions/max_terminated_length"]) == (2, 3)


def test_trl_vllm_path_hands_the_stop_ids_to_sampling_params(scripted, tmp_path, monkeypatch):
    import trl.generation.vllm_generation as vg

    from tests.train.vllm_standin import SamplingParams, install

    install(monkeypatch)
    made = []

    class Recorded(SamplingParams):
        def __init__(self, **kwargs):
            made.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(vg, "SamplingParams", Recorded)
    path, ids = scripted
    trainer = _trainer(path, tmp_path, use_vllm=True)
    rows, metrics = _rollout(trainer)
    assert made and all(kw["stop_token_ids"] == [ids["im_end"], ids["endoftext"]] for kw in made)
    assert {tuple(r) for r in rows} <= {tuple(r) for r in _LONG_SHORT(ids)} and len(rows) == 4
    assert metrics["truncation_rate"] == 0.0
    assert metrics["completions/clipped_ratio"] == 0.0
    assert metrics["completions/mean_terminated_length"] == sum(map(len, rows)) / 4


def test_without_the_stop_set_trl_runs_the_invented_turn_to_the_budget(scripted, tmp_path):
    """TRL's default, what the trainer did before the fix: the tokenizer's EOS (<|endoftext|>) only."""
    path, ids = scripted
    trainer = _trainer(path, tmp_path, use_vllm=False, with_stops=False)
    rows, metrics = _rollout(trainer)
    for row in rows:
        turn = row[:row.index(ids["im_end"]) + 1]
        assert turn in _LONG_SHORT(ids) and len(row) == BUDGET
        assert row[len(turn):] == [ids["im_start"]] + [ids["seven"]] * (BUDGET - len(turn) - 1)
    assert metrics["truncation_rate"] == 1.0
    assert metrics["completions/clipped_ratio"] == 1.0 and metrics["completions/mean_terminated_length"] == 0.0
