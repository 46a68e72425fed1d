"""GPU tier (skipped without CUDA; `python -m infer.gpu_check` is the image's own check, without pytest):
vLLM generation with a LoRA adapter, Transformers scoring on the GPU, chunked entropy memory on the GPU."""

import importlib.util

import numpy as np
import pytest

from infer.backends import SamplingSpec, get_backend

pytestmark = pytest.mark.gpu
CKPT = "train/tiny/grpo/checkpoints/checkpoint-{}"


@pytest.fixture(scope="module")
def prompts(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    return [list(tok.apply_chat_template([{"role": "user", "content": t}], add_generation_prompt=True,
                                         tokenize=True)["input_ids"]) for t in ("Compute 3+4.", "Compute 12+9+1.")]


def test_hf_scoring_on_gpu_matches_cpu(tiny_model_dir, tiny_data_template, prompts):
    cpu = get_backend("hf", str(tiny_model_dir))
    gpu = get_backend("hf", str(tiny_model_dir), device="cuda", dtype="float32")
    for be in (cpu, gpu):
        be.set_adapter(str(tiny_data_template / CKPT.format(4)))
    comps = [c.token_ids for c in cpu.generate(prompts, SamplingSpec(12, temperature=1.0), seeds=[1, 2])]
    a, b = cpu.score(prompts, comps), gpu.score(prompts, comps)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x.logprob, y.logprob, atol=1e-3)
        np.testing.assert_allclose(x.entropy, y.entropy, atol=1e-3)
    g = gpu.generate(prompts, SamplingSpec(12, temperature=1.0), seeds=[1, 2])
    assert [c.token_ids for c in g] == [c.token_ids for c in gpu.generate(prompts, SamplingSpec(12), seeds=[1, 2])]


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is installed only in the GPU infer image")
def test_vllm_generation_with_lora_matches_transformers(tiny_model_dir, tiny_data_template, prompts):
    # bf16: vLLM's LoRA kernels take only fp16/bf16 (the backend refuses float32); HF in bf16 too, so the
    # greedy prefixes compare like with like.
    vl = get_backend("vllm", str(tiny_model_dir), max_lora_rank=8, gpu_memory_utilization=0.3, max_model_len=512,
                     dtype="bfloat16", enforce_eager=True)
    hf = get_backend("hf", str(tiny_model_dir), device="cuda", dtype="bfloat16")
    spec = SamplingSpec(12, greedy=True)
    base = [c.token_ids for c in vl.generate(prompts, spec)]
    for be in (vl, hf):
        be.set_adapter(str(tiny_data_template / CKPT.format(4)))
    lora_vl = vl.generate(prompts, spec)
    lora_hf = hf.generate(prompts, spec)
    assert [c.token_ids[:4] for c in lora_vl] == [c.token_ids[:4] for c in lora_hf]   # greedy prefixes agree
    assert [c.token_ids for c in lora_vl] != base                                          # the adapter is applied
    sampled = vl.generate(prompts, SamplingSpec(12, temperature=1.0), seeds=[5, 6])
    again = vl.generate(prompts, SamplingSpec(12, temperature=1.0), seeds=[5, 6])
    assert [c.token_ids for c in sampled] == [c.token_ids for c in again]
    assert all(len(c.token_ids) <= 12 for c in sampled)


def test_chunked_entropy_memory_on_gpu():
    from infer.entropy_bench import entropy_bench

    res = {r["method"]: r for r in entropy_bench(2048, 2048, 151_936, 256, "cuda")}
    assert res["chunked"]["peak_bytes"] <= res["naive"]["peak_bytes"] / 8
    assert res["chunked"]["seconds"] <= 1.1 * res["naive"]["seconds"]
