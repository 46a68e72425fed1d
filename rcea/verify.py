"""The answer verifier: one rule for the training reward and for evaluation.

A completion is correct iff its LAST `\\boxed{...}` (or `\\fbox{...}`, or `\\boxed 5`) is equivalent to
the reference answer. An unboxed answer is wrong whatever the text says. Equivalence is decided by
(1) comparing normalised strings (`rcea.verify_normalize`), then (2) math-verify 0.9.0 on the
normalised forms, in a time-limited worker process (`rcea.verify_sandbox`). Model output is never
eval'd or exec'd.

Batch use: `python -m rcea.verify < in.jsonl > out.jsonl`, one `{"completion": str, "reference": str}`
per line (optional `"timeout"`: number) -> one `{"correct": bool, "extracted": str|null}` per line, in
order; a malformed line (bad JSON, missing keys, text that cannot be encoded) gives `{"error": "..."}`
(or ASCII-escaped output) and the run goes on. Without math-verify importable it exits 2 at start.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import IO

from rcea.verify_normalize import answer_variants, canonical_string, extract_boxed
from rcea.verify_sandbox import symbolic_equal, warmup

__all__ = ["VerifyResult", "verify", "extract_boxed", "reward", "answers_match", "warmup", "main"]

DEFAULT_TIMEOUT_S = 5.0
MAX_ANSWER_CHARS = 2000  # a longer boxed answer is compared as a string only


@dataclass(frozen=True)
class VerifyResult:
    """Outcome of one verification: `correct` and the extracted boxed answer (None if no box)."""

    correct: bool
    extracted: str | None


def answers_match(pred: str, reference: str, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
    """True if the extracted answer `pred` is equivalent to `reference` (decided within `timeout` s of CPU time)."""
    preds, refs = answer_variants(pred, reference)
    keys = {canonical_string(r) for r in refs}
    if any(canonical_string(p) in keys for p in preds):
        return True
    if len(pred) > MAX_ANSWER_CHARS or not pred.strip():
        return False
    pairs = [(r, p) for r in refs for p in preds]
    raw = (reference.strip(), pred.strip())
    if raw not in pairs:
        pairs.append(raw)
    return symbolic_equal(pairs, timeout)


def verify(completion: str, reference: str, timeout: float = DEFAULT_TIMEOUT_S) -> VerifyResult:
    """Verify `completion` against `reference` within `timeout` s of CPU time (the same verdict at any load)."""
    if not isinstance(completion, str) or not isinstance(reference, str):
        raise TypeError("completion and reference must be str")
    extracted = extract_boxed(completion)
    if extracted is None or not extracted.strip():
        return VerifyResult(False, extracted)
    return VerifyResult(answers_match(extracted, reference, timeout), extracted)


def reward(completion: str, reference: str) -> float:
    """Binary training reward: 1.0 if `verify` accepts, else 0.0 (never raises)."""
    try:
        return 1.0 if verify(completion, reference).correct else 0.0
    except Exception:  # a reward function must not crash a training step
        return 0.0


def _process_line(line: str) -> dict:
    """Verdict (or error) for one batch input line."""
    try:
        obj = json.loads(line)
    except ValueError as exc:
        return {"error": f"bad JSON: {exc}"}
    if not isinstance(obj, dict):
        return {"error": "expected a JSON object"}
    missing = [k for k in ("completion", "reference") if k not in obj]
    if missing:
        return {"error": f"missing keys: {missing}"}
    if not isinstance(obj["completion"], str) or not isinstance(obj["reference"], str):
        return {"error": "completion and reference must be strings"}
    timeout = obj.get("timeout", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        return {"error": "timeout must be a positive number"}
    res = verify(obj["completion"], obj["reference"], float(timeout))
    return {"correct": res.correct, "extracted": res.extracted}


def _dumps(out: dict, encoding: str) -> str:
    """One output line; falls back to ASCII escapes when the text cannot be encoded (a lone surrogate)."""
    text = json.dumps(out, ensure_ascii=False)
    try:
        text.encode(encoding)
    except UnicodeEncodeError:
        text = json.dumps(out)  # \\uXXXX escapes: still one valid JSON line
    return text + "\n"


def _math_verify_missing() -> str | None:
    """Why math-verify cannot be used here (None if it imports)."""
    try:
        import latex2sympy2_extended  # noqa: F401
        import math_verify  # noqa: F401
    except ImportError as exc:
        return str(exc)
    return None


def _parser():
    import argparse

    return argparse.ArgumentParser(
        prog="python -m rcea.verify", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Batch answer verifier: JSON lines on stdin, one verdict line per input line on stdout.",
        epilog="in:  {\"completion\": str, \"reference\": str[, \"timeout\": seconds]} per line\n"
               "out: {\"correct\": bool, \"extracted\": str|null}, or {\"error\": \"...\"} for a malformed line\n"
               "example: echo '{\"completion\": \"\\\\boxed{2}\", \"reference\": \"2\"}' | python -m rcea.verify\n"
               "Needs math-verify: run it with .envs/infer/bin/python (exit 2 otherwise).")


def main(stdin: IO[str] | None = None, stdout: IO[str] | None = None, argv: list[str] | None = None) -> int:
    """Batch CLI: JSON lines in, one JSON verdict line out per input line, flushed per line.

    Exit 2 at start (nothing read) when math-verify is not importable: without it only the lines
    decided by string comparison would be answered. A reader that stops early (`| head -1`) ends the
    run quietly (exit 0), without a BrokenPipe traceback."""
    try:
        _parser().parse_args(argv)
        return _batch(stdin, stdout)
    except BrokenPipeError:
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python flushes stdout at exit
        return 0


def _batch(stdin: IO[str] | None, stdout: IO[str] | None) -> int:
    why = _math_verify_missing()
    if why:
        sys.stderr.write(
            f"rcea.verify: math-verify is not importable in this environment ({sys.executable}: {why}).\n"
            "Run the verifier in the infer environment: .envs/infer/bin/python -m rcea.verify "
            "(set it up with scripts/bootstrap infer), or in the infer image.\n")
        return 2
    stdin = stdin or sys.stdin
    stdout = stdout or sys.stdout
    encoding = getattr(stdout, "encoding", None) or "utf-8"
    warmup()
    for line in stdin:
        try:
            text = _dumps(_process_line(line), encoding)
        except Exception as exc:  # keep going: one bad line must not stop the batch
            text = _dumps({"error": f"{type(exc).__name__}: {exc}"}, encoding)
        stdout.write(text)
        stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
