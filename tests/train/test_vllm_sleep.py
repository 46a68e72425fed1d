"""Item 1 of issue 22: with colocated vLLM in sleep mode, every rollout is sampled from the policy being trained.

Driven through the real trainer (train.run -> ObjectiveGRPOTrainer -> TRL 0.29.0's GRPOTrainer and
VLLMGeneration) on the tiny model, with the recording stand-in for vLLM's engine (tests/train/vllm_standin.py)
at every generating call comparing the engine's logits with the policy's and the base model's.
"""

import pytest
import torch
from transformers import TrainerCallback

from rcea.config import load_config
from tests.train.vllm_standin import install
from train.monitor import GAP_MAX, GAP_MEAN, read_steps
from train.run import run_training

SLEEP = ["toy.warm_start_steps=0", "train.max_completion_tokens=8", "train.warmup_ratio=0.0", "data.draw_size=32",
         "train.max_steps=3", "train.num_iterations=1", "train.learning_rate=0.05", "train.use_vllm=true",
         "train.vllm_enable_sleep_mode=true"]


@pytest.fixture(scope="module", autouse=True)
def prepared_pool():
    from rcea.prepare import prepare

    prepare("tiny", SLEEP)


class Watch(TrainerCallback):
    """At each generating call: max |logits| differences engine-policy, policy-base, engine-base on a probe."""

    def __init__(self, engine_cls):
        self.policy, self.rows = None, []
        self.probe = torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(0))
        engine_cls.on_generate = self.seen

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.policy = model

    @torch.no_grad()
    def seen(self, engine_model):
        was = self.policy.training
        self.policy.eval()
        policy = self.policy(self.probe).logits
        with self.policy.disable_adapter():
            base = self.policy(self.probe).logits
        self.policy.train(was)
        engine = engine_model(self.probe).logits
        self.rows.append({"engine-policy": float((engine - policy).abs().max()),
                          "policy-base": float((policy - base).abs().max()),
                          "engine-base": float((engine - base).abs().max())})


def train(tmp_path, monkeypatch, method="grpo", guarded=True, extra=()):
    engine_cls = install(monkeypatch)
    if not guarded:  # TRL 0.29.0 as released: what the trainer did before train/vllm_sync.py
        monkeypatch.setattr("train.trainer.use_policy_weights", lambda trainer: None)
    watch, lines = Watch(engine_cls), []
    cfg = load_config("tiny", method, SLEEP + list(extra))
    summary = run_training(cfg, tmp_path / method, reward="synthetic", callbacks=[watch], log=lines.append)
    return watch.rows, read_steps(summary["steps_log"]), lines, engine_cls.instances[0]


@pytest.mark.parametrize("method", ["grpo", "dapo"])
def test_sleep_mode_rollouts_are_sampled_from_the_policy(method, tmp_path, monkeypatch):
    # DAPO with groups of 2: about half the groups have one outcome, so refills generate again inside a step
    extra = ["train.num_generations=2"] if method == "dapo" else []
    rows, steps, lines, engine = train(tmp_path, monkeypatch, method, extra=extra)
    assert len(rows) >= 3 and engine.kwargs["gpu_memory_utilization"] > 0 and engine.sleep_mode
    assert sum(r["policy-base"] > 0.05 for r in rows) >= 2, rows  # the policy moved: the check can tell
    assert all(r["engine-policy"] < 1e-4 for r in rows), rows
    assert ("collective_rpc", "reload_weights") not in engine.events  # no disk read of the base checkpoint
    if method == "dapo":  # refills generate again within a step, with no sync_weights before them
        assert len(rows) > len(steps)
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s[GAP_MEAN] < 1e-4 and s[GAP_MAX] >= s[GAP_MEAN] for s in steps), steps
    progress = [line for line in lines if line.startswith("[train] step ")]
    assert len(progress) == 3 and all("logp-gap 0.0000" in line for line in progress), progress


def test_trl_0_29_alone_samples_every_rollout_from_the_base_checkpoint(tmp_path, monkeypatch):
    """The defect the fix removes, seen by the same instruments: the engine holds the base weights at every
    rollout after the first update, and the logged gap shows it."""
    rows, steps, lines, engine = train(tmp_path, monkeypatch, guarded=False)
    assert ("collective_rpc", "reload_weights") in engine.events
    assert all(r["engine-base"] < 1e-5 and r["engine-policy"] > 0.05 for r in rows[1:]), rows
    assert all(s[GAP_MEAN] > 1e-3 for s in steps[1:]), steps
