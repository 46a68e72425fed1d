"""One run at a time per data folder: a lock that names its holder and is taken over once the holder is gone.

    with hold(data_root, "scripts/run demo --quick"):     # raises Busy while another live run holds it
        ...

The lock is `<data folder>/.rcea.lock`: an exclusive `flock` on the file while the run lasts, and in the file
who holds it (JSON: pid, host, command, since). The kernel drops a flock when its process ends in any way
(kill -9 included), so a lock whose holder is gone is free and the next run takes it over, rewriting the
holder. Where the filesystem has no flock, the holder's record decides: a holder on this host whose process is
gone is taken over; any other is refused. Standard library only.
"""
from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

NAME = ".rcea.lock"


class Busy(RuntimeError):
    """Another live run holds the data folder; the message names it (pid, host, command, since)."""

    def __init__(self, folder: Path, holder: dict):
        self.folder, self.holder = folder, holder
        super().__init__(describe(folder, holder))


def describe(folder, holder: dict) -> str:
    since = holder.get("since")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(since)) if isinstance(since, (int, float)) else "?"
    return (f"the data folder {folder} is in use by pid {holder.get('pid', '?')} on {holder.get('host', '?')} "
            f"({holder.get('command', '?')}, since {when}); wait for it to finish or stop it, then rerun "
            f"(a lock whose holder is gone is taken over)")


def read_holder(folder) -> dict:
    try:
        return json.loads((Path(folder) / NAME).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _gone(holder: dict) -> bool:
    """Whether the recorded holder is known to have ended (same host, no such process)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def acquire(folder, command: str) -> int:
    """Take the lock of `folder` (created if missing) for this process; returns the open descriptor (keep it
    open: closing it releases the lock). Raises Busy."""
    import fcntl

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Busy(folder, read_holder(folder)) from None
    except OSError:   # no flock on this filesystem: the record decides
        holder = read_holder(folder)
        if holder and holder.get("pid") != os.getpid() and not _gone(holder):
            os.close(fd)
            raise Busy(folder, holder) from None
    record = {"pid": os.getpid(), "host": socket.gethostname(), "command": command, "since": time.time()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    return fd


def release(folder, fd: int) -> None:
    """Drop the lock: the record is emptied (a run that ended leaves no holder named), then the flock goes."""
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass
    try:
        os.close(fd)
    except OSError:
        pass


@contextmanager
def hold(folder, command: str):
    fd = acquire(folder, command)
    try:
        yield fd
    finally:
        release(folder, fd)
