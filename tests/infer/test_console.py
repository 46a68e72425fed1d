"""The workers' progress line (infer.console): a tenth of the jobs per line at most, the last counts once, time
left only once measured; while the queue is open its total says it is what is queued so far (issue 40 item 9)."""
from __future__ import annotations

import io
import re

from infer.console import QueueWatch, counts_line


def test_lines_come_per_tenth_of_the_jobs_and_the_first_names_the_log():
    states = iter([{"pending": 52, "running": 0, "done": 0, "failed": 0}]                     # nothing claimed yet
                  + [{"pending": 50 - d, "running": 2, "done": d, "failed": 0} for d in range(0, 51)]
                  + [{"pending": 0, "running": 0, "done": 51, "failed": 1}])
    out = io.StringIO()
    w = QueueWatch(lambda: next(states), out, log="L.log")
    for _ in range(52):
        w.show()
    w.show(final=True)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[workers] 0/52 done, 2 running (log: L.log)"          # the first once a job runs
    assert re.fullmatch(r"\[workers\] 51/52 done, 0 running, 1 failed, \S+", lines[-1]), lines[-1]
    done = [int(re.match(r"\[workers\] (\d+)/", ln).group(1)) for ln in lines]
    assert all(b - a >= 5 for a, b in zip(done[:-2], done[1:-1])), done      # 52 // 10 = 5 jobs apart
    assert len(lines) <= 12
    assert "left" not in lines[0] and all("left" in ln for ln in lines[1:-1])  # estimated from 5+ finished jobs


def test_time_left_is_the_measured_rate_times_what_is_left():
    line = counts_line({"pending": 30, "running": 2, "done": 20, "failed": 0}, elapsed=100.0, done_here=10)
    assert line == "[workers] 20/52 done, 2 running, ~5m 20s left"   # 10 jobs / 100 s, 32 to go
    assert counts_line({"pending": 0, "running": 0, "done": 4, "failed": 0}, 75.0, 4) == \
        "[workers] 4/4 done, 0 running, 1m 15s"


def test_the_last_counts_come_once_when_the_thread_already_showed_them():
    """The watching thread may see the queue finish before the process exits: the line at exit is not repeated."""
    states = iter([{"pending": 1, "running": 1, "done": 0, "failed": 0}] + [{"pending": 0, "running": 0, "done": 2,
                                                                               "failed": 0}] * 2)
    out = io.StringIO()
    w = QueueWatch(lambda: next(states), out, log="L.log")
    w.show()
    w.show()                     # the thread shows 2/2 done
    w.show(final=True)           # the same counts at exit: nothing more
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and lines[0] == "[workers] 0/2 done, 1 running (log: L.log)", lines
    assert re.fullmatch(r"\[workers\] 2/2 done, 0 running, \S+", lines[1]), lines


def test_a_growing_total_is_said_to_be_what_is_queued_so_far(monkeypatch):
    """A study's queue stays open while training runs queue their jobs (3, then 17, then 31 ... jobs): each line
    says the total is so far, with no time left, until the queue closes; done counts only grow, no line repeats."""
    clock = [0.0]
    states = [({"pending": 2, "running": 1, "done": 0, "failed": 0}, True),
              ({"pending": 0, "running": 0, "done": 3, "failed": 0}, True),     # all queued so far done: waiting
              ({"pending": 12, "running": 2, "done": 3, "failed": 0}, True),    # the next run queued 14 more
              ({"pending": 8, "running": 2, "done": 7, "failed": 0}, True),
              ({"pending": 0, "running": 0, "done": 17, "failed": 0}, True),
              ({"pending": 0, "running": 0, "done": 17, "failed": 0}, False)]   # closed: the total is final
    it = iter(states)
    now = {}

    def counts():
        now["c"], now["open"] = next(it)
        return now["c"]

    import infer.console as console

    monkeypatch.setattr(console.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    w = QueueWatch(counts, out, log="L.log", is_open=lambda: now["open"], every_s=60.0)
    for _ in states[:-1]:
        w.show()
        clock[0] += 61.0   # a minute between polls: every change may be shown
    w.show(final=True)
    lines = out.getvalue().splitlines()
    assert lines == ["[workers] 0 done of 3 queued so far, 1 running (log: L.log)",
                     "[workers] 3 done of 3 queued so far, 0 running, waiting for more",
                     "[workers] 3 done of 17 queued so far, 2 running",
                     "[workers] 7 done of 17 queued so far, 2 running",
                     "[workers] 17 done of 17 queued so far, 0 running, waiting for more",
                     "[workers] 17/17 done, 0 running, 5m 05s"], lines
    assert len(set(lines)) == len(lines) and "left" not in "".join(lines)
