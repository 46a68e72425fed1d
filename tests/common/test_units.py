"""Work units (orchestrate.units): deterministic keys, grouping by checkpoint, the commands and done()."""

from __future__ import annotations

import json

import pytest

from rcea.store import write_manifest
from rcea import layout
from orchestrate.units import MeasureUnit, TrainUnit, batches, digest, role_python


def job(kind="greedy", method="grpo", step=4, adapter="train/tiny/grpo/checkpoints/checkpoint-4", **extra):
    from infer.jobs import OUTPUTS   # a planned job names the tables it writes

    payload = {"scale": "tiny", "kind": kind, "method": method, "step": step, "adapter": adapter,
               "overrides": ["probe.k=3"], "config_hash": "abc", "tables": OUTPUTS[kind], **extra}
    return {"key": f"{kind}:{method}-{step}", "kind": kind, "payload": payload, "cost": 10.0}


def test_keys_are_stable_and_follow_the_spec():
    a, b = TrainUnit("grpo", "tiny"), TrainUnit("grpo", "tiny")
    assert a.key == b.key and a.key.startswith("train:tiny:grpo:")
    assert TrainUnit("grpo", "tiny", seed=2).key != a.key != TrainUnit(
        "grpo", "tiny", overrides=("train.learning_rate=1e-4",)).key
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
        write_manifest(p, config_hash="abc")      # made under the job's settings (payload config_hash)
    assert not u.done(tmp_path)                   # the last table has no part yet
    last = u.outputs(tmp_path)[-1]
    last.parent.mkdir(parents=True)
    last.write_bytes(b"x")
    assert not u.done(tmp_path)                   # ... and then no manifest
    write_manifest(last, config_hash="quick")
    assert not u.done(tmp_path)                   # ... then one of other settings (the quick demo's): not this job's
    write_manifest(last, config_hash="abc")
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
    summary.write_text(json.dumps({"config_hash": t.config_hash}))
    assert not t.done(tmp_path)
    write_manifest(summary)
    assert t.done(tmp_path)


def fake_run(t, root, config_hash):
    """A complete run folder as `python -m train` leaves it: the settings' hash in config/ and summary.json."""
    out = t.output(root)
    (out / "config").mkdir(parents=True)
    (out / "config" / "resolved.json").write_text(json.dumps({"hash": config_hash}))
    (out / "summary.json").write_text(json.dumps({"config_hash": config_hash}))
    write_manifest(out / "summary.json")
    return out


def test_a_run_of_other_settings_is_another_unit_and_is_set_aside_not_reused(tmp_path, monkeypatch):
    """`scripts/run demo` after `demo --quick` on one data folder: the quick settings travel in RCEA_OVERRIDES.
    The full demo's unit has another key, the quick run is not its output (so it trains), and the quick run is
    kept aside, coming back when the quick settings are asked for again."""
    from rcea.config import load_config

    monkeypatch.setenv("RCEA_OVERRIDES", "train.max_steps=4;train.save_steps=2")
    quick = TrainUnit("grpo", "tiny")
    assert quick.config_hash == load_config("tiny", "grpo").hash("train")   # what `python -m train` stores
    out = fake_run(quick, tmp_path, quick.config_hash)
    assert quick.done(tmp_path)
    parts = {name: layout.table_part("tiny", "probe", name, tmp_path) for name in ("probe-grpo-4", "probe-ep_grpo-4",
                                                                                    "probe-base-0")}
    for part in parts.values():   # the quick run's measurement, another run's, the base policy's (hand-made
        part.parent.mkdir(parents=True, exist_ok=True)   # manifests recording no run: their exact names decide)
        part.write_bytes(b"x")
        write_manifest(part)
    # Issue 40: an outside run named `my-grpo` (the docs' example): its parts' names end in `-grpo-<step>`, but
    # their manifests record its checkpoint folders and jobs, as infer.tables writes them; a killed job's part
    # has no manifest yet. None of them is the study's grpo run's.
    theirs = []
    for table, name, record in (("passk", "passk-my-grpo-4", {"adapter": "train/tiny/my-grpo/checkpoints/checkpoint-4",
                                                              "job": "passk:my-grpo-4"}),
                                ("greedy", "greedy-my-grpo-4", {"adapter": None, "model": "train/tiny/my-grpo/"
                                                                "checkpoints/checkpoint-4", "job": "greedy:my-grpo-4"}),
                                ("samples", "probe-my-grpo-4", {"job": "probe:my-grpo-4"}),
                                ("greedy", "greedy-my-grpo-2", None)):
        theirs.append(layout.table_part("tiny", table, name, tmp_path))
        theirs[-1].parent.mkdir(parents=True, exist_ok=True)
        theirs[-1].write_bytes(b"y")
        if record is not None:
            write_manifest(theirs[-1], **record)
    ours = layout.table_part("tiny", "greedy", "greedy-grpo-2", tmp_path)   # the quick run's, killed: no manifest
    ours.write_bytes(b"x")
    monkeypatch.setenv("RCEA_OVERRIDES", "")
    full = TrainUnit("grpo", "tiny")
    assert full.key != quick.key and not full.done(tmp_path)
    kept = full.set_aside(tmp_path)
    assert kept == layout.superseded_run_dir("tiny", "grpo", quick.config_hash, tmp_path)
    assert not out.exists()   # the full run trains into an empty folder
    assert not parts["probe-grpo-4"].exists() and parts["probe-ep_grpo-4"].exists() and parts["probe-base-0"].exists()
    assert sorted(p.name for p in (kept / "measurements" / "probe").iterdir()) == [
        "probe-grpo-4.parquet", "probe-grpo-4.parquet.manifest.json"]   # its parts went with the run
    assert not ours.exists() and (kept / "measurements" / "greedy" / ours.name).exists()
    assert all(p.exists() and p.read_bytes() == b"y" for p in theirs)   # the outside run's: untouched
    assert sorted(p.name for p in (kept / "measurements").rglob("*")) == sorted(
        ["greedy", "probe", "greedy-grpo-2.parquet", "probe-grpo-4.parquet", "probe-grpo-4.parquet.manifest.json"])
    fake_run(full, tmp_path, full.config_hash)
    assert full.done(tmp_path) and full.set_aside(tmp_path) is None   # its own settings: left alone
    monkeypatch.setenv("RCEA_OVERRIDES", "train.max_steps=4;train.save_steps=2")
    again = TrainUnit("grpo", "tiny")
    assert again.set_aside(tmp_path) == layout.superseded_run_dir("tiny", "grpo", full.config_hash, tmp_path)
    assert again.done(tmp_path)   # the quick run came back, complete: reused, not retrained
    assert parts["probe-grpo-4"].exists() and ours.exists() and not (out / "measurements").exists()   # with its parts
    assert all(p.exists() and p.read_bytes() == b"y" for p in theirs)


def test_a_container_unit_is_judged_from_the_hosts_data_folder_as_a_local_one(tmp_path, monkeypatch):
    """Issue 39: compose.yaml bind-mounts the host's data folder into the train container, so the driver judges a
    3b run from its run folder here: complete with its settings, it is done (the study skips it); a run of other
    settings in the folder is set aside before the container starts; the container's argv names the run
    folder as the container sees it (data/ under its working folder /workspace)."""
    monkeypatch.setenv("RCEA_OVERRIDES", "")
    mine = TrainUnit("grpo", "3b", launcher="compose")
    assert not mine.done(tmp_path)
    out = fake_run(mine, tmp_path, mine.config_hash)
    for launcher in ("compose", "local"):   # one view of the data: the launcher changes nothing here
        unit = TrainUnit("grpo", "3b", launcher=launcher)
        assert unit.done(tmp_path) and unit.damage(tmp_path) == "" and unit.set_aside(tmp_path) is None
    (out / "summary.json").write_text(json.dumps({"config_hash": "other"}))   # manifest no longer matches
    assert not mine.done(tmp_path)
    fake_run(mine, tmp_path / "again", mine.config_hash)
    other = TrainUnit("grpo", "3b", launcher="compose", overrides=("train.learning_rate=1e-4",))
    assert not other.done(tmp_path / "again")
    argv = TrainUnit.command([other], "py", tmp_path / "again", tmp_path)   # sets the other settings' run aside
    assert not other.output(tmp_path / "again").exists()
    assert layout.superseded_run_dir("3b", "grpo", mine.config_hash, tmp_path / "again").is_dir()
    assert argv == ["docker", "compose", "run", "--rm", "-T", "train", "python", "-m", "train", "--method", "grpo",
                    "--scale", "3b", "--resume", "--override", "train.learning_rate=1e-4"]
    assert other.gpu_env == "TRAIN_GPU" and TrainUnit("grpo", "tiny").gpu_env == "CUDA_VISIBLE_DEVICES"
    seeded = TrainUnit("grpo", "3b", seed=2, launcher="compose")
    assert seeded.argv(tmp_path)[-4:] == ["--output", "data/train/3b/grpo-seed2", "--override", "train.seed=2"]
    local = TrainUnit("grpo", "tiny", seed=2)
    assert local.argv(tmp_path, "py") == ["py", "-m", "train", "--method", "grpo", "--scale", "tiny", "--resume",
                                          "--output", str(tmp_path / "train" / "tiny" / "grpo-seed2"),
                                          "--override", "train.seed=2"]


def test_role_python(monkeypatch, tmp_path):
    monkeypatch.setenv("RCEA_PYTHON_INFER", "/opt/venv/bin/python")
    assert role_python("infer") == "/opt/venv/bin/python"
    monkeypatch.delenv("RCEA_PYTHON_TRAIN", raising=False)
    (tmp_path / ".envs" / "train" / "bin").mkdir(parents=True)
    (tmp_path / ".envs" / "train" / "bin" / "python").write_text("")
    assert role_python("train", tmp_path) == str(tmp_path / ".envs" / "train" / "bin" / "python")
    from rcea.paths import project_root   # this project's own: named as the dry run prints it, from its folder

    import sys

    ours = project_root() / ".envs" / "train" / "bin" / "python"
    assert role_python("train") == (".envs/train/bin/python" if ours.exists() else sys.executable)
    with pytest.raises(ValueError, match="valid: train, infer"):
        role_python("aggregate")
