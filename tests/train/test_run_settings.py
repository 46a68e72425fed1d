"""Colocated vLLM memory per scale, report_to, and the progress line in a real tiny run's settings."""

import pytest

from rcea.config import ConfigError, load_config
from train.run import TrainSetupError, colocated_vllm, report_targets, trl_report_to


def test_colocated_vllm_settings_per_scale():
    three, seven = colocated_vllm(load_config("3b", "grpo")), colocated_vllm(load_config("7b", "grpo"))
    assert three == dict(vllm_gpu_memory_utilization=0.25, vllm_enable_sleep_mode=False, vllm_max_model_length=2304)
    assert seven == dict(vllm_gpu_memory_utilization=0.3, vllm_enable_sleep_mode=True, vllm_max_model_length=2304)
    # the context holds the longest prompt plus the whole completion budget
    assert three["vllm_max_model_length"] >= 204 + 2048


def test_a_context_too_short_for_prompt_plus_completion_is_refused():
    cfg = load_config("3b", "grpo", ["train.vllm_max_model_length=2048"])
    with pytest.raises(TrainSetupError, match="at least 2252"):
        colocated_vllm(cfg)
    with pytest.raises(ConfigError, match=r"vllm_gpu_memory_utilization must be in \(0, 1\], got 1.5"):
        load_config("3b", "grpo", ["train.vllm_gpu_memory_utilization=1.5"])  # refused before any set-up


def test_report_to():
    assert report_targets(load_config("tiny", "grpo")) == {"tensorboard"}
    assert report_targets(load_config("tiny", "grpo", ['train.report_to="none"'])) == set()
    assert trl_report_to(load_config("tiny", "grpo")) == []
    for bad in ('"mlflow"', '"none,wandb"', '""'):
        with pytest.raises(TrainSetupError, match="report_to"):
            report_targets(load_config("tiny", "grpo", [f"train.report_to={bad}"]))


def test_wandb_without_wandb_installed_says_how_to_add_it():
    import importlib.util

    if importlib.util.find_spec("wandb") is not None:
        pytest.skip("wandb is installed here")
    with pytest.raises(TrainSetupError, match="scripts/bootstrap train-wandb"):
        trl_report_to(load_config("tiny", "grpo", ['train.report_to="tensorboard,wandb"']))
