"""The state store: the study's one SQLite database, and the only project module that opens SQLite (the audit's
annotation store, infer/audit/store.py, is the one other database).

Its tables, one schema at every scale and engine:

    jobs, opened    the queue, the pull side that measurement workers claim (infer.queue: leases, claims,
                    the holder that keeps it open)
    units, events   unit records: every work unit's state, attempts, duration, host and error, and the events
                    its attempts report (node, pid, GPUs), written by the engine that runs it
                    (orchestrate.engines); the progress line's time left reads their durations

Where it lives (`default_path`): under the local engine, in the data folder, `<data>/state/<scale>.sqlite`
(rcea.layout.state_path): one file holds every unit of the study's scale, training runs and measurement jobs
alike, and Compose bind-mounts that host folder into every container. Under Ray the data folder is a cluster's
shared folder (NFS or similar), where SQLite's locks (WAL needs working POSIX locks and shared memory) are not
safe: the store is then on the driver's own disk, `.state/<digest of the data folder>/<scale>.sqlite`, with
the same schema. `stores()` finds both for `invoke status`. $RCEA_STATE names another file under either engine
($RCEA_LEDGER, its old name, is still read).

The store never makes a missing output count as done, and never keeps a finished job from counting as done:
completeness is decided on the files (rcea.store.job_complete, `unit.done`); `settle` brings the jobs table
in line with them.

Every write is a short transaction (`tx`: BEGIN IMMEDIATE ... COMMIT), each thread and process with its own
connection. A damaged file (truncated, a page or the header overwritten) is found when the store is opened
(`PRAGMA quick_check`): it is moved aside to `<file>.damaged` and an empty store takes its place, said in one
line; nothing is lost that matters (the study enqueues its jobs again, the files decide what is done). Damage
found later, while in use, raises `StoreDamaged`, which names the file and that fix.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

OperationalError = sqlite3.OperationalError   # a busy, full or read-only store: what callers catch
JOB_STATES = ("pending", "running", "done", "failed")

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    cost REAL NOT NULL DEFAULT 1.0,
    state TEXT NOT NULL DEFAULT 'pending',
    attempts INTEGER NOT NULL DEFAULT 0,
    worker TEXT,
    host TEXT,
    pid INTEGER,
    lease_until REAL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    error TEXT,
    rounds INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (state, cost);
CREATE TABLE IF NOT EXISTS opened (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    holder TEXT NOT NULL,
    heartbeat REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS units (key TEXT PRIMARY KEY, role TEXT, state TEXT, attempts INTEGER DEFAULT 0,
    seconds REAL, host TEXT, error TEXT, updated REAL);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL, key TEXT, event TEXT,
    detail TEXT);
"""
UNIT_FIELDS = ("key", "role", "state", "attempts", "seconds", "host", "error")


def default_path(data_root, scale: str | None = None, engine: str = "local") -> Path:
    """$RCEA_STATE (or its old name $RCEA_LEDGER), else the local engine's store of `scale` in `data_root`, else
    the driver's own file for that data folder (Ray, or units of several scales)."""
    env = os.environ.get("RCEA_STATE") or os.environ.get("RCEA_LEDGER")
    if env:
        return Path(env)
    if engine == "local" and scale:
        from rcea.layout import state_path

        return state_path(scale, data_root)
    return driver_path(data_root, scale)


def driver_path(data_root, scale: str | None = None) -> Path:
    """The store kept on the driver's own disk for the data folder `data_root` (Ray's shared folder)."""
    from rcea.paths import project_root

    folder = hashlib.sha256(str(Path(data_root).resolve()).encode()).hexdigest()[:10]
    return project_root() / ".state" / folder / f"{scale or 'several'}.sqlite"


def stores(scale: str, data_root) -> list[Path]:
    """The stores that exist for `scale` in that data folder: $RCEA_STATE's, the local engine's, Ray's."""
    from rcea.layout import state_path

    env = os.environ.get("RCEA_STATE") or os.environ.get("RCEA_LEDGER")
    found = [Path(env)] if env else []
    found += [state_path(scale, data_root), driver_path(data_root, scale)]
    return [p for i, p in enumerate(found) if p.exists() and p not in found[:i]]


def damage(exc: BaseException) -> bool:
    """Whether an sqlite3 error means a damaged file (not a busy, full or read-only one)."""
    return isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError)


class StoreDamaged(RuntimeError):
    """The store's file is damaged; the message names it and the fix."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"the state store {path} is damaged ({why}); stop the workers, remove it (with its -wal and "
                         "-shm files) and rerun the same command: the store is rebuilt, and jobs whose table parts "
                         "are complete are not run again")


def _check(path: Path) -> str:
    """'' when the database at `path` reads whole (or does not exist yet), else why not."""
    if not path.exists():
        return ""
    try:
        db = sqlite3.connect(path, timeout=60.0)
        try:
            rows = db.execute("PRAGMA quick_check").fetchall()
        finally:
            db.close()
    except sqlite3.DatabaseError as exc:
        if not damage(exc):
            raise
        return str(exc)
    problems = [r[0] for r in rows if r[0] != "ok"]
    return "; ".join(problems[:2]) if problems else ""


def rebuild_if_damaged(path: Path, stream=None) -> bool:
    """Move a damaged database (and its WAL files) aside to `<name>.damaged`, under a lock so that two processes
    opening it at once move it only once; says so in one line. True when it did."""
    import fcntl

    lock_path = path.with_name(path.name + ".lock")
    new = not lock_path.exists()
    with open(lock_path, "a") as lock:
        if new:
            share_owner(lock_path)   # root's driver first: the containers open this lock too
        fcntl.flock(lock, fcntl.LOCK_EX)
        why = _check(path)
        if not why:
            return False
        aside = path.with_name(path.name + ".damaged")
        os.replace(path, aside)
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists():
                os.replace(side, aside.with_name(aside.name + suffix))
    print(f"warning: the state store {path} was damaged ({why}); moved to {aside.name} and started an empty one: "
          "jobs are enqueued again by the study, and those whose table parts are complete are not run again",
          file=stream or sys.stderr, flush=True)
    return True


def read(path: str | Path, sql: str, args=()) -> list[dict]:
    """A read of an existing store, as dicts, through a connection of its own (nothing is created or written)."""
    if not Path(path).is_file():
        raise FileNotFoundError(f"no state store at {path}")
    db = sqlite3.connect(path, timeout=60.0)
    try:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute(sql, args)]
    finally:
        db.close()


def share_owner(path: Path) -> None:
    """A store made by root here takes its folder's owner: the containers that share it (compose.yaml's state
    folder, as UID:GID) must write it too (SQLite gives its -wal and -shm files the database's owner)."""
    if os.getuid() != 0:
        return
    st = path.parent.stat()
    if st.st_uid != 0 or st.st_gid != 0:
        os.chown(path, st.st_uid, st.st_gid)


class Store:
    """One state store file: its schema, per-thread connections, transactions and the unit records. The queue's
    operations (infer.queue.Queue) run their SQL through `tx` and `conn`."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local, self._all = threading.local(), []
        rebuild_if_damaged(self.path)
        new = not self.path.exists()
        db = sqlite3.connect(self.path, timeout=60.0)
        try:
            db.execute("PRAGMA journal_mode=WAL")   # readers never block the writer; persists in the file
        finally:
            db.close()
        if new:
            share_owner(self.path)
        with self.tx() as db:
            for statement in SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            have = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
            # a queue made before these columns existed
            for col, kind in (("host", "TEXT"), ("pid", "INTEGER"), ("rounds", "INTEGER NOT NULL DEFAULT 0")):
                if col not in have:
                    db.execute(f"ALTER TABLE jobs ADD COLUMN {col} {kind}")

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (one per thread and process; opened on first use; autocommit)."""
        db = getattr(self._local, "db", None)
        if db is None or self._local.pid != os.getpid():
            db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable across process kills
            self._local.db, self._local.pid = db, os.getpid()
            self._all.append(db)
        return db

    @contextmanager
    def tx(self):
        """One short write transaction (BEGIN IMMEDIATE ... COMMIT), safe across threads and processes."""
        try:
            db = self.conn()
            _begin(db)
        except sqlite3.DatabaseError as exc:
            if damage(exc):
                raise StoreDamaged(self.path, str(exc)) from None
            raise
        try:
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            # SQLite has already rolled back after some errors (SQLITE_FULL: disk full, I/O errors): a
            # second ROLLBACK would raise "no transaction is active" and hide the real error.
            if db.in_transaction:
                try:
                    db.execute("ROLLBACK")
                except sqlite3.Error:
                    pass  # the error being raised says more
            if damage(exc):
                raise StoreDamaged(self.path, str(exc)) from None
            raise

    def rows(self, sql: str, args=()) -> list[dict]:
        """A read, as dicts (a fresh connection: callable from any thread, before or after `close`)."""
        return read(self.path, sql, args)

    def close(self) -> None:
        """Close every connection this store opened (at the end: no thread uses it any more)."""
        for db in self._all:
            db.close()
        self._all.clear()
        self._local = threading.local()

    # ------------------------------------------------------------------ the jobs table, read and settled

    def job_counts(self) -> dict[str, int]:
        counts = dict(self.conn().execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall())
        return {s: counts.get(s, 0) for s in JOB_STATES}

    def settle(self, complete) -> list[str]:
        """Mark `done` every pending or failed job whose outputs are complete (`complete(kind, payload)`, the
        files' verdict: rcea.store.job_complete), so that the store never contradicts the files; their keys."""
        todo = self.rows("SELECT key, kind, payload FROM jobs WHERE state IN ('pending', 'failed') ORDER BY id")
        done = [j["key"] for j in todo if complete(j["kind"], json.loads(j["payload"]))]
        with self.tx() as db:
            for key in done:
                db.execute("UPDATE jobs SET state='done', finished=?, error=NULL, worker=NULL, host=NULL, pid=NULL, "
                           "lease_until=NULL WHERE key=? AND state IN ('pending', 'failed')", (time.time(), key))
        return done

    # ------------------------------------------------------------------ unit records

    def set(self, key: str, role: str, state: str, **fields) -> None:
        cols = {"role": role, "state": state, "updated": time.time(), **fields}
        with self.tx() as db:
            db.execute(f"INSERT INTO units (key, {', '.join(cols)}) VALUES (?{', ?' * len(cols)}) "
                       f"ON CONFLICT(key) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in cols)}",
                       (key, *cols.values()))

    def attempt(self, key: str, role: str, detail: dict) -> int:
        """Record the start of an attempt; returns its number (1 for the first ever)."""
        with self.tx() as db:
            db.execute("INSERT INTO units (key, role, state, attempts, updated) VALUES (?, ?, 'running', 1, ?) "
                       "ON CONFLICT(key) DO UPDATE SET state='running', attempts=attempts+1, updated=excluded.updated",
                       (key, role, time.time()))
            _event(db, key, "start", detail)
            return db.execute("SELECT attempts FROM units WHERE key=?", (key,)).fetchone()[0]

    def event(self, key: str, event: str, detail: dict | None = None) -> None:
        with self.tx() as db:
            _event(db, key, event, detail)

    def state(self, key: str) -> dict | None:
        row = self.conn().execute(f"SELECT {', '.join(UNIT_FIELDS)} FROM units WHERE key=?", (key,)).fetchone()
        return dict(zip(UNIT_FIELDS, row)) if row else None

    def units(self) -> list[dict]:
        return self.rows(f"SELECT {', '.join(UNIT_FIELDS)} FROM units ORDER BY updated")

    def mean_seconds(self, role: str) -> float | None:
        """Mean duration of the units of a role that ran to completion (any run of this data folder)."""
        row = self.conn().execute("SELECT avg(seconds) FROM units WHERE role=? AND state='done' AND seconds > 0",
                                  (role,)).fetchone()
        return row[0]

    def events(self, key: str | None = None) -> list[dict]:
        sql, args = "SELECT t, key, event, detail FROM events", ()
        if key:
            sql, args = sql + " WHERE key=?", (key,)
        return [{"t": t, "key": k, "event": e, **json.loads(d)}
                for t, k, e, d in self.conn().execute(sql + " ORDER BY id", args)]


def _event(db, key: str, event: str, detail: dict | None) -> None:
    db.execute("INSERT INTO events (t, key, event, detail) VALUES (?, ?, ?, ?)",
               (time.time(), key, event, json.dumps(detail or {}, sort_keys=True, default=str)))


def _begin(db, patience_s: float = 60.0) -> None:
    """BEGIN IMMEDIATE, retrying every 1-3 ms while another writer holds the lock.

    SQLite's own busy handler backs off to 100 ms sleeps, which idles workers under contention.
    """
    db.execute("PRAGMA busy_timeout=0")
    deadline = time.monotonic() + patience_s
    while True:
        try:
            db.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.001 + 0.002 * random.random())
    db.execute("PRAGMA busy_timeout=60000")
