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
