"""Work units (orchestrate.units): deterministic keys, grouping by checkpoint, the commands and done()."""

from __future__ import annotations

import json

import pytest

from rcea.store import write_manifest
from orchestrate.units import MeasureUnit, TrainUnit, batches, digest, role_python


def job(kind="greedy", method="grpo", step=4, adapter="train/tiny/grpo/checkpoints/checkpoint-4", **extra):
    from infer.jobs import OUTPUTS   # a planned job names the tables it writes

    payload = {"scale": "tiny", "kind": kind, "method": method, "step": step, "adapter": adapter,
               "overrides": ["probe.k=3"], "config_hash": "abc", "tables": OUTPUTS[kind], **extra}
    return {"key": f"{kind}:{method}-{step}", "kind": kind, "payload": payload, "cost": 10.0}


def test_keys_are_stable_and_follow_the_spec():
    a, b = TrainUnit("grpo", "tiny"), TrainUnit("grpo", "tiny")
    assert a.key == b.key and a.key.startswith("train:tiny:grpo:")
    assert TrainUnit("grpo", "tiny", seed=2).key != a.key != TrainUnit("grpo", "tiny", overrides=("train.lr=1",)).key
    m = MeasureUnit.from_job(job())
    shuffled = json.loads(json.dumps(job(), sort_keys=True))   # same spec, another key order
    assert MeasureUnit.from_job(shuffled).key == m.key and m.key.startswith("infer:tiny:greedy:grpo-4:")
    assert MeasureUnit.from_job(job(config_hash="other")).key != m.key
    assert digest({"a": 1, "b": 2}) == digest({"b": 2, "a": 1}) != digest({"a": 1, "b": 3})


def test_a_malformed_job_spec_names_what_is_expected():
    with pytest.raises(ValueError, match="python -m infer plan"):
        MeasureUnit.from_job({"key": "x", "kind": "sing", "payload": {}})


def test_jobs_of_one_checkpoint_form_one_batch_and_shared_jobs_run_once():
    units = [MeasureUnit.from_job(j) for j in (job(), job("probe"), job("greedy", "base", 0, None),
                                               job("passk", "base", 0, None), job())]
    groups = batches(units)
    assert [[u.job_key for u in g] for g in groups] == [["greedy:grpo-4", "probe:grpo-4"],
                                                         ["greedy:base-0", "passk:base-0"]]
    trains = batches([TrainUnit("grpo", "tiny"), TrainUnit("dapo", "tiny")])
    assert [len(g) for g in trains] == [1, 1]


def test_measurement_outputs_are_the_parts_the_job_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    from infer.jobs import OUTPUTS
    from infer.tables import part_path

    u = MeasureUnit.from_job(job("probe"))
    assert u.outputs(tmp_path) == [part_path("tiny", t, "probe-grpo-4") for t in OUTPUTS["probe"]]
    assert not u.done(tmp_path)
    for p in u.outputs(tmp_path)[:-1]:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x")
        write_manifest(p)
    assert not u.done(tmp_path)                   # the last table has no part yet
    last = u.outputs(tmp_path)[-1]
    last.parent.mkdir(parents=True)
    last.write_bytes(b"x")
    assert not u.done(tmp_path)                   # ... and then no manifest
    write_manifest(last)
    assert u.done(tmp_path)


def test_commands(tmp_path):
    t = TrainUnit("kl_cov", "tiny", overrides=("train.max_steps=2",))
    assert TrainUnit.command([t], "py", tmp_path, tmp_path) == [
        "py", "-m", "train", "--method", "kl_cov", "--scale", "tiny", "--resume", "--override", "train.max_steps=2"]
    seeded = TrainUnit("grpo", "tiny", seed=3).args(tmp_path)
    assert seeded[-4:] == ["--output", str(tmp_path / "train" / "tiny" / "grpo-seed3"), "--override", "train.seed=3"]
    units = [MeasureUnit.from_job(job()), MeasureUnit.from_job(job("probe"))]
    argv = MeasureUnit.command(units, "py", tmp_path, tmp_path)
    assert argv[:4] == ["py", "-m", "infer", "run-job"] and argv[4::2] == ["--spec-file"] * 2
    assert [json.loads(open(f).read()) for f in argv[5::2]] == [u.spec for u in units]


def test_train_unit_done_is_the_summary_manifest(tmp_path):
    t = TrainUnit("grpo", "tiny")
    summary = tmp_path / "train" / "tiny" / "grpo" / "summary.json"
    summary.parent.mkdir(parents=True)
    summary.write_text("{}")
    assert not t.done(tmp_path)
    write_manifest(summary)
    assert t.done(tmp_path)


def test_role_python(monkeypatch, tmp_path):
    monkeypatch.setenv("RCEA_PYTHON_INFER", "/opt/venv/bin/python")
    assert role_python("infer") == "/opt/venv/bin/python"
    monkeypatch.delenv("RCEA_PYTHON_TRAIN", raising=False)
    (tmp_path / ".envs" / "train" / "bin").mkdir(parents=True)
    (tmp_path / ".envs" / "train" / "bin" / "python").write_text("")
    assert role_python("train", tmp_path) == str(tmp_path / ".envs" / "train" / "bin" / "python")
    with pytest.raises(ValueError, match="valid: train, infer"):
        role_python("aggregate")
