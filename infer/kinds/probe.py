"""The fixed probe: `probe.k` samples of each probe question at the base policy and each milestone, scored
token by token (entropies, log-probabilities, the covariance proxy) (settings `[probe]`; docs/estimators.md)."""

from __future__ import annotations

from infer.kinds.common import check_answer, checkpoint_of, derive_seed, encode, use
from infer.kinds.registry import BASE, PlanContext, register


def checkpoints(p: PlanContext):
    return [(ck, {}) for ck in [BASE] + p.milestones]


def cost(p: PlanContext, extra: dict) -> float:
    """Sampling plus teacher-forced scoring: about three times the generated tokens."""
    cfg = p.cfg
    return 3 * cfg["probe.n_questions"] * cfg["probe.k"] * cfg["probe.max_new_tokens"]


@register("probe", tables=("tokens", "questions", "samples"), section="probe", budget="probe.max_new_tokens",
          checkpoints=checkpoints, cost=cost, score_calls=lambda cfg: cfg["probe.n_questions"])   # one per question
def run_probe(payload, cfg, ctx, progress):
    import pandas as pd

    from infer.backends import SamplingSpec
    from infer.proxy import chosen_token_cov_proxy
    from infer.tables import frame
    from rcea.data import probe_questions

    gen, scorer = ctx.backends(cfg)
    ck = checkpoint_of(payload)
    k, seed = cfg["probe.k"], cfg["probe.seed"]
    spec = SamplingSpec(cfg["probe.max_new_tokens"], temperature=cfg["probe.temperature"], top_p=cfg["probe.top_p"])
    qs = probe_questions(cfg)
    samples, scored_all = [], []
    for i, q in enumerate(qs):
        prompt = encode(ctx.tokenizer, q["problem"], cfg)
        use(gen, ck)
        outs = gen.generate([prompt] * k, spec, seeds=[derive_seed(seed, q["id"], j) for j in range(k)])
        use(scorer, ck)
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
