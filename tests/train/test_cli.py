"""The command line refuses clearly: unknown method or scale, a real scale off the GPU container."""

import pytest

from train.cli import main


@pytest.mark.parametrize("argv,expect", [
    (["--method", "ppo", "--scale", "tiny"], "valid methods: grpo, dapo, clip_cov, kl_cov, ep_grpo, gtpo, archer"),
    (["--method", "grpo", "--scale", "13b"], "valid scales: tiny, 3b, 7b"),
    (["--method", "grpo", "--scale", "tiny", "--override", "train.nope=1"], "valid keys in [train]"),
    (["--method", "grpo", "--scale", "3b", "--reward", "synthetic"], "tiny only"),
])
def test_cli_refusals(capsys, argv, expect):
    assert main(argv) == 2
    assert expect in capsys.readouterr().err


def test_real_scale_without_gpu_says_what_to_run(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["--method", "kl_cov", "--scale", "7b"]) == 2
    err = capsys.readouterr().err
    assert "invoke train --method kl_cov --scale 7b" in err and "GPU" in err
