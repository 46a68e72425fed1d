"""`python -m train.bench`: each objective's step cost on the tiny model as a ratio to plain TRL GRPO.

One rollout is generated once (plain TRL) and shared, so generation noise cancels. Measured, as medians
over interleaved repeats:
  loss_bwd   one micro-batch forward + loss + backward (TRL `compute_loss` vs ours)     ratio -> target <= 1.10
  prepare    our rollout-side work without the reference pass (group work, rollout-entropy pass)
  ref_pass   the reference (adapter-disabled) forward pass of Archer / EP-GRPO, reported separately
  step       the optimizer step, generation amortised over num_iterations:
             (gen + prepare) / mu + GA * loss_bwd, as a ratio to TRL's gen / mu + GA * loss_bwd
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
    from train.run import grpo_config, load_policy, lora_config, objective_settings, synthetic, training_dataset
    from train.trainer import ObjectiveGRPOTrainer

    cfg = load_config("tiny", method or "grpo", overrides)
    seed_everything(cfg["train.seed"])
    model, tok = load_policy(cfg)
    ds = training_dataset(cfg, tok)
    common = dict(model=model, reward_funcs=[synthetic], args=grpo_config(cfg, tmp / (method or "trl")),
                  train_dataset=ds, processing_class=tok, peft_config=lora_config(cfg))
    if method is None:
        tr = GRPOTrainer(**common)
    else:
        tr = ObjectiveGRPOTrainer(**common, objective=method, objective_settings=objective_settings(cfg))
    tr.model.train()
    return cfg, tr, ds


def main(argv=None) -> int:
    from train.objectives import NAMES

    ap = argparse.ArgumentParser(prog="python -m train.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
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
    t = time.perf_counter()
    rollout = base._generate_and_score_completions(rows)
    gen = time.perf_counter() - t
    ids = [r.tolist() for r in rollout["completion_ids"]]
    rewards = torch.tensor([float(i[0] % 2 == 0) for i in ids])
    mu, ga = cfg["train.num_iterations"], cfg["train.grad_accum"]

    trainers = {"trl": (base, rollout)}
    prep_times, ref_times = {}, {}
    for m in args.methods:
        _, tr, _ = build(m, over, tmp)
        src = {**rollout, "rcea_rewards": rewards}
        batch = tr._add_objective_inputs(dict(src), rows)  # warm-up
        prep_times[m] = _timed(lambda: tr._add_objective_inputs(dict(src), rows), 3)
        if tr.objective.needs_ref:
            ref_times[m] = _timed(lambda: tr._rollout_forward(src, with_ref=True, with_entropy=False), 3)
        trainers[m] = (tr, batch)

    def loss_bwd(tr, b):
        loss = tr.compute_loss(tr.model, b)
        loss.backward()
        tr.model.zero_grad(set_to_none=True)

    times = {k: [] for k in trainers}
    for _ in range(args.reps):  # interleaved, so load changes hit every entry alike
        for k, (tr, b) in trainers.items():
            times[k] += _timed(lambda: loss_bwd(tr, b), 1)
    med = {k: statistics.median(v) for k, v in times.items()}
    base_step = gen / mu + ga * med["trl"]
    print(f"tiny model, {P} prompts x {G} completions, <= {args.completion_tokens} tokens, mu={mu}, GA={ga}; "
          f"generation {gen:.3f}s; TRL loss+backward {med['trl'] * 1e3:.1f} ms; step {base_step:.3f}s")
    print(f"{'objective':10s} {'loss_bwd':>9s} {'prepare':>9s} {'ref_pass':>9s} {'step':>7s}  (ratios to TRL GRPO)")
    for m in args.methods:
        ref = statistics.median(ref_times[m]) if m in ref_times else 0.0
        prep = max(statistics.median(prep_times[m]) - ref, 0.0)
        step = (gen + prep) / mu + ga * med[m]
        print(f"{m:10s} {med[m] / med['trl']:9.3f} {prep / base_step:9.3f} {ref / base_step:9.3f} "
              f"{step / base_step:7.3f}  {'ok' if step / base_step <= 1.10 else 'OVER 1.10'}")
    print("prepare / ref_pass: seconds per rollout as a fraction of one TRL step; step excludes ref_pass.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
