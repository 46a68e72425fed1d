"""Issue 40 items 2 and 8: `invoke measure-run` after a quick demo measures under the data folder's settings (the
demo's), so one report reads every table, or says in one line the command that agrees; `--check-only` checks
and queues nothing. On main before this change the outside run's tables were made under the scale's defaults and
the aggregation refused "the tables were made under 2 configurations", with no command that fixed it."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from invoke.exceptions import Exit

from orchestrate.ops.outside import join_settings
from orchestrate.ops.study import QUICK_OVERRIDES
from rcea.config import load_config

ROOT = Path(__file__).resolve().parents[2]
INVOKE = str(ROOT / ".envs" / "tools" / "bin" / "invoke")


def _made_under(data: Path, overrides, part="probe-grpo-2") -> str:
    """A table part's manifest as a job under `overrides` writes it (rcea.store.write_manifest)."""
    cfg = load_config("tiny", None, list(overrides))
    man = data / "infer" / "tiny" / "tables" / "probe" / f"{part}.parquet.manifest.json"
    man.parent.mkdir(parents=True, exist_ok=True)
    man.write_text(json.dumps({"config_hash": cfg.hash(), "settings": {k: v["value"] for k, v in
                                                                      cfg.to_dict()["settings"].items()}}))
    return cfg.hash()


@pytest.fixture(autouse=True)
def _no_shared_overrides(monkeypatch):
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)


def test_the_quick_demos_settings_are_joined(tmp_path):
    quick = _made_under(tmp_path, QUICK_OVERRIDES)
    joined, said = join_settings("tiny", "my-grpo", "/runs/my-grpo", [], tmp_path)
    assert load_config("tiny", None, joined).hash() == quick
    assert {o.split("=")[0] for o in joined} == {o.split("=")[0] for o in QUICK_OVERRIDES}
    assert said.count("\n") == 0 and quick in said
    assert join_settings("tiny", "my-grpo", "/runs/my-grpo", [], tmp_path / "empty") == ([], "")   # no tables yet
    assert join_settings("tiny", "my-grpo", "/x", list(QUICK_OVERRIDES), tmp_path) == ([], "")     # already agree


def test_the_runs_own_earlier_settings_are_not_the_folders(tmp_path):
    """Measured before under the defaults (outside.json), the run's old parts do not outvote the study's."""
    quick = _made_under(tmp_path, QUICK_OVERRIDES)
    default = load_config("tiny").hash()
    for i in range(3):
        _made_under(tmp_path, [], part=f"probe-my-grpo-{i}")
    run = tmp_path / "train" / "tiny" / "my-grpo"
    run.mkdir(parents=True)
    (run / "outside.json").write_text(json.dumps({"config_hash": default, "source": "/runs/my-grpo"}))
    joined, _ = join_settings("tiny", "my-grpo", "/runs/my-grpo", [], tmp_path)
    assert load_config("tiny", None, joined).hash() == quick


def test_an_override_against_the_folders_settings_names_the_command_that_agrees(tmp_path):
    quick = _made_under(tmp_path, QUICK_OVERRIDES)
    with pytest.raises(Exit) as err:
        join_settings("tiny", "my-grpo", "/runs/my-grpo", ["probe.k=8"], tmp_path)
    msg = err.value.message
    assert "\n" not in msg and quick in msg and "run `invoke measure-run --path /runs/my-grpo --name my-grpo" in msg
    cmd = msg.split("run `", 1)[1].rstrip("`")
    words = shlex.split(cmd)
    overrides = [words[i + 1] for i, w in enumerate(words) if w == "--override"]
    assert load_config("tiny", None, overrides).hash() == quick   # that command agrees
    assert "'probe.k=4'" in cmd and "probe.k=8" not in cmd


def _invoke(tmp: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RCEA_DATA=str(tmp / "data"), RCEA_RESULTS=str(tmp / "published"))
    env.pop("RCEA_OVERRIDES", None)
    return subprocess.run([INVOKE, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_invoke_measure_run_check_only_and_the_joined_settings_as_typed(tmp_path):
    (tmp_path / "run").mkdir()
    r = _invoke(tmp_path, "--dry", "measure-run", "--path", str(tmp_path / "run"), "--name", "my-grpo", "--check-only")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 1 and " -m infer.outside " in lines[0] and lines[0].endswith("--check-only")
    _made_under(tmp_path / "data", QUICK_OVERRIDES)
    r = _invoke(tmp_path, "--dry", "measure-run", "--path", str(tmp_path / "run"), "--name", "my-grpo")
    assert r.returncode == 0, r.stderr
    assert "measure-run: measuring under the data folder's settings" in r.stdout
    assert "# overrides for every process (RCEA_OVERRIDES): " in r.stdout and "train.max_steps=4" in r.stdout
