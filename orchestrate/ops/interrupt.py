"""Ctrl-C and SIGTERM: every child process ends, and the run says so in one line.

    with interrupt.guard("demo"):        # around anything that starts child processes
        ...

Inside the guard, SIGINT (Ctrl-C) and SIGTERM stop the whole process tree below this one (SIGTERM, then SIGKILL
after a grace period), silence the threads that copy the children's output (their tracebacks would reach the
terminal half-written), run the registered clean-ups (`on_interrupt`), print

    demo: interrupted (Ctrl-C); every child process was stopped; rerun the same command to resume

on stderr and exit with 130 (SIGINT) or 143 (SIGTERM), the shell's codes for those signals. Every stage writes its
outputs atomically and skips what is complete, so the rerun resumes. Outside a guard, and off the main thread,
signals keep Python's default behaviour. The process tree is read from /proc (Linux); elsewhere only this
process ends, and the children die with their parent where they were started with a parent-death signal
(orchestrate/engines/batch.py).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager

EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
NAMES = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
GRACE_S = 10.0   # how long children get to exit on SIGTERM before SIGKILL

_state = {"depth": 0, "name": "", "saved": {}, "stopping": False}
_cleanups: list = []


def on_interrupt(fn) -> None:
    """Call `fn()` (best effort) when an interrupt ends the run, before the exit line."""
    _cleanups.append(fn)


def _stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[1])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below `pid` (default: this one), parents before children; [] without /proc."""
    root = pid or os.getpid()
    children: dict[int, list[int]] = {}
    try:
        entries = [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
    for p in entries:
        st = _stat(p)
        if st and st[0] != "Z":
            children.setdefault(st[1], []).append(p)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(0), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def stop_children(grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM every descendant (twice over, for processes started meanwhile), wait up to `grace_s` for them to
    exit, SIGKILL the rest. Returns the pids that were signalled."""
    seen: list[int] = []
    for _ in range(2):
        for pid in descendants():
            if pid not in seen:
                seen.append(pid)
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
    deadline = time.monotonic() + grace_s
    while any(_alive(p) for p in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in seen + descendants():
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    return seen


def task_name() -> str:
    """The task this process runs (`invoke demo --quick` -> 'demo'), for the exit line."""
    return next((a for a in sys.argv[1:] if not a.startswith("-")), "run")


def _handler(signum, frame) -> None:
    if _state["stopping"]:
        return   # a second Ctrl-C while the children stop: the first one is being handled
    _state["stopping"] = True
    try:   # what was printed stays; what the children write from now on (their tracebacks) goes nowhere
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    err = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    stop_children()
    for fn in _cleanups:
        try:
            fn()
        except Exception:   # noqa: BLE001 - a clean-up must not stop the exit line
            pass
    name = _state["name"] or task_name()
    os.write(err, (f"{name}: interrupted ({NAMES.get(signum, f'signal {signum}')}); every child process was "
                   "stopped; rerun the same command to resume\n").encode())
    os._exit(EXIT.get(signum, 128 + int(signum)))


@contextmanager
def guard(name: str = ""):
    """Handle SIGINT/SIGTERM as the module docstring says while the block runs (nested guards keep the outer
    name); the previous handlers come back after it."""
    main = threading.current_thread() is threading.main_thread()
    if main and _state["depth"] == 0:
        _state["name"] = name
        _state["saved"] = {s: signal.signal(s, _handler) for s in EXIT}
    _state["depth"] += main
    try:
        yield
    finally:
        if main:
            _state["depth"] -= 1
            if _state["depth"] == 0:
                for s, h in _state["saved"].items():
                    signal.signal(s, h)
                _state["saved"], _cleanups[:] = {}, []
