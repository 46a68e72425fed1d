"""One GPU check, a few minutes on a single GPU: the GPU test tier plus a short benchmark at real shapes.

    python -m infer.gpu_check [--quick]

1. `pytest -m gpu tests/infer`: vLLM generation with a LoRA adapter, Transformers scoring on the GPU,
   chunked-entropy memory on the GPU.
2. A random-initialised model with the real Qwen2.5-3B shapes (from a config; no weights download) and
   a random rank-32 LoRA adapter on every projection: Transformers teacher-forced scoring of 8 x 2,048
   tokens (time, peak memory, entropy bounds) and, if vLLM is installed, generation with the adapter
   (tokens per second). Each part runs in its own process so GPU memory is measured cleanly.
3. `python -m infer.bench --skip-queue` on the GPU (V = 151,936, T = 2,048, H = 2,048).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

QWEN25_3B = dict(vocab_size=151_936, hidden_size=2048, intermediate_size=11008, num_hidden_layers=36,
                 num_attention_heads=16, num_key_value_heads=2, max_position_embeddings=32768,
                 rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True)
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build(out: Path, layers: int | None = None) -> None:
    """Random-initialised Qwen2.5-3B-shaped model (bf16) + a tokenizer + a random LoRA adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rcea.tiny import build_tokenizer

    cfg = Qwen2Config(**{**QWEN25_3B, **({"num_hidden_layers": layers} if layers else {})},
                      bos_token_id=0, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out / "model")
    tok = build_tokenizer(512, ["Compute 1+2. \\boxed{3}"] * 50)
    tok.save_pretrained(out / "model")
    peft = get_peft_model(model, LoraConfig(r=32, lora_alpha=64, target_modules=TARGETS, init_lora_weights=False))
    peft.save_pretrained(out / "adapter")


def part_score(out: Path) -> dict:
    import torch

    from infer.backends import get_backend

    be = get_backend("hf", str(out / "model"), device="cuda", batch_size=8, chunk=256)
    be.set_adapter(str(out / "adapter"))
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 500, (100,), generator=g).tolist() for _ in range(8)]
    comps = [torch.randint(3, 151_936, (2048,), generator=g).tolist() for _ in range(8)]
    be.score(prompts[:1], [comps[0][:64]])                      # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    res = be.score(prompts, comps)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    ent = [r.entropy for r in res]
    lp = [r.logprob for r in res]
    ok = all((e >= 0).all() and (e <= math.log(151_936) + 1e-6).all() for e in ent) and all((x <= 0).all() for x in lp)
    return {"part": "score", "tokens": 8 * 2048, "seconds": dt, "tokens_per_s": 8 * 2048 / dt,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30, "bounds_ok": bool(ok),
            "mean_entropy": float(sum(e.mean() for e in ent) / len(ent))}


def part_vllm(out: Path) -> dict:
    from importlib.util import find_spec

    if find_spec("vllm") is None:
        return {"part": "vllm", "skipped": "vLLM not installed (GPU infer image only)"}
    from infer.backends import SamplingSpec, get_backend

    be = get_backend("vllm", str(out / "model"), max_lora_rank=32, gpu_memory_utilization=0.6, max_model_len=1024)
    be.set_adapter(str(out / "adapter"))
    prompts = [[3 + (i * 7 + j) % 400 for j in range(64)] for i in range(64)]
    t0 = time.perf_counter()
    res = be.generate(prompts, SamplingSpec(256, temperature=0.7, top_p=0.95), seeds=list(range(64)))
    dt = time.perf_counter() - t0
    n = sum(len(r.token_ids) for r in res)
    again = be.generate(prompts[:4], SamplingSpec(256, temperature=0.7, top_p=0.95), seeds=list(range(4)))
    return {"part": "vllm", "sequences": 64, "tokens": n, "seconds": dt, "tokens_per_s": n / dt,
            "seeded_repeat_equal": [r.token_ids for r in again] == [r.token_ids for r in res[:4]]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m infer.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="4 layers instead of 36 in the real-shape model")
    p.add_argument("--_part", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_dir", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a._part:
        fn = {"score": part_score, "vllm": part_vllm}[a._part]
        print(json.dumps(fn(Path(a._dir))))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("no CUDA GPU here: run this on a GPU host (the infer GPU image)")
        return 2
    rc = subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests/infer"])
    results, ok = [], rc == 0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"from infer.gpu_check import build; from pathlib import Path; "
                        f"build(Path({tmp!r}), {4 if a.quick else None})"], check=True)
        print(f"built a random Qwen2.5-3B-shaped model and adapter in {time.perf_counter() - t0:.0f} s")
        for part in ("score", "vllm"):
            out = subprocess.run([sys.executable, "-m", "infer.gpu_check", "--_part", part, "--_dir", tmp],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                print(out.stderr[-3000:])
                ok = False
                continue
            r = json.loads(out.stdout.strip().splitlines()[-1])
            results.append(r)
            print(json.dumps(r))
            ok &= r.get("bounds_ok", True) and r.get("seeded_repeat_equal", True)
    ok &= subprocess.call([sys.executable, "-m", "infer.bench", "--skip-queue"]) == 0
    print("GPU check passed" if ok else "GPU CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
