"""Per-step training log (JSONL + TensorBoard) and the failure detector run over it."""

from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback

from train.callback import carry_rollout

# Fields every step line carries (TRL's own names where TRL logs them); besides these, each line carries its
# objective's own metrics (train.objectives registry: `metrics`, e.g. clip ratios only where there is a clip).
STEP_FIELDS = ("reward", "entropy", "response_length", "boxed_rate", "truncation_rate", "step_time", "loss")

# The sampler-vs-trainer log-prob gap of every vLLM rollout, under TRL's names (TRL logs them itself only with its
# importance-sampling correction on; train/trainer.py otherwise): mean and max over completion tokens of
# |log p_vLLM - log p_policy| in nats. Near 0 when vLLM samples from the policy being trained.
GAP_MEAN, GAP_MAX = "sampling/sampling_logp_difference/mean", "sampling/sampling_logp_difference/max"


def read_steps(path: str | Path) -> list[dict]:
    """The step lines of a run's log; a last line torn by a kill mid-write is dropped."""
    from rcea.jsonl import read_jsonl

    path = Path(path)
    if not path.exists():
        return []
    return read_jsonl(path, required=("step",), id_key="step", allow_empty=True, drop_partial_tail=True)


def truncate_steps(path: str | Path, last_step: int) -> None:
    """Drop lines past `last_step` (written by a run killed after its newest checkpoint)."""
    from rcea.store import atomic_write_text

    rows = [r for r in read_steps(path) if r["step"] <= last_step]
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


TB_TRAIN = "train/"   # a TensorBoard tag prefix, not a store folder


def tensorboard_tag(key: str) -> str:
    """TRL's (Transformers') TensorBoard naming: training scalars under `train/` (`train/reward`,
    `train/clip_ratio/low`), so runs line up with any other TRL run in one TensorBoard."""
    return key if key.startswith((TB_TRAIN, "eval/")) else TB_TRAIN + key


class StepLogger(TrainerCallback):
    """Appends one JSON line per logged optimizer step to steps.jsonl and mirrors it to TensorBoard
    (tags under `train/`, `tensorboard_tag`).

    steps.jsonl is the record; `tb_dir` is a mirror rebuilt from it when the logger starts. A run
    killed after logging steps past its newest checkpoint logs those steps again on resume:
    steps.jsonl has already been truncated to the checkpoint (`truncate_steps`), and rebuilding the
    mirror drops the stale events too, so every reader of the event files sees each step once.
    """

    def __init__(self, steps_path: Path, tb_dir: Path | None):
        self.steps_path, self.tb_dir, self._writer = Path(steps_path), tb_dir, None
        rows = read_steps(self.steps_path)  # on resume: carry the last rollout's fields forward
        self._last: dict = rows[-1] if rows else {}
        if self.tb_dir is not None and Path(self.tb_dir).exists():
            self._rebuild_tensorboard(rows)

    def _rebuild_tensorboard(self, rows: list[dict]) -> None:
        """Replace the event files by the rows of steps.jsonl (a kill mid-rebuild: redone next start)."""
        import shutil

        shutil.rmtree(self.tb_dir)
        for row in rows:
            self._mirror(row, int(row["step"]))

    def _mirror(self, row: dict, step: int) -> None:
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.tb_dir))
        for k, v in row.items():
            if k != "step" and isinstance(v, (int, float)) and math.isfinite(v):
                self._writer.add_scalar(tensorboard_tag(k), v, step)
        self._writer.flush()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return
        row = {"step": state.global_step, **{k: float(v) for k, v in logs.items() if isinstance(v, (int, float))}}
        row = carry_rollout(row, self._last)   # a step reusing a rollout (num_iterations > 1) repeats its fields
        self._last = row
        with self.steps_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
        if self.tb_dir is not None:
            self._mirror(row, state.global_step)

    def on_train_end(self, args, state, control, **kwargs):
        if self._writer is not None:
            self._writer.close()
