"""A configuration file with a TOML syntax error is one line naming the file, in `invoke doctor` too (issue 31:
doctor printed a 31-line traceback; train and study said it prefixed "invalid --override:" with no override)."""
from __future__ import annotations

import shutil

import pytest
from invoke import MockContext
from invoke.exceptions import Exit

import rcea.config
import tasks
from orchestrate.ops import doctor
from orchestrate.ops.commands import check_overrides
from rcea.paths import configs_dir
from tests.deploy.test_doctor import NO_GPU_LAPTOP


@pytest.fixture
def broken(tmp_path, monkeypatch):
    """A copy of configs/ whose base.toml has a syntax error on its second line."""
    cfg = tmp_path / "configs"
    shutil.copytree(configs_dir(), cfg)
    text = (cfg / "base.toml").read_text().splitlines()
    (cfg / "base.toml").write_text("\n".join([text[0], "oops = = 1", *text[1:]]) + "\n")
    monkeypatch.setattr(rcea.config, "configs_dir", lambda: cfg)
    return cfg / "base.toml"


def test_doctor_names_the_file_in_one_check_line(broken, monkeypatch, capsys):
    monkeypatch.setattr(doctor, "gather_facts", lambda: dict(NO_GPU_LAPTOP))
    with pytest.raises(Exit) as e:
        tasks.doctor(MockContext(), scale="3b")
    assert e.value.code == 1 and "configuration (3b)" in e.value.message
    lines = [ln for ln in capsys.readouterr().out.splitlines() if str(broken) in ln]
    assert len(lines) == 1 and lines[0].startswith("[FAIL] configuration (3b): ") and "line 2" in lines[0]


def test_a_file_error_is_not_called_an_override(broken):
    with pytest.raises(Exit) as e:
        check_overrides([], "tiny")
    assert e.value.code == 2 and "override" not in e.value.message and str(broken) in e.value.message
    assert "\n" not in e.value.message


def test_an_override_error_still_says_override():
    with pytest.raises(Exit) as e:
        check_overrides(["train.learning_rate=-1"], "tiny")
    assert e.value.message.startswith("invalid --override: ")


def test_a_dry_study_says_it_ran_nothing(capsys, monkeypatch):
    """`invoke --dry demo` ended with 'demo done in 0s' and 'results: results/tiny/ on this machine' (issue 31)."""
    from invoke import Config, Context

    monkeypatch.setenv("RCEA_OVERRIDES", "")
    tasks.demo(Context(Config(overrides={"run": {"dry": True, "echo_format": "{command}"}})), quick=True,
               methods="grpo")
    out = capsys.readouterr().out
    assert out.rstrip().endswith("=== dry run: nothing ran; the commands above are what `invoke demo` runs")
    assert " done in " not in out and "results:" not in out and "report:" not in out


def test_workers_help_shows_that_lease_takes_a_value():
    """`invoke --help workers` listed a bare `--lease` (a float default: Invoke names only str and int values)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "invoke", "--help", "workers"], cwd=root, capture_output=True,
                         text=True, timeout=60).stdout
    assert "--lease=INT" in out, out
