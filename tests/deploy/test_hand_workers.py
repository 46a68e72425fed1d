"""Issue 38: a hand-started `invoke workers` at a GPU scale next to a running training job. Before, worker 0 always
took GPU 0 (compose.yaml's INFER_GPU_0 default), the training GPU of 3b/7b (train_gpus = [0]). Now, when a
training container of the project runs, the workers go to GPUs that neither it nor the scale's train_gpus hold
(orchestrate/ops/commands.py hand_worker_gpus), checked on the exact command `invoke workers` runs (the GPUs Compose
resolves from it: tests/deploy/test_compose_cli.py). With no training running they keep compose.yaml's worker i on GPU i."""
from __future__ import annotations

import pytest
from invoke import Config, Context
from invoke.exceptions import Exit

import tasks
from orchestrate.ops import commands


def test_placement_by_hand():
    h = commands.hand_worker_gpus
    assert h("3b", 4, None) == ()                        # nothing trains: compose.yaml's GPUs 0..3
    assert h("3b", 4, {0}) == (1, 2, 3, 4)               # training on GPU 0
    assert h("3b", 8, {0}) == (1, 2, 3, 4, 5, 6, 7)      # 7 GPUs do not train: 7 workers
    assert h("7b", 4, set(), host_gpus=4) == (0, 1, 2, 3)   # a container naming no GPU, train_gpus [] (the rule)
    assert h("3b", 3, {2}, host_gpus=4) == (0, 1, 3)        # TRAIN_GPU=2 by hand: GPU 2 avoided
    with pytest.raises(Exit, match="training holds every GPU of this host"):
        h("3b", 2, {0, 1}, host_gpus=2)


@pytest.fixture
def dry():
    return Context(Config(overrides={"run": {"dry": True, "echo_format": "{command}"}}))


@pytest.mark.parametrize("training, expected", [
    (None, "env RCEA_SCALE=3b NUM_WORKERS=3 docker compose up -d infer-workers"),
    ({0}, "env RCEA_SCALE=3b NUM_WORKERS=3 INFER_GPU_0=1 INFER_GPU_1=2 INFER_GPU_2=3 docker compose up -d "
          "infer-workers"),
])
def test_invoke_workers_avoids_a_running_training_job(capsys, dry, monkeypatch, training, expected):
    monkeypatch.setattr(tasks, "training_gpus", lambda: training)
    monkeypatch.setattr(tasks, "host_gpu_count", lambda: 8)
    tasks.workers(dry, scale="3b", num_workers=3)
    out = [ln for ln in capsys.readouterr().out.splitlines() if ln and not ln.startswith(("#", "==="))]
    assert out[-1] == expected
    assert ("avoid its GPUs" in "\n".join(out)) is bool(training)

