"""Greedy evaluation: the five benchmarks at the base policy and each milestone, the trace benchmark alone at
the other dense-trace points (settings `[eval]`; docs/measurements.md)."""

from __future__ import annotations

from infer.kinds.common import check_answer, checkpoint_of, encode, use
from infer.kinds.registry import BASE, PlanContext, register


def checkpoints(p: PlanContext):
    cfg = p.cfg
    out = []
    for ck in [BASE] + sorted(set(p.milestones) | set(p.dense), key=lambda c: c.step):
        full = ck is BASE or ck in p.milestones
        out.append((ck, {"benchmarks": list(cfg["eval.benchmarks"]) if full else [cfg["eval.trace_benchmark"]]}))
    return out


def cost(p: PlanContext, extra: dict) -> float:
    """Generated tokens at most: questions x the greedy budget."""
    cap = p.cfg["eval.questions_per_benchmark"]
    return sum(p.n_questions(b, cap) for b in extra["benchmarks"]) * p.cfg["eval.max_new_tokens"]


@register("greedy", tables=("greedy",), section="eval", budget="eval.max_new_tokens", checkpoints=checkpoints,
          cost=cost)
def run_greedy(payload, cfg, ctx, progress):
    from infer.backends import SamplingSpec
    from infer.tables import frame
    from rcea.data import benchmark_questions

    gen, _ = ctx.backends(cfg)
    use(gen, checkpoint_of(payload))
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
