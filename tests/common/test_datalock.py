"""The data-folder lock (rcea.datalock): one holder at a time, named, and taken over once its holder is gone."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rcea import datalock

ROOT = Path(__file__).resolve().parents[2]
HOLD = ("import sys, time; sys.path.insert(0, sys.argv[1]); from rcea import datalock; "
        "datalock.acquire(sys.argv[2], sys.argv[3]); print('held', flush=True); time.sleep(600)")


def _holder(folder: Path, command: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(ROOT), str(folder), command], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_live_holder_is_named_and_a_dead_one_is_taken_over(tmp_path):
    before = time.time()
    other = _holder(tmp_path, "invoke demo --quick")
    try:
        with pytest.raises(datalock.Busy) as busy:
            datalock.acquire(tmp_path, "invoke study")
        h = busy.value.holder
        assert (h["pid"], h["host"], h["command"]) == (other.pid, socket.gethostname(), "invoke demo --quick")
        assert before - 1 <= h["since"] <= time.time()
        msg = str(busy.value)
        assert f"pid {other.pid}" in msg and socket.gethostname() in msg and "invoke demo --quick" in msg
        assert time.strftime("%Y-%m-%d", time.gmtime(h["since"])) in msg and str(tmp_path) in msg
    finally:
        other.send_signal(signal.SIGKILL)   # the holder dies without releasing anything
        other.wait()
    fd = datalock.acquire(tmp_path, "invoke study")   # taken over
    try:
        assert json.loads((tmp_path / datalock.NAME).read_text())["pid"] == os.getpid()
        assert datalock.read_holder(tmp_path)["command"] == "invoke study"
    finally:
        datalock.release(tmp_path, fd)
    assert datalock.read_holder(tmp_path) == {}     # a run that ended names no holder
    datalock.release(tmp_path, datalock.acquire(tmp_path, "again"))   # and the folder is free again


def test_the_lock_is_not_inherited_by_child_processes(tmp_path):
    """A child the run started (and that outlives it) must not keep the folder locked."""
    fd = datalock.acquire(tmp_path, "parent")
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], close_fds=False)
    try:
        time.sleep(0.5)   # the child runs its own program now (a copy of the descriptor lives only until exec)
        datalock.release(tmp_path, fd)
        datalock.release(tmp_path, datalock.acquire(tmp_path, "next"))
    finally:
        child.kill()
        child.wait()
