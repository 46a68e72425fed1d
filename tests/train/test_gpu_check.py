"""train.gpu_check: one LoRA training step at the tiny shape on CPU (its GPU twin runs the real shapes)."""

from rcea.device_check import SHAPES, lora_params
from train import gpu_check


def test_cpu_step_passes(capsys):
    assert gpu_check.main(["--cpu"]) == 0
    out = capsys.readouterr().out
    assert "PASS train-step-tiny" in out and "by hand 65,536" in out and "GPU CHECK PASSED" in out


def test_lora_parameter_count_by_hand():
    # Qwen2.5-3B: h 2048, MLP 11008, kv width 2 x 128 = 256, 36 layers
    per_layer = (2048 + 2048) + 2 * (2048 + 256) + (2048 + 2048) + 2 * (2048 + 11008) + (11008 + 2048)
    assert lora_params("3b", 32) == 32 * per_layer * 36 == 59_867_136
    assert SHAPES["7b"]["hidden_size"] // SHAPES["7b"]["num_attention_heads"] == 128


def test_one_step_fails_when_the_optimizer_does_not_move_lora(monkeypatch):
    class Frozen:
        def __init__(self, params, lr):
            pass

        def step(self):
            pass

        def zero_grad(self, set_to_none=True):
            pass

    monkeypatch.setattr(gpu_check, "optimizer_for", lambda params, lr, device: (Frozen(params, lr), "frozen"))
    res = gpu_check.part_step("tiny", "cpu", 2, 8, 16)
    assert res["ok"] is False and "LoRA moved False" in res["detail"]
