"""The training progress line: step, reward, entropy, time left from this process's own step rate."""

from types import SimpleNamespace

from rcea.progress import Progress, duration, timing
from train.progress import ProgressLine, progress_line


def test_one_duration_format():
    assert [duration(12), duration(250), duration(3900), duration(-3)] == ["12s", "4m 10s", "1h 05m", "0s"]
    assert timing(60, 1, 4) == "1m 00s, ~3m 00s left" and timing(60, 4, 4) == "1m 00s"


def test_plain_lines_when_not_a_terminal():
    import io

    out = io.StringIO()
    p = Progress("warm start", 3, stream=out, every_s=3600)
    for i in (1, 2, 3):
        p.update(i, f"loss {1 / i:.3f}")
    lines = out.getvalue().splitlines()  # the first and the last (rate-limited in between), no bar codes
    assert [ln.split(" | ")[0] for ln in lines] == ["[warm start] step 1/3 loss 1.000", "[warm start] step 3/3 loss 0.333"]
    assert "\r" not in out.getvalue() and lines[0].endswith("left")


def test_line_has_step_reward_entropy_and_time_left():
    line = progress_line(120, 4000, {"reward": 0.4123, "entropy": 0.5234, "loss": 1.0}, 18.0)
    # (4000 - 120) x 18 s = 69,840 s = 19 h 24 min
    assert line == "[train] step 120/4000 (3.0%) reward 0.412 entropy 0.523 | 18.0 s/step, ~19h 24m left"


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
    assert lines == ["[train] step 53/100 (53.0%) reward 0.500 | 10.0 s/step, ~7m 50s left"]


def test_a_logged_step_prints_the_train_line_only(tmp_path, capsys):
    """A real Trainer with tqdm disabled (as train/run.py configures it) prints its raw log dict through
    PrinterCallback; after quiet_trainer only ProgressLine speaks."""
    import torch
    from transformers import Trainer, TrainingArguments

    from train.progress import quiet_trainer

    args = TrainingArguments(output_dir=str(tmp_path), disable_tqdm=True, report_to=[], use_cpu=True)
    trainer = Trainer(model=torch.nn.Linear(2, 2), args=args, callbacks=[ProgressLine()])
    trainer.state.max_steps, trainer.state.global_step = 10, 1
    trainer.log({"reward": 0.25, "loss": 1.0})
    assert "{'reward'" in capsys.readouterr().out  # today's duplicate: the Trainer's raw dict
    quiet_trainer(trainer)
    trainer.log({"reward": 0.25, "loss": 1.0})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("[train] step 1/10 (10.0%) reward 0.250"), out


def test_line_shows_the_sampler_gap_when_vllm_sampled():
    from train.monitor import GAP_MEAN

    line = progress_line(3, 10, {"reward": 0.5, "entropy": 1.0, GAP_MEAN: 0.01234}, None)
    assert line == "[train] step 3/10 (30.0%) reward 0.500 entropy 1.000 logp-gap 0.0123"
