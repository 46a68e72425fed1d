"""Agreement of the verifier with hand labels: `python -m rcea.verify_agreement [--split heldout]`.

Reads the labelled completions in `tests/common/verify_cases.jsonl` (fields id, category, split,
completion, reference, label) and prints, for the chosen split, the agreement of
(a) math-verify alone: our last-box extraction, then math-verify `parse`/`verify` of the raw boxed
    text against the raw reference (LaTeX extraction only, math-verify's own timeouts), and
(b) `rcea.verify.verify`,
with the disagreements per category and the number of accepted unboxed answers (must be 0).
Exit status 1 if (b) is below `--min-agreement` or any unboxed answer is accepted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from rcea.verify import verify, warmup
from rcea.verify_normalize import extract_boxed

CASES_PATH = Path(__file__).resolve().parent.parent / "tests" / "common" / "verify_cases.jsonl"
UNBOXED_CATEGORIES = frozenset({"unboxed_correct", "unbalanced", "empty_box"})


@dataclass
class Report:
    """Agreement of one verifier with the labels on a set of cases."""

    name: str
    seconds: float = 0.0
    n: int = 0
    agree: int = 0
    failures: dict[str, list[str]] = field(default_factory=dict)  # category -> case ids
    unboxed_accepted: int = 0

    @property
    def agreement(self) -> float:
        """Fraction of cases where the verdict equals the label."""
        return self.agree / self.n if self.n else float("nan")


def load_cases(path: Path = CASES_PATH, split: str = "heldout") -> list[dict]:
    """Cases of `split` ("dev", "heldout" or "all")."""
    from rcea.jsonl import read_jsonl

    rows = read_jsonl(path, required=("completion", "reference", "split"))
    return [r for r in rows if split == "all" or r["split"] == split]


def mathverify_alone(completion: str, reference: str) -> bool:
    """Baseline: last-box extraction, then plain math-verify with no extra normalisation."""
    from math_verify import LatexExtractionConfig, parse
    from math_verify import verify as mv_verify

    extracted = extract_boxed(completion)
    if extracted is None:
        return False
    cfg = [LatexExtractionConfig(boxed_match_priority=0)]
    # WARNING: model output parsed by latex2sympy (LaTeX extraction only: no eval-based parse_expr).
    gold = parse(f"${reference}$", extraction_config=cfg)
    pred = parse(f"\\boxed{{{extracted}}}", extraction_config=cfg)
    return bool(gold and pred and mv_verify(gold, pred))


def ours(completion: str, reference: str) -> bool:
    """The project verifier."""
    return verify(completion, reference).correct


def evaluate(name: str, fn: Callable[[str, str], bool], cases: Iterable[dict]) -> Report:
    """Run `fn` on every case and tally agreement, failures per category and unboxed acceptances."""
    rep = Report(name)
    t0 = time.perf_counter()
    for c in cases:
        verdict = bool(fn(c["completion"], c["reference"]))
        rep.n += 1
        if verdict == bool(c["label"]):
            rep.agree += 1
        else:
            rep.failures.setdefault(c["category"], []).append(c["id"])
        unboxed = c["category"] in UNBOXED_CATEGORIES or extract_boxed(c["completion"]) is None
        if verdict and unboxed:
            rep.unboxed_accepted += 1
    rep.seconds = time.perf_counter() - t0
    return rep


def _print(rep: Report) -> None:
    print(f"{rep.name}: agreement {rep.agree}/{rep.n} = {100 * rep.agreement:.1f}%  "
          f"unboxed accepted: {rep.unboxed_accepted}  ({1000 * rep.seconds / max(rep.n, 1):.1f} ms/case)")
    for cat, ids in sorted(rep.failures.items()):
        print(f"    {cat}: {len(ids)} wrong ({', '.join(ids)})")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=CASES_PATH)
    ap.add_argument("--split", choices=("dev", "heldout", "all"), default="heldout")
    ap.add_argument("--min-agreement", type=float, default=0.99)
    ap.add_argument("--skip-baseline", action="store_true")
    args = ap.parse_args(argv)
    cases = load_cases(args.cases, args.split)
    cats = Counter(c["category"] for c in cases)
    print(f"{len(cases)} cases ({args.split}) in {len(cats)} categories from {args.cases}")
    if not args.skip_baseline:
        _print(evaluate("math-verify alone", mathverify_alone, cases))
    warmup()  # worker start-up is not part of the timing
    rep = evaluate("rcea.verify", ours, cases)
    _print(rep)
    ok = rep.agreement >= args.min_agreement and rep.unboxed_accepted == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
