"""Item 1 of issue 29: syncing a bf16 LoRA policy into vLLM leaves the frozen base bit-identical.

A tiny bf16 Qwen2 (random init, LoRA on every projection, the adapter in fp32 as PEFT makes it) is synced into a
recording stand-in for the engine N times, its adapter moving between syncs as an optimizer moves it. TRL 0.29.0's
own sync (merge into the base in place, send, unmerge) changes the base; train/vllm_sync.py's (merged weights
computed out of place) leaves it exact and sends base + scaling * B @ A rounded once to bf16.
"""

from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from trl.generation.vllm_generation import VLLMGeneration

from train.vllm_sync import PolicySyncedVLLM, merged_weight, policy_weights

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
SYNCS = 100


class RecordingEngine:
    """What TRL's colocated sync touches of vLLM's `LLM`: load_weights records the last tensor sent per name."""

    def __init__(self):
        self.received: dict[str, torch.Tensor] = {}
        self.loads = 0
        runner = SimpleNamespace(model=SimpleNamespace(load_weights=self.load_weights))
        self.llm_engine = SimpleNamespace(model_executor=SimpleNamespace(driver_worker=SimpleNamespace(
            model_runner=runner)))

    def load_weights(self, weights):
        for name, tensor in weights:
            self.received[name] = tensor.detach().clone()
            self.loads += 1

    def reset_prefix_cache(self):
        return True

    def wake_up(self, tags=None):
        pass


def tiny_peft(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    base = Qwen2ForCausalLM(config).to(torch.bfloat16)
    names = [n for n, _ in base.named_parameters()]
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=16, target_modules=TARGETS, lora_dropout=0.0))
    return model, names


def lora_tensors(model):
    return [p for n, p in model.named_parameters() if "lora_" in n]


def frozen(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}


def sync_generation(model, cls):
    """A VLLMGeneration (TRL's or ours) in colocate mode on one process, without building an engine."""
    gen = cls.__new__(cls)
    gen.model, gen.is_fsdp_enabled, gen.mode, gen.enable_sleep_mode = model, False, "colocate", False
    gen.accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None), is_main_process=True)
    gen.llm = RecordingEngine()
    return gen


def run_syncs(cls, syncs=SYNCS, seed=0):
    """`syncs` syncs of a moving adapter; returns the model, its frozen tensors before, the engine."""
    model, names = tiny_peft(seed)
    gen = sync_generation(model, cls)
    rng = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in lora_tensors(model):  # a trained adapter (PEFT starts B at zero)
            p.copy_(torch.randn(p.shape, generator=rng) * 0.02)
    before = frozen(model)
    assert all(p.dtype == torch.float32 for p in lora_tensors(model))  # PEFT keeps the adapter in fp32
    for _ in range(syncs):
        with torch.no_grad():
            for p in lora_tensors(model):  # one optimizer step's worth of movement
                p.add_(torch.randn(p.shape, generator=rng) * 1e-3)
        gen.sync_weights()
    return model, names, before, gen.llm


def drift(model, before) -> float:
    after = frozen(model)
    assert set(after) == set(before)
    return max(float((after[n].float() - before[n].float()).abs().max()) for n in before)


@pytest.mark.parametrize("cls,exact", [(PolicySyncedVLLM, True), (VLLMGeneration, False)],
                         ids=["out-of-place", "trl-0.29-in-place"])
def test_base_is_bit_identical_after_many_syncs(cls, exact):
    model, names, before, engine = run_syncs(cls)
    changed = drift(model, before)
    if exact:
        assert changed == 0.0
    else:  # TRL's merge / unmerge in bf16: the same measurement sees the base drift
        assert changed > 0.0
        n_changed = sum(int((frozen(model)[n] != before[n]).sum()) for n in before if "base_layer" in n)
        assert n_changed > 100, n_changed
    assert set(engine.received) == set(names)  # every parameter of the plain model, under vLLM's names
    assert engine.loads == SYNCS * len(names)


def test_engine_receives_base_plus_delta():
    from peft.tuners.lora import LoraLayer

    model, _, before, engine = run_syncs(PolicySyncedVLLM, syncs=3)
    layers = {n.removeprefix("base_model.model."): m for n, m in model.named_modules() if isinstance(m, LoraLayer)}
    assert len(layers) == 2 * len(TARGETS)
    for name, layer in layers.items():
        base = before[f"base_model.model.{name}.base_layer.weight"].float()
        delta = (layer.lora_B["default"].weight @ layer.lora_A["default"].weight) * layer.scaling["default"]
        exact = base + delta  # fp32 oracle, computed another way (matmul, then scale, then add)
        got = engine.received[f"{name}.weight"]
        assert got.dtype == torch.bfloat16
        # one rounding to bf16: within half a bf16 step (2^-8 relative) of the exact sum
        assert bool(((got.float() - exact).abs() <= exact.abs() * 2.0**-8 + 1e-30).all()), name
        assert not torch.equal(got, base.to(torch.bfloat16)), name  # the update is in it
    for n, t in before.items():  # everything else is sent as it is
        if "base_layer" not in n:
            assert torch.equal(engine.received[n.removeprefix("base_model.model.")], t), n


def test_merged_weight_refuses_a_layer_already_merged():
    model, _ = tiny_peft()
    model.merge_adapter()
    with pytest.raises(RuntimeError, match="merged into its base already"):
        list(policy_weights(model))


def test_merged_weight_of_an_fp32_base_leaves_it_untouched():
    model, _ = tiny_peft()
    model = model.float()
    layer = model.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_B["default"].weight.fill_(0.5)
    w = layer.get_base_layer().weight.detach().clone()
    out = merged_weight(layer)
    assert torch.equal(layer.get_base_layer().weight, w) and not torch.equal(out, w)
