"""The commands a study runs beside its stages: the queue's holder and the measurement workers.

Under the default engine the train stage starts, before its first run, `python -m infer hold` (the queue stays
open: idle `--until-empty` workers wait for more jobs, infer.queue), the base policy's enqueue and the
measurement workers on the devices that do not train (local worker processes, or `docker compose up -d` of
compose.yaml's workers), so each run's measurements start as soon as that run has enqueued them; once no training
run is left to start, each slot training frees gets one more worker (`add`: orchestrate/ops/study.py, the rule of
rcea.launch). The workers stage then closes
the queue (the holder's stdin ends) and joins the workers: a local worker command identical to a background one
waits for that process instead of starting a second; Compose's attached `up` re-attaches to its containers.

A study that stops early (a failed run, an exception) closes the queue and stops the local workers; Compose's
detached workers finish what was enqueued and exit. Ctrl-C and SIGTERM stop every child (orchestrate.ops.interrupt);
a killed holder's heartbeat goes stale, so no worker waits forever; a rerun resumes (queue keys are idempotent).
"""
from __future__ import annotations

import os
import signal
import subprocess

from invoke.exceptions import Exit

from orchestrate.ops.shell import ROOT, sh

HOLD_WAIT_S = 60.0   # how long a closed holder gets to say so


class Background:
    def __init__(self):
        self.holder: subprocess.Popen | None = None
        self.procs: list[tuple[tuple[str, ...], subprocess.Popen]] = []

    def start(self, commands, hold=None, log=None, quiet=()) -> None:
        """Start `hold` (the queue's holder) and wait until it says the queue is open, then each command; the
        output of those in `quiet` (an enqueue's line per job) goes to the file `log`, not the terminal."""
        os.chdir(ROOT)
        if hold is not None and self.holder is None:
            self.holder = subprocess.Popen(list(hold), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            first = self.holder.stdout.readline()
            if "open" not in first:
                rc = self.holder.wait()
                self.holder = None
                raise Exit(f"study: the queue holder `{sh(hold)}` did not open the queue (exit {rc}): {first.strip()}",
                           code=1)
            print(first.strip(), flush=True)
        if commands:   # one line: `--dry` lists the commands themselves
            print(f"study: {len(commands)} command(s) started in the background (listed by --dry)", flush=True)
        for argv in commands:
            self.add(argv, log, tuple(argv) in {tuple(q) for q in quiet})

    def add(self, argv, log=None, quiet: bool = False, errors: bool = False) -> None:
        """Start one more background command (a measurement worker on a slot training has freed: study.py), owned
        as the others: joined by `join`/`finish`, stopped by `stop`; `quiet`: its output to the file `log`
        (`errors`: its error stream too: a worker's per-job lines)."""
        out = None
        if log is not None and quiet:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = open(log, "a", encoding="utf-8")
        os.chdir(ROOT)
        err = subprocess.STDOUT if out is not None and errors else None
        self.procs.append((tuple(argv), subprocess.Popen(list(argv), stdout=out, stderr=err)))
        if out is not None:
            out.close()   # the child holds its own copy

    def close(self) -> None:
        """Close the queue: the holder's stdin ends, it marks the queue closed and exits."""
        h, self.holder = self.holder, None
        if h is None:
            return
        try:
            h.communicate(timeout=HOLD_WAIT_S)   # closes its stdin first; the workers stage then names the queue
        except (OSError, ValueError, subprocess.TimeoutExpired):
            h.kill()   # its heartbeat goes stale: the queue counts as closed within infer.queue.STALE_S

    def join(self, argv) -> bool:
        """Wait for the background process running exactly `argv` (True), if there is one (False)."""
        for item in list(self.procs):
            if item[0] == tuple(argv):
                self.procs.remove(item)
                rc = item[1].wait()
                if rc != 0:
                    raise Exit(f"study: `{sh(argv)}` exited with {rc}", code=1)
                return True
        return False

    def ended(self, argv) -> bool:
        """Wait for the background process running exactly `argv`, if there is one, leaving it to `join`/`finish`
        (which report a failure); True when it exited 0 (or there is none)."""
        return all(proc.wait() == 0 for a, proc in self.procs if a == tuple(argv))

    def finish(self) -> None:
        """Wait for the one-off background commands (enqueue, `up -d`); a failure stops the study."""
        for argv, _ in list(self.procs):
            self.join(argv)

    def stop(self) -> None:
        """A study ending early: close the queue and stop every background process (its whole tree)."""
        from orchestrate.ops.interrupt import descendants

        self.close()
        for _, proc in self.procs:
            if proc.poll() is None:
                for pid in [*descendants(proc.pid), proc.pid]:
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except OSError:
                        pass
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self.procs = []


BACKGROUND = Background()
