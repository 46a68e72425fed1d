"""SQLite store of the partition audit: trajectories, pairs, raw labels, adjudications."""

from __future__ import annotations

import re
import sqlite3
import time
from contextlib import contextmanager
from pathlib import Path

# A pair's label: 1 when the two trajectories follow different strategies, 0 when the same one (the page
# posts the words; an imported CSV may give either the words or the digits).
LABELS = {"same": 0, "different": 1}

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS trajectories (
    blind_id TEXT PRIMARY KEY, traj_id TEXT NOT NULL UNIQUE, question_id TEXT NOT NULL,
    text TEXT NOT NULL, auto_mode TEXT);
CREATE TABLE IF NOT EXISTS questions (question_id TEXT PRIMARY KEY, problem TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pairs (
    pair_id INTEGER PRIMARY KEY, position INTEGER NOT NULL UNIQUE, question_id TEXT NOT NULL,
    a TEXT NOT NULL REFERENCES trajectories(blind_id), b TEXT NOT NULL REFERENCES trajectories(blind_id));
CREATE TABLE IF NOT EXISTS labels (          -- raw labels: the latest per (annotator, pair)
    annotator TEXT NOT NULL, pair_id INTEGER NOT NULL REFERENCES pairs(pair_id),
    label INTEGER NOT NULL CHECK (label IN (0, 1)), updated REAL NOT NULL, PRIMARY KEY (annotator, pair_id));
CREATE TABLE IF NOT EXISTS label_events (    -- every click, append-only
    id INTEGER PRIMARY KEY AUTOINCREMENT, annotator TEXT NOT NULL, pair_id INTEGER NOT NULL,
    label INTEGER NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS adjudications (   -- kept apart from the raw labels
    pair_id INTEGER PRIMARY KEY REFERENCES pairs(pair_id), label INTEGER NOT NULL CHECK (label IN (0, 1)),
    adjudicator TEXT NOT NULL, note TEXT NOT NULL DEFAULT '', updated REAL NOT NULL);
"""
NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


def valid_name(name: str) -> bool:
    return isinstance(name, str) and bool(NAME.match(name))


@contextmanager
def connect(path: str | Path):
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(path), timeout=30)
    con.row_factory = sqlite3.Row
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA foreign_keys=ON")
        con.executescript(SCHEMA)
        yield con
        con.commit()
    finally:
        con.close()


def set_label(path, annotator: str, pair_id: int, label: int) -> None:
    now = time.time()
    with connect(path) as con:
        if con.execute("SELECT 1 FROM pairs WHERE pair_id=?", (pair_id,)).fetchone() is None:
            raise KeyError(pair_id)
        con.execute("INSERT INTO labels VALUES (?,?,?,?) ON CONFLICT(annotator, pair_id) DO UPDATE SET "
                    "label=excluded.label, updated=excluded.updated", (annotator, pair_id, label, now))
        con.execute("INSERT INTO label_events (annotator, pair_id, label, at) VALUES (?,?,?,?)",
                    (annotator, pair_id, label, now))


def set_adjudication(path, adjudicator: str, pair_id: int, label: int, note: str = "") -> None:
    with connect(path) as con:
        if con.execute("SELECT 1 FROM pairs WHERE pair_id=?", (pair_id,)).fetchone() is None:
            raise KeyError(pair_id)
        con.execute("INSERT INTO adjudications VALUES (?,?,?,?,?) ON CONFLICT(pair_id) DO UPDATE SET "
                    "label=excluded.label, adjudicator=excluded.adjudicator, note=excluded.note, "
                    "updated=excluded.updated", (pair_id, label, adjudicator, note[:500], time.time()))


def annotators(con) -> list[str]:
    row = con.execute("SELECT value FROM meta WHERE key='annotators'").fetchone()
    return row["value"].split(",") if row else ["A", "B"]


def disagreements(con) -> list[int]:
    a, b = annotators(con)[:2]
    rows = con.execute("SELECT la.pair_id FROM labels la JOIN labels lb ON la.pair_id=lb.pair_id "
                       "JOIN pairs p ON p.pair_id=la.pair_id WHERE la.annotator=? AND lb.annotator=? "
                       "AND la.label<>lb.label ORDER BY p.position", (a, b)).fetchall()
    return [r["pair_id"] for r in rows]
