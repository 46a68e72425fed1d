"""Rule-based judge and mode labeller for the toy world, through the same export path as the LLM ones.

`python -m infer.judge run --scale tiny` lands here when the configuration's `data.world` is `toy`:
process validity and the semantic mode of every accepted trajectory are decidable by rule there
(`rcea.toy`), so no model is called.
"""

from __future__ import annotations

from rcea import toy


def run_rules(scale: str) -> dict:
    from infer.codebook import run_labeller
    from infer.judge import run_judge
    from infer.llm_io import load_questions

    questions = load_questions(scale)

    class _Labeller:  # the codebook path hands over question ids; the rule needs the problem text
        def assign(self, question_id: str, completions: list[str]) -> list[str | None]:
            problem = questions[str(question_id)]["problem"]
            return toy.RuleModeLabeller().assign(problem, completions)

    verdicts = run_judge(scale, toy.RuleJudge())
    modes = run_labeller(scale, _Labeller())
    valid = verdicts["valid"]
    return {"accepted": int(len(verdicts)), "valid": int(valid.fillna(False).sum()),
            "invalid": int((~valid.fillna(True)).sum()),
            "modes": {str(k): int(v) for k, v in modes["mode"].value_counts(dropna=False).items()}}
