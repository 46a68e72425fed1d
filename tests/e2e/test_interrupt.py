"""Ctrl-C, SIGTERM and a second run on a busy data folder end `scripts/run demo` in one line (issue 31, item 2).

Each test starts `scripts/run demo --quick` in a fresh data folder as its own process group (as a shell runs a
command), signals it at a stage and checks: the exit status a shell gives that signal, one line on stderr that
says how to resume, and no process left behind that carries the run's data folder in its environment.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESUME = "interrupted"


def _start(data: Path, *extra: str) -> tuple[subprocess.Popen, list[str]]:
    env = dict(os.environ, RCEA_DATA=str(data), RCEA_RESULTS=str(data.parent / "results"))
    env.pop("RCEA_OVERRIDES", None)
    proc = subprocess.Popen([str(ROOT / "scripts" / "run"), "demo", "--quick", "--methods", "grpo", *extra], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    return proc, lines


def _wait_for(lines: list[str], text: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in ln for ln in lines):
        assert proc.poll() is None, f"the demo ended before {text!r}: {''.join(lines)[-2000:]}"
        assert time.monotonic() < deadline, f"no {text!r} within {timeout}s"
        time.sleep(0.2)


def _left_behind(data: Path) -> list[int]:
    """Processes whose environment names this run's data folder (every child of the run inherits it)."""
    needle = f"RCEA_DATA={data}\0".encode()
    found = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes() + b"\0":
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                if stat[0] != "Z":
                    found.append(int(pid))
        except OSError:
            continue
    return found


def _check_one_line_exit(proc: subprocess.Popen, code: int, data: Path) -> str:
    try:
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == code, (proc.returncode, err[-3000:])
    assert len(err.strip().splitlines()) == 1, err[-3000:]
    assert "Traceback" not in err and "rerun the same command to resume" in err and RESUME in err, err
    time.sleep(0.5)
    assert _left_behind(data) == [], "child processes outlived the interrupted run"
    return err


def test_ctrl_c_in_training_stops_every_child_in_one_line(tmp_path):
    """SIGINT to the whole process group (what a terminal's Ctrl-C does) while a training run is going."""
    data = tmp_path / "data"
    proc, lines = _start(data)
    _wait_for(lines, "=== [2/8]", proc)
    time.sleep(3)   # the training child is running
    os.killpg(proc.pid, signal.SIGINT)
    err = _check_one_line_exit(proc, 130, data)
    assert "Ctrl-C" in err


def test_sigterm_in_prepare_stops_every_child_in_one_line(tmp_path):
    """SIGTERM to the run's own process (what a service manager or `kill` sends) while prepare runs."""
    data = tmp_path / "data"
    proc, lines = _start(data)
    _wait_for(lines, "=== [1/8]", proc)
    time.sleep(1)
    os.kill(proc.pid, signal.SIGTERM)
    _check_one_line_exit(proc, 143, data)


def test_a_second_run_on_a_busy_data_folder_is_refused_naming_the_holder(tmp_path):
    """While another live process holds the folder's lock, the demo stops at once in one line naming the holder,
    and touches nothing (no half-built model left in the folder)."""
    data = tmp_path / "data"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); from rcea import datalock; "
        "datalock.acquire(sys.argv[2], 'the other run'); print('held', flush=True); time.sleep(600)"),
        str(ROOT), str(data)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc, _ = _start(data)
        try:
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        err = proc.stderr.read()
        assert proc.returncode == 1, err[-3000:]
        assert len(err.strip().splitlines()) == 1, err[-3000:]
        assert f"pid {holder.pid}" in err and "the other run" in err and str(data) in err, err
        assert sorted(p.name for p in data.iterdir()) == [".rcea.lock"]   # nothing was started
    finally:
        holder.kill()
        holder.wait()
