"""Device check of the inference role: one PASS/FAIL/SKIP line per check, a few minutes on one GPU.

    python -m infer.gpu_check                 # GPU host: real Qwen2.5-3B and 7B shapes
    python -m infer.gpu_check --cpu           # the same code at a tiny shape on CPU (what CI runs)

Needs only torch, Transformers and PEFT (and this repository); no pytest, no test files, no network,
no weights: the models are random-initialised at the real shapes (rcea/device_check.py), so memory and
speed are real while the numbers are not. Checks, each in its own process so GPU memory is clean:

1. score-<shape>: the Transformers backend's teacher-forced scoring of the same inputs with the model in
   bf16 and in fp32: mean |difference| of per-token log-prob and entropy (nats), entropy within [0, log V],
   tokens per second and peak memory in bf16.
2. entropy: chunked full-vocabulary entropy against the naive whole-sequence log_softmax at V = 151,936,
   T = 2,048 (infer/entropy_bench.py): peak-memory ratio (target <= 1/8) and speed ratio (GPU: chunked no slower
   than 1.1x naive).
3. vllm: generation with a random rank-32 LoRA adapter through the vLLM backend (bf16), with the settings
   vLLM documents for reproducible runs (infer.backends.vllm_args.REPRODUCIBLE_ENV: engine core in-process,
   VLLM_BATCH_INVARIANT=1, set before vLLM is imported): the same batch of prompts and seeds twice must be
   identical (the prefix cache is reset in between, as a rerun in a fresh process would start), processed
   sampler log-probs <= 0. The same prompts in reverse order (a different batch) are reported too: batch
   invariance says they match, but that is vLLM's claim for this GPU, so it is shown, not required.
   Skipped, with the reason, without vLLM.
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time

TOL_LOGPROB, TOL_ENTROPY = 0.05, 0.02   # nats: bf16 scoring against fp32, mean absolute difference


def _inputs(vocab: int, n: int, prompt: int, completion: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, vocab, (prompt,), generator=g).tolist() for _ in range(n)]
    comps = [torch.randint(3, vocab, (completion,), generator=g).tolist() for _ in range(n)]
    return prompts, comps


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def score_difference(fp32, bf16) -> dict:
    """Mean absolute per-token difference (nats) between two lists of `Scored`."""
    import numpy as np

    lp = np.concatenate([a.logprob - b.logprob for a, b in zip(fp32, bf16)])
    ent = np.concatenate([a.entropy - b.entropy for a, b in zip(fp32, bf16)])
    return {"logprob_mad": float(np.abs(lp).mean()), "entropy_mad": float(np.abs(ent).mean())}


def part_score(shape: str, device: str, n: int, prompt: int, completion: int) -> dict:
    import numpy as np
    import torch

    from infer.backends.hf import HFBackend
    from rcea.device_check import random_model

    model = random_model(shape, torch.float32, device)
    head = model.get_output_embeddings().weight
    with torch.no_grad():   # logits of std ~2 (random init gives ~0.9 or less): entropies well below log V, so
        head.mul_(2.0 / (float(head.std()) * model.config.hidden_size ** 0.5))   # bf16 rounding shows in them
    vocab = model.config.vocab_size
    prompts, comps = _inputs(vocab, n, prompt, completion)
    be = HFBackend.from_model(model, batch_size=n, chunk=256)
    with torch.inference_mode():
        fp32 = be.score(prompts, comps)
        model.to(torch.bfloat16)                                   # same weights, rounded to bf16
        be = HFBackend.from_model(model, batch_size=n, chunk=256)  # fresh: its fp32 head copy is per model dtype
        be.score(prompts[:1], [comps[0][:16]])                     # warm-up
        _sync(device)
        if device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        bf16 = be.score(prompts, comps)
        _sync(device)
        dt = time.perf_counter() - t0
    diff = score_difference(fp32, bf16)
    bounds = all(((s.entropy >= -1e-6) & (s.entropy <= math.log(vocab) + 1e-6)).all() and (s.logprob <= 1e-6).all()
                 for s in bf16)
    ok = bounds and diff["logprob_mad"] <= TOL_LOGPROB and diff["entropy_mad"] <= TOL_ENTROPY \
        and all(np.isfinite(s.entropy).all() for s in bf16)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return {"check": f"score-{shape}", "ok": bool(ok), **diff, "bounds_ok": bool(bounds),
            "tokens_per_s": round(n * completion / dt, 1), "peak_gib": peak,
            "detail": f"bf16 vs fp32 mean |dlogp| {diff['logprob_mad']:.4f} (<= {TOL_LOGPROB}), mean |dH| "
                      f"{diff['entropy_mad']:.4f} (<= {TOL_ENTROPY}) nats; {n * completion / dt:,.0f} tokens/s"
                      + (f", peak {peak:.1f} GiB" if peak is not None else "")}


def part_entropy(device: str, T: int, H: int, V: int, chunk: int) -> dict:
    from infer.entropy_bench import entropy_bench

    res = {r["method"]: r for r in entropy_bench(T, H, V, chunk, device)}
    mem = res["chunked"]["peak_bytes"] / max(res["naive"]["peak_bytes"], 1)
    speed = res["naive"]["seconds"] / res["chunked"]["seconds"]
    ok = mem <= 1 / 8 and (speed >= 1 / 1.1 or not device.startswith("cuda"))   # CPU times are shared-core noise
    return {"check": "entropy", "ok": bool(ok), "memory_ratio": mem, "speedup": speed,
            "detail": f"T={T} V={V:,}: chunked/naive peak memory {mem:.3f} (<= 0.125), speed x{speed:.2f} "
                      f"(chunked {T / res['chunked']['seconds']:,.0f} tokens/s)"}


def part_vllm(device: str) -> dict:
    from importlib.util import find_spec

    if not device.startswith("cuda"):
        return {"check": "vllm", "skip": "vLLM generation needs a CUDA GPU"}
    if find_spec("vllm") is None:
        return {"check": "vllm", "skip": "vLLM is not installed here (only the infer GPU image has it)"}
    from infer.backends.vllm_args import reproducible_env

    env = reproducible_env()   # before vLLM is imported: it reads some of them at import
    import torch
    from peft import LoraConfig, get_peft_model

    from infer.backends import SamplingSpec
    from infer.backends.vllm_backend import VLLMBackend
    from rcea.device_check import LORA_TARGETS, random_model
    from rcea.tiny import build_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        model = random_model("3b", torch.bfloat16, "cuda", layers=4)
        model.save_pretrained(f"{tmp}/model")
        build_tokenizer(512, ["Compute 1+2. \\boxed{3}"] * 50).save_pretrained(f"{tmp}/model")
        get_peft_model(model, LoraConfig(r=32, lora_alpha=64, target_modules=LORA_TARGETS,
                                         init_lora_weights=False)).save_pretrained(f"{tmp}/adapter")
        del model
        torch.cuda.empty_cache()
        be = VLLMBackend(f"{tmp}/model", max_lora_rank=32, gpu_memory_utilization=0.6, max_model_len=1024)
        be.set_adapter(f"{tmp}/adapter")
        prompts = [[3 + (i * 7 + j) % 400 for j in range(64)] for i in range(64)]
        spec = SamplingSpec(256, temperature=0.7, top_p=0.95)
        t0 = time.perf_counter()
        first = be.generate(prompts, spec, seeds=list(range(64)))
        dt = time.perf_counter() - t0
        be.llm.reset_prefix_cache()
        again = be.generate(prompts, spec, seeds=list(range(64)))   # same batch, same prompts, same seeds
        be.llm.reset_prefix_cache()
        reverse = be.generate(prompts[::-1], spec, seeds=list(range(64))[::-1])[::-1]   # another batch order
    n = sum(len(r.token_ids) for r in first)
    same = [r.token_ids for r in again] == [r.token_ids for r in first]
    reordered = [r.token_ids for r in reverse] == [r.token_ids for r in first]
    lps_ok = all(r.sampler_logprobs is not None and all(x <= 1e-6 for x in r.sampler_logprobs) for r in first)
    return {"check": "vllm", "ok": bool(same and lps_ok), "tokens_per_s": n / dt, "settings": env,
            "reordered_identical": reordered,
            "detail": f"64 x 256 tokens with a rank-32 adapter: {n / dt:,.0f} tokens/s; seeded repeat of the "
                      f"same batch identical: {same}; in reverse order identical: {reordered} (shown, not "
                      f"required); processed log-probs <= 0: {lps_ok}; "
                      + " ".join(f"{k}={v}" for k, v in env.items())}


def dispatch(args: list[str]) -> dict:
    kind, device, *rest = args
    if kind == "score":
        return part_score(rest[0], device, *map(int, rest[1:]))
    if kind == "entropy":
        return part_entropy(device, *map(int, rest))
    return part_vllm(device)


def main(argv=None) -> int:
    from rcea.device_check import check_parser, finish, gpu_present, run_part

    from rcea.device_check import GPU_SCALES

    a = check_parser("infer.gpu_check", __doc__, f"real shapes to score ({', '.join(GPU_SCALES)})").parse_args(argv)
    if a._part:
        print(json.dumps(dispatch(a._part)))
        return 0
    if a.cpu:
        device, shapes, sizes, ent = "cpu", ["tiny"], ["4", "32", "128"], ["1024", "64", "32768", "64"]
    elif gpu_present():
        device, shapes, sizes, ent = "cuda", a.shapes.split(","), ["8", "204", "2048"], ["2048", "2048", "151936", "256"]
    else:
        return 2
    t0 = time.perf_counter()
    results = [run_part("infer.gpu_check", ["score", device, s, *sizes], dispatch) for s in shapes]
    results.append(run_part("infer.gpu_check", ["entropy", device, *ent], dispatch))
    results.append(run_part("infer.gpu_check", ["vllm", device], dispatch))
    return finish(results, t0)


if __name__ == "__main__":
    sys.exit(main())
