"""Issue 32: an outside run's checkpoint folder (PEFT adapters and full model folders, steps in names or in
trainer_state.json) is found, checked against the base, imported as its own run and planned with the study's
kinds; a checkpoint of another architecture is refused in one line before anything is written or queued."""

from __future__ import annotations

import json
import shutil

import pytest

from infer.outside import find_checkpoints, main


@pytest.fixture
def outside(tiny_data, tiny_model_dir, tmp_path):
    """A TRL-like output folder: an adapter named checkpoint-2, a verl-like global_step_3/actor/huggingface
    adapter, a full (merged) model folder whose step is only in its trainer_state.json, and a steps.jsonl."""
    src = tiny_data / "train" / "tiny" / "grpo" / "checkpoints"
    run = tmp_path / "their-run"
    for name, step in (("checkpoint-2", 2), ("global_step_3/actor/huggingface", 4)):
        dst = run / name
        dst.mkdir(parents=True)
        for p in (src / f"checkpoint-{step}").glob("adapter_*"):
            shutil.copy2(p, dst / p.name)
    shutil.copytree(tiny_model_dir, run / "merged")
    (run / "merged" / "trainer_state.json").write_text(json.dumps({"global_step": 5}))
    (run / "steps.jsonl").write_text("".join(json.dumps({"step": s, "entropy": 1.0 / s, "reward": 0.1 * s}) + "\n"
                                             for s in (1, 2, 3, 4, 5)))
    return run


def test_finds_each_checkpoint_with_its_step_and_form(outside):
    found = find_checkpoints(outside)
    assert [(f.step, f.form, f.step_from) for f in found] == [
        (2, "adapter", "name"), (3, "adapter", "name"), (5, "full", "trainer_state.json")]


def test_imports_and_plans_the_outside_run_as_its_own_rows(outside, tiny_model_dir, tiny_data, capsys):
    from infer.queue import Queue
    from rcea.layout import queue_path
    from rcea.store import checkpoint_complete
    from tests.infer.tiny_run import tiny_overrides

    args = [str(outside), "--base", str(tiny_model_dir), "--name", "their-run"]
    args += [a for o in tiny_overrides() for a in ("--override", o)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "trainer_state.json" in out and "not measured" in out and "queued" in out
    run = tiny_data / "train" / "tiny" / "their-run"
    assert [checkpoint_complete(run / "checkpoints" / f"checkpoint-{s}") for s in (2, 3)] == [True, True]
    assert not (run / "checkpoints" / "checkpoint-5").exists()
    assert (run / "steps.jsonl").read_text() == (outside / "steps.jsonl").read_text()
    jobs = Queue(queue_path("tiny")).jobs()
    payloads = [json.loads(j["payload"]) if isinstance(j["payload"], str) else j["payload"] for j in jobs]
    ours = [(j, p) for j, p in zip(jobs, payloads) if p["method"] == "their-run"]
    assert ours and {p["step"] for _, p in ours} <= {2, 3}
    assert {j["kind"] for j, _ in ours} >= {"probe", "greedy"}
    assert main(args) == 0   # again: nothing new (idempotent)
    assert len(Queue(queue_path("tiny")).jobs()) == len(jobs)


def _other_architecture(folder):
    from rcea.tiny import build_tiny_model

    return build_tiny_model(folder, layers=1, hidden=32, heads=2, kv_heads=1, intermediate=64, vocab=300)


@pytest.mark.parametrize("form", ["full", "adapter", "tokenizer"])
def test_another_architecture_is_refused_in_one_line_before_any_job(outside, tiny_model_dir, tiny_data, capsys,
                                                                    form):
    if form == "tokenizer":   # the base's adapter, saved with another vocabulary's tokenizer
        from rcea.tiny import build_tokenizer

        shutil.copytree(outside / "checkpoint-2", outside / "checkpoint-7")
        build_tokenizer(300).save_pretrained(outside / "checkpoint-7")
    else:
        other = _other_architecture(outside / "checkpoint-7")
    if form == "adapter":   # a LoRA adapter of the other model, in place of the model itself
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        model = get_peft_model(AutoModelForCausalLM.from_pretrained(other),
                               LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
        shutil.rmtree(other)
        model.save_pretrained(other)
    capsys.readouterr()   # the folder's build output
    rc = main([str(outside), "--base", str(tiny_model_dir), "--name", "their-run"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "checkpoint-7" in err and "step 7" in err and "--base" in err and "Traceback" not in err
    assert not (tiny_data / "train" / "tiny" / "their-run").exists()
    from rcea.layout import queue_path
    assert not queue_path("tiny").exists()


def test_a_study_method_name_is_refused(outside, tiny_model_dir, capsys):
    assert main([str(outside), "--base", str(tiny_model_dir), "--name", "grpo", "--check-only"]) == 2
    assert "--name 'grpo'" in capsys.readouterr().err


def test_the_base_defaults_to_the_scales_base_policy(outside, tiny_data, capsys):
    from tests.infer.tiny_run import tiny_overrides

    args = [str(outside), "--name", "their-run", "--check-only", *(a for o in tiny_overrides() for a in ("--override", o))]
    assert main(args) == 0
    assert "checkpoint-2" in capsys.readouterr().out
    _other_architecture(outside / "checkpoint-7")
    capsys.readouterr()
    assert main(args) == 2 and f"base model {tiny_data / 'models' / 'tiny-toy'}:" in capsys.readouterr().err
