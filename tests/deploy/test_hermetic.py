"""The suite ignores the caller's project variables (tests/conftest.py clears them at session start)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import KEEP, project_variables

ROOT = Path(__file__).resolve().parents[2]
CALLER = {"RCEA_DATA": "/nonexistent/rcea-data", "RCEA_OVERRIDES": "train.max_steps=3;eval.greedy_max_new_tokens=7",
          "RCEA_SCALE": "7b", "RCEA_TAG": "x", "NUM_WORKERS": "3", "RCEA_JUDGE_API_KEY": "k"}


def test_project_variables_are_cleared_and_run_controls_kept():
    env = {**CALLER, "RCEA_ROLE": "tools", "RCEA_OFFLINE": "1", "PATH": "/bin", "HOME": "/h"}
    assert project_variables(env) == sorted(CALLER)
    assert not KEEP & set(CALLER)


def test_a_session_under_a_polluted_shell_gives_the_clean_result(tmp_path):
    """Before the conftest hook, RCEA_DATA alone made the dry-run tests print /nonexistent/... paths."""
    env = {**os.environ, **CALLER}
    cmd = [sys.executable, "-m", "pytest", "tests/deploy/test_tasks.py", "-q", "-p", "no:cacheprovider",
           "-k", "dry_run", "-o", "addopts=", "--rootdir", str(ROOT)]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "/nonexistent" not in out.stdout
