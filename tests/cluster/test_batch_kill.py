"""A killed unit leaves nothing behind but its log: kill -9 of the process running a batch (what a lost Ray
worker is) takes its child with it and leaves no temporary folder; the rerun of the batch completes it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DRIVER = """
import sys
from orchestrate.engines.batch import run_batch
from tests.cluster.standin import StandIn
print(run_batch([StandIn("slow", seconds=float(sys.argv[2]))], sys.argv[1]))
"""


def test_a_killed_batch_leaves_no_temporary_folder_and_its_rerun_completes(tmp_path):
    from orchestrate.engines.batch import log_path
    from tests.cluster.standin import StandIn, expected

    data, tmp = tmp_path / "data", tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(data), "60"], cwd=ROOT, env=env,
                            start_new_session=True)
    seen = data / "seen"
    deadline = time.monotonic() + 60
    while not (seen.exists() and any(seen.iterdir())) and time.monotonic() < deadline:   # the unit's child runs
        time.sleep(0.1)
    assert seen.exists() and any(seen.iterdir()), "the unit never started"
    child = int(next(seen.iterdir()).name.rsplit(".", 1)[1])
    os.kill(proc.pid, signal.SIGKILL)                     # the batch's process only, as when a Ray worker dies
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:  # the child dies with its parent (PR_SET_PDEATHSIG)
        time.sleep(0.1)
    assert not _alive(child)
    assert sorted(p.name for p in tmp.iterdir()) == []    # nothing left in the temporary folder
    unit = StandIn("slow", seconds=0.1)
    assert not unit.done(data)
    rerun = subprocess.run([sys.executable, "-c", DRIVER, str(data), "0.1"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert unit.done(data) and unit.output(data).read_text() == expected("slow")
    assert sorted(p.name for p in tmp.iterdir()) == []
    logs = log_path(data, unit.group).parent
    assert sorted(p.name for p in logs.iterdir()) == [log_path(data, unit.group).name]   # its log, no spec folder


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False
