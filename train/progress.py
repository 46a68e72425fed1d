"""One progress line per logged step: step, reward, entropy, the vLLM sampler's log-prob gap, step time, time left.

    [train] step 120/4000 (3.0%) reward 0.412 entropy 0.523 logp-gap 0.0123 | 18.2 s/step, ~19h 37m left

logp-gap (runs that sample with vLLM) is the mean |log p_vLLM - log p_policy| over the rollout's tokens
(train.monitor.GAP_MEAN): near 0 when the rollouts come from the weights being trained.

Time left is (max_steps - step) x the mean wall time per step since this process started training (a
resumed run counts only its own steps, so a restart does not look infinitely fast). Durations in
`rcea.progress.duration`'s one format; the Trainer's own dict print is removed (`quiet_trainer`).
"""

from __future__ import annotations

import time
from typing import Callable

from transformers import TrainerCallback

from rcea.progress import duration
from train.monitor import GAP_MEAN


def progress_line(step: int, max_steps: int, logs: dict, seconds_per_step: float | None) -> str:
    parts = [f"[train] step {step}/{max_steps}" + (f" ({100 * step / max_steps:.1f}%)" if max_steps > 0 else "")]
    for key in ("reward", "entropy"):
        if key in logs:
            parts.append(f"{key} {float(logs[key]):.3f}")
    if GAP_MEAN in logs:
        parts.append(f"logp-gap {float(logs[GAP_MEAN]):.4f}")
    line = " ".join(parts)
    if seconds_per_step is not None:
        line += f" | {seconds_per_step:.1f} s/step, ~{duration((max_steps - step) * seconds_per_step)} left"
    return line


class ProgressLine(TrainerCallback):
    """Prints `progress_line` on every log event of the trainer (every `train.logging_steps` steps)."""

    def __init__(self, log: Callable[[str], None] = print, clock: Callable[[], float] = time.monotonic):
        self.log, self.clock = log, clock
        self._t0 = self._step0 = None

    def on_train_begin(self, args, state, control, **kwargs):
        self._t0, self._step0 = self.clock(), state.global_step

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs:
            return
        if self._t0 is None:
            self.on_train_begin(args, state, control)
        done = state.global_step - self._step0
        rate = (self.clock() - self._t0) / done if done > 0 else None
        self.log(progress_line(state.global_step, state.max_steps, logs, rate))


def quiet_trainer(trainer) -> None:
    """Leave the step output to `ProgressLine`: drop the Trainer's own printer of the raw log dict
    (added when tqdm is disabled) and its tqdm bar (added otherwise)."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    for cb in (PrinterCallback, ProgressCallback):
        trainer.remove_callback(cb)
