"""`python -m benchmarks.bf16 drift|ratios`: what bf16 weights do to the training role, measured on the tiny model.

drift   TRL 0.29.0's weight sync merges the LoRA adapter into the frozen bf16 base in place and unmerges it
        (train/vllm_sync.py). A tiny bf16 GRPO run (the tiny scale, train.precision = bf16, TRL's own
        generation) does that merge / unmerge at every rollout, as the stock sync would, and trains on the
        base it leaves; then the same cycles go on with the adapter moving by the run's own per-sync step, up
        to the 3B and 7B runs' sync counts (about 1,000 and 2,000). Printed at each count: the largest and the
        RMS change of the frozen weights (and as a multiple of the LoRA update's RMS), the share of weights
        changed, and the per-token KL(pristine base + LoRA || drifted base + LoRA) with the largest |delta log p|
        on sequences the policy samples. With train/vllm_sync.py's out-of-place merge all of these are 0.
ratios  The importance ratio exp(log p_new - log p_old) of the optimizer iterations as the trainer computes
        it: the Accelerate-prepared bf16 policy (bf16 autocast forward, the head's bf16 output upcast to fp32)
        through train/logprobs.py, fp32 log-softmax. Also with TRL's GRPOConfig.cast_lm_head_to_fp32 applied
        (fp32 head weights and input: under the prepared forward's autocast the product still runs in bf16, so
        it prints the largest log-prob difference, 0) and with a true fp32 head (the bf16 body's last hidden
        state times the head in fp32 outside autocast). Each against the all-fp32 policy, on tokens the bf16
        tiny policy samples, for policy moves of several sizes. Printed: |ratio error| (mean, 99th
        percentile, max) and the share of tokens whose clip decision at 1 - 0.2 / 1 + 0.28 differs from the
        reference's.
Numbers are in docs/objectives.md ("bf16 weight sync", "bf16 log-probabilities").
"""

from __future__ import annotations

import argparse
import copy
import math

import torch

from train.gpu_measure import frozen_copy

CLIP_LOW, CLIP_HIGH = 0.2, 0.28  # DAPO's / Clip-Cov's clip range (configs/objectives.toml)


def tiny_policy(overrides=()):
    """The tiny scale's base policy in bf16 with the scale's LoRA adapter (fp32, as PEFT makes it)."""
    from peft import get_peft_model

    from rcea.config import load_config
    from rcea.seeds import limit_cpu_threads, seed_everything
    from train.run import load_policy, lora_config

    limit_cpu_threads()
    cfg = load_config("tiny", "grpo", ["train.precision='bf16'", *overrides])
    seed_everything(cfg["train.seed"])
    model, tok = load_policy(cfg)
    return cfg, get_peft_model(model, lora_config(cfg)), tok


def adapter(model) -> list[torch.Tensor]:
    """The LoRA adapter's parameters, in order."""
    return [p for n, p in model.named_parameters() if "lora_" in n]


@torch.no_grad()
def load_frozen(model, tensors: dict[str, torch.Tensor]) -> None:
    """Copy `tensors` (a `frozen_copy`) into the model's frozen weights."""
    for n, p in model.named_parameters():
        if n in tensors:
            p.copy_(tensors[n])


def sample(model, tok, cfg, n: int = 16, tokens: int = 32, seed: int = 0) -> torch.Tensor:
    """n sequences: training prompts and completions the model samples (temperature 1)."""
    from rcea.data import chat_messages, load_train_records

    recs = load_train_records(cfg, tok)[:n]
    texts = [tok.apply_chat_template(chat_messages(r["problem"], cfg), add_generation_prompt=True, tokenize=False)
             for r in recs]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=tokens,
                             min_new_tokens=tokens, pad_token_id=tok.pad_token_id)
    return out


@torch.no_grad()
def logprobs(model, ids) -> torch.Tensor:
    return torch.log_softmax(model(ids).logits.float(), -1)


def drift_row(syncs, model, pristine, ids, ref_lp) -> str:
    now = frozen_copy(model)
    diffs = torch.cat([(now[n].float() - pristine[n].float()).flatten() for n in pristine])
    delta_rms = lora_delta_rms(model)
    lp = logprobs(model, ids)
    kl = float((ref_lp.exp() * (ref_lp - lp)).sum(-1).mean())
    ids_next = ids[:, 1:].unsqueeze(-1)
    dlp = float((ref_lp[:, :-1].gather(-1, ids_next) - lp[:, :-1].gather(-1, ids_next)).abs().max())
    rms = float(diffs.pow(2).mean().sqrt())
    return (f"{syncs:6d} syncs: base max |change| {float(diffs.abs().max()):.2e}, RMS {rms:.2e} "
            f"({rms / delta_rms:.3f} x the LoRA update's RMS), {100 * float((diffs != 0).float().mean()):.1f}% of "
            f"weights changed; KL {kl:.2e} nats/token, max |delta log p| {dlp:.3f}")


@torch.no_grad()
def lora_delta_rms(model) -> float:
    from peft.tuners.lora import LoraLayer

    sq, n = 0.0, 0
    for m in model.modules():
        if isinstance(m, LoraLayer):
            d = (m.lora_B["default"].weight @ m.lora_A["default"].weight) * m.scaling["default"]
            sq, n = sq + float(d.pow(2).sum()), n + d.numel()
    return math.sqrt(sq / n)


def cycle(model) -> None:
    """TRL 0.29.0's sync, as far as the base is concerned: PEFT's in-place merge, then unmerge."""
    model.merge_adapter()
    model.unmerge_adapter()


def run_drift(steps: int, counts: list[int]) -> None:
    import tempfile

    from transformers import TrainerCallback

    from train.objectives import settings_for
    from train.run import grpo_config, synthetic, training_dataset
    from train.trainer import ObjectiveGRPOTrainer

    over = [f"train.max_steps={steps}", "train.warmup_ratio=0.0", "train.report_to='none'", "train.save_steps=100000"]
    cfg, model, tok = tiny_policy(over)
    pristine = frozen_copy(model)
    mu = cfg["train.num_iterations"]
    steps_seen: list[float] = []

    class StockSync(TrainerCallback):
        """At each rollout (every num_iterations steps, grad_accum = 1): TRL's merge / unmerge."""

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step % mu == 0:
                before = [p.detach().clone() for p in adapter(model)]
                cycle(model)
                self.prev = before

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % mu == 0:
                now = [p.detach() for p in adapter(model)]
                sq = sum(float((a - b).pow(2).sum()) for a, b in zip(now, self.prev))
                steps_seen.append(math.sqrt(sq / sum(a.numel() for a in now)))

    with tempfile.TemporaryDirectory() as tmp:
        trainer = ObjectiveGRPOTrainer(
            model=model, reward_funcs=[synthetic], args=grpo_config(cfg, tmp), train_dataset=training_dataset(cfg, tok),
            processing_class=tok, callbacks=[StockSync()], objective="grpo", objective_settings=settings_for(cfg))
        trainer.train()
    model = trainer.model.eval()
    syncs = math.ceil(steps / mu)
    ids = sample(model, tok, cfg)
    drifted = frozen_copy(model)
    load_frozen(model, pristine)  # the reference: the trained adapter on the pristine base
    ref_lp = logprobs(model, ids)
    load_frozen(model, drifted)
    step_rms = sum(steps_seen) / max(len(steps_seen), 1)
    print(f"tiny bf16 GRPO run, {steps} steps, {syncs} syncs (TRL's merge / unmerge), the adapter moving "
          f"{step_rms:.2e} RMS per sync; then the same cycles with the adapter moving by that step at random:")
    print(drift_row(syncs, model, pristine, ids, ref_lp))
    # continue the cycles: the base keeps drifting, the reference is the moving adapter on the pristine base
    gen = torch.Generator().manual_seed(1)
    ref_model = copy.deepcopy(model)
    load_frozen(ref_model, pristine)
    lora, ref_lora = adapter(model), adapter(ref_model)
    done = syncs
    for target in sorted(c for c in counts if c > syncs):
        while done < target:
            with torch.no_grad():
                for p, q in zip(lora, ref_lora):
                    p.add_(torch.randn(p.shape, generator=gen) * step_rms)
                    q.copy_(p)
            cycle(model)
            done += 1
        print(drift_row(done, model, pristine, ids, logprobs(ref_model, ids)))


class FP32Head(torch.nn.Module):
    """An LM head computed in fp32 whatever the autocast: (n, H) hidden states -> (n, V) fp32 logits. Under
    Accelerate's bf16 autocast a plain nn.Linear runs in bf16 even with fp32 weights and inputs (TRL's
    cast_lm_head_to_fp32); this one leaves autocast for its product."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = weight  # (V, H), the tied embedding; not copied

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        with torch.autocast(h.device.type, enabled=False):
            return h.float() @ self.weight.float().T


def trl_cast_head(model) -> None:
    """TRL 0.29.0's cast_lm_head_to_fp32, as GRPOTrainer.__init__ applies it: the head's weights to fp32 and
    its input cast to fp32 (a tied embedding's output cast back to the body's dtype)."""
    base = model.get_base_model()
    dtype = base.lm_head.weight.dtype
    base.lm_head = base.lm_head.float()
    base.lm_head.register_forward_pre_hook(lambda mod, args: (args[0].float(),) + args[1:])
    if base.config.tie_word_embeddings:
        base.model.embed_tokens.register_forward_hook(lambda mod, args, out: out.to(dtype))


def run_ratios(moves: list[float], untrained: bool = False) -> None:
    """Importance-ratio errors of the trainer's log-probs (the Accelerate-prepared bf16 policy through
    train/logprobs.py: bf16 body, bf16 head output upcast to fp32, fp32 log-softmax), of the same with TRL's
    cast_lm_head_to_fp32, and of a true fp32 head, against the all-fp32 policy, for policy moves."""
    from accelerate import Accelerator

    from train.logprobs import token_logps_and_entropies

    cfg, model, tok = tiny_policy(["toy.warm_start_steps=0"] if untrained else [])
    ids = sample(model, tok, cfg, n=32, tokens=32)
    K = 32
    attn = torch.ones_like(ids)
    attn[:, :-K] = (ids[:, :-K] != tok.pad_token_id).long()  # left-padded prompts
    lora = adapter(model)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in lora:  # a trained adapter (PEFT starts B at zero)
            p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    fp32 = copy.deepcopy(model).float()  # the reference: no autocast, fp32 throughout
    trl_fp32 = copy.deepcopy(model)
    trl_cast_head(trl_fp32)
    true_fp32 = copy.deepcopy(model)
    true_fp32.get_base_model().lm_head = FP32Head(true_fp32.get_output_embeddings().weight)
    acc = Accelerator(cpu=True, mixed_precision="bf16")  # the trainer's prepare: bf16 autocast, fp32 outputs
    variants = {"trainer (bf16 head output, fp32 log-softmax)": model, "TRL cast_lm_head_to_fp32": trl_fp32,
                "true fp32 head": true_fp32}
    variants = {k: acc.prepare(m.eval()) for k, m in variants.items()}
    models = [*variants.values(), fp32.eval()]

    @torch.no_grad()
    def logps() -> list[torch.Tensor]:
        return [token_logps_and_entropies(m, ids, attn, K, 1.0, False, 4096)[0] for m in models]  # (n, K) each

    old = logps()
    same = float((old[1] - old[0]).abs().max())
    base = [p.detach().clone() for p in lora]
    ref = old[-1]
    buckets = [("log p < -4", ref < -4), ("-4 <= log p < -1", (ref >= -4) & (ref < -1)), ("log p >= -1", ref >= -1)]
    print(f"tiny bf16 policy ({'untrained' if untrained else 'warm start'}), {ref.numel()} sampled tokens; "
          f"sampled-token log p: median {float(ref.median()):.2f}, 10th percentile {float(ref.quantile(0.1)):.2f}")
    print(f"TRL's cast_lm_head_to_fp32 under the prepared forward: max |log p - trainer's| = {same:.1e}")
    copies = [list(adapter(m)) for m in (trl_fp32, true_fp32, fp32)]
    for move in moves:
        with torch.no_grad():
            for p, b in zip(lora, base):
                p.copy_(b + torch.randn(p.shape, generator=gen) * move)
            for params in copies:
                for p, q in zip(params, lora):
                    p.copy_(q)  # the same adapter in every variant
        new = logps()
        ratios = [torch.exp(n - o) for n, o in zip(new, old)]
        r32 = ratios[-1]

        def clipped(r):
            return (r < 1 - CLIP_LOW) | (r > 1 + CLIP_HIGH)

        print(f"LoRA move {move:.0e}: reference |ratio - 1| mean {float((r32 - 1).abs().mean()):.3f}, "
              f"{100 * float(clipped(r32).float().mean()):.1f}% of tokens outside the clip range")
        for name, r in zip(variants, ratios):
            err = (r - r32).abs()
            flip = float((clipped(r) != clipped(r32)).float().mean())
            print(f"    {name}: |ratio error| mean {float(err.mean()):.2e}, p99 {float(err.quantile(0.99)):.2e}, "
                  f"max {float(err.max()):.2e}; clip decision differs on {100 * flip:.2f}% of tokens")
            print("        by reference log p: " + "; ".join(
                f"{label} ({int(m.sum())} tokens) {float(err[m].mean()) if m.any() else float('nan'):.2e}"
                for label, m in buckets))
        with torch.no_grad():
            for p, b in zip(lora, base):
                p.copy_(b)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.bf16", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    d = sub.add_parser("drift", help="base-weight drift of TRL's in-place merge / unmerge")
    d.add_argument("--steps", type=int, default=100, help="GRPO steps of the tiny run (the tiny scale's 100)")
    d.add_argument("--counts", default="100,1000,2000", help="sync counts to continue to (3B ~1,000, 7B ~2,000)")
    r = sub.add_parser("ratios", help="importance-ratio error of the trainer's log-probs vs an fp32 LM head")
    r.add_argument("--moves", default="1e-3,3e-3,1e-2", help="LoRA weight moves (std) between old and new policy")
    r.add_argument("--untrained", action="store_true",
                   help="the untrained tiny model (flat distributions: sampled tokens have log p near -log V)")
    a = p.parse_args(argv)
    if a.what == "drift":
        run_drift(a.steps, [int(x) for x in a.counts.split(",")])
    else:
        run_ratios([float(x) for x in a.moves.split(",")], a.untrained)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
