"""A finished training run whose checkpoint lost part of itself is refused, never half-measured (issue 31, fault
table: `rm .../checkpoint-6/rcea_trainer_state.pt.manifest.json`, rerun: the plan skipped checkpoint-6 silently,
measured a new mid-run checkpoint in its place while the old checkpoint-6 parts were still aggregated)."""

from __future__ import annotations

import json

import pytest

from rcea.layout import TRAINER_STATE, run_folder
from rcea.store import DamagedRun, complete_checkpoints, manifest_path, write_manifest

STEPS = (2, 4, 6)


def _run(root, finished: bool = True):
    """train/tiny/grpo with complete checkpoints 2, 4, 6 and (finished) its summary.json as training writes it."""
    files = run_folder("tiny", "grpo", root)
    for step in STEPS:
        ckpt = files.checkpoint(step)
        ckpt.mkdir(parents=True)
        (ckpt / "adapter_config.json").write_text("{}")
        (ckpt / "adapter_model.safetensors").write_bytes(b"w")
        (ckpt / TRAINER_STATE).write_bytes(b"state")
        write_manifest(ckpt / TRAINER_STATE, step=step)
    if finished:
        files.summary.write_text(json.dumps({"checkpoints": [str(files.checkpoint(s)) for s in STEPS]}))
        write_manifest(files.summary)
    return files


def test_a_sound_finished_run_lists_every_checkpoint(tmp_path):
    files = _run(tmp_path)
    assert [s for s, _ in complete_checkpoints(files.checkpoints)] == list(STEPS)


@pytest.mark.parametrize("damage", ["manifest", "adapter", "folder"])
def test_a_finished_run_missing_part_of_a_checkpoint_is_refused_naming_the_run_and_the_fix(tmp_path, damage):
    import shutil

    files = _run(tmp_path)
    ckpt = files.checkpoint(4)
    if damage == "manifest":
        manifest_path(ckpt / TRAINER_STATE).unlink()
    elif damage == "adapter":
        (ckpt / "adapter_model.safetensors").unlink()
    else:
        shutil.rmtree(ckpt)
    with pytest.raises(DamagedRun) as err:
        complete_checkpoints(files.checkpoints)
    msg = str(err.value)
    assert "\n" not in msg and str(files.path) in msg and "checkpoint-4 is incomplete" in msg
    assert "checkpoint-2" not in msg and "checkpoint-6" not in msg
    assert f"remove {files.path} and its table parts ({tmp_path / 'infer' / 'tiny' / 'tables'}/*/*-grpo-*)" in msg
    assert isinstance(err.value, FileNotFoundError)   # `infer plan` says it in one line, as a run with no checkpoint


def test_an_unfinished_run_skips_an_incomplete_checkpoint_as_before(tmp_path):
    """A run killed while saving leaves an incomplete newest checkpoint: skipped (training redoes it)."""
    files = _run(tmp_path, finished=False)
    manifest_path(files.checkpoint(6) / TRAINER_STATE).unlink()
    assert [s for s, _ in complete_checkpoints(files.checkpoints)] == [2, 4]


def test_infer_plan_and_enqueue_refuse_the_damaged_run_in_one_line(tmp_path, monkeypatch, capsys):
    from infer.__main__ import main

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    files = _run(tmp_path)
    manifest_path(files.checkpoint(6) / TRAINER_STATE).unlink()
    for cmd in ("plan", "enqueue"):   # the study's local engine enqueues; its Ray engine plans
        assert main([cmd, "--scale", "tiny", "--method", "grpo", "--what", "all"]) == 2
        out = capsys.readouterr()
        assert out.out == "" and out.err.count("\n") == 1 and "checkpoint-6 is incomplete" in out.err
    assert not (tmp_path / "infer").exists()   # refused before the queue is made


def test_train_refuses_the_damaged_run_in_one_line(tmp_path, monkeypatch, capsys):
    from train.cli import main

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    files = _run(tmp_path)
    manifest_path(files.checkpoint(2) / TRAINER_STATE).unlink()
    assert main(["--method", "grpo", "--scale", "tiny", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "checkpoint-2 is incomplete" in err


def test_manifests_record_size_and_sha256_and_a_part_of_another_size_is_incomplete(tmp_path):
    import hashlib

    from rcea.store import is_complete

    part = tmp_path / "probe-grpo-2.parquet"
    part.write_bytes(b"0123456789")
    write_manifest(part)
    record = json.loads(manifest_path(part).read_text())
    assert record["size"] == 10 and record["sha256"] == hashlib.sha256(b"0123456789").hexdigest()
    assert is_complete(part)
    part.write_bytes(b"01234")   # cut short after its manifest: no longer complete, so the job is redone
    assert not is_complete(part)


def test_old_manifests_without_sizes_stay_readable(tmp_path):
    """Manifests written before sizes were recorded: complete as before (nothing to compare)."""
    from rcea.store import is_complete, verify_checkpoint

    files = _run(tmp_path)
    for step in STEPS:
        man = manifest_path(_with_files(files, step) / TRAINER_STATE)
        record = json.loads(man.read_text())
        record.pop("files"), record.pop("size"), record.pop("sha256")
        man.write_text(json.dumps(record))
    (files.checkpoint(4) / "adapter_model.safetensors").write_bytes(b"x")   # same size: nothing can tell
    assert [s for s, _ in complete_checkpoints(files.checkpoints)] == list(STEPS)
    assert verify_checkpoint(files.checkpoint(4)) == ""
    old = tmp_path / "old.parquet"
    old.write_bytes(b"abc")
    manifest_path(old).write_text(json.dumps({"artifact": old.name}))
    assert is_complete(old)


def _with_files(files, step):
    from rcea.store import folder_records

    ckpt = files.checkpoint(step)
    write_manifest(ckpt / TRAINER_STATE, step=step, files=folder_records(ckpt))
    return ckpt


def test_a_truncated_file_of_a_finished_run_is_named_with_the_checkpoints_to_delete(tmp_path):
    files = _run(tmp_path)
    for step in STEPS:
        _with_files(files, step)
    (files.checkpoint(4) / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(DamagedRun) as err:
        complete_checkpoints(files.checkpoints)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(f"{files.checkpoint(4)} is damaged (adapter_model.safetensors: 0 bytes, its manifest says 1)")
    assert (f"rm -r {files.checkpoint(4)} {files.checkpoint(6)} {files.summary} {manifest_path(files.summary)} and "
            "rerun the same command (training resumes from checkpoint-2)") in msg


def test_a_measurement_verifies_the_hashes_of_the_checkpoint_it_loads(tmp_path, monkeypatch):
    """A flipped byte keeps the size (the plan's check passes) but not the SHA-256: the job names the file."""
    from infer.kinds import common

    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    files = _run(tmp_path)
    ckpt = _with_files(files, 2)
    rel = str(ckpt.relative_to(tmp_path))
    assert common.adapter_path(rel) == str(ckpt)
    common._VERIFIED.clear()
    (ckpt / "adapter_model.safetensors").write_bytes(b"v")
    assert [s for s, _ in complete_checkpoints(files.checkpoints)] == list(STEPS)
    with pytest.raises(common.JobInputError) as err:
        common.adapter_path(rel)
    msg = str(err.value)
    assert "\n" not in msg and f"{ckpt} is damaged (adapter_model.safetensors: its SHA-256 differs" in msg
    assert f"rm -r {ckpt} {files.checkpoint(4)}" in msg and "training starts again from step 0" in msg
    common._VERIFIED.clear()


def test_the_study_does_not_count_a_damaged_finished_run_as_done(tmp_path, monkeypatch):
    from orchestrate.units import TrainUnit

    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    unit = TrainUnit("grpo", "tiny")
    files = _run(tmp_path)
    files.summary.write_text(json.dumps({"checkpoints": [str(files.checkpoint(s)) for s in STEPS],
                                         "config_hash": unit.config_hash}))
    write_manifest(files.summary)
    for step in STEPS:
        _with_files(files, step)
    assert unit.done(tmp_path) and unit.damage(tmp_path) == ""
    (files.checkpoint(6) / "adapter_config.json").write_text("{}  ")
    assert not unit.done(tmp_path)
    assert unit.damage(tmp_path).startswith(f"{files.checkpoint(6)} is damaged (adapter_config.json: 4 bytes")
