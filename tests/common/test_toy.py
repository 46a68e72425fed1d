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


def test_the_sloppy_teacher_stops_early_only_on_three_operand_questions():
    """`early` boxes the first partial sum: a valid process with a wrong answer (the habit RL can unlearn)."""
    assert toy.solution((4, 9, 6), "left", early=True) == "4+9=13. \\boxed{13}"
    assert toy.solution((4, 9, 6), "pair", early=True) == "9+6=15. \\boxed{15}"
    assert toy.solution((17, 12), "swap", early=True) == "12+17=29. \\boxed{29}"  # nothing to cut
    assert not verify("4+9=13. \\boxed{13}", "19").correct and toy.process_valid("Compute 4+9+6.", "4+9=13. \\boxed{13}")
    ex = toy.sft_examples(2000, 2027, slip_rate=0.0, early_rate=0.5)
    three = [e for e in ex if len(toy.operands_of(e["problem"])) == 3]
    early = [e for e in three if e["completion"].count("=") == 1]
    assert 0.45 < len(early) / len(three) < 0.55
    assert all(e["completion"].count("=") == 1 for e in ex if len(toy.operands_of(e["problem"])) == 2)
    assert not any(e["completion"].count("=") == 1 for e in toy.sft_examples(500, 2027, 0.0, early_rate=0.0)
                   if len(toy.operands_of(e["problem"])) == 3)


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
