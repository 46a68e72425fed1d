"""`python -m infer plan` prints the queue's jobs; `run-job` runs specs idempotently with clear exits."""

from __future__ import annotations

import json

from rcea.config import load_config

from infer.__main__ import main
from infer.plan import plan_jobs
from infer.unit_cli import EXIT_INPUT
from tests.infer.tiny_run import tiny_overrides


def _plan(capsys, *args):
    assert main(["plan", "--scale", "tiny", "--method", "grpo", *args]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_plan_prints_what_enqueue_would_queue(tiny_data, capsys):
    over = [a for o in tiny_overrides() for a in ("--override", o)]
    jobs = _plan(capsys, "--what", "all", *over)
    cfg = load_config("tiny", None, tiny_overrides())
    assert jobs == plan_jobs(cfg, "tiny", "grpo", "all", tiny_overrides())
    assert {j["key"] for j in _plan(capsys, "--what", "passk", *over)} == {"passk:base-0", "passk:grpo-4"}


def test_run_job_runs_then_skips(tiny_data, tmp_path, capsys):
    cfg = load_config("tiny", None, tiny_overrides())
    jobs = {j["key"]: j for j in plan_jobs(cfg, "tiny", "grpo", "greedy", tiny_overrides())}
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps(jobs["greedy:grpo-4"], indent=2))
    assert main(["run-job", "--spec-file", str(spec)]) == 0
    assert "greedy:grpo-4: done {'greedy': 3}" in capsys.readouterr().out
    part = tiny_data / "infer" / "tiny" / "tables" / "greedy" / "greedy-grpo-4.parquet"
    before = part.read_bytes()
    assert main(["run-job", "--spec-file", str(spec)]) == 0
    assert "skipped" in capsys.readouterr().out and part.read_bytes() == before


def test_run_job_exit_codes_name_the_problem(tiny_data, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["run-job", "--spec-file", str(bad)]) == EXIT_INPUT
    assert "not a JSON job spec" in capsys.readouterr().err
    cfg = load_config("tiny", None, tiny_overrides())
    job = next(j for j in plan_jobs(cfg, "tiny", "grpo", "greedy", tiny_overrides()) if j["key"] == "greedy:grpo-4")
    job["payload"]["adapter"] = "train/tiny/grpo/checkpoints/checkpoint-99"   # no such checkpoint
    lines = tmp_path / "jobs.jsonl"
    lines.write_text(json.dumps(job) + "\n")
    assert main(["run-job", "--spec-file", str(lines)]) == EXIT_INPUT
    assert "checkpoint-99 is missing" in capsys.readouterr().err
