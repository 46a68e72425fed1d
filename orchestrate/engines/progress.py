"""The study's progress line: counts per stage and the time left, printed when they change.

    [train:local] train 1/4 done, 1 running, ~1m 30s left; infer 3/20 done, 2 running

The time left falls back on the durations the state store's unit records keep (rcea.state.Store.mean_seconds)
before this run has finished a unit of a stage.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from rcea.progress import duration

if TYPE_CHECKING:
    from rcea.state import Store


class Progress:
    """Counts per stage (role) and the time left, printed when they change.

    Time left per stage = mean duration of its batches (this run's, else the unit records' history) x batches
    not finished / batches running side by side (at least one).
    """

    def __init__(self, totals: dict[str, int], store: Store | None = None, label: str = "study", stream=None):
        self.totals, self.store, self.label = totals, store, label
        self.stream = stream or sys.stdout
        self.done = {r: 0 for r in totals}
        self.failed = {r: 0 for r in totals}
        self.running = {r: 0 for r in totals}
        self.seconds = {r: [] for r in totals}
        self.width = {r: 1 for r in totals}
        self.last, self.last_t, self.last_finished = "", 0.0, -1
        self.held = False   # True while an engine settles finished units and starts their successors

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
        mean = sum(mine) / len(mine) if mine else (self.store.mean_seconds(role) if self.store else None)
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
