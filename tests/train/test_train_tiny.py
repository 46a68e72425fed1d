"""Tiny-scale training on CPU: every objective trains, logs every field, checkpoints and resumes exactly."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from rcea.config import load_config
from train.monitor import STEP_FIELDS, read_steps
from train.objectives import NAMES, get
from train.run import TrainSetupError, run_training

# The untrained tiny base (no warm start): the synthetic reward needs no skill, and the 1200-step warm
# start would cost minutes of CPU in a fresh checkout.
FAST = ["toy.warm_start_steps=0", "train.max_completion_tokens=8", "train.warmup_ratio=0.0", "train.weight_decay=0.0",
        "train.max_steps=3", "data.draw_size=32"]


@pytest.fixture(scope="module", autouse=True)
def prepared_pool():
    """The tiny policy these runs share, built once into the area's data folder (tests/train/conftest.py)."""
    from rcea.prepare import prepare

    prepare("tiny", FAST)


def adapter(ckpt: Path) -> dict[str, torch.Tensor]:
    return load_file(str(ckpt / "adapter_model.safetensors"))


def initial_adapter(cfg) -> dict[str, torch.Tensor]:
    """The LoRA weights a run starts from (same seed, same construction as run_training)."""
    from peft import get_peft_model

    from rcea.seeds import seed_everything
    from train.run import load_policy, lora_config

    seed_everything(cfg["train.seed"])
    model, _ = load_policy(cfg)
    peft = get_peft_model(model, lora_config(cfg))
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(peft).items()}


@pytest.mark.parametrize("method", NAMES)
def test_each_objective_trains_logs_and_checkpoints(method, tmp_path):
    cfg = load_config("tiny", method, FAST)
    summary = run_training(cfg, tmp_path / method, reward="synthetic", log=lambda _: None)
    assert summary["global_step"] == 3
    final = Path(summary["final_adapter"])
    assert final.name == "checkpoint-3" and (final / "adapter_config.json").exists()
    after, before = adapter(final), initial_adapter(cfg)
    assert set(after) == set(before) and len(after) == 3 * 7 * 2  # 3 layers x 7 projections x (A, B)
    unchanged = [k for k in after if torch.equal(after[k], before[k])]
    assert not unchanged, f"{method}: LoRA tensors that did not change: {unchanged[:4]}"
    rows = read_steps(summary["steps_log"])
    assert [r["step"] for r in rows] == [1, 2, 3]
    for r in rows:
        missing = [f for f in STEP_FIELDS + get(method).metrics if f not in r]
        assert not missing, f"{method}: step {r['step']} lacks {missing}"
        assert method != "kl_cov" or not any(k.startswith("clip_ratio") for k in r), r  # KL-Cov has no clip
    if method == "kl_cov":  # top-k always selects at least one token
        assert all(r["cov_selected_frac"] > 0 for r in rows)
    if method == "dapo":  # dynamic sampling refilled every rollout with mixed groups only
        assert all(r["dapo/frac_kept"] == 1.0 and r["frac_nonzero_var"] == 1.0 for r in rows)
        assert all("dapo/refill_rounds" in r for r in rows)
        assert all(0.0 <= r["frac_nonzero_var_sampled"] <= 1.0 for r in rows)  # the share before the filter
    assert json.loads((tmp_path / method / "summary.json").read_text())["failure_detector_reward_trace"]["n_points"] == 3
    assert any((tmp_path / method / "tb").iterdir())


class Crash(TrainerCallback):
    def __init__(self, at: int):
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise KeyboardInterrupt("simulated kill")


@pytest.mark.parametrize("method", ["dapo", "gtpo"])
def test_killed_and_resumed_run_ends_with_the_same_adapter(method, tmp_path):
    over = FAST[:-1] + ["train.max_steps=4", "train.save_steps=1", "data.draw_size=32"]
    cfg = load_config("tiny", method, over)
    straight = run_training(cfg, tmp_path / "straight", reward="synthetic", log=lambda _: None)
    with pytest.raises(KeyboardInterrupt):  # killed after step 4's update, before its checkpoint
        run_training(cfg, tmp_path / "killed", reward="synthetic", callbacks=[Crash(4)], log=lambda _: None)
    ckpts = tmp_path / "killed" / "checkpoints"
    assert (ckpts / "checkpoint-3").exists() and not (ckpts / "checkpoint-4").exists()
    (ckpts / "checkpoint-4").mkdir()  # a checkpoint half written when the kill came: must be ignored
    with pytest.raises(TrainSetupError, match="--resume"):
        run_training(cfg, tmp_path / "killed", reward="synthetic", log=lambda _: None)
    resumed = run_training(cfg, tmp_path / "killed", resume=True, reward="synthetic", log=lambda _: None)
    a, b = adapter(Path(straight["final_adapter"])), adapter(Path(resumed["final_adapter"]))
    assert Path(resumed["final_adapter"]).name == "checkpoint-4"
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=f"{method}: {k} differs after resume")
    assert [r["step"] for r in read_steps(resumed["steps_log"])] == [1, 2, 3, 4]


def test_output_folder_with_other_config_is_refused(tmp_path):
    """Once a checkpoint exists under a configuration, a run with other training settings is refused."""
    from rcea import layout
    from rcea.config import ConfigError
    from rcea.store import write_manifest

    cfg = load_config("tiny", "grpo", FAST)
    cfg.write(tmp_path, "train")
    ckpt = tmp_path / "checkpoints" / "checkpoint-1"
    ckpt.mkdir(parents=True)
    for name in ("adapter_config.json", "adapter_model.safetensors", layout.TRAINER_STATE):
        (ckpt / name).write_bytes(b"{}")
    write_manifest(ckpt / layout.TRAINER_STATE, cfg=cfg, step=1)   # a complete checkpoint (manifest last)
    other = load_config("tiny", "grpo", FAST + ["train.learning_rate=0.5"])
    with pytest.raises(ConfigError, match="different configuration.*train.learning_rate"):
        run_training(other, tmp_path, reward="synthetic", log=lambda _: None)


def test_a_failed_set_up_leaves_no_configuration_that_blocks_the_corrected_rerun(tmp_path, monkeypatch):
    """A run that fails before its first checkpoint (here the policy cannot be loaded, as when a GPU runs out
    of memory; a negative learning rate, torch's refusal before, is now refused by the configuration check)
    made nothing under its configuration: the corrected command trains into the folder."""
    import train.run as run_module

    bad = load_config("tiny", "grpo", FAST + ["train.max_steps=1", "train.learning_rate=0.5"])
    real_load = run_module.load_policy

    def failing_load(cfg):
        raise RuntimeError("CUDA out of memory (stand-in)")

    monkeypatch.setattr(run_module, "load_policy", failing_load)
    with pytest.raises(RuntimeError, match="out of memory"):
        run_training(bad, tmp_path, reward="synthetic", log=lambda _: None)
    assert (tmp_path / "config" / "resolved.json").exists()      # what the failed set-up left behind
    monkeypatch.setattr(run_module, "load_policy", real_load)
    good = load_config("tiny", "grpo", FAST + ["train.max_steps=1"])
    assert good["train.learning_rate"] != 0.5
    summary = run_training(good, tmp_path, reward="synthetic", log=lambda _: None)
    assert summary["global_step"] == 1
    resolved = json.loads((tmp_path / "config" / "resolved.json").read_text())
    assert resolved["settings"]["train.learning_rate"]["value"] == good["train.learning_rate"]


def test_a_second_run_into_a_folder_being_trained_is_refused_naming_the_first(tmp_path):
    """Two studies on one data folder: the second training into the same run folder stops at once, naming
    the process that holds it (its lock is dropped by the kernel when that process ends or is killed)."""
    import os

    from rcea import layout
    from rcea.store import folder_lock

    cfg = load_config("tiny", "grpo", FAST)
    with folder_lock(tmp_path / layout.RUN_LOCK):   # the first study, training here
        with pytest.raises(TrainSetupError, match=rf"in use by pid {os.getpid()} on .*wait until it has finished"):
            run_training(cfg, tmp_path, reward="synthetic", log=lambda _: None)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "steps.jsonl").exists()
