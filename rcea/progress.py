"""One progress style for every long step, with one time format.

    [warm start] step 301/1200 loss 0.552 | 2m 03s, ~6m 09s left

Plain lines where output goes to a log, a pipe or a container (`docker compose logs` keeps them readable);
on a terminal, a tqdm bar when tqdm is installed in that environment (it is locked in train, infer and
aggregate). Durations read `12s`, `4m 10s`, `1h 05m` everywhere: training steps, the warm start, the
measurement jobs, the study's stages and the engines' progress line.
"""
from __future__ import annotations

import sys
import time


def duration(seconds: float) -> str:
    """'12s', '4m 10s', '1h 05m' (negative: '0s')."""
    s = int(round(max(seconds, 0)))
    h, m = divmod(s // 60, 60)
    return f"{h}h {m:02d}m" if h else (f"{m}m {s % 60:02d}s" if m else f"{s}s")


def time_left(elapsed: float, done: float, total: float) -> str:
    """'~4m 10s left' at the pace so far, or '' before the first unit or after the last."""
    if done <= 0 or done >= total or elapsed <= 0:
        return ""
    return f"~{duration(elapsed / done * (total - done))} left"


def timing(elapsed: float, done: float, total: float) -> str:
    """'2m 03s, ~6m 09s left' (elapsed, then the time left when there is one)."""
    left = time_left(elapsed, done, total)
    return duration(elapsed) + (f", {left}" if left else "")


class Progress:
    """`update(done, note)`: a tqdm bar on a terminal, else one plain line at most every `every_s` seconds
    (and always for the last unit)."""

    def __init__(self, label: str, total: int, unit: str = "step", stream=None, every_s: float = 10.0,
                 bar: bool | None = None):
        self.label, self.total, self.unit, self.every_s = label, total, unit, every_s
        self.stream = stream or sys.stderr
        self.t0, self.last = time.monotonic(), float("-inf")
        self.bar = None
        if bar if bar is not None else getattr(self.stream, "isatty", lambda: False)():
            try:
                from tqdm import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, desc=label, unit=unit, file=self.stream, dynamic_ncols=True)

    def line(self, done: int, note: str = "") -> str:
        elapsed = time.monotonic() - self.t0
        return (f"[{self.label}] {self.unit} {done}/{self.total}" + (f" {note}" if note else "")
                + f" | {timing(elapsed, done, self.total)}")

    def update(self, done: int, note: str = "") -> None:
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            if note:
                self.bar.set_postfix_str(note, refresh=False)
            if done >= self.total:
                self.bar.close()
            return
        now = time.monotonic()
        if now - self.last >= self.every_s or done >= self.total:
            print(self.line(done, note), file=self.stream, flush=True)
            self.last = now
