"""`invoke audit --serve --port N` as typed: the page on port N, saying what to do while no pairs are drawn; a
port in use is one line and a non-zero exit."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import tasks

ROOT = Path(tasks.__file__).resolve().parent
INVOKE = str(ROOT / ".envs" / "tools" / "bin" / "invoke")


def run_env(tmp_path):
    return {**os.environ, "RCEA_DATA": str(tmp_path / "data")}


def test_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run([INVOKE, "audit", "--serve", "--port", str(port)], cwd=ROOT, env=run_env(tmp_path),
                           capture_output=True, text=True, timeout=120)
    said = (r.stdout + r.stderr).strip().splitlines()
    assert r.returncode != 0 and len(said) == 1, said
    assert f"127.0.0.1:{port}" in said[0] and "--port N" in said[0] and "Traceback" not in said[0]


def test_serve_on_port_n_says_to_draw_the_sample_first(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([INVOKE, "audit", "--serve", "--port", str(port)], cwd=ROOT, env=run_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = [proc.stdout.readline(), proc.stdout.readline()]
        assert lines[0].startswith(f"audit page: http://127.0.0.1:{port}/"), lines
        assert "invoke audit --scale tiny --sample" in lines[1], lines   # one line: what to do first
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/people", timeout=10) as r:
            people = json.loads(r.read())
        assert people["pairs"] == 0 and "invoke audit --scale tiny --sample" in people["message"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)
