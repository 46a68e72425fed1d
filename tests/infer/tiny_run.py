"""Helpers for the tiny-model inference tests: test budgets and the subprocess environment."""

from __future__ import annotations

import os


def tiny_overrides() -> list[str]:
    """Test budgets on top of the tiny scale: 2 probe questions, K = 3, 16 tokens (and no toy warm start)."""
    from rcea.config import load_config

    cfg = load_config("tiny")
    comp = cfg["probe.composition"]
    first = list(comp)[:2]
    out = ["eval.max_new_tokens=16", "eval.questions_per_benchmark=3", "eval.benchmarks=" + str(first).replace("'", '"'),
           "passk.n=3", "passk.questions=2", "passk.max_new_tokens=16", "passk.benchmark=" + first[0],
           "probe.k=3", "probe.max_new_tokens=16", "probe.composition={" + ", ".join(f"{b} = {3 - len(first)}" for b in first) + "}",
           "covariance.n_questions=2", "covariance.trajectories=2", "covariance.max_positions=8",
           "covariance.gap_steps=2", "eval.milestones=[0.5, 1.0]"]
    if "toy.warm_start_steps" in cfg:
        out.append("toy.warm_start_steps=0")
    return out


def subprocess_env(data_root) -> dict:
    """Environment for `python -m infer ...` subprocesses: the data folder and the project on the path."""
    from rcea.paths import project_root

    env = dict(os.environ, RCEA_DATA=str(data_root), PYTHONPATH=str(project_root()))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env
