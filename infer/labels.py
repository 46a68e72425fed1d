"""The owner of labelling: process validity and semantic modes, by rules or by an LLM, by configuration.

    python -m infer.labels validity --scale S     the validity judge over every verified success
    python -m infer.labels modes    --scale S     semantic modes of the valid successes
    python -m infer.labels all      --scale S     both, in that order
        [--labeller auto|rules|llm] [--base-url URL] [--model NAME] [--concurrency N] [--no-progress] [--json]

Prints one line per step (`[judge] 339 accepted: 324 valid, 15 invalid, 0 without a verdict (rules)`);
--json prints the whole summary as JSON instead.

Who labels is `judge.labeller` (overridable with --labeller): `auto` uses the toy world's rules when
`data.world` is `toy` (decidable there, no model call) and the LLM judge and codebook otherwise; `rules` or
`llm` force one. Both paths write through the same export (`process_valid` and `mode` in the samples
table, the verdict and assignment tables under semantic/). Modes need validity first.
An LLM endpoint that does not list its model, and any permanent failure (404, 401/403, retries exhausted),
stops the step with exit status 1 and one line naming endpoint, model and status (infer.llm).
"""

from __future__ import annotations

import argparse
import json
import sys

from infer.llm import exits_on_failure
from rcea.endpoints import labeller as choose   # rules or llm: one rule, also used by the study's preflight

STEPS = ("validity", "modes", "all")
LABELLERS = ("auto", "rules", "llm")


def _llm(cfg, section: str, args):
    """The endpoint's settings, checked first: it must serve its model (infer.llm.preflight), else the stage
    stops here, before any request, with the fix."""
    from infer.llm import LLMSettings, preflight
    settings = LLMSettings.from_config(cfg, section, base_url=args.base_url, model=args.model,
                                       concurrency=args.concurrency, progress=not args.no_progress)
    preflight(settings)
    return settings


def validity(scale: str, kind: str, cfg, args) -> dict:
    from infer.judge import LLMJudge, run_judge

    if kind == "rules":
        from infer.rules import rule_judge
        out, stats = run_judge(scale, rule_judge()), {}
    else:
        judge = LLMJudge(_llm(cfg, "judge", args))
        out, stats = run_judge(scale, judge), judge.client.stats()
    v = out["valid"]
    return {"labeller": kind, "accepted": int(len(out)), "valid": int(v.fillna(False).sum()),
            "invalid": int((~v.fillna(True)).sum()), "no_verdict": int(v.isna().sum()), **stats}


def modes(scale: str, kind: str, cfg, args) -> dict:
    from infer.codebook import CodebookSettings, Pipeline, run_labeller, summary

    if kind == "rules":
        from infer.llm_io import load_questions
        from infer.rules import QuestionRuleLabeller
        table = run_labeller(scale, QuestionRuleLabeller(load_questions(scale)))
        return {"labeller": kind, **summary(table)}
    pipe = Pipeline(scale, _llm(cfg, "codebook", args), CodebookSettings.from_config(cfg))
    table = pipe.run()
    return {"labeller": kind, **summary(table), **pipe.client.stats(), "problems": len(pipe.log)}


@exits_on_failure
def main(argv: list[str] | None = None) -> int:
    from rcea.config import SCALES, ConfigError, load_config

    ap = argparse.ArgumentParser(prog="python -m infer.labels", description=__doc__.split("\n")[0])
    ap.add_argument("step", choices=STEPS)
    ap.add_argument("--scale", required=True, choices=SCALES)
    ap.add_argument("--labeller", default=None, choices=LABELLERS, help="override judge.labeller")
    ap.add_argument("--base-url", default=None, help="override the [judge] / [codebook] endpoint")
    ap.add_argument("--model", default=None)
    ap.add_argument("--concurrency", type=int, default=None)
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON (default: one line per step)")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.scale)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kind = choose(cfg, args.labeller)
    out = {}
    if args.step in ("validity", "all"):
        out["validity"] = validity(args.scale, kind, cfg, args)
    if args.step in ("modes", "all"):
        out["modes"] = modes(args.scale, kind, cfg, args)
    print(json.dumps(out, indent=2) if args.json else "\n".join(one_line(step, v) for step, v in out.items()))
    return 0


def one_line(step: str, s: dict) -> str:
    """A step's summary in one line, the style of the study's other stages."""
    if step == "validity":
        return (f"[judge] {s.get('accepted', 0)} accepted: {s.get('valid', 0)} valid, {s.get('invalid', 0)} "
                f"invalid, {s.get('no_verdict', 0)} without a verdict ({s.get('labeller')})")
    extra = ", ".join(f"{s[k]} {k}" for k in ("uncertain", "disputed") if s.get(k))
    return (f"[modes] {s.get('included', 0)} of {s.get('trajectories', 0)} valid successes assigned a mode"
            + (f" ({extra})" if extra else "") + f" ({s.get('labeller')})")


if __name__ == "__main__":
    sys.exit(main())
