"""The training progress line: step, reward, entropy, time left from this process's own step rate."""

from types import SimpleNamespace

from train.progress import ProgressLine, hms, progress_line


def test_hms():
    assert [hms(12), hms(250), hms(3900), hms(-3)] == ["12s", "4m 10s", "1h 05m", "0s"]


def test_line_has_step_reward_entropy_and_time_left():
    line = progress_line(120, 4000, {"reward": 0.4123, "entropy": 0.5234, "loss": 1.0}, 18.0)
    # (4000 - 120) x 18 s = 69,840 s = 19 h 24 min
    assert line == "[train] step 120/4000 (3.0%) reward 0.412 entropy 0.523 | 18.0 s/step, 19h 24m left"


def test_a_resumed_run_counts_only_its_own_steps():
    now = [1000.0]
    lines = []
    cb = ProgressLine(log=lines.append, clock=lambda: now[0])
    state = SimpleNamespace(global_step=50, max_steps=100)
    cb.on_train_begin(None, state, None)           # resumed at step 50
    now[0] += 30.0
    state.global_step = 53
    cb.on_log(None, state, None, logs={"reward": 0.5})
    cb.on_log(None, state, None, logs={"train_runtime": 1.0})   # the final summary is not a step
    assert lines == ["[train] step 53/100 (53.0%) reward 0.500 | 10.0 s/step, 7m 50s left"]
