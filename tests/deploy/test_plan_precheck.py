"""invoke train / study at a GPU scale: the resource plan (train.plan, run locally) comes before any container,
and a plan that says no stops the task with exit 1 before `docker compose` runs (orchestrate/ops/plan.py)."""
from __future__ import annotations

import pytest
from invoke import MockContext, Result
from invoke.exceptions import Exit

import tasks
from orchestrate.ops import shell

PLAN = ".envs/train/bin/python -m train.plan --scale 3b"
TRAIN = "docker compose run --rm train python -m train --method grpo --scale 3b"


@pytest.fixture
def docker(monkeypatch, tmp_path):
    """A host with Docker as far as the task can tell; nothing is written to the project."""
    monkeypatch.setattr(shell, "compose_available", lambda: True)
    monkeypatch.setattr(shell, "engine_available", lambda: True)
    monkeypatch.setattr(shell, "write_env_file", lambda values: None)
    monkeypatch.setattr(shell, "data_folder", lambda: tmp_path)


def test_a_plan_that_says_no_stops_before_the_container(docker, capsys):
    c = MockContext(run={PLAN: Result("plan: train grpo does not fit h100-80gb", exited=1)})   # TRAIN would raise
    with pytest.raises(Exit) as got:
        tasks.train(c, method="grpo", scale="3b")
    assert got.value.code == 1 and "before any container started" in str(got.value.message)


def test_a_plan_that_fits_lets_the_container_run(docker):
    c = MockContext(run={PLAN: Result("study: 60 GPU-hours"), TRAIN: Result("trained")})
    tasks.train(c, method="grpo", scale="3b")


def test_the_tiny_scale_plans_nothing():
    c = MockContext(run={".envs/train/bin/python -m train --method grpo --scale tiny": Result("ok")})
    tasks.train(c, method="grpo", scale="tiny")   # MockContext raises on any other command (a plan)
