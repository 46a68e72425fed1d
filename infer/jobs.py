"""The four job kinds. Each reads its settings from the configuration the job was enqueued with,
computes every row in memory, then writes its table parts atomically (infer.tables), so a killed job
leaves nothing and its rerun writes exactly the rows of an uninterrupted run.

Settings: docs/settings.md (`[eval]`, `[passk]`, `[probe]`, `[covariance]`); formulas: docs/estimators.md.
"""

from __future__ import annotations

import zlib
from typing import Callable

import numpy as np
import pandas as pd

from rcea.config import load_config
from rcea.data import benchmark_questions, chat_messages, probe_questions
from rcea.paths import data_dir
from rcea.store import checkpoint_complete
from rcea.layout import JOB_OUTPUTS, part_name

from infer.backends import SamplingSpec
from infer.tables import clear_stale, frame, part_path, parts_complete, write_parts

Progress = Callable[[str, int, int], None]
OUTPUTS = {kind: list(tables) for kind, tables in JOB_OUTPUTS.items()}  # one spelling: rcea.layout


class JobInputError(RuntimeError):
    """The inputs of a job are missing or malformed; the message says which and what to do."""


def derive_seed(base: int, question_id: str, k: int) -> int:
    """A per-sample seed from (base seed, question, sample index); independent of processing order."""
    return int(np.random.SeedSequence([base, zlib.crc32(question_id.encode()), k]).generate_state(1)[0])


def job_config(payload: dict):
    cfg = load_config(payload["scale"], None, payload.get("overrides", ()))
    if cfg.hash() != payload["config_hash"]:
        raise JobInputError(f"the configuration changed since this job was enqueued ({cfg.hash()} != "
                            f"{payload['config_hash']}); re-enqueue with --retry-failed or restore the config")
    return cfg


def adapter_path(rel: str | None) -> str | None:
    if rel is None:
        return None
    path = data_dir() / rel
    if not checkpoint_complete(path):
        raise JobInputError(f"checkpoint {rel} is missing or incomplete (needs its adapter files and the "
                            "manifest training writes last); finish or rerun training, then re-enqueue with --retry-failed")
    return str(path)


def encode(tokenizer, problem: str, cfg) -> list[int]:
    ids = tokenizer.apply_chat_template(chat_messages(problem, cfg), add_generation_prompt=True, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def check_answer(text: str, reference: str):
    from rcea.verify import verify
    return verify(text, reference)


def run_job(payload: dict, ctx, progress: Progress) -> dict:
    """Run one job unless its outputs are complete; returns a short summary."""
    kind, scale = payload["kind"], payload["scale"]
    part = part_name(payload)
    tables = OUTPUTS[kind]
    if parts_complete(scale, part, tables):
        return {"skipped": "outputs already complete"}
    for t in tables:
        clear_stale(part_path(scale, t, part))
    cfg = job_config(payload)
    frames, seeds = RUNNERS[kind](payload, cfg, ctx, progress)
    write_parts(scale, part, frames, cfg, seeds, job=f"{kind}:{payload['method']}-{payload['step']}",
                adapter=payload.get("adapter"), backends=ctx.describe())
    return {t: len(df) for t, df in frames.items()}


# ----------------------------------------------------------------------------- greedy evaluation
def run_greedy(payload, cfg, ctx, progress):
    gen, _ = ctx.backends(cfg)
    gen.set_adapter(adapter_path(payload["adapter"]))
    spec = SamplingSpec(cfg["eval.max_new_tokens"], greedy=True)
    rows = []
    for i, bench in enumerate(payload["benchmarks"]):
        qs = benchmark_questions(bench, cfg["eval.questions_per_benchmark"])
        outs = gen.generate([encode(ctx.tokenizer, q["problem"], cfg) for q in qs], spec)
        for q, o in zip(qs, outs):
            v = check_answer(ctx.tokenizer.decode(o.token_ids, skip_special_tokens=True), q["answer"])
            rows.append({"scale": payload["scale"], "method": payload["method"], "step": payload["step"],
                         "benchmark": bench, "question_id": q["id"], "correct": bool(v.correct),
                         "boxed": v.extracted is not None, "n_tokens": len(o.token_ids), "truncated": not o.finished})
        progress(f"greedy {bench}", i + 1, len(payload["benchmarks"]))
    return {"greedy": frame("greedy", rows)}, {}


# ----------------------------------------------------------------------------- pass@k
def run_passk(payload, cfg, ctx, progress):
    gen, _ = ctx.backends(cfg)
    gen.set_adapter(adapter_path(payload["adapter"]))
    n, base = cfg["passk.n"], cfg["passk.seed_base"]
    spec = SamplingSpec(cfg["passk.max_new_tokens"], temperature=cfg["passk.temperature"], top_p=cfg["passk.top_p"])
    qs = benchmark_questions(cfg["passk.benchmark"], cfg["passk.questions"])
    rows = []
    for i, q in enumerate(qs):
        outs = gen.generate([encode(ctx.tokenizer, q["problem"], cfg)] * n, spec, seeds=[base + j for j in range(n)])
        c = sum(check_answer(ctx.tokenizer.decode(o.token_ids, skip_special_tokens=True), q["answer"]).correct
                for o in outs)
        rows.append({"scale": payload["scale"], "method": payload["method"], "step": payload["step"],
                     "question_id": q["id"], "n": n, "c": int(c), "benchmark": cfg["passk.benchmark"]})
        progress("passk", i + 1, len(qs))
    return {"passk": frame("passk", rows)}, {"inference": f"{base}..{base + n - 1}"}


# ----------------------------------------------------------------------------- fixed probe
def run_probe(payload, cfg, ctx, progress):
    from infer.proxy import chosen_token_cov_proxy

    gen, scorer = ctx.backends(cfg)
    adapter = adapter_path(payload["adapter"])
    k, seed = cfg["probe.k"], cfg["probe.seed"]
    spec = SamplingSpec(cfg["probe.max_new_tokens"], temperature=cfg["probe.temperature"], top_p=cfg["probe.top_p"])
    qs = probe_questions(cfg)
    samples, scored_all = [], []
    for i, q in enumerate(qs):
        prompt = encode(ctx.tokenizer, q["problem"], cfg)
        gen.set_adapter(adapter)
        outs = gen.generate([prompt] * k, spec, seeds=[derive_seed(seed, q["id"], j) for j in range(k)])
        scorer.set_adapter(adapter)
        scored = scorer.score([prompt] * k, [o.token_ids for o in outs])
        for j, (o, s) in enumerate(zip(outs, scored)):
            text = ctx.tokenizer.decode(o.token_ids, skip_special_tokens=True)
            v = check_answer(text, q["answer"])
            samples.append({
                "scale": payload["scale"], "method": payload["method"], "step": payload["step"],
                "question_id": q["id"], "benchmark": q["benchmark"], "sample": j, "reward": int(v.correct),
                "n_tokens": len(o.token_ids), "logprob_sum": float(s.logprob.sum()),
                "token_entropy_mean": float(s.entropy.mean()) if len(s.entropy) else 0.0,
                "truncated": not o.finished, "process_valid": None, "mode": None,
                "boxed": v.extracted is not None,
                "sampler_logprob_sum": float(sum(o.sampler_logprobs)) if o.sampler_logprobs else float("nan"),
                "completion": text,   # WARNING: model output; read it as data, never evaluate it
            })
            scored_all.append((q["id"], j, o.token_ids, s))
        progress("probe questions", i + 1, len(qs))
    cov = chosen_token_cov_proxy([r["question_id"] for r in samples], [r["reward"] for r in samples],
                                 [s.logprob for _, _, _, s in scored_all], cfg["covariance.advantage_eps"])
    tok_cols = {c: [] for c in ("question_id", "sample", "position", "token_id", "logprob", "entropy", "cov_proxy")}
    for (qid, j, ids, s), cv in zip(scored_all, cov):
        tok_cols["question_id"] += [qid] * len(ids)
        tok_cols["sample"] += [j] * len(ids)
        tok_cols["position"] += list(range(len(ids)))
        tok_cols["token_id"] += list(ids)
        tok_cols["logprob"] += s.logprob.tolist()
        tok_cols["entropy"] += s.entropy.tolist()
        tok_cols["cov_proxy"] += cv.tolist()
    n = len(tok_cols["position"])
    tokens = {"scale": [payload["scale"]] * n, "method": [payload["method"]] * n, "step": [payload["step"]] * n,
              **tok_cols}
    questions = pd.DataFrame([{"question_id": q["id"], "benchmark": q["benchmark"], "problem": q["problem"],
                               "answer": str(q["answer"])} for q in qs])
    return ({"tokens": frame("tokens", tokens), "questions": questions, "samples": frame("samples", samples)},
            {"probe": seed})


# ----------------------------------------------------------------------------- covariance prediction
def covariance_questions(cfg) -> list[dict]:
    """A seeded draw of `covariance.n_questions` probe questions (in probe order)."""
    qs = probe_questions(cfg)
    n = min(cfg["covariance.n_questions"], len(qs))
    idx = np.sort(np.random.default_rng(cfg["covariance.seed"]).choice(len(qs), n, replace=False))
    return [qs[i] for i in idx]


def run_covariance(payload, cfg, ctx, progress):
    import torch

    from infer.entropy import covariance_prediction

    gen, scorer = ctx.backends(cfg)
    src, dst = adapter_path(payload["adapter_from"]), adapter_path(payload["adapter"])
    seed, m, traj = cfg["covariance.seed"], cfg["covariance.max_positions"], cfg["covariance.trajectories"]
    spec = SamplingSpec(cfg["probe.max_new_tokens"], temperature=1.0, top_p=1.0)
    qs = covariance_questions(cfg)
    preds, obss = [], []
    for i, q in enumerate(qs):
        prompt = encode(ctx.tokenizer, q["problem"], cfg)
        gen.set_adapter(src)                      # prefixes are on-policy for the earlier checkpoint
        outs = gen.generate([prompt] * traj, spec, seeds=[derive_seed(seed, q["id"], j) for j in range(traj)])
        comps = [o.token_ids for o in outs]
        at = [sorted(np.random.default_rng([seed, zlib.crc32(q["id"].encode()), j])
                     .choice(len(c), min(m, len(c)), replace=False).tolist()) for j, c in enumerate(comps)]
        scorer.set_adapter(src)
        z0 = scorer.score([prompt] * traj, comps, logits_at=at)
        scorer.set_adapter(dst)
        z1 = scorer.score([prompt] * traj, comps, logits_at=at)
        for a, b in zip(z0, z1):
            if a.logits is not None:
                pred, obs = covariance_prediction(torch.from_numpy(a.logits), torch.from_numpy(b.logits))
                preds.append(pred.numpy())
                obss.append(obs.numpy())
        progress("covariance questions", i + 1, len(qs))
    pred, obs = np.concatenate(preds), np.concatenate(obss)
    row = {"scale": payload["scale"], "method": payload["run_method"], "step_from": payload["step_from"],
           "step_to": payload["step"], "predicted_delta": float(pred.mean()), "observed_delta": float(obs.mean()),
           "n_positions": int(len(pred)), "n_questions": len(qs), "trajectories": traj}
    return {"covariance": frame("covariance", [row])}, {"covariance": seed}


RUNNERS = {"greedy": run_greedy, "passk": run_passk, "probe": run_probe, "covariance": run_covariance}
