"""Supplement §12's pipeline counts: trajectories the rule verifier accepts and the judge retains over every
fixed-probe checkpoint (the paper: 118,435 and 92,867 from 125 questions), and the initial modes of the frozen
codebooks before any extension (the paper: 307, one to eight per question, median two).

Counted over the base policy and the paper's six methods (extensions left out, as from every paper number).
Initial modes are those a codebook held at version 1 (`added_in_version == 1` in
`semantic/codebooks/<question>.json`, written by infer/codebook.py); a rule labeller (the toy world) writes no
codebooks, and the count is then said to be unavailable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

PAPER = {"verifier_accepted": "118,435", "judge_retained": "92,867", "retained_questions": "125",
         "initial_modes": "307", "initial_per_question": "1 to 8", "initial_median": "2"}


def pipeline_counts(samples, settings) -> dict[str, Any]:
    """Verifier-accepted (reward 1) and judge-retained (reward 1, process_valid true) trajectories of the samples
    table (pyarrow), over the base and paper methods; `judged` False when process_valid is null throughout."""
    import pyarrow.compute as pc

    methods = pc.cast(samples["method"], "string").to_pylist()
    keep = np.array([not settings.is_extension(m) for m in methods], bool)
    reward = np.asarray(samples["reward"].to_numpy(zero_copy_only=False), float)
    pv_col = samples["process_valid"] if "process_valid" in samples.column_names else None
    pv = pv_col.to_pylist() if pv_col is not None else [None] * len(reward)
    valid = np.array([v is True for v in pv], bool)
    judged = any(v is not None for v in pv)
    qid = np.array(pc.cast(samples["question_id"], "string").to_pylist(), object)
    acc = keep & (reward == 1)
    ret = acc & valid
    return {"verifier_accepted": int(acc.sum()), "judge_retained": int(ret.sum()) if judged else None,
            "retained_questions": int(len(set(qid[ret]))) if judged else None, "judged": judged,
            "trajectories": int(keep.sum())}


def initial_modes(codebooks: Path) -> dict[str, Any] | None:
    """Initial (version-1) modes per question from the codebook JSONs; None without any."""
    per_q = {}
    for path in sorted(Path(codebooks).glob("*.json")) if Path(codebooks).is_dir() else []:
        if path.name == "index.json":
            continue
        try:
            cb = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        modes = cb.get("modes") if isinstance(cb, dict) else None
        if isinstance(modes, list):
            per_q[str(cb.get("question_id", path.stem))] = sum(1 for m in modes
                                                               if isinstance(m, dict) and m.get("added_in_version", 1) == 1)
    if not per_q:
        return None
    n = list(per_q.values())
    return {"questions": len(n), "modes": int(sum(n)), "min": int(min(n)), "max": int(max(n)),
            "median": float(np.median(n))}


def _n(x: Any) -> str:
    return "–" if x is None else f"{x:,}" if isinstance(x, int) else f"{x:g}"


def pipeline_lines(res: dict) -> list[str]:
    """report.md: §12's counts beside the paper's."""
    c = res.get("pipeline_counts")
    init = res.get("initial_modes")
    L = ["", "## Semantic pipeline counts (supplement §12; `summary.json` → `pipeline_counts`, `initial_modes`)", ""]
    if not c:
        return L + ["- not available: no samples table."]
    L += ["Over every fixed-probe checkpoint of the base policy and the paper's six methods.", "",
          "| Count | This study | Paper |", "|---|---|---|",
          f"| verifier-accepted trajectories | {_n(c['verifier_accepted'])} | {PAPER['verifier_accepted']} |",
          f"| judge-retained trajectories | {_n(c['judge_retained'])} | {PAPER['judge_retained']} |",
          f"| questions with a retained trajectory | {_n(c['retained_questions'])} | {PAPER['retained_questions']} |"]
    if init:
        L += [f"| initial modes (codebook version 1) | {_n(init['modes'])} | {PAPER['initial_modes']} |",
              f"| initial modes per question | {init['min']} to {init['max']} | {PAPER['initial_per_question']} |",
              f"| median initial modes per question | {_n(init['median'])} | {PAPER['initial_median']} |"]
    else:
        L += ["| initial modes (codebook version 1) | – | 307 |"]
    if not c["judged"]:
        L += ["", "- judge counts: `process_valid` is null throughout (the judge stage has not run)."]
    if not init:
        L += ["", "- initial modes: no `semantic/codebooks/<question>.json` beside the tables (the toy world's rule "
              "labeller has fixed strategies and writes no codebook; infer/codebook.py writes them)."]
    return L
