"""Issue 41 item 1: a checkpoint file cut short after the run finished is named, with the fix, in one line; the
fix (delete that checkpoint, those after it and the summary) makes the rerun resume from the checkpoint before
and end with the same adapter. On main before this change the rerun reused the run: rc 0, no message."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from rcea.config import load_config
from rcea.layout import TRAINER_STATE
from rcea.store import manifest_path
from tests.train.test_train_tiny import FAST
from train.cli import main
from train.run import run_training

OVER = FAST[:-2] + ["train.max_steps=2", "train.save_steps=1", "data.draw_size=32"]


@pytest.fixture(scope="module", autouse=True)
def prepared_pool():
    from rcea.prepare import prepare

    prepare("tiny", FAST)


def _cli(out: Path) -> list[str]:
    return ["--method", "grpo", "--scale", "tiny", "--resume", "--reward", "synthetic", "--output", str(out),
            *(a for o in OVER for a in ("--override", o))]


def test_a_truncated_adapter_is_named_with_its_fix_and_the_fix_resumes_to_the_same_adapter(tmp_path, capsys):
    out = tmp_path / "grpo"
    summary = run_training(load_config("tiny", "grpo", OVER), out, reward="synthetic", log=lambda _: None)
    ckpt = out / "checkpoints" / "checkpoint-2"
    record = json.loads(manifest_path(ckpt / TRAINER_STATE).read_text())
    adapter = ckpt / "adapter_model.safetensors"
    good = adapter.read_bytes()
    assert record["files"]["adapter_model.safetensors"]["size"] == len(good)   # the manifest lists every file
    assert {"adapter_config.json", TRAINER_STATE, "trainer_state.json"} <= set(record["files"])
    adapter.write_bytes(good[: len(good) // 2])

    assert main(_cli(out)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert f"{adapter} " not in err and f"{ckpt} is damaged (adapter_model.safetensors: {len(good) // 2} bytes, its " \
        f"manifest says {len(good)})" in err
    fix = err.split("rm -r ", 1)[1]
    gone = shlex.split(fix.split(" and rerun", 1)[0])
    assert gone == [str(ckpt), str(out / "summary.json"), str(manifest_path(out / "summary.json"))]
    assert "training resumes from checkpoint-1" in err

    import shutil

    for p in map(Path, gone):   # the fix, as the line says
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    assert main(_cli(out)) == 0
    capsys.readouterr()
    assert adapter.read_bytes() == good   # resumed from checkpoint-1: the same checkpoint-2 again
    assert json.loads((out / "summary.json").read_text())["final_adapter"] == summary["final_adapter"]


def test_a_full_disk_while_saving_a_checkpoint_is_one_line_and_the_rerun_resumes(tmp_path, capsys, monkeypatch):
    """Issue 41 item 2: safetensors' own error when the disk fills as checkpoint-2 is saved (on main: three
    tracebacks); the half-saved checkpoint has no manifest, so nothing partial counts, and the rerun resumes."""
    import peft.peft_model as pm

    out = tmp_path / "grpo"
    real, calls = pm.safe_save_file, []

    def save(tensors, path, *a, **k):
        calls.append(path)
        if len(calls) == 2:
            with open(path, "wb") as fh:   # the half written before the disk filled
                fh.write(b"\0" * 64)
            raise RuntimeError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "
                               "\"No space left on device\" })")
        return real(tensors, path, *a, **k)

    monkeypatch.setattr(pm, "safe_save_file", save)
    assert main(_cli(out)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: the disk holding ") and "Traceback" not in err
    size = sum(p.stat().st_size for p in (out / "checkpoints" / "checkpoint-1").rglob("*") if p.is_file())
    assert " left; a checkpoint of this run takes " in err and "rerun the same command" in err
    assert f"{size / 1024:.1f} KiB" in err
    assert not manifest_path(out / "checkpoints" / "checkpoint-2" / TRAINER_STATE).exists()
    monkeypatch.undo()
    assert main(_cli(out)) == 0
    assert "resuming from" in capsys.readouterr().out
    assert json.loads((out / "summary.json").read_text())["final_adapter"].endswith("checkpoint-2")
