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


@pytest.mark.parametrize("seed", [2027, 0, 1, 7, 2026, 123456])
def test_the_benchmarks_stay_held_out_under_any_toy_seed(seed):
    """Issue 41: the benchmarks were drawn with seed 2027 whatever `toy.seed` said, and training with
    `toy.seed`, so another seed could train on benchmark questions. Through the configuration (what the
    trainer and the measurement workers read): the training pool of any `toy.seed` misses every `toy` and
    `toy_wide` question, and the benchmarks do not move with the seed."""
    from rcea.config import load_config
    from rcea.data import load_benchmark, load_train_records

    cfg = load_config("tiny", None, [f"toy.seed={seed}", "data.draw_size=3000"])
    train = {r["problem"] for r in load_train_records(cfg)}
    assert len(train) == 3000
    held = {r["problem"] for name in ("toy", "toy_wide") for r in load_benchmark(name)}
    assert len(held) > 400 and not train & held
    assert [q["problem"] for q in toy.questions("test", 20, seed=seed)] == \
        [q["problem"] for q in toy.questions("test", 20)]
    if seed != toy.HELDOUT_SEED:   # the seed still moves the training draw
        assert toy.questions("train", 20, seed=seed) != toy.questions("train", 20)


def test_long_garbage_is_bounded():
    text = "1+1=2. " * 100000 + "\\boxed{2}"
    assert toy.process_valid("Compute 1+1.", text)  # only the first 2000 characters are read
    assert toy.mode("Compute 1+1.", "x" * 10**6) == "other"


def test_the_wide_slice_is_held_out_from_training_and_wider():
    """pass@k's toy set (`toy_wide`): every question is either a held-out one (never trained on) or has an
    operand beyond the training bounds (no training question has it); seeded; its own ids."""
    heldout = {q["problem"] for q in toy.questions("test", toy.HELDOUT)}
    train = {q["problem"] for q in toy.questions("train", 3000)}
    wide = toy.wide_questions(200)
    assert wide == toy.wide_questions(200) and len({q["problem"] for q in wide}) == 200
    assert not {q["problem"] for q in wide} & train
    beyond = 0
    for q in wide:
        ops = toy.operands_of(q["problem"])
        assert q["answer"] == str(sum(ops)) and q["benchmark"] == "toy_wide" and q["id"].startswith("toy_wide-")
        outside = max(ops) > (toy.TWO_MAX if len(ops) == 2 else toy.THREE_MAX)
        assert outside or q["problem"] in heldout
        assert max(ops) <= (toy.WIDE_TWO_MAX if len(ops) == 2 else toy.WIDE_THREE_MAX)
        beyond += outside
    assert 0.15 < beyond / len(wide) < 0.4  # about 1 - 0.6 (49/55)^2 - 0.4 (19/21)^3 = 0.23 beyond the bounds


def _warm_pass_at_n(benchmark: str, cfg) -> float:
    """The share of questions with a verified success among `passk.n` seeded samples of the shipped warm start,
    sampled as infer/kinds/passk.py samples them (same seeds, prompt, budget, temperature, top-p, stop set)."""
    from infer.backends import SamplingSpec
    from infer.backends.hf import HFBackend
    from infer.kinds.common import check_answer, encode
    from rcea import warmstart
    from rcea.data import benchmark_questions, stop_strings

    gen = HFBackend(str(warmstart.SHIPPED_DIR), stop_tokens=stop_strings(cfg))
    n, base = cfg["passk.n"], cfg["passk.seed_base"]
    spec = SamplingSpec(cfg["passk.max_new_tokens"], temperature=cfg["passk.temperature"], top_p=cfg["passk.top_p"])
    hits = 0
    for q in benchmark_questions(benchmark, cfg["passk.questions"]):
        outs = gen.generate([encode(gen.tokenizer, q["problem"], cfg)] * n, spec, seeds=[base + j for j in range(n)])
        hits += any(check_answer(gen.tokenizer.decode(o.token_ids, skip_special_tokens=True), q["answer"]).correct
                    for o in outs)
    return hits / cfg["passk.questions"]


def test_the_demo_pass_at_k_set_leaves_the_warm_start_room_both_ways():
    """The tiny scale's pass@k set: the shipped warm start's pass@8 sits inside 70-90% (measured 81.2% on its 32
    questions), so trained objectives can widen or narrow coverage; on the held-out `toy` set it is at ceiling."""
    from rcea.config import load_config

    cfg = load_config("tiny")
    assert cfg["passk.benchmark"] == "toy_wide"
    assert 0.70 <= _warm_pass_at_n("toy_wide", cfg) <= 0.90
    assert _warm_pass_at_n("toy", cfg) == 1.0  # the old set: no room to gain
