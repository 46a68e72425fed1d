"""A setting whose choices a library defines is refused before any work (issue 31: train.lr_scheduler=bogus
passed the configuration check, wrote the warm start and the run folder, then died in transformers)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers.trainer_utils import SchedulerType
from transformers.training_args import OptimizerNames

from rcea.choices import LIBRARY, PROJECT, library_choices
from rcea.config import SCALES, ConfigError, base_value, load_config
from rcea.config_check import check_library_choices

ROOT = Path(__file__).resolve().parents[2]


def test_the_choices_are_the_library_s_own():
    assert set(library_choices("train.lr_scheduler")) == {s.value for s in SchedulerType}
    assert set(library_choices("train.optimizer")) == {o.value for o in OptimizerNames}


@pytest.mark.parametrize("scale", SCALES)
def test_every_shipped_value_is_a_choice(scale):
    check_library_choices(load_config(scale))   # raises on a shipped value transformers does not know


@pytest.mark.parametrize("key", sorted(LIBRARY))
def test_a_bogus_value_is_one_line_naming_the_valid_ones(key):
    cfg = load_config("tiny", overrides=[f"{key}=bogus"])
    with pytest.raises(ConfigError) as err:
        check_library_choices(cfg)
    msg = str(err.value)
    assert "\n" not in msg and "'bogus'" in msg and key in msg and library_choices(key)[0] in msg
    check_library_choices(cfg, overrides=[])   # prepare checks only what an override sets: nothing here
    with pytest.raises(ConfigError):
        check_library_choices(cfg, overrides=[f"{key}=bogus"])


def test_train_refuses_before_the_run_folder_exists(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, RCEA_DATA=str(tmp_path / "data"))
    r = subprocess.run([sys.executable, "-m", "train", "--method", "grpo", "--scale", "tiny", "--output", str(out),
                        "--override", "train.lr_scheduler=bogus"], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and "train.lr_scheduler = 'bogus'" in r.stderr
    assert "cosine" in r.stderr                    # the valid ones, from SchedulerType
    assert not out.exists() and not (tmp_path / "data").exists()   # no run folder, no warm start


@pytest.mark.parametrize("key", sorted(PROJECT))
def test_a_value_outside_the_project_s_set_stops_the_load(key):
    """data.world=maths ran the math world's code; train.precision=fp16 trained in fp32 (both silently)."""
    assert base_value(key) in PROJECT[key]
    with pytest.raises(ConfigError) as err:
        load_config("tiny", overrides=[f"{key}=bogus"])
    assert str(err.value).startswith(f"override '{key}=bogus': ") and ", ".join(PROJECT[key]) in str(err.value)
