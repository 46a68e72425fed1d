"""Issue 40 items 1 and 2: a quick demo, then `invoke measure-run` of an outside run named `my-grpo` (the docs'
example), then the report: exit 0, the run in the report. On main before this change the outside run's tables were
made under the scale's defaults beside the demo's quick ones, and both commands ended in "the tables were made
under 2 configurations" with no command that fixed it. Then the study's own grpo run is set aside, as a rerun
with a changed setting does before training (TrainUnit.command, what the engine runs): only grpo's parts go
with it (before, `passk-my-grpo-4` was read as grpo's by its file name and moved too), and `invoke aggregate`
still reports my-grpo.

The outside run is the demo's own grpo checkpoints, copied out as a TRL output folder (no training here); the
measurement runs in a copy of the demo's data folder, which the session's other tests read unchanged."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVOKE = str(ROOT / ".envs" / "tools" / "bin" / "invoke")


def test_quick_demo_then_measure_run_then_the_report(demo, tmp_path, monkeypatch):
    from orchestrate.units import TrainUnit
    from rcea import layout

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

    tables = layout.tables_dir("tiny", data)
    mine = {p: p.read_bytes() for p in tables.glob("*/*-my-grpo-*.parquet*")}
    assert {p.parent.name for p in mine} >= {"greedy", "passk", "samples"}   # its greedy, pass@k and probe parts
    grpo_parts = sorted(p.name for p in tables.glob("*/*-grpo-*.parquet*") if "-my-grpo-" not in p.name)
    assert grpo_parts
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)   # the scale's defaults: not the quick settings grpo has
    unit = TrainUnit("grpo", "tiny")
    theirs = json.loads((layout.RunFolder(unit.output(data)).config / "resolved.json").read_text())["hash"]
    assert theirs != unit.config_hash
    TrainUnit.command([unit], "python", data, data)   # sets the quick run aside, as before training the defaults
    kept = layout.superseded_run_dir("tiny", "grpo", theirs, data)
    assert kept.is_dir() and not unit.output(data).exists()
    assert sorted(p.name for p in (kept / "measurements").rglob("*.parquet*")) == grpo_parts
    assert {p: p.read_bytes() for p in tables.glob("*/*-my-grpo-*.parquet*")} == mine   # my-grpo's: untouched

    again = subprocess.run([INVOKE, "aggregate", "--scale", "tiny"], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0 and "configurations" not in again.stdout + again.stderr, again.stderr[-3000:]
    published = tmp_path / "results" / "tiny"
    summary = json.loads((published / "summary.json").read_text())
    assert "tiny/my-grpo" in summary["extension_runs"]
    assert "tiny/my-grpo (extension)" in (published / "report.md").read_text()
    assert {e["step"] for e in summary["endpoints"] if e["method"] == "my-grpo"}
    # nothing of its measurements is missing (its training trace is: the copied checkpoints carry no steps.jsonl)
    assert not [k for k in summary["unavailable"] if "my-grpo" in k and not k.startswith("training_traces")], \
        summary["unavailable"]
