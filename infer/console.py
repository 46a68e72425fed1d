"""`infer worker --progress`: the details in a log, one progress line for the queue on the terminal.

    console = to_log(path)               # this process's stdout/stderr (and its children's) now go to `path`
    watch = QueueWatch(counts, console)  # a thread printing the queue's counts as they change
    watch.start(); ...; watch.stop()     # (watch_queue(scale) does all of it, the stop at exit)

Per-job lines, library warnings (PEFT, transformers) and progress bars of every worker process end up in the log
(<data>/logs/workers/<scale>.log); the terminal gets, in the style of the other stages,

    [workers] 3 done of 17 queued so far, 2 running (log: data/logs/workers/tiny.log)
    [workers] 40/52 done, 2 running, ~40s left

While the queue is open (a study's training runs queue their jobs as each finishes) the total is what is queued
so far, and the line says so; a line comes at most once a minute then. Once it is closed the total is final: a line
when a tenth of the jobs has finished (or a minute passed), the time left measured from the jobs this run has
finished (none before a tenth of them). The last counts come once, at exit unless a line already showed them.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

from rcea.progress import duration, time_left


def to_log(path: Path):
    """Point file descriptors 1 and 2 at `path` (appending); returns a text stream on the former stdout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    console = os.fdopen(os.dup(1), "w", buffering=1)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    return console


def counts_line(counts: dict, elapsed: float, done_here: int, log: str = "", growing: bool = False) -> str:
    """'[workers] 12/52 done, 2 running, 1 failed, ~40s left' from the queue's state counts. `growing`: the queue
    is still open (training runs queue their jobs as they finish), so the total is what is queued so far:
    '[workers] 12 done of 17 queued so far, 2 running', with no time left (the total is not known yet)."""
    total = sum(counts.values())
    done, failed, running = counts.get("done", 0), counts.get("failed", 0), counts.get("running", 0)
    left = ""
    if done_here > 0 and done + failed < total and not growing:
        left = time_left(elapsed, done_here, done_here + total - done - failed)
    finished = done + failed >= total
    head = f"[workers] {done} done of {total} queued so far" if growing else f"[workers] {done}/{total} done"
    parts = [head, f"{running} running", *([f"{failed} failed"] if failed else []),
             *([left] if left else ["waiting for more"] if growing and finished else
               [f"{duration(elapsed)}"] if finished else [])]
    return ", ".join(parts) + (f" (log: {log})" if log else "")


class QueueWatch(threading.Thread):
    """`counts()`: the queue's state counts; `is_open()`: whether more jobs may still come (default: none)."""

    def __init__(self, counts, console, log: str = "", every_s: float = 60.0, poll_s: float = 1.0, is_open=None):
        super().__init__(daemon=True)
        self.counts, self.console, self.log, self.every_s, self.poll_s = counts, console, log, every_s, poll_s
        self.is_open = is_open or (lambda: False)
        self.t0, self.halt = time.monotonic(), threading.Event()
        self.start_done: int | None = None
        self.shown: tuple = (None, float("-inf"), 0)   # counts, time and finished jobs of the last line

    def show(self, final: bool = False) -> None:
        """A line when the counts changed and: it is the first with a job running, or (the total known: the queue
        closed) a tenth of the jobs finished since the last line, or a minute passed since the last line; at exit,
        the last counts unless the line before showed them. The first line names the log; while the queue is
        open its total is what is queued so far, said so on every such line."""
        try:
            c = self.counts()
            growing = bool(self.is_open()) and not final
        except Exception:   # noqa: BLE001 - a busy or damaged queue: the workers report it themselves
            return
        finished, total = c.get("done", 0) + c.get("failed", 0), sum(c.values())
        if self.start_done is None:
            self.start_done = finished
        key, now = (tuple(sorted(c.items())), growing), time.monotonic()   # a closed queue's total is final
        first = self.shown[0] is None
        step = finished - self.shown[2] >= max(1, total // 10) and not growing
        if key != self.shown[0] and (final or (first and (c.get("running") or finished > self.start_done))
                                     or (not first and (step or now - self.shown[1] >= self.every_s))):
            here = finished - self.start_done
            print(counts_line(c, now - self.t0, here if here >= max(2, total // 10) else 0,
                              self.log if first else "", growing), file=self.console, flush=True)
            self.shown = (key, now, finished)

    def run(self) -> None:
        while not self.halt.wait(self.poll_s):
            self.show()

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=5)
        self.show(final=True)


def watch_queue(scale: str, log: Path | None = None) -> QueueWatch:
    """From now on this process's (and its children's) output goes to the scale's worker log, and a thread
    prints the queue's progress on the terminal until the process exits."""
    import atexit

    from infer.queue import Queue
    from rcea.layout import logs_dir, state_path

    log = log or logs_dir("workers") / f"{scale}.log"
    console = to_log(log)
    q = Queue(state_path(scale))
    watch = QueueWatch(q.counts, console, str(log), is_open=q.is_open)
    watch.start()
    atexit.register(watch.stop)
    return watch
