"""The job queue: the pull side of the study's one state store (rcea.state: the `jobs` and `opened` tables of
<data>/state/<scale>.sqlite, rcea.layout.state_path; the engines' unit records are in the same file). This module
holds the queue's operations; rcea.state owns the schema, the connections and the transactions.

Every state change is a transaction (`BEGIN IMMEDIATE`). A claimed job carries a lease that the worker's
heartbeat extends, and the holder's host (host name + PID namespace) and process id. A job whose lease
ran out (its worker died or hung), or whose holder ran on this host and whose process is gone (kill -9, OOM: reclaimed at
once, without waiting out the lease), returns to `pending` at the next claim, up to `max_attempts`
claims, after which it is `failed` with the reason. Claims take the most expensive
pending job first (longest-processing-time order keeps many workers busy to the end).
Keys are unique, so enqueueing is idempotent: a known key (pending, running or done) is left alone, and the
files decide over the flag: a job whose table parts are complete is `done` (rcea.store.job_complete).

The queue is *open* while a study may still enqueue (its training runs enqueue their measurements as each
finishes): `open(holder)` writes one row with a heartbeat, which the holder refreshes (`beat`) every BEAT_S
seconds, and `close()` removes it. A heartbeat older than STALE_S counts as closed, so a holder that was killed
never leaves the workers waiting. Workers with `--until-empty` exit only when nothing is pending or running
and the queue is not open (`drained`); `python -m infer hold` is the holder the study runs.

A damaged store is moved aside and rebuilt when opened, in one line; damage found while in use raises
rcea.state.StoreDamaged (see rcea/state.py).
"""

from __future__ import annotations

import json
import socket
import time
import os
from dataclasses import dataclass
from pathlib import Path

from rcea.state import JOB_STATES as STATES, Store

KILLED_ROUNDS = 3   # reruns that retry a job whose holders were all killed, before it needs --retry-failed
BEAT_S = 10.0       # how often the holder of an open queue refreshes its heartbeat
STALE_S = 60.0      # a heartbeat older than this: the holder is gone, the queue counts as closed



@dataclass
class Job:
    id: int
    key: str
    kind: str
    payload: dict
    cost: float
    attempts: int


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def pid_domain() -> str:
    """Where a pid means the same process: this host name and this PID namespace. Containers sharing
    the host's network (and so its host name) still have their own PID namespace."""
    try:
        ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        ns = "?"
    return f"{socket.gethostname()}/{ns}"


def process_alive(pid: int) -> bool:
    """Whether process `pid` of this host (this PID namespace) exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    try:  # a killed child its parent has not reaped yet is a zombie: dead all the same
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


class Queue:
    def __init__(self, path: str | Path, lease_s: float = 300.0, max_attempts: int = 3):
        self.store = Store(path)
        self.path = self.store.path
        self.lease_s, self.max_attempts = lease_s, max_attempts
        self._tx, self._conn = self.store.tx, self.store.conn

    def enqueue(self, key: str, kind: str, payload: dict, cost: float = 1.0, retry_failed: bool = False,
                complete: bool | None = None) -> str:
        """Add a job; returns 'added', 'exists' (left alone), 'retried' (a failed job made pending), 'redo'
        (a job marked done whose outputs are not all there: `complete` False, as the caller found the files) or
        'complete' (a pending or failed job whose outputs are all there, `complete` True: marked done).

        The files decide, not the flag: a done job with a missing or incomplete output part runs again, and a
        pending or failed one whose parts were completed since (by another run) is done. A job
        that failed only because its holders were killed (`lease expired`) is retried by a rerun on its own, up
        to KILLED_ROUNDS times (each round `max_attempts` claims); `retry_failed` retries any failed job."""
        with self._tx() as db:
            row = db.execute("SELECT state, error, rounds FROM jobs WHERE key = ?", (key,)).fetchone()
            if row is None:
                db.execute("INSERT INTO jobs (key, kind, payload, cost, created) VALUES (?, ?, ?, ?, ?)",
                           (key, kind, json.dumps(payload, sort_keys=True), float(cost), time.time()))
                return "added"
            state, error, rounds = row[0], row[1] or "", row[2] or 0
            if complete and state in ("pending", "failed"):
                db.execute("UPDATE jobs SET state='done', finished=?, error=NULL WHERE key=?", (time.time(), key))
                return "complete"
            killed = state == "failed" and error.startswith("lease expired") and rounds < KILLED_ROUNDS
            redo = state == "done" and complete is False
            if (state == "failed" and retry_failed) or killed or redo:
                db.execute("UPDATE jobs SET state='pending', attempts=0, error=NULL, worker=NULL, host=NULL, pid=NULL, "
                           "payload=?, cost=?, rounds=? WHERE key=?",
                           (json.dumps(payload, sort_keys=True), float(cost), rounds + killed, key))
                return "redo" if redo else "retried"
            return "exists"

    def _expire(self, db, now: float) -> None:
        here = pid_domain()
        for job_id, pid in db.execute("SELECT id, pid FROM jobs WHERE state='running' AND host=? AND pid IS NOT NULL",
                                      (here,)).fetchall():
            if pid != os.getpid() and not process_alive(pid):
                db.execute("UPDATE jobs SET lease_until=? WHERE id=?", (now - 1.0, job_id))  # its holder is gone
        db.execute("UPDATE jobs SET state='failed', finished=?, error=printf('lease expired %d times (worker '"
                   " || coalesce(worker, '?') || ' died or hung)', attempts) "
                   "WHERE state='running' AND lease_until < ? AND attempts >= ?", (now, now, self.max_attempts))
        db.execute("UPDATE jobs SET state='pending', worker=NULL, host=NULL, pid=NULL "
                   "WHERE state='running' AND lease_until < ?", (now,))

    def claim(self, worker: str | None = None) -> Job | None:
        """The most expensive pending job (after returning expired leases), now running under `worker`."""
        worker = worker or worker_name()
        now = time.time()
        with self._tx() as db:
            self._expire(db, now)
            row = db.execute("SELECT id, key, kind, payload, cost, attempts FROM jobs WHERE state='pending' "
                             "ORDER BY cost DESC, id ASC LIMIT 1").fetchone()
            if row is None:
                return None
            db.execute("UPDATE jobs SET state='running', worker=?, host=?, pid=?, attempts=attempts+1, lease_until=?, "
                       "started=? WHERE id=?", (worker, pid_domain(), os.getpid(), now + self.lease_s, now,
                                                row[0]))
        return Job(row[0], row[1], row[2], json.loads(row[3]), row[4], row[5] + 1)

    def heartbeat(self, job_id: int, worker: str) -> bool:
        """Extend the lease; False if the job is no longer ours (it expired and was reclaimed)."""
        with self._tx() as db:
            cur = db.execute("UPDATE jobs SET lease_until=? WHERE id=? AND worker=? AND state='running'",
                             (time.time() + self.lease_s, job_id, worker))
            return cur.rowcount == 1

    def finish(self, job_id: int, worker: str, error: str | None = None) -> bool:
        state = "done" if error is None else "failed"
        with self._tx() as db:
            cur = db.execute("UPDATE jobs SET state=?, finished=?, error=?, lease_until=NULL "
                             "WHERE id=? AND worker=? AND state='running'",
                             (state, time.time(), error, job_id, worker))
            return cur.rowcount == 1

    def held(self) -> list[dict]:
        """Running jobs: key, holder (worker name) and seconds left on the lease (soonest first)."""
        now = time.time()
        rows = self._conn().execute("SELECT key, worker, lease_until FROM jobs WHERE state='running' "
                                    "ORDER BY lease_until").fetchall()
        return [{"key": k, "worker": w, "left_s": max(0.0, (u or now) - now)} for k, w, u in rows]

    def counts(self) -> dict[str, int]:
        with self._tx() as db:
            self._expire(db, time.time())
            rows = db.execute("SELECT state, count(*) FROM jobs GROUP BY state").fetchall()
        return {s: dict(rows).get(s, 0) for s in STATES}

    def open(self, holder: str) -> None:
        """Mark the queue open (more jobs may come) under `holder`, replacing any earlier (stale) holder."""
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO opened (one, holder, heartbeat) VALUES (1, ?, ?)", (holder, time.time()))

    def beat(self, holder: str) -> bool:
        """Refresh `holder`'s heartbeat; False when the queue is no longer open under it (closed, or taken)."""
        with self._tx() as db:
            cur = db.execute("UPDATE opened SET heartbeat=? WHERE one=1 AND holder=?", (time.time(), holder))
            return cur.rowcount == 1

    def close(self, holder: str | None = None) -> None:
        """Mark the queue closed (no more jobs come): `holder`'s opening only, or any (None)."""
        with self._tx() as db:
            db.execute("DELETE FROM opened WHERE one=1 AND (? IS NULL OR holder=?)", (holder, holder))

    def is_open(self, stale_s: float = STALE_S) -> bool:
        """Whether a holder keeps the queue open: its row exists and its heartbeat is fresher than `stale_s`."""
        row = self._conn().execute("SELECT heartbeat FROM opened WHERE one=1").fetchone()
        return row is not None and time.time() - row[0] < stale_s

    def drained(self, counts: dict | None = None) -> bool:
        """Nothing pending or running, and no more jobs can come (the queue is not open): workers may exit."""
        counts = counts or self.counts()
        return not counts["pending"] and not counts["running"] and not self.is_open()

    def wait_for_work(self, poll_s: float = 1.0, sleep=time.sleep) -> bool:
        """Wait, cheaply (a read of the store every `poll_s` seconds), until a job is pending (True) or the queue is
        drained (False: nothing pending or running and not open). A `--until-empty` worker asks this before it loads
        its libraries, so one with nothing to do (a rerun whose jobs are all complete) exits at once; a job held by
        a worker that dies returns to pending here, as at a claim."""
        while True:
            counts = self.counts()
            if counts["pending"]:
                return True
            if self.drained(counts):
                return False
            sleep(poll_s)

    def jobs(self) -> list[dict]:
        return self.store.rows("SELECT * FROM jobs ORDER BY id")
