"""Issue 29: a short tiny training in bf16 (the real scales' weight precision) through the study's own path:
train.run -> ObjectiveGRPOTrainer -> TRL 0.29.0's colocated VLLMGeneration with train/vllm_sync.py, the vLLM
engine replaced by the recording stand-in (tests/train/vllm_standin.py; sleep mode as at 7B).

It checks what only bf16 shows: after every rollout's weight sync the frozen bf16 base is bit-identical to the
one the run started from (TRL's own sync merges and unmerges in place and changes it), and the engine holds
the policy being trained."""

import math
import os

import pytest
import torch
from transformers import TrainerCallback

from rcea.config import load_config
from tests.train.vllm_standin import install
from train.monitor import read_steps
from train.run import run_training

BF16 = ["toy.warm_start_steps=0", "train.max_completion_tokens=8", "train.warmup_ratio=0.0", "data.draw_size=32",
        "train.max_steps=3", "train.num_iterations=1", "train.learning_rate=0.05", "train.precision='bf16'",
        "train.per_device_batch=8", "train.num_generations=4", "train.use_vllm=true",
        "train.vllm_enable_sleep_mode=true"]


@pytest.fixture(scope="module", autouse=True)
def prepared_pool():
    from rcea.prepare import prepare

    prepare("tiny", BF16)


@pytest.fixture(autouse=True)
def environment_restored():
    """TrainingArguments(bf16=True) writes ACCELERATE_MIXED_PRECISION=bf16 into os.environ; later tiny runs in
    this pytest process would train under bf16 autocast (tests/train/test_grpo_config_trl.py)."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


class Base(TrainerCallback):
    """The frozen (non-LoRA) tensors of the policy at the start and at the end of training."""

    def __init__(self, engine_cls):
        self.start = self.end = None
        self.engine_policy: list[float] = []
        engine_cls.on_generate = self.seen
        self.probe = torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(0))

    @staticmethod
    def frozen(model):
        return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.model, self.start = model, self.frozen(model)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self.end = self.frozen(model)

    @torch.no_grad()
    def seen(self, engine_model):
        """At each generating call: max |log p engine - log p policy| on a probe (bf16 policy, fp32 engine)."""
        was = self.model.training
        self.model.eval()
        policy = torch.log_softmax(self.model(self.probe).logits.float(), -1)
        self.model.train(was)
        engine = torch.log_softmax(engine_model(self.probe).logits, -1)
        self.engine_policy.append(float((engine - policy).abs().max()))


def train_bf16(tmp_path, monkeypatch, trl_sync=False):
    engine_cls = install(monkeypatch)
    if trl_sync:  # TRL 0.29.0's merge / send / unmerge in place of train/vllm_sync.py's out-of-place merge
        from trl.generation.vllm_generation import VLLMGeneration

        monkeypatch.setattr("train.vllm_sync.PolicySyncedVLLM.sync_weights",
                            lambda self: (VLLMGeneration.sync_weights(self), setattr(self, "weights_current", True)))
    watch = Base(engine_cls)
    cfg = load_config("tiny", "grpo", BF16)
    summary = run_training(cfg, tmp_path / "grpo", reward="synthetic", callbacks=[watch], log=lambda _: None)
    return watch, summary


def test_bf16_tiny_training_keeps_the_base_exact(tmp_path, monkeypatch):
    watch, summary = train_bf16(tmp_path, monkeypatch)
    assert summary["global_step"] == 3
    steps = read_steps(summary["steps_log"])
    assert [s["step"] for s in steps] == [1, 2, 3] and all(math.isfinite(s["loss"]) for s in steps), steps
    assert {t.dtype for t in watch.start.values()} == {torch.bfloat16}  # the base trains in bf16
    assert all(p.dtype == torch.float32 for n, p in watch.model.named_parameters() if "lora_" in n)
    assert set(watch.end) == set(watch.start)
    changed = [n for n in watch.start if not torch.equal(watch.start[n], watch.end[n])]
    assert not changed, changed[:5]
    # the engine samples from the policy: the bf16 policy vs its fp32 copy in the engine, bf16 noise only
    assert len(watch.engine_policy) == 3 and max(watch.engine_policy) < 0.05, watch.engine_policy


def test_bf16_tiny_training_with_trls_sync_changes_the_base(tmp_path, monkeypatch):
    """The defect the out-of-place merge removes, through the same run: TRL's in-place merge leaves the bf16
    base changed after three syncs."""
    watch, _ = train_bf16(tmp_path, monkeypatch, trl_sync=True)
    changed = sum(int((watch.start[n] != watch.end[n]).sum()) for n in watch.start)
    assert changed > 0


@pytest.mark.parametrize("value", [False, True])
def test_lm_head_fp32_setting_reaches_trl(value, tmp_path):
    """train.lm_head_fp32 (default off, measured in benchmarks/bf16.py) is TRL's cast_lm_head_to_fp32."""
    from train.run import grpo_config

    over = [] if value is False else ["train.lm_head_fp32=true"]
    cfg = load_config("tiny", "grpo", BF16[:1] + over)
    assert cfg["train.lm_head_fp32"] is value
    assert grpo_config(cfg, tmp_path).cast_lm_head_to_fp32 is value
