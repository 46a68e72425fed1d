"""The covariance prediction: at each milestone s, the predicted and observed entropy change from checkpoint
s - `covariance.gap_steps` to s on sampled prefixes (settings `[covariance]`; docs/estimators.md)."""

from __future__ import annotations

import zlib

from infer.kinds.common import checkpoint_of, derive_seed, encode, use
from infer.kinds.registry import PlanContext, register


def checkpoints(p: PlanContext):
    out = []
    for ck in p.milestones:
        src = p.at(ck.step - p.cfg["covariance.gap_steps"])
        out.append((ck, {"run_method": p.method, "step_from": src.step, **src.fields("_from")}))
    return out


def cost(p: PlanContext, extra: dict) -> float:
    """Prefix sampling plus two scorings with full logits at the drawn positions."""
    cfg = p.cfg
    return 4 * cfg["covariance.n_questions"] * cfg["covariance.trajectories"] * cfg["probe.max_new_tokens"]


def covariance_questions(cfg) -> list[dict]:
    """A seeded draw of `covariance.n_questions` probe questions (in probe order)."""
    import numpy as np

    from rcea.data import probe_questions

    qs = probe_questions(cfg)
    n = min(cfg["covariance.n_questions"], len(qs))
    idx = np.sort(np.random.default_rng(cfg["covariance.seed"]).choice(len(qs), n, replace=False))
    return [qs[i] for i in idx]


@register("covariance", tables=("covariance",), section="covariance", budget="probe.max_new_tokens",
          checkpoints=checkpoints, cost=cost,
          score_calls=lambda cfg: 2 * cfg["covariance.n_questions"])   # per question: the earlier and later checkpoint
def run_covariance(payload, cfg, ctx, progress):
    import numpy as np
    import torch

    from infer.backends import SamplingSpec
    from infer.entropy import covariance_prediction
    from infer.tables import frame

    gen, scorer = ctx.backends(cfg)
    src, dst = checkpoint_of(payload, "_from"), checkpoint_of(payload)
    seed, m, traj = cfg["covariance.seed"], cfg["covariance.max_positions"], cfg["covariance.trajectories"]
    spec = SamplingSpec(cfg["probe.max_new_tokens"], temperature=1.0, top_p=1.0)
    qs = covariance_questions(cfg)
    preds, obss = [], []
    # Two full model folders (an outside run's exports): the later one is loaded once, after every question's
    # prefixes are scored under the earlier one (their logits at the drawn positions held meanwhile), instead of
    # the two swapping places at each question (the scorer holds one full model beside the base).
    later = [] if src[1] and dst[1] else None

    def compare(prompt, comps, at, z0):
        use(scorer, dst)
        z1 = scorer.score([prompt] * traj, comps, logits_at=at)
        for a, b in zip(z0, z1):
            if a is not None:
                pred, obs = covariance_prediction(torch.from_numpy(a), torch.from_numpy(b.logits))
                preds.append(pred.numpy())
                obss.append(obs.numpy())

    for i, q in enumerate(qs):
        prompt = encode(ctx.tokenizer, q["problem"], cfg)
        use(gen, src)                      # prefixes are on-policy for the earlier checkpoint
        outs = gen.generate([prompt] * traj, spec, seeds=[derive_seed(seed, q["id"], j) for j in range(traj)])
        comps = [o.token_ids for o in outs]
        at = [sorted(np.random.default_rng([seed, zlib.crc32(q["id"].encode()), j])
                     .choice(len(c), min(m, len(c)), replace=False).tolist()) for j, c in enumerate(comps)]
        use(scorer, src)
        z0 = [z.logits for z in scorer.score([prompt] * traj, comps, logits_at=at)]
        if later is None:
            compare(prompt, comps, at, z0)
        else:
            later.append((prompt, comps, at, z0))
        progress("covariance questions", i + 1, len(qs))
    for i, held in enumerate(later or []):
        compare(*held)
        progress("covariance questions, later checkpoint", i + 1, len(later))
    pred, obs = np.concatenate(preds), np.concatenate(obss)
    row = {"scale": payload["scale"], "method": payload["run_method"], "step_from": payload["step_from"],
           "step_to": payload["step"], "predicted_delta": float(pred.mean()), "observed_delta": float(obs.mean()),
           "n_positions": int(len(pred)), "n_questions": len(qs), "trajectories": traj}
    return {"covariance": frame("covariance", [row])}, {"covariance": seed}
