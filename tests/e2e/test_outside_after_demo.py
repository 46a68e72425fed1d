"""Issue 40 item 2: a quick demo, then `invoke measure-run` of an outside run, then the report: exit 0, the run in
the report, and `invoke aggregate` after it content. On main before this change the outside run's tables were
made under the scale's defaults beside the demo's quick ones, and both commands ended in "the tables were made
under 2 configurations" with no command that fixed it.

The outside run is the demo's own grpo checkpoints, copied out as a TRL output folder (no training here); the
measurement runs in a copy of the demo's data folder, which the session's other tests read unchanged."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVOKE = str(ROOT / ".envs" / "tools" / "bin" / "invoke")


def test_quick_demo_then_measure_run_then_the_report(demo, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(demo[0], data, ignore=shutil.ignore_patterns("logs", "*.lock", "superseded"))
    run = tmp_path / "my-grpo"
    shutil.copytree(demo[0] / "train" / "tiny" / "grpo" / "checkpoints", run)
    env = dict(os.environ, RCEA_DATA=str(data), RCEA_RESULTS=str(tmp_path / "results"), OMP_NUM_THREADS="1")
    env.pop("RCEA_OVERRIDES", None)
    done = subprocess.run([INVOKE, "measure-run", "--path", str(run), "--name", "my-grpo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1500)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "measure-run: measuring under the data folder's settings" in done.stdout
    assert "configurations" not in out and "Traceback" not in out
    report = (tmp_path / "results" / "tiny" / "report.md").read_text()   # the published copy the docs name
    assert "tiny/my-grpo (extension)" in report
    again = subprocess.run([INVOKE, "aggregate", "--scale", "tiny"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0 and "configurations" not in again.stdout + again.stderr, again.stderr[-3000:]
