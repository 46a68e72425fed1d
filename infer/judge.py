"""Process-validity judge (paper supplement §12; docs/estimators.md#judge-calibration).

For each verifier-accepted probe trajectory: does it contain a fatal reasoning error? The frozen
judge (config [judge]: temperature 0, seed 2027) answers through an OpenAI-compatible endpoint.
A verdict that does not parse is recorded as `unparsed`, left null in `process_valid`, and listed
for reconciliation (`semantic/judge/reconcile.csv`); a person's decision in
`semantic/judge/manual.csv` (traj_id, valid) is applied on the next run. Nothing is guessed.

    python -m infer.judge run --scale tiny
    python -m infer.judge calibrate --labels FILE [--scale tiny]

This is always the LLM judge; `python -m infer.labels validity` chooses between it and the toy world's
rules by configuration (the study and `invoke judge` go through there).

Plug-in: any object with `judge(question, reference, completion) -> bool | None` (True = valid)
can be passed to `run_judge`, e.g. the toy world's rule-based judge (infer.rules); it fills
`process_valid` through the same export path.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import pandas as pd

from rcea.layout import judge_calibration, llm_cache_dir, semantic_dir
from rcea.stats import binary_calibration

from infer.llm import LLMClient, LLMSettings, Request, exits_on_failure, parse_json
from infer.llm_io import accepted, export_labels, load_questions, load_samples, load_texts, traj_id
from rcea.store import atomic_write_json, atomic_write_text, read_parquet, write_parquet

MAX_COMPLETION_CHARS = 24_000

SYSTEM = """TASK: validity-judge
You audit a math solution that reached the correct final answer. Decide whether its reasoning contains a
FATAL error: a false step, an unjustified leap, or a computation error that the final answer only survives
by luck or by a compensating error. Harmless slips that are corrected, notation, verbosity and style are
not fatal. Reply with one JSON object and nothing else:
{"fatal_error": true or false, "reason": "<one sentence>"}"""


@runtime_checkable
class Judge(Protocol):
    def judge(self, question: str, reference: str, completion: str) -> bool | None:
        """True = process-valid, False = fatal error, None = no verdict."""


@dataclass
class Verdict:
    valid: bool | None
    status: str          # ok | unparsed | error
    detail: str = ""


def judge_messages(question: str, reference: str, completion: str) -> list[dict[str, str]]:
    comp = completion[:MAX_COMPLETION_CHARS]
    user = (f"Problem:\n{question}\n\nReference answer: {reference}\n\n"
            f"Solution (between <<< and >>>):\n<<<\n{comp}\n>>>")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_verdict(text: str | None) -> Verdict:
    """WARNING: model output, parsed as bounded JSON only."""
    obj = parse_json(text)
    if obj is None or not isinstance(obj.get("fatal_error"), bool):
        return Verdict(None, "unparsed", (text or "")[:200])
    return Verdict(not obj["fatal_error"], "ok", str(obj.get("reason", ""))[:200])


class LLMJudge:
    """The model judge; `judge_many` runs concurrently through the cached client."""

    def __init__(self, settings: LLMSettings, cache_dir: Path | None = None):
        self.settings = settings
        self.client = LLMClient(settings, cache_dir or llm_cache_dir("judge"))

    def judge_many(self, items: list[tuple[str, str, str]]) -> list[Verdict]:
        reqs = [Request(judge_messages(*it), self.settings.params()) for it in items]
        out = []
        for r in self.client.complete_many(reqs, desc="judge"):
            out.append(parse_verdict(r.text) if r.ok else Verdict(None, "error", r.error or ""))
        return out

    def judge(self, question: str, reference: str, completion: str) -> bool | None:
        return self.judge_many([(question, reference, completion)])[0].valid


def _judge_all(judge, items: list[tuple[str, str, str]]) -> list[Verdict]:
    if hasattr(judge, "judge_many"):
        return judge.judge_many(items)
    out = []
    for it in items:
        v = judge.judge(*it)
        out.append(Verdict(v, "ok" if v is not None else "unparsed"))
    return out


def run_judge(scale: str, judge) -> pd.DataFrame:
    """Judge every accepted trajectory of `scale`, write the verdict table, fill process_valid."""
    samples = load_samples(scale)
    acc = accepted(samples).copy()
    texts = load_texts(scale, samples)
    questions = load_questions(scale)
    acc["traj_id"] = [traj_id(r) for _, r in acc.iterrows()]  # also right when empty
    acc = acc.sort_values("traj_id").reset_index(drop=True)
    items = [(questions.get(str(q), {}).get("problem", ""), questions.get(str(q), {}).get("answer", ""),
              texts.get(t, "")) for q, t in zip(acc["question_id"], acc["traj_id"])]
    verdicts = _judge_all(judge, items)
    out = acc[["traj_id", "scale", "method", "step", "question_id", "sample"]].copy()
    out["valid"] = pd.Series([v.valid for v in verdicts], dtype="boolean")
    out["status"] = [v.status for v in verdicts]
    out["detail"] = [v.detail for v in verdicts]
    manual = semantic_dir(scale) / "judge" / "manual.csv"
    if manual.exists():  # reconciled by a person
        decided = pd.read_csv(manual)
        m = dict(zip(decided["traj_id"].astype(str), decided["valid"].astype(bool)))
        hit = out["traj_id"].isin(m) & out["valid"].isna()
        out.loc[hit, "valid"] = out.loc[hit, "traj_id"].map(m).astype("boolean")
        out.loc[hit, "status"] = "manual"
    jdir = semantic_dir(scale) / "judge"
    write_parquet(out, jdir / "verdicts.parquet", stage="judge")
    pending = out[out["valid"].isna()][["traj_id", "question_id", "status", "detail"]]
    atomic_write_text(jdir / "reconcile.csv", pending.to_csv(index=False))
    export_labels(scale, process_valid={t: (None if pd.isna(v) else bool(v))
                                        for t, v in zip(out["traj_id"], out["valid"])})
    return out


# ---- calibration (docs/estimators.md#judge-calibration) -------------------------------------------------------------

def calibration_metrics(y_true, y_pred) -> dict[str, float]:
    """Positive class = valid; `y_pred` items may be None (abstain): rcea.stats.binary_calibration."""
    return binary_calibration(list(y_true), [None if p is None or pd.isna(p) else bool(p) for p in y_pred])


def _read_labels(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return read_parquet(path)
    if path.suffix == ".jsonl":
        from rcea.jsonl import read_jsonl

        return pd.DataFrame(read_jsonl(path))
    if path.suffix == ".json":
        return pd.read_json(path)
    return pd.read_csv(path)


def _as_bool(v) -> bool | None:
    if v is None or (isinstance(v, float) and pd.isna(v)):
        return None
    if isinstance(v, str):
        s = v.strip().lower()
        if s in ("valid", "true", "1", "yes"):
            return True
        if s in ("invalid", "false", "0", "no"):
            return False
        return None
    return bool(v)


def calibrate(labels: Path, judge=None) -> dict:
    """Labelled set: column `label` (valid/invalid, 1/0) and either `pred` (recorded verdicts, empty =
    abstain) or `question`, `reference`, `completion` to judge now."""
    df = _read_labels(Path(labels))
    y = [_as_bool(v) for v in df["label"]]
    if any(v is None for v in y):
        raise ValueError("every row of the labelled set needs label valid/invalid (or 1/0)")
    if "pred" in df.columns and judge is None:
        pred = [_as_bool(v) for v in df["pred"]]
    else:
        items = list(zip(df["question"].astype(str), df["reference"].astype(str), df["completion"].astype(str)))
        pred = [v.valid for v in _judge_all(judge, items)]
    return calibration_metrics(y, pred)


def settings_for(scale: str, args) -> LLMSettings:
    from rcea.config import load_config
    from rcea.hub import record

    cfg = load_config(scale)
    settings = LLMSettings.from_config(cfg, "judge", base_url=args.base_url, model=args.model,
                                       concurrency=args.concurrency, progress=not args.no_progress)
    record("judge", settings.model, cfg["judge.model_revision"])   # what the server was started with
    return settings


@exits_on_failure
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m infer.judge", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "calibrate"):
        p = sub.add_parser(name)
        p.add_argument("--scale", default="tiny", required=name == "run")
        p.add_argument("--base-url", default=None,
                       help="override [judge] base_url")
        p.add_argument("--model", default=None)
        p.add_argument("--concurrency", type=int, default=None)
        p.add_argument("--no-progress", action="store_true")
        if name == "calibrate":
            p.add_argument("--labels", required=True, type=Path)
            p.add_argument("--out", type=Path, default=None,
                           help="write the metrics as JSON here (default: the scale's semantic/judge_calibration.json, "
                                "which the aggregation report reads)")
    args = ap.parse_args(argv)
    judge = LLMJudge(settings_for(args.scale, args))
    if args.cmd == "run":
        out = run_judge(args.scale, judge)
        v = out["valid"]
        summary = {"accepted": len(out), "valid": int(v.fillna(False).sum()), "invalid": int((~v.fillna(True)).sum()),
                   "no_verdict": int(v.isna().sum()), **judge.client.stats()}
    else:
        use_model = "pred" not in _read_labels(args.labels).columns
        summary = calibrate(args.labels, judge if use_model else None)
        if use_model:
            summary.update(judge.client.stats())
        atomic_write_json(args.out or judge_calibration(args.scale), summary)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
