"""Inputs and outputs of the LLM-judged stages (validity judge, codebooks, audit).

Reads the inference role's probe outputs under `data/infer/<scale>/tables/`:

    samples/   the RCEA `samples` table (rcea/schema.py)
    texts/     completion texts, keyed by (scale, method, step, question_id, sample), column `text`
               (a `text` or `completion` column on the samples table itself is used when present)
    questions/ optional (question_id, problem, answer); else the frozen probe questions of the config

Writes the judged / labelled side tables under `data/infer/<scale>/semantic/` and fills
`process_valid` and `mode` in the samples table through one export path (`export_labels`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd

from rcea.layout import tables_dir
from rcea.schema import check_columns
from rcea.store import atomic_write_bytes, atomic_write_json, file_record, manifest_path, read_parquet, read_table

KEY = ["scale", "method", "step", "question_id", "sample"]
TEXT_COLUMNS = ("text", "completion")



def traj_id(row) -> str:
    """Stable trajectory identifier. It encodes provenance, so it is never shown to a model."""
    return f"{row['scale']}|{row['method']}|{int(row['step'])}|{row['question_id']}|{int(row['sample'])}"


def blind_id(tid: str) -> str:
    """An opaque id that hides method, scale, checkpoint and seed (for files people review)."""
    return hashlib.sha256(tid.encode()).hexdigest()[:12]


def load_samples(scale: str) -> pd.DataFrame:
    df = read_table(tables_dir(scale) / "samples")
    check_columns("samples", df.columns)
    return df


def load_texts(scale: str, samples: pd.DataFrame) -> pd.Series:
    """Completion text per trajectory id (index = traj_id)."""
    for col in TEXT_COLUMNS:
        if col in samples.columns:
            return pd.Series(samples[col].astype(str).values, index=[traj_id(r) for _, r in samples.iterrows()])
    texts = read_table(tables_dir(scale) / "texts")
    col = next((c for c in TEXT_COLUMNS if c in texts.columns), None)
    if col is None or any(k not in texts.columns for k in KEY):
        raise ValueError(f"texts table needs columns {KEY} and one of {TEXT_COLUMNS}; has {list(texts.columns)}")
    return pd.Series(texts[col].astype(str).values, index=[traj_id(r) for _, r in texts.iterrows()])


def load_questions(scale: str) -> dict[str, dict]:
    """question_id -> {"problem", "answer"}."""
    loc = tables_dir(scale) / "questions"
    if loc.exists() or loc.with_suffix(".parquet").exists():
        df = read_table(loc if loc.exists() else loc.with_suffix(".parquet"))
        return {str(r["question_id"]): {"problem": str(r["problem"]), "answer": str(r["answer"])}
                for _, r in df.iterrows()}
    from rcea.config import load_config
    from rcea.data import probe_questions
    probe = probe_questions(load_config(scale))
    return {str(q["id"]): {"problem": q["problem"], "answer": str(q["answer"])} for q in probe}


def accepted(samples: pd.DataFrame) -> pd.DataFrame:
    """Verifier-accepted trajectories (reward 1)."""
    return samples[samples["reward"].astype(int) == 1]


def _missing(v) -> bool:
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def _part_files(loc: Path) -> list[Path]:
    if loc.is_file():
        return [loc]
    parts = sorted(loc.glob("*.parquet"))
    if any(manifest_path(p).exists() for p in parts):  # as rcea.store.read_table: complete parts only
        parts = [p for p in parts if manifest_path(p).exists()]
    return parts


def export_labels(scale: str, process_valid: dict[str, bool | None] | None = None,
                  mode: dict[str, str | None] | None = None, stage: str = "semantic-export") -> list[Path]:
    """Fill `process_valid` and/or `mode` (keyed by traj_id) in the samples table, in place.

    The one export path for the LLM judge / codebook and for rule-based plug-ins. Every part keeps
    its name (the inference role's completion markers) and its manifest, which gains a `labels`
    entry; each part is rewritten atomically. Rows not in a mapping keep their current value.
    """
    import io
    import json
    import time

    changed = []
    for part in _part_files(tables_dir(scale) / "samples"):
        df = read_parquet(part)
        check_columns("samples", df.columns)
        ids = df.apply(traj_id, axis=1) if len(df) else pd.Series([], dtype=object)
        if process_valid is not None:
            cur = df["process_valid"].astype("object")
            df["process_valid"] = [process_valid.get(t, c) for t, c in zip(ids, cur)]
        if mode is not None:
            cur = df["mode"].astype("object")
            df["mode"] = [mode.get(t, c) for t, c in zip(ids, cur)]
        df["process_valid"] = pd.array([None if _missing(v) else bool(v) for v in df["process_valid"].astype("object")],
                                       dtype="boolean")
        df["mode"] = pd.array([None if _missing(v) else str(v) for v in df["mode"].astype("object")], dtype="string")
        buf = io.BytesIO()
        df.to_parquet(buf, index=False)
        atomic_write_bytes(part, buf.getvalue())
        man = manifest_path(part)
        record = json.loads(man.read_text()) if man.exists() else {"artifact": part.name}
        record.update(file_record(part))   # the rewritten part's size and SHA-256 (rcea.store.is_complete)
        record.setdefault("labels", {})[stage] = {"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                  "process_valid": process_valid is not None, "mode": mode is not None}
        if man.exists():  # a part without a manifest stays without one (read_table rule)
            atomic_write_json(man, record)
        changed.append(part)
    return changed
