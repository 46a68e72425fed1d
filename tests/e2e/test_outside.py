"""Issue 32: RCEA diagnostics for a run this harness did not train, across the roles.

A plain TRL GRPOTrainer run (tests/train/plain_trl.py, train env) trains the tiny policy for 3 steps with
RCEACallback, keeping PEFT checkpoints 1 and 2 and a merged full model folder (no tokenizer) for step 3.
`invoke measure-run` on that folder checks the checkpoints against the base, queues and runs the study's jobs
(infer env), and aggregates (aggregate env): the report has the outside run's rows, the full model's among them,
and its training-entropy trace, which equals the callback's log. The same run with step 3 kept as its adapter
measures alike (the oracle of the merge). A checkpoint of another architecture is refused in one line before
any job is queued.
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
    env = dict(os.environ, RCEA_DATA=str(data), RCEA_RESULTS=str(data.parent / "results"), PYTHONPATH=str(ROOT),
               OMP_NUM_THREADS="1")   # measure-run publishes its results: beside the data folder, not the project's
    env.pop("RCEA_OVERRIDES", None)
    return env


@pytest.fixture(scope="module")
def outside_run(tmp_path_factory):
    """(data folder, the outside run's folder, its base model folder, the same run with step 3 as an adapter)."""
    tmp = tmp_path_factory.mktemp("outside")
    data, run = tmp / "data", tmp / "their-run"
    done = subprocess.run([PY["train"], "-m", "tests.train.plain_trl", str(run)], cwd=ROOT, env=_env(data),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(done.stdout.strip().splitlines()[-1])
    return data, run, made["base"], Path(made["adapters"])


def _measure(data, run, base, *extra, name="their-run"):
    from tests.infer.tiny_run import tiny_overrides

    # The test budgets, on the base the run was trained from (the scale's warm-started policy): the jobs load the
    # adapters over the scale's base policy, which must be the --base given
    over = [o for o in tiny_overrides() if not o.startswith("toy.warm_start_steps")]
    argv = [str(ROOT / ".envs" / "tools" / "bin" / "invoke"), "measure-run", "--path", str(run), "--base", base,
            "--name", name, *(a for o in over for a in ("--override", o)), *extra]
    return subprocess.run(argv, cwd=ROOT, env=_env(data), capture_output=True, text=True, timeout=900)


def test_another_architecture_is_refused_in_one_line_before_any_job(outside_run, tmp_path):
    data, run, base, _ = outside_run
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
    data, run, base, _ = outside_run
    res = _measure(data, run, base)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = res.stdout
    assert "adapter" in out and "full" in out and "trainer_state.json" in out   # the table of checkpoints
    results = data / "results" / "tiny"
    summary = json.loads((results / "summary.json").read_text())
    assert summary["extension_runs"] == ["tiny/their-run"]   # its own rows, pooled into none of the paper's fits
    assert "tiny/their-run (extension)" in (results / "report.md").read_text()
    probed = {e["step"]: e for e in summary["endpoints"] if e["method"] == "their-run"}
    assert set(probed) == {2, 3}   # the milestones: adapter 2 and the merged full model of step 3, measured alike
    full = probed[3]
    assert full["n_questions"] == 2 and full["samples_per_question"] == 3 and 0 <= full["accuracy"] <= 1
    assert 0 < full["token_entropy_mean"] < 10 and full["seq_entropy_mean"] > 0
    run_row = [r for r in summary["runs"] if r["method"] == "their-run"]
    assert len(run_row) == 1 and run_row[0]["extension"] is True
    assert run_row[0]["probe_step"] == 3 and 0 <= run_row[0]["pass_at_3"] <= 100   # the final row: the full model's
    assert run_row[0]["accuracy"] and all(0 <= v <= 1 for v in run_row[0]["accuracy"].values())
    logged = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    trace = summary["training_traces"]["tiny/their-run"]
    assert trace["step"] == [r["step"] for r in logged] == [1, 2, 3]
    assert trace["entropy"] == pytest.approx([r["entropy"] for r in logged])
    window = summary["failure_window"]["tiny/their-run"]
    assert window["nonzero_var_share_run"] == pytest.approx(
        sum(1 - r["frac_reward_zero_std"] for r in logged) / len(logged))


def test_the_merged_full_model_measures_as_the_adapter_it_merges(outside_run):
    """The same run with step 3 as its adapter (over the base) in place of the merged model: every row alike."""
    data, run, base, twin = outside_run
    summary = data / "results" / "tiny" / "summary.json"
    measured = summary.exists() and "tiny/their-run" in json.loads(summary.read_text())["extension_runs"]
    for folder, name in ([] if measured else [(run, "their-run")]) + [(twin, "their-adapters")]:   # their-run: kept
        res = _measure(data, folder, base, name=name)                                               # from the test above
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads(summary.read_text())
    ends = {(e["method"], e["step"]): e for e in summary["endpoints"]}
    for step in (2, 3):
        full, lora = ends[("their-run", step)], ends[("their-adapters", step)]
        for key in ("accuracy", "n_success", "n_failure", "q99_tokens"):
            assert full[key] == lora[key], (step, key)
        for key in ("token_entropy_mean", "seq_entropy_mean", "chain_rule_entropy_mean"):
            assert full[key] == pytest.approx(lora[key], rel=1e-4), (step, key)
    runs = {r["method"]: r for r in summary["runs"]}
    for key in ("pass_at_3", "accuracy", "probe_step"):
        assert runs["their-run"][key] == runs["their-adapters"][key], key
    fits = summary["extension_covariance_fit"]   # each run's transitions 0 -> 2 and 1 -> 3 (into the full model)
    full, lora = fits["tiny/their-run"], fits["tiny/their-adapters"]
    assert full["n"] == lora["n"] == 2 and full["sign_agreement"] == lora["sign_agreement"]
    for key in ("median_abs_error", "median_rel_error"):
        assert full[key] == pytest.approx(lora[key], rel=1e-3), key
