"""`python -m train.noise_study`: does RL beat the warm start by more than run-to-run noise? (tiny toy world)

Trains one method (default GRPO) from the same warm start with several training seeds, then measures
held-out *sampled* accuracy (temperature 1.0, top-p 1.0, the probe's sampling settings) of the warm start
and of every final adapter on the same held-out toy questions with the same sampling seed, in this one
process. Prints and writes (data/results/<scale>/seeds-<method>.{json,md}):

    warm start accuracy, each seed's accuracy, their mean and standard deviation (the run-to-run noise),
    the gain (mean - warm start) and gain / sd, plus the evaluation's own binomial standard error.

Each training run goes to data/seeds/<scale>/<method>/seed-<s>-<config hash>/ and is reused when already
complete, so a rerun only evaluates. The demo's training runs use `train.seed` from the config; this varies it.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from rcea import layout


def sampled_accuracy(model, tokenizer, cfg, questions: list[dict], k: int, seed: int, batch: int = 64) -> float:
    """Mean verifier reward over k samples per question (temperature 1, top-p 1)."""
    import torch

    from rcea.data import chat_messages
    from rcea.verify import reward

    prompts = [tokenizer.apply_chat_template(chat_messages(q["problem"], cfg), add_generation_prompt=True,
                                             tokenize=False) for q in questions]
    rows = [(i, p) for i, p in enumerate(prompts) for _ in range(k)]
    per_q = [0.0] * len(questions)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model.eval()
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        enc = tokenizer([p for _, p in chunk], return_tensors="pt", padding=True, add_special_tokens=False)
        torch.manual_seed(int(torch.randint(2**31 - 1, (1,), generator=gen)))
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                 max_new_tokens=cfg["probe.max_new_tokens"], pad_token_id=tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for (i, _), text in zip(chunk, texts):
            per_q[i] += reward(text, questions[i]["answer"]) / k
    return sum(per_q) / len(per_q)


def _load(cfg, adapter: str | None):
    """The run's policy (`train.run.load_policy`: left-padded tokenizer), with `adapter` merged in."""
    from train.run import load_policy

    model, tok = load_policy(cfg)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).merge_and_unload()
    return model, tok


def report(result: dict) -> str:
    s = result
    lines = [
        f"# Run-to-run noise: {s['method']} on {s['scale']} ({len(s['seeds'])} training seeds)", "",
        f"Held-out sampled accuracy: {s['questions']} toy test questions x {s['k']} samples, temperature 1.0, "
        f"sampling seed {s['eval_seed']}; binomial standard error of one measurement ~{s['eval_se']:.3f}.", "",
        "| policy | training seed | sampled accuracy |", "|---|---|---|",
        f"| warm start | - | {s['warm_start']:.3f} |",
    ]
    lines += [f"| {s['method']} | {seed} | {acc:.3f} |" for seed, acc in zip(s["seeds"], s["accuracy"])]
    lines += ["", f"- mean over seeds: {s['mean']:.3f}; run-to-run standard deviation: {s['sd']:.3f}",
              f"- gain over the warm start: {s['gain']:+.3f} = {s['gain_over_sd']:.1f} x the run-to-run sd; "
              f"smallest seed's gain {s['min_gain']:+.3f}",
              "- verdict: " + ("RL beats the warm start beyond run-to-run noise" if s["beats_noise"]
                               else "NOT beyond noise")]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from rcea.config import METHODS, ConfigError, check_choice, load_config
    from rcea.store import atomic_write_json, atomic_write_text

    ap = argparse.ArgumentParser(prog="python -m train.noise_study", description=__doc__.splitlines()[0])
    ap.add_argument("--method", default="grpo", help=f"RLVR method ({', '.join(METHODS)})")
    ap.add_argument("--scale", default="tiny", help="tiny only (it trains several runs on CPU)")
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated training seeds")
    ap.add_argument("--questions", type=int, default=200, help="held-out toy questions")
    ap.add_argument("--k", type=int, default=8, help="samples per question")
    ap.add_argument("--override", action="append", default=[], help="section.key=value (repeatable)")
    args = ap.parse_args(argv)
    try:
        check_choice("method", args.method, METHODS)
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        if len(seeds) < 2:
            raise ConfigError("--seeds needs at least two seeds to measure run-to-run noise")
        cfg0 = load_config(args.scale, args.method, args.override)
        from rcea.launch import tiny_model

        if not tiny_model(cfg0):   # several runs side by side on CPU
            raise ConfigError("python -m train.noise_study runs the tiny toy world only (--scale tiny)")
        if cfg0["data.world"] != "toy":
            raise ConfigError("python -m train.noise_study needs data.world=toy (held-out questions with rule answers)")
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    import torch

    from rcea import toy
    from rcea.tiny import model_path
    from train.run import run_training

    torch.set_num_threads(1)
    questions = toy.questions("test", args.questions, seed=cfg0["toy.seed"])
    eval_seed = cfg0["probe.seed"]
    root = layout.seeds_dir(args.scale, args.method)
    t0 = time.time()
    model, tok = _load(cfg0, None)
    warm = sampled_accuracy(model, tok, cfg0, questions, args.k, eval_seed)
    print(f"[seeds] warm start: sampled accuracy {warm:.3f} ({time.time() - t0:.0f}s)", flush=True)
    accs = []
    for i, seed in enumerate(seeds):
        cfg = load_config(args.scale, args.method, [*args.override, f"train.seed={seed}"])
        run_dir = root / f"seed-{seed}-{cfg.hash()[:8]}"
        run_dir.mkdir(parents=True, exist_ok=True)
        print(f"[seeds] training seed {seed} ({i + 1}/{len(seeds)}); log: {run_dir / 'train.log'}", flush=True)
        with open(run_dir / "train.log", "a") as log, contextlib.redirect_stdout(log):
            summary = run_training(cfg, run_dir, log=print)
        model, tok = _load(cfg, summary["final_adapter"])
        acc = sampled_accuracy(model, tok, cfg, questions, args.k, eval_seed)
        accs.append(acc)
        print(f"[seeds] seed {seed} ({i + 1}/{len(seeds)}): sampled accuracy {acc:.3f} "
              f"(train {summary['wall_s']:.0f}s; {time.time() - t0:.0f}s so far)", flush=True)
    mean, sd = statistics.mean(accs), statistics.stdev(accs)
    gain = mean - warm
    result = {
        "method": args.method, "scale": args.scale, "overrides": args.override, "seeds": seeds,
        "config_hash": cfg0.hash(), "policy": model_path(cfg0),
        "questions": len(questions), "k": args.k, "eval_seed": eval_seed,
        "eval_se": (warm * (1 - warm) / (len(questions) * args.k)) ** 0.5,
        "warm_start": warm, "accuracy": accs, "mean": mean, "sd": sd, "gain": gain,
        "gain_over_sd": gain / sd if sd > 0 else float("inf"), "min_gain": min(accs) - warm,
        "beats_noise": bool(gain > sd and min(accs) > warm), "wall_s": round(time.time() - t0, 1),
    }
    out = layout.results_dir(args.scale)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / f"seeds-{args.method}.json", result)
    text = report(result)
    atomic_write_text(out / f"seeds-{args.method}.md", text)
    print(text + f"[seeds] written: {out / f'seeds-{args.method}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
