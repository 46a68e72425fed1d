"""The toy world's rule-based judge and mode labeller on hand-written completions."""

import pytest

from rcea import toy
from rcea.verify import verify


@pytest.mark.parametrize("problem,completion,correct,valid,mode", [
    ("Compute 17+12.", "17+12=29. \\boxed{29}", True, True, "forward"),
    ("Compute 17+12.", "12+17=29. \\boxed{29}", True, True, "swap"),
    ("Compute 17+12.", "17+12=211. \\boxed{29}", True, False, "forward"),   # success, invalid process
    ("Compute 17+12.", "\\boxed{29}", True, False, "other"),                  # no work shown
    ("Compute 17+12.", "17+12=29. The answer is 29", False, True, "forward"), # unboxed: not a success
    ("Compute 17+12.", "17+12=28. \\boxed{28}", False, False, "forward"),
    ("Compute 4+9+6.", "4+9=13. 13+6=19. \\boxed{19}", True, True, "left"),
    ("Compute 4+9+6.", "9+6=15. 4+15=19. \\boxed{19}", True, True, "pair"),
    ("Compute 4+9+6.", "4+6=10. 10+9=19. \\boxed{19}", True, True, "other"),
    ("Compute 4+9+6.", "9+6=15. 4+15=18. \\boxed{19}", True, False, "pair"),
    ("Compute 4+9+6.", "4 + 9 = 13.  13 + 6 = 19. \\boxed{19}", True, True, "left"),
])
def test_rules_on_hand_written_completions(problem, completion, correct, valid, mode):
    answer = str(sum(toy.operands_of(problem)))
    assert verify(completion, answer).correct is correct
    assert toy.process_valid(problem, completion) is valid
    assert toy.mode(problem, completion) == mode
    assert toy.RuleJudge().judge(problem, answer, completion) is valid
    assert toy.RuleModeLabeller().assign(problem, [completion]) == [mode]


def test_every_generated_solution_is_correct_valid_and_labelled_by_its_strategy():
    for q in toy.questions("test", 50):
        ops = toy.operands_of(q["problem"])
        for strategy in toy.STRATEGIES[len(ops)]:
            text = toy.solution(ops, strategy)
            assert verify(text, q["answer"]).correct
            assert toy.process_valid(q["problem"], text)
            symmetric = len(set(ops)) < len(ops)  # e.g. 5+5: both orders read the same
            assert toy.mode(q["problem"], text) == strategy or symmetric
            slipped = toy.solution(ops, strategy, slip=True)
            assert verify(slipped, q["answer"]).correct and not toy.process_valid(q["problem"], slipped)


def test_splits_are_disjoint_and_seeded():
    test = {q["problem"] for q in toy.questions("test", 400)}
    train = toy.questions("train", 3000)
    assert not test & {q["problem"] for q in train}
    assert toy.questions("train", 10) == toy.questions("train", 10)
    assert toy.questions("train", 10, seed=1) != toy.questions("train", 10)
    with pytest.raises(ValueError, match="not a toy problem"):
        toy.operands_of("Compute 2*3.")


def test_long_garbage_is_bounded():
    text = "1+1=2. " * 100000 + "\\boxed{2}"
    assert toy.process_valid("Compute 1+1.", text)  # only the first 2000 characters are read
    assert toy.mode("Compute 1+1.", "x" * 10**6) == "other"
