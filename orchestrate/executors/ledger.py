"""The ledger of work units and the progress line.

The ledger records every unit's state, attempts, durations and the events the workers report (start of an
attempt: node, pid, GPUs), so a restarted driver knows what happened and the time-left estimate can use the
durations of earlier runs. Completeness itself is always checked on the outputs (`unit.done`): the ledger
never makes a missing output count as done.

Where it lives (`default_ledger`): under the default engine, in the study's one state store,
`<data>/state/<scale>.sqlite` (rcea.layout.state_path), beside the queue's jobs (infer.queue): one file holds
the state of every unit of the study, training runs and measurement jobs alike, at every scale (under Compose
that folder is the host's, bind-mounted into the containers). Under Ray the data folder is a cluster's shared
folder (NFS or similar), where SQLite's locks are not safe, and no queue exists: the ledger is then the
study's only store, on the driver's own disk, `.ledger/<digest of the data folder>.sqlite`. RCEA_LEDGER names
another file under either engine.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

from rcea import layout
from rcea.paths import project_root
from rcea.progress import duration
from orchestrate.units import digest

SCHEMA = """
CREATE TABLE IF NOT EXISTS units (key TEXT PRIMARY KEY, role TEXT, state TEXT, attempts INTEGER DEFAULT 0,
    seconds REAL, host TEXT, error TEXT, updated REAL);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL, key TEXT, event TEXT,
    detail TEXT);
"""


def default_ledger(data_root, scale: str | None = None, engine: str = "local") -> Path:
    """$RCEA_LEDGER, else the state store of `scale` in `data_root` (the local engine), else the driver's own
    `.ledger/` file of that data folder (Ray, or units of several scales)."""
    env = os.environ.get("RCEA_LEDGER")
    if env:
        return Path(env)
    if engine == "local" and scale:
        return layout.state_path(scale, data_root)
    return project_root() / ".ledger" / f"{digest(str(Path(data_root).resolve()))}.sqlite"


class Ledger:
    """The `units` and `events` tables of one SQLite file (the driver's one connection, autocommit); the file may
    hold the queue's tables too (the state store), which other processes use at the same time."""

    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        self.db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")   # as the queue's: its workers read and write beside the driver
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        if new:
            share_owner(self.path)

    def set(self, key: str, role: str, state: str, **fields) -> None:
        cols = {"role": role, "state": state, "updated": time.time(), **fields}
        self.db.execute(f"INSERT INTO units (key, {', '.join(cols)}) VALUES (?{', ?' * len(cols)}) "
                        f"ON CONFLICT(key) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in cols)}",
                        (key, *cols.values()))

    def attempt(self, key: str, role: str, detail: dict) -> int:
        """Record the start of an attempt; returns its number (1 for the first ever)."""
        self.db.execute("INSERT INTO units (key, role, state, attempts, updated) VALUES (?, ?, 'running', 1, ?) "
                        "ON CONFLICT(key) DO UPDATE SET state='running', attempts=attempts+1, updated=excluded.updated",
                        (key, role, time.time()))
        self.event(key, "start", detail)
        return self.db.execute("SELECT attempts FROM units WHERE key=?", (key,)).fetchone()[0]

    def event(self, key: str, event: str, detail: dict | None = None) -> None:
        self.db.execute("INSERT INTO events (t, key, event, detail) VALUES (?, ?, ?, ?)",
                        (time.time(), key, event, json.dumps(detail or {}, sort_keys=True, default=str)))

    def state(self, key: str) -> dict | None:
        cur = self.db.execute("SELECT key, role, state, attempts, seconds, host, error FROM units WHERE key=?", (key,))
        row = cur.fetchone()
        return dict(zip(("key", "role", "state", "attempts", "seconds", "host", "error"), row)) if row else None

    def mean_seconds(self, role: str) -> float | None:
        """Mean duration of the units of a role that ran to completion (any run of this data folder)."""
        row = self.db.execute("SELECT avg(seconds) FROM units WHERE role=? AND state='done' AND seconds > 0",
                              (role,)).fetchone()
        return row[0]

    def events(self, key: str | None = None) -> list[dict]:
        sql, args = "SELECT t, key, event, detail FROM events", ()
        if key:
            sql, args = sql + " WHERE key=?", (key,)
        return [{"t": t, "key": k, "event": e, **json.loads(d)} for t, k, e, d in self.db.execute(sql + " ORDER BY id", args)]

    def close(self) -> None:
        self.db.close()


def share_owner(path: Path) -> None:
    """A store made by root here takes its folder's owner: the containers that share it (compose.yaml's state
    folder, as UID:GID) must write it too (SQLite gives its -wal and -shm files the database's owner)."""
    if os.getuid() != 0:
        return
    st = path.parent.stat()
    if st.st_uid != 0 or st.st_gid != 0:
        os.chown(path, st.st_uid, st.st_gid)


class Progress:
    """Counts per stage (role) and the time left, printed when they change.

    Time left per stage = mean duration of its batches (this run's, else the ledger's history) x batches
    not finished / batches running side by side (at least one).
    """

    def __init__(self, totals: dict[str, int], ledger: Ledger | None = None, label: str = "study", stream=None):
        self.totals, self.ledger, self.label = totals, ledger, label
        self.stream = stream or sys.stdout
        self.done = {r: 0 for r in totals}
        self.failed = {r: 0 for r in totals}
        self.running = {r: 0 for r in totals}
        self.seconds = {r: [] for r in totals}
        self.width = {r: 1 for r in totals}
        self.last, self.last_t, self.last_finished = "", 0.0, -1
        self.held = False   # True while an executor settles finished units and starts their successors

    def add(self, role: str, n: int, done: int = 0) -> None:
        """`n` more units of `role` joined the run (units that follow a finished one), `done` of them complete."""
        for counts in (self.totals, self.done, self.failed, self.running):
            counts.setdefault(role, 0)
        self.seconds.setdefault(role, [])
        self.width.setdefault(role, 1)
        self.totals[role] += n
        self.done[role] += done
        self.show()

    def start(self, role: str, n: int = 1) -> None:
        """`n` units of `role` started (one batch)."""
        self.running[role] += n
        self.width[role] = max(self.width[role], self.running[role])
        self.show()

    def finish(self, role: str, ok: bool, seconds: float = 0.0, was_running: bool = True, n: int = 1) -> None:
        """`n` units of `role` finished (one batch), `seconds` each."""
        if was_running:
            self.running[role] = max(0, self.running[role] - n)
        (self.done if ok else self.failed)[role] += n
        if ok and seconds > 0:
            self.seconds[role] += [seconds] * n
        self.show()

    def left_s(self, role: str) -> float | None:
        mine = self.seconds[role]
        mean = sum(mine) / len(mine) if mine else (self.ledger.mean_seconds(role) if self.ledger else None)
        rest = self.totals[role] - self.done[role] - self.failed[role]
        return None if mean is None else mean * rest / self.width[role]

    def line(self) -> str:
        parts = []
        for role, total in self.totals.items():
            if not total:
                continue
            left = self.left_s(role)
            eta = "" if left is None or self.done[role] + self.failed[role] == total else f", ~{duration(left)} left"
            fail = f", {self.failed[role]} failed" if self.failed[role] else ""
            parts.append(f"{role} {self.done[role]}/{total} done, {self.running[role]} running{fail}{eta}")
        return f"[{self.label}] " + "; ".join(parts)

    def show(self) -> None:
        """Print when a unit finished, else (only the running counts moved) at most every 5 s."""
        if self.held:   # shown once the freed slots are filled again: "running" counts what really runs
            return
        line, finished = self.line(), sum(self.done.values()) + sum(self.failed.values())
        if line != self.last and (finished != self.last_finished or time.monotonic() - self.last_t > 5):
            print(line, file=self.stream, flush=True)
            self.last, self.last_t, self.last_finished = line, time.monotonic(), finished
