"""A full disk, said in one line: the folder, the space left there and the space needed.

A write that runs out of space fails in many forms: an OSError with errno 28 (ENOSPC) or 122 (EDQUOT), the
same wrapped in a library's own error (safetensors' "No space left on device (os error 28)", SQLite's
"database or disk is full"), or something unrelated raised later by a library whose write failed underneath
(matplotlib's `AttributeError: 'Stream' object has no attribute 'pos'` when a PDF could not be written).
`cause` recognises the first two by the error itself and the last by the free space left where the failed
write went. Every role's command line ends such a failure with `line` (`guard` around its main), and
`rcea.store.atomic_write` raises `DiskFull` naming the file it could not finish (its temporary file removed,
so no partial file is ever published); the rerun resumes from what is complete.

Standard library only: every environment imports it.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
from pathlib import Path
from typing import Callable

LOW = 1 << 20   # free bytes under which a failed write is taken for a full disk, whatever its error says
MESSAGES = ("no space left on device", "os error 28", "database or disk is full", "disk quota exceeded")


class DiskFull(OSError):
    """A write that ran out of space: `folder`, `needed` (what the write needed, as words) and the line."""

    def __init__(self, folder: str | Path, needed: str = ""):
        self.folder, self.needed = Path(folder), needed
        super().__init__(errno.ENOSPC, line(folder, needed))


def size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} bytes"


def free(folder: str | Path) -> int | None:
    """Free bytes on the disk holding `folder` (its nearest existing ancestor), None when unknown."""
    p = Path(folder).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def line(folder: str | Path, needed: str = "") -> str:
    left = free(folder)
    return (f"the disk holding {folder} is full ({'unknown' if left is None else size(left)} left"
            + (f"; {needed}" if needed else "") + "): free space there (or point RCEA_DATA at a larger disk), then "
            "rerun the same command: it resumes from what is complete")


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def cause(exc: BaseException, folders=()) -> DiskFull | None:
    """The DiskFull behind `exc` (None when it is not a full disk): a DiskFull in its chain, an OSError of errno
    ENOSPC/EDQUOT, an error whose message says so, or any error while one of `folders` has under LOW bytes free."""
    for e in _chain(exc):
        if isinstance(e, DiskFull):
            return e
    for e in _chain(exc):
        where = getattr(e, "filename", None)
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return DiskFull(Path(where).parent if where else (list(folders) or ["."])[0])
        if any(m in str(e).lower() for m in MESSAGES):   # safetensors', SQLite's (sqlite3.OperationalError), ...
            return DiskFull((list(folders) or ["."])[0])
    for folder in folders:
        left = free(folder)
        if left is not None and left < LOW:
            return DiskFull(folder)
    return None


def watched() -> list[Path]:
    """The folders a role writes: the data folder and the published results."""
    from rcea.paths import data_dir

    out = [data_dir()]
    if os.environ.get("RCEA_RESULTS"):
        out.append(Path(os.environ["RCEA_RESULTS"]))
    return out


def guard(main: Callable[[], int], folders: Callable[[], list] = watched, needed: Callable[[], str] | None = None) -> int:
    """`main()`, with a full disk ended in one line (exit 1) instead of a traceback; other errors propagate."""
    try:
        return main()
    except Exception as exc:
        full = cause(exc, folders())
        if full is None:
            raise
        print(f"error: {line(full.folder, full.needed or (needed() if needed else ''))}", file=sys.stderr, flush=True)
        return 1
