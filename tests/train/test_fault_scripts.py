"""scripts/faults/train_kills.py reads the TensorBoard tags the trainer writes (issue 31: it read `reward` while
the trainer writes `train/reward`, so it printed "same steps as steps.jsonl False" for a sound run)."""

from __future__ import annotations

import importlib.util

from rcea.paths import project_root
from train.monitor import StepLogger, read_steps

from tests.train.test_tensorboard_resume import tensorboard_scalars


def _script():
    spec = importlib.util.spec_from_file_location("train_kills", project_root() / "scripts/faults/train_kills.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _State:
    def __init__(self, step: int):
        self.global_step = step


def _log(tmp_path, logs: list[dict]):
    """A run's steps.jsonl and TensorBoard mirror, written by the trainer's own StepLogger."""
    logger = StepLogger(tmp_path / "steps.jsonl", tmp_path / "tb")
    for step, row in enumerate(logs, start=1):
        logger.on_log(None, _State(step), None, logs=row)
    logger.on_train_end(None, None, None)   # closes the event writer
    return read_steps(tmp_path / "steps.jsonl"), tensorboard_scalars(tmp_path / "tb")


def test_the_fault_script_agrees_with_what_the_trainer_writes(tmp_path):
    rows, tb = _log(tmp_path, [{"reward": 0.25, "loss": 1.5}, {"reward": 0.5, "loss": 1.25}, {"loss": 1.0}])
    assert "train/reward" in tb and "reward" not in tb
    once, agree, wrong = _script().tensorboard_check(rows, tb)
    assert once and agree and wrong == []


def test_the_fault_script_names_a_field_the_mirror_lacks_or_repeats(tmp_path):
    rows, tb = _log(tmp_path, [{"reward": 0.25, "loss": 1.5}, {"reward": 0.5, "loss": 1.25}])
    check = _script().tensorboard_check
    assert check(rows, {k: v for k, v in tb.items() if k != "train/loss"})[1:] == (False, ["train/loss"])
    twice = dict(tb, **{"train/reward": tb["train/reward"] + tb["train/reward"][:1]})
    once, agree, wrong = check(rows, twice)
    assert not once and not agree and wrong == ["train/reward"]
    moved = dict(tb, **{"train/reward": [(s, v + 0.1) for s, v in tb["train/reward"]]})
    assert check(rows, moved)[1:] == (False, ["train/reward"])
