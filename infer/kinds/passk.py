"""pass@k: `passk.n` seeded samples per question of `passk.benchmark` at the base policy and the run's final
checkpoint (settings `[passk]`; the estimator: docs/estimators.md)."""

from __future__ import annotations

from infer.kinds.common import check_answer, checkpoint_of, encode, use
from infer.kinds.registry import BASE, PlanContext, register


def checkpoints(p: PlanContext):
    return [(ck, {}) for ck in (BASE, *p.checkpoints[-1:])]


def cost(p: PlanContext, extra: dict) -> float:
    cfg = p.cfg
    return p.n_questions(cfg["passk.benchmark"], cfg["passk.questions"]) * cfg["passk.n"] * cfg["passk.max_new_tokens"]


@register("passk", tables=("passk",), section="passk", budget="passk.max_new_tokens", checkpoints=checkpoints,
          cost=cost)
def run_passk(payload, cfg, ctx, progress):
    from infer.backends import SamplingSpec
    from infer.tables import frame
    from rcea.data import benchmark_questions

    gen, _ = ctx.backends(cfg)
    use(gen, checkpoint_of(payload))
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
