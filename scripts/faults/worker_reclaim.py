"""Fault check: how long does a job wait after its worker is killed (kill -9)?

    .envs/infer/bin/python scripts/faults/worker_reclaim.py [--lease 300] [--remote-lease 3]

A child process claims a job from a fresh queue (as `python -m infer worker` does) and is killed with
SIGKILL; a second worker then runs `run_worker(until_empty=True)`. Printed: seconds from the kill to
the job's second claim, (1) with the holder on this host (its process is gone: reclaimed at once) and
(2) with the holder recorded as on another host, whose process cannot be checked (waits for the lease,
`--remote-lease` seconds here, and says what it waits for while it does).
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from infer.queue import Queue  # noqa: E402
from infer.worker import run_worker  # noqa: E402


class Quiet:
    def __init__(self):
        self.stream = io.StringIO()

    def start(self, job):
        pass

    def __call__(self, *a):
        pass


def trial(folder: Path, lease: float, remote: bool) -> tuple[float, str]:
    path = folder / ("remote.sqlite" if remote else "local.sqlite")
    q = Queue(path, lease_s=lease)
    q.enqueue("probe:grpo-4", "probe", {})
    code = ("import sys, time; from infer.queue import Queue\n"
            f"Queue(sys.argv[1], lease_s={lease}).claim('victim'); print('claimed', flush=True); time.sleep(600)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(path)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                             stdout=subprocess.PIPE, text=True)
    child.stdout.readline()
    if remote:
        q._conn().execute("UPDATE jobs SET host='another-host'")
    child.send_signal(signal.SIGKILL)
    child.wait()
    t = time.monotonic()
    claimed: list[float] = []

    def runner(payload, ctx, progress):
        claimed.append(time.monotonic() - t)
        return {}

    shown = Quiet()
    run_worker(q, runner, until_empty=True, poll_s=0.2, name="rescuer", display=shown, report_s=1.0)
    waits = [ln for ln in shown.stream.getvalue().splitlines() if "waiting" in ln]
    return claimed[0], (waits[0] if waits else "(no wait)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lease", type=float, default=300.0, help="lease of the local trial (the default lease)")
    ap.add_argument("--remote-lease", type=float, default=3.0, help="lease of the other-host trial")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        s, _ = trial(Path(tmp), args.lease, remote=False)
        print(f"holder on this host, lease {args.lease:g}s: job reclaimed {s:.2f}s after the kill")
        s, line = trial(Path(tmp), args.remote_lease, remote=True)
        print(f"holder on another host, lease {args.remote_lease:g}s: job reclaimed {s:.2f}s after the kill")
        print(f"  while waiting it said: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
