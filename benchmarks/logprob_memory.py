"""`python -m benchmarks.logprob_memory`: peak memory of the training pass's log-probs, TRL's vs chunked, on CPU.

One loss step (forward, a weighted sum of the log-probs, backward) of a small Qwen2 policy as the trainer
holds it (bf16 weights, PEFT LoRA, gradient checkpointing, Accelerate-prepared with bf16 autocast) at a
moderate vocabulary, through TRL 0.29.0's unchunked `_get_per_token_logps_and_entropies` (chunk 0) and
through train/logprobs.py at several chunk sizes. Each configuration runs in a fresh process; the peak is
the process's resident-set high-water mark (VmHWM, reset through /proc/self/clear_refs once the model is
built) minus its resident set just before the step, in MiB. glibc is told to mmap every block of 1 MiB or
more (MALLOC_MMAP_THRESHOLD_), so freed tensors leave the resident set at once and it follows the live ones. The printed unit L is one fp32 logits
tensor of the micro-batch (B x K x V x 4 bytes): TRL's peak in L is the factor the GPU plan scales by, and
the chunked peaks' slope over chunk size gives the factor per chunk.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from types import SimpleNamespace

B, P, K = 4, 32, 256           # rows, prompt width, completion positions: B*K = 1,024 rows
VOCAB, HIDDEN, LAYERS = 32768, 256, 2  # (bf16 matrix products are slow on CPU: about 1 GFLOP/s here)
CHUNKS = (0, 1024, 256)


def _kib(field: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status (Linux only)")


def policy():
    import torch
    from accelerate import Accelerator
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    acc = Accelerator(cpu=True, mixed_precision="bf16")
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                             task_type="CAUSAL_LM"))
    model.gradient_checkpointing_enable({"use_reentrant": False})
    model.enable_input_require_grads()
    model.train()
    return acc.prepare(model)


def one(chunk: int, grad: bool) -> dict:
    """Peak resident-set growth (MiB) of one loss step (or one no-grad pass) at this chunk size."""
    import torch

    from train.logprobs import token_logps_and_entropies

    torch.set_num_threads(1)
    model = policy()
    ids = torch.randint(3, VOCAB, (B, P + K), generator=torch.Generator().manual_seed(1))
    attn = torch.ones_like(ids)
    w = torch.randn(B, K, generator=torch.Generator().manual_seed(2))
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset VmHWM to the current resident set
    before = _kib("VmRSS")
    with torch.set_grad_enabled(grad):
        if chunk:
            logp, ent = token_logps_and_entropies(model, ids, attn, K, 1.0, True, chunk)
        else:
            from trl import GRPOTrainer

            trl_pass = GRPOTrainer._get_per_token_logps_and_entropies.__wrapped__
            me = SimpleNamespace(model_kwarg_keys={"input_ids", "attention_mask", "logits_to_keep"}, temperature=1.0)
            logp, ent = trl_pass(me, model, ids, attn, K, compute_entropy=True)
        if grad:
            (w * logp).sum().backward()
    return {"chunk": chunk, "grad": grad, "peak_mib": round((_kib("VmHWM") - before) / 1024, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--no-grad", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--chunks", default=",".join(map(str, CHUNKS)), help="chunk sizes in rows (0: TRL's pass)")
    a = ap.parse_args(argv)
    if a.one is not None:
        print(json.dumps(one(a.one, not a.no_grad)))
        return 0
    L = B * K * VOCAB * 4 / 2**20
    print(f"B={B} K={K} V={VOCAB} H={HIDDEN}: one fp32 logits tensor L = {L:.0f} MiB")
    print(f"{'pass':>14} {'chunk rows':>10} {'peak MiB':>9} {'peak / L':>8} {'/ chunk fp32':>12}")
    for grad in (True, False):
        for chunk in [int(c) for c in a.chunks.split(",")]:
            cmd = [sys.executable, "-m", "benchmarks.logprob_memory", "--one", str(chunk)] + ([] if grad else ["--no-grad"])
            env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}  # glibc: every block >= 1 MiB mmap'd,
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout  # freed at once
            r = json.loads(out.strip().splitlines()[-1])
            rows = chunk or B * K
            per_chunk = r["peak_mib"] / (rows * VOCAB * 4 / 2**20)
            name = ("loss step" if grad else "no-grad pass") + (" TRL" if not chunk else "")
            print(f"{name:>14} {chunk or '-':>10} {r['peak_mib']:>9.1f} {r['peak_mib'] / L:>8.2f} {per_chunk:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
