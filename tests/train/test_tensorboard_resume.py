"""TensorBoard after a resume agrees with steps.jsonl: each step once, with the same values.

A run killed after logging a step but before that step's checkpoint logs the step again when resumed.
steps.jsonl drops its stale lines; the TensorBoard mirror must not keep them either (TensorBoard itself
would show both points under some readers, and every other reader of the event files sees both).
The untrained tiny base (no warm start) keeps this to a few seconds of training.
"""

from pathlib import Path

import pytest
from transformers import TrainerCallback

from rcea.config import load_config
from train.monitor import read_steps
from train.run import run_training

OVER = ["train.max_completion_tokens=8", "train.warmup_ratio=0.0", "train.weight_decay=0.0", "data.draw_size=32",
        "train.max_steps=4", "train.save_steps=2", "toy.warm_start_steps=0"]


class Crash(TrainerCallback):
    """Raise once step `at` is logged (after its update, before its checkpoint): a kill."""

    def __init__(self, at: int):
        self.at = at

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.global_step == self.at and logs and "train_runtime" not in logs:
            raise KeyboardInterrupt("simulated kill")


def tensorboard_scalars(tb_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar record of every event file under `tb_dir`, as written (no purge logic applied)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    found: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(tb_dir.rglob("events.out.tfevents.*")):
        for ev in EventFileLoader(str(f)).Load():
            for v in ev.summary.value:
                val = v.simple_value if v.HasField("simple_value") else float(tensor_util.make_ndarray(v.tensor))
                found.setdefault(v.tag, []).append((ev.step, val))
    return found


def test_tensorboard_agrees_with_steps_jsonl_after_a_resume(tmp_path):
    cfg = load_config("tiny", "grpo", OVER)
    with pytest.raises(KeyboardInterrupt):
        run_training(cfg, tmp_path / "run", reward="synthetic", callbacks=[Crash(3)], log=lambda _: None)
    assert [r["step"] for r in read_steps(tmp_path / "run" / "steps.jsonl")] == [1, 2, 3]
    assert not (tmp_path / "run" / "checkpoints" / "checkpoint-3").exists()
    resumed = run_training(cfg, tmp_path / "run", resume=True, reward="synthetic", log=lambda _: None)
    rows = read_steps(resumed["steps_log"])
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    tb = tensorboard_scalars(tmp_path / "run" / "tb")
    assert {"train/reward", "train/loss", "train/entropy"} <= set(tb)
    for tag, points in tb.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{tag}: a step logged more than once: {sorted(steps)}"
    assert sorted(tb["train/reward"]) == [(r["step"], pytest.approx(r["reward"], rel=1e-6)) for r in rows]
    assert sorted(tb["train/loss"]) == [(r["step"], pytest.approx(r["loss"], rel=1e-6, abs=1e-9)) for r in rows]


def test_tensorboard_tags_are_under_train_like_trl(tmp_path):
    from types import SimpleNamespace

    from train.monitor import StepLogger

    logger = StepLogger(tmp_path / "steps.jsonl", tmp_path / "tb")
    logger.on_log(None, SimpleNamespace(global_step=1), None, logs={"reward": 0.5, "clip_ratio/low": 0.0})
    logger.on_train_end(None, None, None)
    tb = tensorboard_scalars(tmp_path / "tb")
    assert set(tb) == {"train/reward", "train/clip_ratio/low", "train/fresh_rollout"}
    assert tb["train/reward"] == [(1, 0.5)]
    assert read_steps(tmp_path / "steps.jsonl")[0]["reward"] == 0.5  # the record keeps TRL's plain keys
