"""A plain TRL GRPOTrainer run (not this project's trainer) with RCEACallback, on a tiny model: the outside run of
issue 32's tests. `python -m tests.train.plain_trl OUT` (train env, RCEA_DATA set) trains the scale's tiny policy
for 3 steps, keeps the PEFT checkpoints TRL saves and merges the last one into a full model folder OUT/merged
(config and weights, no tokenizer); OUT-adapters holds the three adapters (the merged one's as an adapter)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch

from train.callback import RCEACallback


def _length_reward(completions, **kw):
    return [float(len(c) % 3) for c in completions]   # varies within a group: nonzero reward variance


def plain_trl_run(base, out, steps: int = 2, save_steps: int = 1, targets=("q_proj", "v_proj")):
    import datasets
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    torch.manual_seed(0)
    out = Path(out)
    tok = AutoTokenizer.from_pretrained(base, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    ds = datasets.Dataset.from_list([{"prompt": f"{i} + {i} ="} for i in range(8)])
    args = GRPOConfig(output_dir=str(out), max_steps=steps, per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=6, logging_steps=1, save_steps=save_steps, report_to=[],
                      use_cpu=True, learning_rate=1e-3, bf16=False, seed=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[_length_reward], args=args, train_dataset=ds,
                          processing_class=tok, peft_config=LoraConfig(r=4, target_modules=list(targets),
                                                                       task_type="CAUSAL_LM"))
    trainer.add_callback(RCEACallback(out / "steps.jsonl"))
    trainer.train()
    return trainer


def main(out: str) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from rcea.config import load_config
    from rcea.tiny import model_path

    torch.set_num_threads(1)
    cfg = load_config("tiny")
    base, out = model_path(cfg), Path(out)
    plain_trl_run(base, out, steps=3, save_steps=1, targets=cfg["train.lora_targets"])
    last = out / "checkpoint-3"
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), last).merge_and_unload()
    merged.save_pretrained(out / "merged")   # config and weights only, as an export may be: the engines use the base's tokenizer
    shutil.copy2(last / "trainer_state.json", out / "merged" / "trainer_state.json")   # its step: 3
    twin = out.parent / f"{out.name}-adapters"   # the same run with step 3 as the adapter: the oracle of the merge
    for step in (1, 2, 3):
        shutil.copytree(out / f"checkpoint-{step}", twin / f"checkpoint-{step}")
    shutil.rmtree(last)   # step 3 is the merged model's: one checkpoint per step
    print(json.dumps({"base": base, "adapters": str(twin)}))


if __name__ == "__main__":
    main(sys.argv[1])
