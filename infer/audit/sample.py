"""Draw the audit: question-disjoint within-question trajectory pairs (seed 2031), and the report."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from rcea.layout import audit_db, semantic_dir
from rcea.store import read_parquet

from infer.audit import store
from infer.audit.metrics import audit_report
from infer.llm_io import blind_id, load_questions, load_samples, load_texts


def audit_defaults(scale: str | None = None) -> dict[str, int]:
    """seed, n_questions and per_question of the draw: aggregate.audit_seed and the [audit] settings of `scale`'s
    configuration (configs/base.toml alone when None): 29 questions (stated) x 18 trajectories (our choice, so
    29 x C(18, 2) = 4,437 pairs where the paper has 4,526; docs/settings.md#audit says why)."""
    from rcea.config import base_value, load_config

    get = load_config(scale).__getitem__ if scale else base_value
    return {"seed": int(get("aggregate.audit_seed")), "n_questions": int(get("audit.n_questions")),
            "per_question": int(get("audit.per_question"))}


def _settled(scale: str | None, seed: int | None, n_questions: int | None,
             per_question: int | None) -> tuple[int, int, int]:
    """(seed, n_questions, per_question) of a draw, each None replaced by its value in `audit_defaults(scale)`."""
    d, given = audit_defaults(scale), {"seed": seed, "n_questions": n_questions, "per_question": per_question}
    return tuple(d[k] if v is None else v for k, v in given.items())


def draw_pairs(assignments: pd.DataFrame, seed: int | None = None, n_questions: int | None = None,
               per_question: int | None = None,
               exclude: set[str] = frozenset()) -> tuple[list[str], list[tuple[str, str, str]]]:
    """(audit trajectory ids, pairs (question_id, a, b)). Questions in `exclude` (development labels)
    are never drawn; per question up to `per_question` trajectories, then every within-question pair,
    the pairs shown in a seeded random order. A None argument takes its configured value (`audit_defaults`)."""
    seed, n_questions, per_question = _settled(None, seed, n_questions, per_question)
    rng = np.random.default_rng(seed)
    by_q = {q: sorted(g["traj_id"]) for q, g in assignments.groupby("question_id", sort=True)
            if str(q) not in exclude and len(g) >= 2}
    qs = sorted(by_q)
    chosen = sorted(rng.choice(len(qs), size=min(n_questions, len(qs)), replace=False)) if qs else []
    trajs, pairs = [], []
    for i in chosen:
        q = qs[i]
        ids = by_q[q]
        pick = sorted(rng.choice(len(ids), size=min(per_question, len(ids)), replace=False))
        sel = [ids[j] for j in pick]
        trajs += sel
        pairs += [(q, a, b) for a, b in itertools.combinations(sel, 2)]
    order = rng.permutation(len(pairs))
    return trajs, [pairs[k] for k in order]


def sample(scale: str, seed: int | None = None, n_questions: int | None = None, per_question: int | None = None,
           exclude: set[str] = frozenset(), annotators: tuple[str, str] = ("A", "B"), force: bool = False) -> dict:
    path = audit_db(scale)
    if path.exists() and not force:
        with store.connect(path) as con:
            n = con.execute("SELECT COUNT(*) FROM pairs").fetchone()[0]
        if n:
            raise SystemExit(f"{path} already holds {n} pairs; labels may exist. Use --force to redraw.")
    assignments = read_parquet(semantic_dir(scale) / "codebook" / "assignments.parquet")
    samples = load_samples(scale)
    texts = load_texts(scale, samples)
    questions = load_questions(scale)
    seed, n_questions, per_question = _settled(scale, seed, n_questions, per_question)
    trajs, pairs = draw_pairs(assignments, seed, n_questions, per_question, exclude)
    mode = dict(zip(assignments["traj_id"], assignments["mode"]))
    qid = dict(zip(assignments["traj_id"], assignments["question_id"].astype(str)))
    if path.exists():
        path.unlink()
    with store.connect(path) as con:
        con.executemany("INSERT INTO meta VALUES (?,?)", [
            ("seed", str(seed)), ("annotators", ",".join(annotators)), ("scale", scale),
            ("exclude", json.dumps(sorted(exclude)))])
        con.executemany("INSERT INTO trajectories VALUES (?,?,?,?,?)", [
            (blind_id(t), t, qid[t], texts.get(t, ""), None if pd.isna(mode[t]) else str(mode[t])) for t in trajs])
        con.executemany("INSERT INTO questions VALUES (?,?)", [
            (q, questions.get(q, {}).get("problem", "")) for q in sorted({p[0] for p in pairs})])
        con.executemany("INSERT INTO pairs (position, question_id, a, b) VALUES (?,?,?,?)", [
            (i, q, blind_id(a), blind_id(b)) for i, (q, a, b) in enumerate(pairs)])
    return {"questions": len({p[0] for p in pairs}), "trajectories": len(trajs), "pairs": len(pairs), "db": str(path)}


def drawn(path: Path) -> int:
    """How many pairs the audit at `path` holds (0 when none was drawn)."""
    if not path.exists():
        return 0
    with store.connect(path) as con:
        return int(con.execute("SELECT COUNT(*) FROM pairs").fetchone()[0])


IMPORT_COLUMNS = ("annotator", "pair_id", "label")  # and optionally kind


def _label(text: str) -> int:
    """`same` / `different` (the page's words) or 0 / 1 (store.LABELS' coding); KeyError otherwise."""
    word = (text or "").strip().lower()
    return store.LABELS[word] if word in store.LABELS else {"0": 0, "1": 1}[word]


def import_labels(path: Path, csv_path: Path) -> dict:
    """Import annotations made elsewhere: a CSV with the header annotator,pair_id,label[,kind]; label is
    `same` or `different` (or 0 = same, 1 = different); kind is `label` (the default) or `adjudication`.
    Every row is checked before anything is written; a file without rows imports nothing and says so."""
    import csv

    if not drawn(path):
        raise ValueError(f"no audit pairs at {path}; draw them first (python -m infer.audit sample)")
    try:
        with csv_path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows, header = list(reader), [h.strip() for h in reader.fieldnames or []]
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read it ({exc.strerror or exc}); give the path of a CSV file") from None
    if not set(IMPORT_COLUMNS) <= set(header):
        raise ValueError(f"the header is {','.join(header) or 'empty'}; the first line must be "
                         f"{','.join(IMPORT_COLUMNS)}[,kind]")
    if not rows:
        raise ValueError("it holds a header but no annotation rows")
    with store.connect(path) as con:
        known = {r[0] for r in con.execute("SELECT pair_id FROM pairs")}
    checked = []
    for i, r in enumerate(rows, 2):
        r = {(k or "").strip(): v for k, v in r.items()}
        who, kind = (r.get("annotator") or "").strip(), (r.get("kind") or "label").strip()
        if not store.valid_name(who) or kind not in ("label", "adjudication"):
            raise ValueError(f"line {i}: annotator must be 1-32 letters, digits, _ or -, kind label|adjudication")
        try:
            pair = int(r["pair_id"])
        except (TypeError, ValueError):
            raise ValueError(f"line {i}: pair_id must be an integer, got {r['pair_id']!r}") from None
        try:
            label = _label(r["label"])
        except KeyError:
            raise ValueError(f"line {i}: label must be same or different (or 1 = different, 0 = same), "
                             f"got {r['label']!r}") from None
        if pair not in known:
            raise ValueError(f"line {i}: unknown pair {pair} (the drawn pairs are listed by the audit page)")
        checked.append((kind, who, pair, label))
    for kind, who, pair, label in checked:
        (store.set_adjudication if kind == "adjudication" else store.set_label)(path, who, pair, label)
    return {"imported": len(checked), "adjudications": sum(k == "adjudication" for k, *_ in checked)}


def report(path: Path) -> dict:
    with store.connect(path) as con:
        a, b = store.annotators(con)[:2]
        lab = {(r["annotator"], r["pair_id"]): r["label"] for r in con.execute("SELECT * FROM labels")}
        adj = {r["pair_id"]: r["label"] for r in con.execute("SELECT * FROM adjudications")}
        pairs = [{"a": r["a"], "b": r["b"], "human_a": lab.get((a, r["pair_id"])),
                  "human_b": lab.get((b, r["pair_id"])), "adjudicated": adj.get(r["pair_id"])}
                 for r in con.execute("SELECT * FROM pairs ORDER BY position")]
        modes = {r["blind_id"]: r["auto_mode"] for r in con.execute("SELECT blind_id, auto_mode FROM trajectories")}
    out = audit_report(pairs, modes)
    out["annotators"] = [a, b]
    return out
