"""The toy world's rule-based labellers, shaped as the judge and codebook plug-ins.

In the toy world process validity and the semantic mode of a trajectory are decidable by rule
(`rcea.toy`), so no model is called. `infer.labels` chooses these or the LLM ones; this module imports
neither the judge nor the codebook.
"""

from __future__ import annotations

from rcea import toy


def rule_judge() -> toy.RuleJudge:
    """A `Judge` plug-in (infer.judge.run_judge): `judge(question, reference, completion)`."""
    return toy.RuleJudge()


class QuestionRuleLabeller:
    """A `ModeLabeller` plug-in (infer.codebook.run_labeller): the codebook path hands over question ids,
    the rule needs the problem text."""

    def __init__(self, questions: dict[str, dict]):
        self.questions = questions
        self.rule = toy.RuleModeLabeller()

    def assign(self, question_id: str, completions: list[str]) -> list[str | None]:
        return self.rule.assign(self.questions[str(question_id)]["problem"], completions)
