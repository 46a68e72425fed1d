"""The toy arithmetic world: the embedded CPU default, small enough to learn on two cores.

Questions are sums ("Compute 17+12.", "Compute 4+9+6."), answered as written equations and then a
`\\boxed{}` answer. Everything the paper judges by model is decidable here by rule:

* strategy (the semantic mode): two operands -> `forward` (a+b first) or `swap` (b+a first); three
  operands -> `left` (a+b, then +c) or `pair` (b+c first, then a+...); anything else -> `other`;
* process validity: every written equation `p+q=r` is true, and at least one is written. So
  `17+12=211. \\boxed{29}` is a verifier success with an invalid process.

WARNING: completions are model output; they are parsed with one bounded regular expression and
integer arithmetic on at most a few hundred characters, never evaluated.
"""

from __future__ import annotations

import random
import re
from typing import Any

BENCHMARK = "toy"
TWO_MAX, THREE_MAX = 49, 19
STRATEGIES = {2: ("forward", "swap"), 3: ("left", "pair")}
_EQ = re.compile(r"(\d{1,4})\s*\+\s*(\d{1,4})\s*=\s*(\d{1,5})")
_MAX_CHARS = 2000


def _question(kind: int, rng: random.Random) -> tuple[int, ...]:
    hi = TWO_MAX if kind == 2 else THREE_MAX
    return tuple(rng.randint(1, hi) for _ in range(kind))


def problem_text(operands: tuple[int, ...]) -> str:
    return "Compute " + "+".join(map(str, operands)) + "."


def operands_of(problem: str) -> tuple[int, ...]:
    m = re.fullmatch(r"Compute (\d+(?:\+\d+){1,2})\.", problem.strip())
    if not m:
        raise ValueError(f"not a toy problem: {problem[:80]!r}")
    return tuple(int(x) for x in m.group(1).split("+"))


# Held-out toy questions (the toy world's benchmark): a fixed part of the world, not a setting. They are drawn
# from the stream of HELDOUT_SEED whatever `toy.seed` is, and every training draw leaves them out, so the
# benchmarks (`toy`, `toy_wide`) stay held out from training under any `toy.seed`. Training questions continue
# that stream when the seed is HELDOUT_SEED (the default), else come from the seed's own stream.
HELDOUT = 400
HELDOUT_SEED = 2027


def _heldout() -> tuple[list[tuple[int, ...]], set[tuple[int, ...]], random.Random]:
    """The held-out pool (always the same), the set of questions drawn so far, and the stream after it."""
    rng = random.Random(f"toy-{HELDOUT_SEED}")
    seen: set[tuple[int, ...]] = set()
    test: list[tuple[int, ...]] = []
    while len(test) < HELDOUT:
        q = _question(2 if rng.random() < 0.6 else 3, rng)
        if q not in seen:
            seen.add(q)
            test.append(q)
    return test, seen, rng


def questions(split: str, n: int, seed: int = HELDOUT_SEED) -> list[dict[str, Any]]:
    """`n` distinct questions of a split; `test` never overlaps `train` for any `seed` (the held-out pool does
    not depend on it, and training draws skip it)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be train or test, not {split!r}")
    test, seen, rng = _heldout()
    if split == "test":
        if n > len(test):
            raise ValueError(f"the toy test split has {len(test)} questions; asked for {n}")
        chosen = test[:n]
    else:
        if seed != HELDOUT_SEED:
            rng = random.Random(f"toy-{seed}")
        chosen = []
        while len(chosen) < n:
            q = _question(2 if rng.random() < 0.6 else 3, rng)
            if q not in seen:
                seen.add(q)
                chosen.append(q)
    return [{"id": f"toy-{split}-{i:05d}", "problem": problem_text(q), "answer": str(sum(q)),
             "benchmark": BENCHMARK} for i, q in enumerate(chosen)]


# The wide slice (benchmark `toy_wide`, for pass@k): the same question mix with operands up to WIDE_TWO_MAX /
# WIDE_THREE_MAX, held out from training by construction: a draw inside the training bounds is replaced by the
# next held-out question of that operand count (never trained on), a draw outside them is a sum no training
# question has. The warm start's pass@8 on its first 32 questions sits below ceiling (docs/measurements.md).
WIDE_TWO_MAX, WIDE_THREE_MAX = 55, 21
WIDE_BENCHMARK = "toy_wide"


def wide_questions(n: int) -> list[dict[str, Any]]:
    """`n` distinct questions of the wide slice (none in the training split of any `toy.seed`): a fixed part of
    the world, as the held-out pool."""
    pools = {k: iter(q for q in _heldout()[0] if len(q) == k) for k in (2, 3)}
    rng = random.Random(f"toy-wide-{HELDOUT_SEED}")
    chosen: list[tuple[int, ...]] = []
    while len(chosen) < n:
        kind = 2 if rng.random() < 0.6 else 3
        q = tuple(rng.randint(1, WIDE_TWO_MAX if kind == 2 else WIDE_THREE_MAX) for _ in range(kind))
        if max(q) <= (TWO_MAX if kind == 2 else THREE_MAX):
            q = next(pools[kind], None)
            if q is None:
                raise ValueError(f"the toy wide slice has no more held-out questions; asked for {n}")
        if q not in chosen:
            chosen.append(q)
    return [{"id": f"{WIDE_BENCHMARK}-{i:05d}", "problem": problem_text(q), "answer": str(sum(q)),
             "benchmark": WIDE_BENCHMARK} for i, q in enumerate(chosen)]


def solution(operands: tuple[int, ...], strategy: str, slip: bool = False, early: bool = False) -> str:
    """A written solution in one strategy; `slip` writes a false intermediate equation; `early` (three
    operands) stops after the first equation and boxes its partial sum, a wrong answer."""
    if len(operands) == 2:
        a, b = operands if strategy == "forward" else operands[::-1]
        steps = [(a, b, a + b)]
    elif strategy == "left":
        a, b, c = operands
        steps = [(a, b, a + b), (a + b, c, a + b + c)]
    else:
        a, b, c = operands
        steps = [(b, c, b + c), (a, b + c, a + b + c)]
    if slip:
        p, q, r = steps[0]
        steps[0] = (p, q, r + 1 if r % 2 else r - 1)
    answer = sum(operands)
    if early and len(steps) > 1:
        steps, answer = steps[:1], steps[0][2]
    return " ".join(f"{p}+{q}={r}." for p, q, r in steps) + f" \\boxed{{{answer}}}"


def equations(completion: str) -> list[tuple[int, int, int]]:
    return [tuple(int(x) for x in m.groups()) for m in _EQ.finditer(completion[:_MAX_CHARS])]


def process_valid(problem: str, completion: str) -> bool:
    """Rule judge: at least one equation, and every written equation is true."""
    eqs = equations(completion)
    return bool(eqs) and all(p + q == r for p, q, r in eqs)


def mode(problem: str, completion: str) -> str:
    """Rule mode labeller: the strategy the first written equation reveals."""
    ops = operands_of(problem)
    eqs = equations(completion)
    if not eqs:
        return "other"
    first = eqs[0][:2]
    if len(ops) == 2:
        return {ops: "forward", ops[::-1]: "swap"}.get(first, "other")
    return {ops[:2]: "left", ops[1:]: "pair"}.get(first, "other")


def sft_examples(n: int, seed: int, slip_rate: float = 0.05, early_rate: float = 0.0) -> list[dict[str, str]]:
    """Warm-start data: training questions with solutions in a seeded mix of strategies, from a sloppy
    teacher: `slip_rate` of them write a false equation (right answer), `early_rate` of the three-operand
    ones stop after the first equation (wrong answer): a habit for RL to unlearn."""
    rng = random.Random(f"toy-sft-{seed}")
    out = []
    for q in questions("train", n, seed=seed):
        ops = operands_of(q["problem"])
        strategy = rng.choice(STRATEGIES[len(ops)])
        slip = rng.random() < slip_rate
        early = len(ops) == 3 and rng.random() < early_rate
        out.append({"problem": q["problem"], "completion": solution(ops, strategy, slip=slip, early=early)})
    return out


def corpus(seed: int = 2027) -> list[str]:
    """Text to fit the toy tokenizer on: problems, solutions of every strategy, the instruction words."""
    texts = []
    for q in questions("train", 2000, seed=seed):
        ops = operands_of(q["problem"])
        texts.append(q["problem"] + " " + " ".join(solution(ops, s) for s in STRATEGIES[len(ops)]))
    return texts


class RuleJudge:
    """Fills `process_valid` by rule (the toy world's stand-in for the LLM validity judge)."""

    def judge(self, question: str, reference: str, completion: str) -> bool | None:
        return process_valid(question, completion)


class RuleModeLabeller:
    """Fills `mode` by rule (the toy world's stand-in for the codebook pipeline)."""

    def assign(self, question: str, completions: list[str]) -> list[str | None]:
        return [mode(question, c) for c in completions]
