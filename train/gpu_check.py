"""Device check of the training role: one training step at the real shapes, one PASS/FAIL line each.

    python -m train.gpu_check                 # GPU host: Qwen2.5-3B and 7B shapes, bf16
    python -m train.gpu_check --cpu           # tiny shape on CPU, fp32 (what CI runs)

Needs only torch, Transformers and PEFT (bitsandbytes if installed; TRL and vLLM are not used), no
network and no weights: random-initialised models of the real shapes (rcea/device_check.py). For each
shape, in its own process: a rank-32 LoRA (alpha 64) on every projection, gradient checkpointing, and
one optimizer step of a token-level policy-gradient loss over `--rows` sequences of 204 prompt + 2,048
completion tokens (the scale's micro-batch: 16 rows at 3B, 8 at 7B), with 8-bit AdamW from bitsandbytes
when it is importable (else torch AdamW, and the line says so). Checks: the trainable parameter count
equals r x (in + out) summed over every adapted matrix (by hand, rcea.device_check.lora_params), the loss
is finite, only LoRA weights moved, and peak memory stays under 90% of the GPU; step time, tokens per
second and peak memory are printed. Log-probs are computed one row at a time from the hidden states (as
TRL does), so the (rows x T x V) logits never exist at once.
"""

from __future__ import annotations

import json
import sys
import time

ROWS = {"3b": 16, "7b": 8, "tiny": 4}
PROMPT, COMPLETION = 204, 2048


def row_logprobs(hidden, head, targets):
    """(T,) log-prob of `targets` (T,) from hidden states (T, H) through `head`, in fp32."""
    import torch

    logits = head(hidden).float()                                  # (T, V) for one row only
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)


def optimizer_for(params, lr: float, device: str):
    """8-bit AdamW (bitsandbytes) on a GPU when importable, else torch AdamW; returns (optimizer, name)."""
    import torch

    if device.startswith("cuda"):
        try:
            import bitsandbytes as bnb

            return bnb.optim.AdamW8bit(params, lr=lr), "bitsandbytes AdamW8bit"
        except ImportError:
            return torch.optim.AdamW(params, lr=lr), "torch AdamW (bitsandbytes not importable: 8-bit AdamW NOT checked)"
    return torch.optim.AdamW(params, lr=lr), "torch AdamW (CPU)"


def part_step(shape: str, device: str, rows: int, prompt: int, completion: int) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model

    from rcea.device_check import LORA_TARGETS, lora_params, random_model

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    base = random_model(shape, dtype, device)
    base.config.use_cache = False
    base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = get_peft_model(base, LoraConfig(r=32, lora_alpha=64, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                            task_type="CAUSAL_LM"))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_trainable = sum(p.numel() for p in trainable)
    frozen_before = model.get_output_embeddings().weight.detach().float().sum().item()
    lora_before = [p.detach().clone() for p in trainable[:4]]
    opt, opt_name = optimizer_for(trainable, 1e-4, device)
    V = base.config.vocab_size
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, V, (rows, prompt + completion), generator=g).to(device)
    adv = torch.randn(rows, generator=g).to(device)                 # one advantage per sequence

    def step() -> float:
        hidden = model.base_model.model.model(input_ids=ids).last_hidden_state   # (rows, L, H)
        head = model.get_output_embeddings()
        total = 0.0
        for b in range(rows):   # one row of logits at a time; backward through each row's graph at the end
            lp = row_logprobs(hidden[b, prompt - 1:-1], head, ids[b, prompt:])
            total = total + (-(adv[b] * lp).mean() / rows)
        total.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(total.detach())

    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss = step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = total = None
    if device.startswith("cuda"):
        peak, total = torch.cuda.max_memory_allocated() / 2**30, torch.cuda.get_device_properties(0).total_memory / 2**30
    moved = any(not torch.equal(a, b.detach()) for a, b in zip(lora_before, trainable[:4]))
    frozen_same = model.get_output_embeddings().weight.detach().float().sum().item() == frozen_before
    want = lora_params(shape, 32)
    ok = n_trainable == want and moved and frozen_same and loss == loss and abs(loss) < float("inf") \
        and (peak is None or peak < 0.9 * total)
    tokens = rows * (prompt + completion)
    return {"check": f"train-step-{shape}", "ok": bool(ok), "seconds": dt, "peak_gib": peak,
            "trainable": n_trainable, "expected_trainable": want, "optimizer": opt_name,
            "detail": f"{rows} x {prompt}+{completion} tokens, LoRA r32: {dt:.1f} s/step "
                      f"({tokens / dt:,.0f} tokens/s)" + (f", peak {peak:.1f} of {total:.0f} GiB" if peak else "")
                      + f"; trainable {n_trainable:,} (by hand {want:,}); LoRA moved {moved}, base frozen "
                      f"{frozen_same}; loss {loss:.4f}; {opt_name}"}


def dispatch(args: list[str]) -> dict:
    shape, device, *sizes = args
    return part_step(shape, device, *map(int, sizes))


def main(argv=None) -> int:
    from rcea.device_check import check_parser, finish, gpu_present, run_part

    p = check_parser("train.gpu_check", __doc__, "real shapes (3b, 7b)")
    p.add_argument("--rows", type=int, default=0, help="sequences per step (0: the scale's micro-batch)")
    a = p.parse_args(argv)
    if a._part:
        print(json.dumps(dispatch(a._part)))
        return 0
    if a.cpu:
        device, shapes, sizes = "cpu", ["tiny"], [16, 64]
    elif gpu_present():
        device, shapes, sizes = "cuda", a.shapes.split(","), [PROMPT, COMPLETION]
    else:
        return 2
    t0 = time.perf_counter()
    results = [run_part("train.gpu_check", [s, device, str(a.rows or ROWS[s]), *map(str, sizes)], dispatch)
               for s in shapes]
    return finish(results, t0)


if __name__ == "__main__":
    sys.exit(main())
