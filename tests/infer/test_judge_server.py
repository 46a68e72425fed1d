"""infer.judge_server: the judge service serves every name its clients send, at the configured revision."""
from __future__ import annotations

import os
import subprocess
import sys

from rcea.config import load_config

from infer.judge_server import SERVER_MODULE, served_names, server_argv


def test_the_codebook_name_is_served_when_its_endpoint_is_the_judge():
    cfg = load_config("3b", overrides=["codebook.base_url='http://judge:8000/v1/'"])   # the user's choice
    assert served_names(cfg) == [cfg["judge.model"], cfg["codebook.model"]]
    unset = load_config("3b")                      # base.toml: the codebook endpoint has no default
    assert unset["codebook.base_url"] == "" and served_names(unset) == [unset["judge.model"]]
    remote = load_config("3b", overrides=["codebook.base_url='https://api.example.org/v1'"])
    assert served_names(remote) == [remote["judge.model"]]
    same = load_config("3b", overrides=[f"codebook.model='{cfg['judge.model']}'", "codebook.base_url='http://judge:8000/v1'"])
    assert served_names(same) == [cfg["judge.model"]]   # one model, one name


def test_revision_seed_and_hardware_options_come_from_the_configuration():
    cfg = load_config("3b", overrides=["judge.model_revision='0123abc'", "judge.seed=7"])
    argv = server_argv(cfg, extra="--tensor-parallel-size 2")
    assert argv[1:3] == ["-m", SERVER_MODULE]
    assert argv[argv.index("--model") + 1] == cfg["judge.model"]
    assert argv[argv.index("--revision") + 1] == "0123abc"
    assert argv[argv.index("--seed") + 1] == "7"
    names = argv[argv.index("--served-model-name") + 1:argv.index("--host")]
    assert names == served_names(cfg)
    assert argv[-2:] == ["--tensor-parallel-size", "2"]
    # local weights (e.g. a copy in the data volume) are served under the configured names, without a revision
    local = server_argv(cfg, weights="/workspace/data/models/judge")
    assert local[local.index("--model") + 1] == "/workspace/data/models/judge" and "--revision" not in local
    assert local[local.index("--served-model-name") + 1:local.index("--host")] == names


def run(env_extra, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("RCEA_SCALE", "RCEA_OVERRIDES", "JUDGE_MODEL", "JUDGE_ARGS")}
    return subprocess.run([sys.executable, "-m", "infer.judge_server", *args], env={**env, **env_extra},
                          capture_output=True, text=True, timeout=120)


def test_the_container_command_reads_scale_and_overrides_from_its_environment():
    out = run({"RCEA_SCALE": "7b", "RCEA_OVERRIDES": "codebook.model='Other-Model';codebook.base_url='http://judge:8000/v1'",
               "JUDGE_ARGS": "--dtype bfloat16"},
              "--dry")
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert f"-m {SERVER_MODULE} --model Qwen/Qwen3.5-9B --revision main" in line
    assert "--served-model-name Qwen/Qwen3.5-9B Other-Model --host 0.0.0.0 --port 8000 --seed 2027 --dtype bfloat16" in line


def test_judge_model_naming_the_configured_model_keeps_its_revision():
    out = run({"RCEA_SCALE": "3b", "JUDGE_MODEL": "Qwen/Qwen3.5-9B", "RCEA_OVERRIDES": "judge.model_revision='abc123'"},
              "--dry")
    assert out.returncode == 0 and "--model Qwen/Qwen3.5-9B --revision abc123 --served-model-name" in out.stdout
    local = run({"RCEA_SCALE": "3b", "JUDGE_MODEL": "/workspace/data/models/tiny-toy-warm"}, "--dry")
    assert "--model /workspace/data/models/tiny-toy-warm --served-model-name" in local.stdout


def test_no_scale_is_one_clear_line():
    out = run({}, "--dry")
    assert out.returncode == 2 and "$RCEA_SCALE is ''" in out.stderr and "invoke judge --scale S" in out.stderr
