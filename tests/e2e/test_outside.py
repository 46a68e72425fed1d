"""Issue 32: RCEA diagnostics for a run this harness did not train, across the roles.

A plain TRL GRPOTrainer run (tests/train/plain_trl.py, train env) trains the tiny policy for 3 steps with
RCEACallback, keeping PEFT checkpoints 1 and 2 and a merged full model folder for step 3. `invoke measure-run`
on that folder checks the checkpoints against the base, queues and runs the study's jobs (infer env), and
aggregates (aggregate env): the report has the outside run's rows and its training-entropy trace, which equals
the callback's log. A checkpoint of another architecture is refused in one line before any job is queued.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PY = {role: str(ROOT / ".envs" / role / "bin" / "python") for role in ("train", "infer", "tools")}


def _env(data: Path) -> dict:
    env = dict(os.environ, RCEA_DATA=str(data), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    env.pop("RCEA_OVERRIDES", None)
    return env


@pytest.fixture(scope="module")
def outside_run(tmp_path_factory):
    """(data folder, the outside run's folder, its base model folder)."""
    tmp = tmp_path_factory.mktemp("outside")
    data, run = tmp / "data", tmp / "their-run"
    done = subprocess.run([PY["train"], "-m", "tests.train.plain_trl", str(run)], cwd=ROOT, env=_env(data),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return data, run, json.loads(done.stdout.strip().splitlines()[-1])["base"]


def _measure(data, run, base, *extra):
    from tests.infer.tiny_run import tiny_overrides

    argv = [str(ROOT / ".envs" / "tools" / "bin" / "invoke"), "measure-run", "--path", str(run), "--base", base,
            "--name", "their-run", *(a for o in tiny_overrides() for a in ("--override", o)), *extra]
    return subprocess.run(argv, cwd=ROOT, env=_env(data), capture_output=True, text=True, timeout=900)


def test_another_architecture_is_refused_in_one_line_before_any_job(outside_run, tmp_path):
    data, run, base = outside_run
    bad = tmp_path / "their-run"
    shutil.copytree(run, bad)
    other = bad / "global_step_9"   # a full model of another shape, verl-style name
    made = subprocess.run([PY["train"], "-c", "import sys; from rcea.tiny import build_tiny_model; "
                           "build_tiny_model(sys.argv[1], layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64,"
                           " vocab=300)", str(other)], cwd=ROOT, env=_env(data), capture_output=True, text=True)
    assert made.returncode == 0, made.stderr[-2000:]
    fresh = tmp_path / "data"
    shutil.copytree(data / "models", fresh / "models")
    res = _measure(fresh, bad, base)
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "global_step_9" in lines[0] and "step 9" in lines[0] and "--base" in lines[0]
    assert "Traceback" not in res.stderr + res.stdout
    assert not (fresh / "infer").exists() and not (fresh / "train" / "tiny" / "their-run").exists()


def test_outside_run_is_measured_and_reported_with_its_training_trace(outside_run):
    data, run, base = outside_run
    res = _measure(data, run, base)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    assert "adapter" in out and "full" in out and "trainer_state.json" in out   # the table of checkpoints
    results = data / "results" / "tiny"
    summary = json.loads((results / "summary.json").read_text())
    assert summary["extension_runs"] == ["tiny/their-run"]   # its own rows, pooled into none of the paper's fits
    assert "tiny/their-run (extension)" in (results / "report.md").read_text()
    probed = {e["step"] for e in summary["endpoints"] if e["method"] == "their-run"}
    assert probed and probed <= {1, 2}   # adapters measured; the merged full model (step 3) is listed only
    run_row = [r for r in summary["runs"] if r["method"] == "their-run"]
    assert len(run_row) == 1 and run_row[0]["extension"] is True
    logged = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    trace = summary["training_traces"]["tiny/their-run"]
    assert trace["step"] == [r["step"] for r in logged] == [1, 2, 3]
    assert trace["entropy"] == pytest.approx([r["entropy"] for r in logged])
    window = summary["failure_window"]["tiny/their-run"]
    assert window["nonzero_var_share_run"] == pytest.approx(
        sum(1 - r["frac_reward_zero_std"] for r in logged) / len(logged))
