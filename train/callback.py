"""RCEACallback: the training-side records of this project's trainer, for any TRL `GRPOTrainer` run.

It needs only `transformers` (no other module of this project), so a run trained elsewhere can write the
per-step log (`steps.jsonl`) the aggregation reads for the training-entropy trace and the failure-window shares
(aggregate/context.py). Each logged optimizer step becomes one JSON line in the format of train/monitor.py:

    step, reward, entropy, response_length, truncation_rate, loss, ...   TRL's own logged values
    frac_nonzero_var, frac_nonzero_var_sampled                          1 - TRL's frac_reward_zero_std: the share
                                                                        of completions whose prompt group has
                                                                        nonzero reward variance
    fresh_rollout                                                       1 when the step drew a fresh rollout

Usage (docs/outside-runs.md):

    from trl import GRPOTrainer
    from train.callback import RCEACallback
    trainer = GRPOTrainer(model=..., reward_funcs=..., args=..., train_dataset=...)
    trainer.add_callback(RCEACallback("out/steps.jsonl"))
    trainer.train()
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from transformers import TrainerCallback

# TRL's log name -> this project's step-log name (train/monitor.py STEP_FIELDS)
RENAMES = {"completions/mean_length": "response_length", "completions/clipped_ratio": "truncation_rate"}


def step_row(step: int, logs: dict, last: dict) -> dict:
    """One steps.jsonl line from TRL's logs of one step; steps that reuse a rollout (num_iterations > 1) log no
    rollout fields and repeat those of the rollout they train on (`last`), with fresh_rollout = 0."""
    row = {"step": int(step)}
    for k, v in logs.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)):
            row[RENAMES.get(k, k)] = float(v)
    if "frac_reward_zero_std" in row:
        row["frac_nonzero_var"] = row["frac_nonzero_var_sampled"] = 1.0 - row["frac_reward_zero_std"]
    return carry_rollout(row, last)


def carry_rollout(row: dict, last: dict) -> dict:
    """A step's line with the rollout fields of `last` (the line before it) under its own: a step that reuses a
    rollout logs none and repeats those of the rollout it trains on; fresh_rollout says which (1 fresh, 0 reused).
    Shared with train/monitor.py's StepLogger, so both writers keep one format."""
    return {**{k: v for k, v in last.items() if k != "step"}, **row, "fresh_rollout": float("reward" in row)}


class RCEACallback(TrainerCallback):
    """Appends one line per logged step to `steps_path` (steps.jsonl). On a resumed run, lines past the resumed
    step are dropped first, so every step appears once."""

    def __init__(self, steps_path: str | os.PathLike):
        self.steps_path = Path(steps_path)
        self._last: dict = {}

    def _rows(self) -> list[dict]:
        if not self.steps_path.exists():
            return []
        rows = []
        for line in self.steps_path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:   # a last line torn by a kill mid-write
                break
        return rows

    def on_train_begin(self, args, state, control, **kwargs):
        if args.process_index != 0:
            return
        keep = [r for r in self._rows() if r.get("step", 0) <= state.global_step]
        self.steps_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.steps_path.with_name(self.steps_path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
        os.replace(tmp, self.steps_path)
        self._last = keep[-1] if keep else {}

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "train_runtime" in logs or args.process_index != 0:
            return
        row = step_row(state.global_step, logs, self._last)
        self._last = row
        with self.steps_path.open("a") as fh:
            fh.write(json.dumps(row) + "\n")
