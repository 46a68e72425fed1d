"""Issue 41 item 3: `python -m infer.outside` (what `invoke measure-run` runs first) refuses damaged input in one
line before anything is imported or queued: a random or half-written adapter, a random config.json, an
adapter_config.json that is not JSON, a truncated tokenizer.json, a checkpoint still being copied; and a --base
whose weights differ from the scale's base policy unless --base-differs, which is recorded (and measures over it:
tests/infer/test_outside_base.py).
On main before this change: tracebacks, or rc 0 with the damage accepted."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from infer.outside import main


@pytest.fixture
def outside(tiny_data, tiny_model_dir, tmp_path):
    """A TRL-like output folder (as tests/infer/test_outside.py's): adapters checkpoint-2 and global_step_3/...,
    a full model folder whose step is in its trainer_state.json, and a steps.jsonl."""
    src = tiny_data / "train" / "tiny" / "grpo" / "checkpoints"
    run = tmp_path / "their-run"
    for name, step in (("checkpoint-2", 2), ("global_step_3/actor/huggingface", 4)):
        (run / name).mkdir(parents=True)
        for p in (src / f"checkpoint-{step}").glob("adapter_*"):
            shutil.copy2(p, run / name / p.name)
    shutil.copytree(tiny_model_dir, run / "merged")
    (run / "merged" / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    return run


def _refused(capsys, argv, *names):
    assert main(argv) == 2
    out = capsys.readouterr()
    err = out.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "Traceback" not in out.err + out.out, err
    for n in names:
        assert n in err, (n, err)
    return err


def _argv(outside, tiny_model_dir, *extra):
    return [str(outside), "--base", str(tiny_model_dir), "--name", "their-run", *extra]


def _cut(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("damage", ["random adapter", "half adapter", "random config", "adapter_config not json",
                                    "truncated tokenizer"])
def test_a_damaged_file_is_refused_in_one_line_before_anything_is_written(outside, tiny_model_dir, tiny_data,
                                                                           capsys, damage):
    if damage == "random adapter":
        target = outside / "checkpoint-2" / "adapter_model.safetensors"
        target.write_bytes(os.urandom(target.stat().st_size))
    elif damage == "half adapter":
        target = outside / "checkpoint-2" / "adapter_model.safetensors"
        _cut(target)
    elif damage == "random config":
        target = outside / "merged" / "config.json"
        target.write_bytes(os.urandom(300))
    elif damage == "adapter_config not json":
        target = outside / "checkpoint-2" / "adapter_config.json"
        target.write_text("{not json")
    else:   # the base's own tokenizer, cut short: equal as far as it goes
        target = outside / "checkpoint-2" / "tokenizer.json"
        shutil.copy2(tiny_model_dir / "tokenizer.json", target)
        _cut(target, 0.8)
    err = _refused(capsys, _argv(outside, tiny_model_dir, "--check-only"), str(target.parent), target.name)
    assert "copy it again" in err
    assert not (tiny_data / "train" / "tiny" / "their-run").exists()


def test_a_checkpoint_still_being_copied_is_not_imported(outside, tiny_model_dir, tiny_data, capsys):
    """Transformers' checkpoints hold trainer_state.json, written after the weights: one without it, beside
    others that have it, is still being written (here: its adapter copied, the rest not yet)."""
    (outside / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2, "max_steps": 9}))
    copying = outside / "checkpoint-9"
    copying.mkdir()
    for p in (outside / "checkpoint-2").glob("adapter_*"):
        shutil.copy2(p, copying / p.name)
    _refused(capsys, _argv(outside, tiny_model_dir), str(copying), "trainer_state.json", "still being written")
    assert not (tiny_data / "train" / "tiny" / "their-run").exists()
    (copying / "trainer_state.json").write_text(json.dumps({"global_step": 9, "max_steps": 9}))   # the copy ends
    from tests.infer.tiny_run import tiny_overrides

    over = [a for o in tiny_overrides() for a in ("--override", o)]
    assert main(_argv(outside, tiny_model_dir, "--check-only", *over)) == 0


def test_a_base_of_other_weights_is_refused_unless_base_differs_which_is_recorded(outside, tiny_model_dir, tiny_data,
                                                                                  tmp_path, capsys):
    from rcea.tiny import build_tiny_model
    from tests.infer.tiny_run import tiny_overrides

    other = tmp_path / "other-base"   # the same shape and tokenizer, other weights
    shutil.copytree(tiny_model_dir, other)
    for p in other.glob("*.safetensors"):
        p.unlink()
    build_tiny_model(tmp_path / "seed1", seed=1)
    for p in (tmp_path / "seed1").glob("*.safetensors"):
        shutil.copy2(p, other / p.name)
    capsys.readouterr()
    over = [a for o in tiny_overrides() for a in ("--override", o)]
    _refused(capsys, _argv(outside, other, *over), f"--base {other} holds other weights", "--base-differs")
    assert not (tiny_data / "train" / "tiny" / "their-run").exists()

    assert main(_argv(outside, tiny_model_dir, *over, "--check-only")) == 0   # the same weights in another folder
    assert "--base-differs" not in capsys.readouterr().out
    assert main(_argv(outside, other, *over, "--base-differs")) == 0
    assert "--base-differs: measured over it, not over the scale's base" in capsys.readouterr().out
    run = tiny_data / "train" / "tiny" / "their-run"
    record = json.loads((run / "outside.json").read_text())
    assert record["base"] == record["measured_over"] == str(other) and record["base_differs"] is True
    assert record["base_weights_sha256"] == record["measured_over_weights_sha256"] != record["scale_base_weights_sha256"]
    manifest = json.loads((run / "checkpoints" / "checkpoint-2" / "rcea_trainer_state.pt.manifest.json").read_text())
    assert manifest["base_differs"] is True and manifest["files"]["adapter_model.safetensors"]["size"] > 0
    # measured again over the scale's base: its tables over `other` would stay, labelled with the scale's base
    _refused(capsys, _argv(outside, tiny_model_dir, *over), f"run their-run was measured over {other}",
             "another --name")
    assert json.loads((run / "outside.json").read_text()) == record
