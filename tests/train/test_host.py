"""Where a run may train: real models need the GPU container; the tiny model trains on CPU at any scale."""
from __future__ import annotations

import pytest
import torch

from rcea.config import load_config
from train.run import TrainSetupError, check_host, on_cpu


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_a_real_model_without_a_gpu_is_refused_with_the_fix():
    cfg = load_config("3b", "grpo")
    assert not on_cpu(cfg)
    with pytest.raises(TrainSetupError, match="needs a CUDA GPU.*invoke train --method grpo --scale 3b"):
        check_host(cfg)


def test_the_tiny_model_trains_on_cpu_at_any_scale():
    """The Compose rehearsal runs the 3b recipe with the tiny model on CPU."""
    for scale in ("tiny", "3b", "7b"):
        cfg = load_config(scale, "grpo", ["model.name=tiny"])
        assert on_cpu(cfg)
        check_host(cfg)  # no GPU needed
