"""Process-parallel map over independent work items (endpoints), for the 2-core CPU target.

Uses forked worker processes where the platform has ``fork`` (numpy work in the bootstrap and the
rarefaction holds the GIL for small arrays, so threads do not help); otherwise runs serially.
Results come back in input order, and every item seeds its own generator, so the output does not
depend on the number of workers.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def n_workers(requested: int = 0) -> int:
    """``requested`` if > 0, else the CPUs available to this process."""
    if requested > 0:
        return requested
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def pmap(fn: Callable[..., T], items: Sequence[tuple[Any, ...]], workers: int = 0, min_items: int = 4) -> list[T]:
    """[fn(*item) for item in items], in forked processes when there are at least ``min_items``
    items and more than one worker; ``fn`` must be a top-level function."""
    w = min(n_workers(workers), len(items))
    if w <= 1 or len(items) < min_items or "fork" not in mp.get_all_start_methods():
        return [fn(*it) for it in items]
    with ProcessPoolExecutor(max_workers=w, mp_context=mp.get_context("fork")) as ex:
        return list(ex.map(fn, *zip(*items), chunksize=max(1, len(items) // (4 * w))))
