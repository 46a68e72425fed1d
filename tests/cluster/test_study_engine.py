"""The `ray` engine of `invoke study`: which stages become Ray work units, and what they hold."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from invoke.exceptions import Exit

from rcea.executors.study import RayStage
from rcea.units import batches


def _fake_run(root, method, steps, max_steps):
    for s in steps:
        d = root / "train" / "tiny" / method / "checkpoints" / f"checkpoint-{s}"
        d.mkdir(parents=True)
        (d / "adapter_config.json").write_text("{}")
        (d / "adapter_model.safetensors").write_text("")
        (d / "trainer_state.json").write_text(json.dumps({"max_steps": max_steps}))


def _ctx(dry=False):
    return SimpleNamespace(config=SimpleNamespace(run=SimpleNamespace(dry=dry)))


def test_train_and_workers_become_units_the_rest_runs_locally(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    for m in ("grpo", "dapo"):
        _fake_run(tmp_path, m, (50, 100), 100)
    ran = []
    engine = RayStage("tiny", ["grpo", "dapo"], local=lambda c, stage, log_dir: ran.append(stage.key))
    assert [u.method for u in engine.train_units()] == ["grpo", "dapo"]
    units = engine.measure_units()
    keys = [u.job_key for u in units]
    assert keys.count("greedy:base-0") == 2                       # planned per run ...
    groups = batches(units)
    flat = [u.job_key for g in groups for u in g]
    assert flat.count("greedy:base-0") == 1 and len(flat) == len(set(keys))   # ... run once
    assert {u.payload["adapter"] for g in groups for u in g[:1]} == {
        None, *(f"train/tiny/{m}/checkpoints/checkpoint-{s}" for m in ("grpo", "dapo") for s in (50, 100))}
    for key in ("prepare", "judge", "aggregate"):
        engine(_ctx(), SimpleNamespace(key=key), tmp_path)
    assert ran == ["prepare", "judge", "aggregate"]
    engine(_ctx(dry=True), SimpleNamespace(key="train"), tmp_path)
    assert "[ray] 2 training run(s) as Ray tasks on a local Ray started here" in capsys.readouterr().out


def test_a_run_without_checkpoints_stops_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    with pytest.raises(Exit, match="train first"):
        RayStage("tiny", ["grpo"]).measure_units()
