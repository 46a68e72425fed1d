"""The GRPOConfig of every method at 3b and 7b validates in the real TRL 0.29.0 (this environment's)."""

import os
from importlib import metadata

import pytest

from rcea.config import METHODS, load_config


@pytest.fixture(autouse=True)
def environment_restored():
    """TrainingArguments(bf16=True) writes ACCELERATE_MIXED_PRECISION=bf16 into os.environ; left there,
    every later tiny training run in this pytest process trained under bf16 autocast (seen as gradients
    that moved with the micro-batch split in test_loss_seam). Production builds one configuration per
    process; here the environment is put back after each test."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def bf16_allowed(monkeypatch):
    """The ONLY patch: Transformers refuses bf16=True without a bf16-capable GPU (training_args checks
    is_torch_bf16_gpu_available); on this CPU-only machine we say the GPU is there. Every other check of
    TrainingArguments and GRPOConfig runs as it will on the GPU host."""
    import transformers.training_args as ta

    monkeypatch.setattr(ta, "is_torch_bf16_gpu_available", lambda: True)


@pytest.mark.parametrize("scale", ["3b", "7b"])
@pytest.mark.parametrize("method", METHODS)
def test_grpo_config_validates_in_trl(bf16_allowed, tmp_path, scale, method):
    from train.run import grpo_config

    assert metadata.version("trl") == "0.29.0"
    cfg = load_config(scale, method)
    args = grpo_config(cfg, tmp_path)
    assert args.bf16 and args.use_vllm and args.vllm_mode == "colocate" and args.optim == "adamw_8bit"
    assert (args.vllm_gpu_memory_utilization, args.vllm_enable_sleep_mode, args.vllm_max_model_length) == (
        cfg["train.vllm_gpu_memory_utilization"], cfg["train.vllm_enable_sleep_mode"],
        cfg["train.vllm_max_model_length"])
    assert args.vllm_max_model_length >= cfg["data.max_prompt_tokens"] + args.max_completion_length
    assert args.report_to == [] and args.gradient_checkpointing


def test_without_the_patch_bf16_is_refused_here(tmp_path):
    """What the patch stands in for really is the GPU check (so the test above checks everything else)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    from train.run import grpo_config

    with pytest.raises(ValueError, match="bf16"):
        grpo_config(load_config("3b", "grpo"), tmp_path)
