"""Checkpoint discovery, milestones, the dense trace and the job list (fake checkpoint folders)."""

import json

import pytest

from rcea.config import load_config
from rcea.layout import TRAINER_STATE
from rcea.store import write_manifest

from infer.plan import BASE, dense_trace, discover, milestones, plan_jobs


def _fake_run(root, steps, max_steps, broken=()):
    for s in steps:
        d = root / "train" / "3b" / "grpo" / "checkpoints" / f"checkpoint-{s}"
        d.mkdir(parents=True)
        (d / "adapter_config.json").write_text("{}")
        (d / "adapter_model.safetensors").write_text("")
        (d / "trainer_state.json").write_text(json.dumps({"max_steps": max_steps}))
        if s not in broken:   # a checkpoint is complete once training wrote its last file's manifest
            (d / TRAINER_STATE).write_bytes(b"state")
            write_manifest(d / TRAINER_STATE, step=s)


def test_milestones_dense_trace_and_jobs_at_3b(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    _fake_run(tmp_path, range(50, 4001, 50), 4000, broken=(3950,))
    cfg = load_config("3b")
    ckpts = discover("3b", "grpo")
    assert len(ckpts) == 79 and 3950 not in [c.step for c in ckpts]
    assert [c.step for c in milestones(cfg, ckpts)] == [1000, 2000, 3000, 4000]
    assert [c.step for c in dense_trace(cfg, ckpts)] == list(range(200, 4001, 200))
    jobs = {j["key"]: j for j in plan_jobs(cfg, "3b", "grpo", "all", [])}
    greedy = {k: j["payload"]["benchmarks"] for k, j in jobs.items() if k.startswith("greedy:")}
    assert len(greedy) == 21 and greedy["greedy:base-0"] == greedy["greedy:grpo-1000"] == cfg["eval.benchmarks"]
    assert greedy["greedy:grpo-200"] == ["math500"]
    assert {k for k in jobs if k.startswith("passk:")} == {"passk:base-0", "passk:grpo-4000"}
    assert {k for k in jobs if k.startswith("probe:")} == {"probe:base-0", "probe:grpo-1000", "probe:grpo-2000",
                                                            "probe:grpo-3000", "probe:grpo-4000"}
    cov = jobs["covariance:grpo-4000"]["payload"]
    assert (cov["step_from"], cov["step"]) == (3950, 4000)   # enqueued; the broken checkpoint fails the job later
    assert jobs["covariance:grpo-1000"]["payload"]["adapter_from"].endswith("checkpoint-950")
    # long jobs first: pass@64 over 500 questions outweighs a 40-question covariance job
    assert jobs["passk:base-0"]["cost"] > jobs["probe:base-0"]["cost"] > jobs["covariance:grpo-1000"]["cost"]


def test_unknown_kind_and_missing_run_name_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    cfg = load_config("3b")
    with pytest.raises(FileNotFoundError, match="train first"):
        plan_jobs(cfg, "3b", "grpo", "all", [])
    _fake_run(tmp_path, [50], 100)
    with pytest.raises(ValueError, match="valid: greedy, passk, probe, covariance, all"):
        plan_jobs(cfg, "3b", "grpo", "everything", [])
    assert BASE.tag == "base-0"


def test_the_minerva_subset_size_is_the_frozen_files(tmp_path, monkeypatch):
    """eval.minerva_subset_size is checked against the frozen subset it documents (a different size would
    need a new draw) and sizes the Minerva greedy jobs' cost."""
    from rcea.data import DataError

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    jobs = plan_jobs(load_config("3b"), "3b", "base", "greedy", [])
    assert jobs and jobs[0]["payload"]["benchmarks"][-1] == "minerva_math"
    with pytest.raises(DataError, match="holds 40 questions"):
        plan_jobs(load_config("3b", None, ["eval.minerva_subset_size=50"]), "3b", "base", "greedy", [])
