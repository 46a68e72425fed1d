"""Issue 40 item 8: Invoke's bare "No idea what '--methd' is!" becomes one line naming the task's valid options
and the closest one; an unknown task gets the closest task name. Run as typed, through the tools environment's
`invoke` on tasks.py, in a subprocess."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVOKE = str(ROOT / ".envs" / "tools" / "bin" / "invoke")


def _invoke(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([INVOKE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_an_unknown_flag_names_the_tasks_options_and_the_closest():
    r = _invoke("train", "--methd", "grpo")
    assert r.returncode != 0 and r.stdout == ""
    assert r.stderr.splitlines() == ["invoke train: no option '--methd'; did you mean --method? Its options: "
                                     "--gpu, --max-steps, --method, --override, --resume, --scale (invoke --help train)"]
    far = _invoke("aggregate", "--zzz")   # nothing close: the options only
    assert far.returncode != 0 and "did you mean" not in far.stderr
    assert far.stderr.startswith("invoke aggregate: no option '--zzz'. Its options: ") and "--skip-bad-parts" in far.stderr


def test_an_unknown_task_and_a_flag_without_its_value():
    r = _invoke("tarin", "--method", "grpo")
    assert r.returncode != 0 and len(r.stderr.splitlines()) == 1
    assert r.stderr.startswith("invoke: no task 'tarin'; did you mean train? Tasks: ") and "measure-run" in r.stderr
    assert _invoke("--help", "tarin").stderr == r.stderr
    v = _invoke("train", "--max-steps")
    assert v.returncode != 0 and v.stderr.startswith("invoke train: --max-steps needs a value. Its options: ")


def test_a_valid_command_line_is_untouched():
    r = _invoke("--dry", "train", "--method", "kl_cov", "--scale", "3b")
    assert r.returncode == 0, r.stderr
    assert "docker compose run --rm train python -m train --method kl_cov --scale 3b" in r.stdout
