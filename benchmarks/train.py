"""`python -m benchmarks.train`: each objective's step cost on the tiny model as a ratio to plain TRL GRPO.

Every trainer generates from the same seed and the same (B = 0) LoRA policy, so the completions agree;
batches are built once per trainer and reused. Measured as the minimum (loss, rollout) or median (prepare)
over interleaved repeats:
  loss_bwd   one micro-batch forward + loss + backward (TRL `compute_loss` vs ours)     ratio -> target <= 1.10
  rollout    generation + scoring + TRL's old-log-prob pass (ours also captures rollout entropies there)
  prepare    our rollout-side work without the reference pass (group work, rollout-entropy pass)
  ref_pass   the reference (adapter-disabled) forward pass of Archer / EP-GRPO, reported separately
  step       the optimizer step, generation amortised over num_iterations:
             (rollout + prepare) / mu + GA * loss_bwd, as a ratio to TRL's rollout / mu + GA * loss_bwd
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch


def _timed(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def build(method: str | None, overrides, tmp: Path):
    from trl import GRPOTrainer

    from rcea.config import load_config
    from rcea.seeds import seed_everything
    from train.objectives import settings_for
    from train.run import grpo_config, load_policy, lora_config, synthetic, training_dataset
    from train.trainer import ObjectiveGRPOTrainer

    cfg = load_config("tiny", method or "grpo", overrides)
    seed_everything(cfg["train.seed"])
    model, tok = load_policy(cfg)
    ds = training_dataset(cfg, tok)
    common = dict(model=model, reward_funcs=[synthetic], args=grpo_config(cfg, tmp / (method or "trl"), tok),
                  train_dataset=ds, processing_class=tok, peft_config=lora_config(cfg))
    if method is None:
        tr = GRPOTrainer(**common)
    else:
        tr = ObjectiveGRPOTrainer(**common, objective=method, objective_settings=settings_for(cfg))
    tr.model.train()
    tr.current_gradient_accumulation_steps = cfg["train.grad_accum"]  # set by the training loop otherwise
    return cfg, tr, ds


def main(argv=None) -> int:
    from train.objectives import NAMES

    ap = argparse.ArgumentParser(prog="python -m benchmarks.train", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=15, help="loss+backward repeats per objective")
    ap.add_argument("--gen-reps", type=int, default=5, help="rollout repeats per objective")
    ap.add_argument("--completion-tokens", type=int, default=32)
    ap.add_argument("--methods", nargs="*", default=list(NAMES))
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: no spinning on a shared CPU)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    over = [f"train.max_completion_tokens={args.completion_tokens}", "data.draw_size=32"]
    tmp = Path(tempfile.mkdtemp(prefix="rcea-bench-"))

    cfg, base, ds = build(None, over, tmp)
    G = cfg["train.num_generations"]
    P = cfg["train.per_device_batch"] * cfg["train.grad_accum"] // G
    rows = [dict(ds[i]) for i in range(P) for _ in range(G)]
    mu, ga = cfg["train.num_iterations"], cfg["train.grad_accum"]

    trainers = {"trl": base}
    for m in args.methods:
        trainers[m] = build(m, over, tmp)[1]

    def rollout(k):  # same seed, same (zero-initialised-B) LoRA policy -> the same completions everywhere
        torch.manual_seed(1234)
        tr = trainers[k]
        return tr._generate_and_score_completions(rows) if k == "trl" else tr._scored_rollout(rows)

    gen = {k: [] for k in trainers}
    for _ in range(args.gen_reps):
        for k in trainers:
            gen[k] += _timed(lambda: rollout(k), 1)
    batches, prep_times, ref_times = {"trl": rollout("trl")}, {}, {}
    for m in args.methods:
        tr, src = trainers[m], rollout(m)
        prep_times[m] = _timed(lambda: tr._add_objective_inputs(dict(src), rows), 3)
        if tr.objective.needs_ref:
            ref_times[m] = _timed(lambda: tr._rollout_forward(src, with_ref=True, with_entropy=False), 3)
        batches[m] = tr._add_objective_inputs(dict(src), rows)
    gen = {k: min(v) for k, v in gen.items()}

    def loss_bwd(tr, b):
        loss = tr.compute_loss(tr.model, b)
        loss.backward()
        tr.model.zero_grad(set_to_none=True)

    times = {k: [] for k in trainers}
    for _ in range(args.reps):  # interleaved, so load changes hit every entry alike
        for k, tr in trainers.items():
            times[k] += _timed(lambda: loss_bwd(tr, batches[k]), 1)
    med = {k: min(v) for k, v in times.items()}  # min: the least-disturbed repeat on a shared CPU
    base_step = gen["trl"] / mu + ga * med["trl"]
    print(f"tiny model, {P} prompts x {G} completions, <= {args.completion_tokens} tokens, mu={mu}, GA={ga}; "
          f"TRL generation {gen['trl']:.3f}s, loss+backward {med['trl'] * 1e3:.1f} ms, step {base_step:.3f}s")
    print(f"{'objective':10s} {'loss_bwd':>9s} {'rollout':>9s} {'prepare':>9s} {'ref_pass':>9s} {'step':>7s}  "
          "(ratios to TRL GRPO)")
    for m in args.methods:
        ref = statistics.median(ref_times[m]) if m in ref_times else 0.0
        prep = max(statistics.median(prep_times[m]) - ref, 0.0)
        step = (gen[m] + prep) / mu + ga * med[m]
        print(f"{m:10s} {med[m] / med['trl']:9.3f} {gen[m] / gen['trl']:9.3f} {prep / base_step:9.3f} {ref / base_step:9.3f} "
              f"{step / base_step:7.3f}  {'ok' if step / base_step <= 1.10 else 'OVER 1.10'}")
    print("prepare / ref_pass: seconds per rollout as a fraction of one TRL step; step excludes ref_pass.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
