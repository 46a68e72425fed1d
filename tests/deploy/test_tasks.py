"""tasks.py and orchestrate/ops: every task's exact command (via Invoke's dry run), argument validation, no-Docker
behaviour, the study's stage list."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Config, Context, MockContext, Result
from invoke.exceptions import Exit

import tasks
from orchestrate.ops import commands, lockfiles, shell, study
from orchestrate.units import TrainUnit
from rcea.provenance import git_commit

COMMIT = git_commit()

ROOT = Path(tasks.__file__).resolve().parent
LOCAL = {"train": ".envs/train/bin/python", "infer": ".envs/infer/bin/python",
         "aggregate": ".envs/aggregate/bin/python"}


@pytest.fixture
def dry():
    return Context(Config(overrides={"run": {"dry": True, "echo_format": "{command}"}}))


def dry_lines(capsys, task, c, **kwargs):
    task(c, **kwargs)
    return [ln for ln in capsys.readouterr().out.splitlines() if ln and not ln.startswith(("#", "==="))]


EXPECTED = [  # (task, kwargs, exact command lines)
    ("prepare", {"scale": "tiny"}, [f"{LOCAL['train']} -m rcea.prepare --scale tiny"]),
    ("prepare", {"scale": "7b"}, ["docker compose run --rm train python -m rcea.prepare --scale 7b"]),
    ("train", {"method": "kl_cov", "scale": "3b"},   # the resource plan first, locally on CPU (train.plan)
     [f"{LOCAL['train']} -m train.plan --scale 3b",
      "docker compose run --rm train python -m train --method kl_cov --scale 3b"]),
    ("train", {"method": "grpo", "scale": "3b", "gpu": "rtx-pro-6000-96gb"},
     [f"{LOCAL['train']} -m train.plan --scale 3b --gpu rtx-pro-6000-96gb",
      "docker compose run --rm train python -m train --method grpo --scale 3b"]),
    ("plan", {"scale": "7b", "gpu": "h200-141gb", "num_gpus": 4, "override": ["train.per_device_batch=4"]},
     [f"{LOCAL['train']} -m train.plan --scale 7b --gpu h200-141gb --num-gpus 4 --override train.per_device_batch=4"]),
    ("train", {"method": "grpo", "scale": "tiny", "max_steps": 2, "resume": True,
               "override": ["train.learning_rate=1e-6", "train.num_generations=4"]},
     [f"{LOCAL['train']} -m train --method grpo --scale tiny --max-steps 2 --resume "
      "--override train.learning_rate=1e-6 --override train.num_generations=4"]),
    ("train", {"method": "archer", "scale": "7b", "override": ["data.instruction=a b"]},
     [f"{LOCAL['train']} -m train.plan --scale 7b --override 'data.instruction=a b'",
      "docker compose run --rm train python -m train --method archer --scale 7b --override 'data.instruction=a b'"]),
    ("infer", {"scale": "tiny", "method": "dapo", "what": "passk"},
     [f"{LOCAL['infer']} -m infer enqueue --scale tiny --method dapo --what passk"]),
    ("infer", {"scale": "3b", "method": "clip_cov", "what": "all"},
     ["docker compose run --rm infer-cli python -m infer enqueue --scale 3b --method clip_cov --what all"]),
    ("warm_start", {}, [f"{LOCAL['train']} -m rcea.warmstart_rebuild --rebuild"]),
    ("warm_start", {"write": True}, [f"{LOCAL['train']} -m rcea.warmstart_rebuild --rebuild --write"]),
    ("warm_start", {"steps": 10}, [f"{LOCAL['train']} -m rcea.warmstart_rebuild --rebuild --steps 10"]),
    ("workers", {"scale": "tiny"}, [f"{LOCAL['infer']} -m infer worker --scale tiny --until-empty --processes 2 --progress"]),
    ("workers", {"scale": "tiny", "lease": 20.0},
     [f"{LOCAL['infer']} -m infer worker --scale tiny --until-empty --processes 2 --lease 20 --progress"]),
    ("workers", {"scale": "3b", "num_workers": 2, "lease": 60.0},
     ["env RCEA_SCALE=3b NUM_WORKERS=2 RCEA_LEASE_S=60 docker compose up -d infer-workers"]),
    ("workers", {"scale": "3b", "num_workers": 8},
     ["env RCEA_SCALE=3b NUM_WORKERS=8 docker compose up -d infer-workers"]),
    ("workers", {"scale": "7b", "num_workers": 3},
     ["env RCEA_SCALE=7b NUM_WORKERS=3 docker compose up -d infer-workers"]),
    ("status", {"scale": "tiny"}, [".envs/tools/bin/python -m rcea.status --scale tiny"]),
    ("status", {"scale": "7b"}, [".envs/tools/bin/python -m rcea.status --scale 7b"]),   # the host's data folder
    ("judge", {"scale": "tiny"}, [f"{LOCAL['infer']} -m infer.labels validity --scale tiny"]),
    ("judge", {"scale": "3b"}, ["env RCEA_SCALE=3b docker compose --profile judge up -d --wait judge",
                                "docker compose run --rm infer-cli python -m infer.labels validity --scale 3b"]),
    ("codebook", {"scale": "tiny"}, [f"{LOCAL['infer']} -m infer.labels modes --scale tiny"]),
    ("codebook", {"scale": "7b"}, ["env RCEA_SCALE=7b docker compose --profile judge up -d --wait judge",
                                   "docker compose run --rm infer-cli python -m infer.labels modes --scale 7b"]),
    ("audit", {"scale": "tiny", "sample": True, "report": True},
     [f"{LOCAL['infer']} -m infer.audit sample --scale tiny --if-missing",
      f"{LOCAL['infer']} -m infer.audit report --scale tiny"]),
    ("audit", {"scale": "3b", "serve": True},
     ["docker compose run --rm -p 127.0.0.1:8765:8765 infer-cli python -m infer.audit serve --scale 3b "
      "--host 0.0.0.0 --port 8765"]),
    ("audit", {"scale": "tiny", "serve": True, "port": 9001}, [f"{LOCAL['infer']} -m infer.audit serve --scale tiny --port 9001"]),
    ("audit", {"scale": "tiny", "import_": "labels.csv"}, [f"{LOCAL['infer']} -m infer.audit import --scale tiny labels.csv"]),
    ("infer", {"scale": "3b", "method": "base", "what": "probe"},
     ["docker compose run --rm infer-cli python -m infer enqueue --scale 3b --method base --what probe"]),
    ("aggregate", {"scale": "tiny"},   # then the copy in results/<scale>/ (rcea.publish)
     [f"{LOCAL['aggregate']} -m aggregate --input data/infer/tiny/tables --output data/results/tiny --scale tiny",
      f"{LOCAL['aggregate']} -m rcea.publish data/results/tiny results/tiny"]),
    ("aggregate", {"scale": "tiny", "skip_bad_parts": True},
     [f"{LOCAL['aggregate']} -m aggregate --input data/infer/tiny/tables --output data/results/tiny --scale tiny "
      "--skip-bad-parts", f"{LOCAL['aggregate']} -m rcea.publish data/results/tiny results/tiny"]),
    ("aggregate", {"scale": "3b"},
     ["docker compose run --rm aggregate python -m aggregate --input data/infer/3b/tables "
      "--output data/results/3b --scale 3b",
      "docker compose run --rm aggregate python -m rcea.publish data/results/3b results/3b"]),
    ("bootstrap", {}, ["scripts/bootstrap"]),
    ("bootstrap", {"role": "train"}, ["scripts/bootstrap train"]),
    ("test", {}, ["scripts/test"]),
    ("test", {"args": "-x -k verify"}, ["scripts/test -x -k verify"]),
    ("lock", {"name": "train"},
     [".envs/tools/bin/uv --directory lockfiles pip compile train.in -o train.txt --python-version 3.11 "
      "--only-binary :all: --generate-hashes --no-header --python-platform x86_64-manylinux_2_35 "
      "--exclude-newer 2026-02-28"]),
    ("lock", {"name": "aggregate"},
     [".envs/tools/bin/uv --directory lockfiles pip compile aggregate.in -o aggregate.txt --python-version 3.11 "
      "--only-binary :all: --generate-hashes --no-header --python-platform x86_64-manylinux_2_28 "
      "--exclude-newer 2026-06-16"]),
]


@pytest.mark.parametrize("name,kwargs,expected", EXPECTED, ids=[f"{t}-{i}" for i, (t, _, _) in enumerate(EXPECTED)])
def test_dry_run_prints_the_exact_command(capsys, dry, name, kwargs, expected):
    assert dry_lines(capsys, getattr(tasks, name), dry, **kwargs) == expected


def test_lock_of_a_cpu_twin_constrains_it_by_its_gpu_lock(capsys, dry, monkeypatch):
    monkeypatch.setenv("RCEA_FIND_LINKS", "wheels-dir")
    tasks.lock(dry, name="infer-cpu")
    out = capsys.readouterr().out.splitlines()
    constraints = lockfiles.constraints_path("infer")
    assert out[0].startswith(f"# constraints: {constraints} <- lockfiles/infer.txt")
    assert out[1] == (f".envs/tools/bin/uv --directory lockfiles pip compile infer-cpu.in -o infer-cpu.txt "
                      f"-c {constraints} --python-version 3.11 --only-binary :all: --generate-hashes "
                      "--no-header --python-platform x86_64-manylinux_2_35 --exclude-newer 2026-12-01 "
                      "--find-links wheels-dir")


def test_lock_all_compiles_every_gpu_lock_before_its_cpu_twin(capsys, dry, monkeypatch):
    monkeypatch.setenv("RCEA_FIND_LINKS", "w")
    tasks.lock(dry)
    order = re.findall(r"pip compile (\S+)\.in", capsys.readouterr().out)
    assert sorted(order) == sorted(p.stem for p in (ROOT / "lockfiles").glob("*.in"))
    assert order.index("train") < order.index("train-cpu") and order.index("infer") < order.index("infer-cpu")


STAGES = ["prepare", "train", "workers", "judge", "modes", "audit", "aggregate", "results"]


def test_demo_runs_every_stage_in_order(capsys, dry, monkeypatch):
    monkeypatch.setenv("RCEA_OVERRIDES", "")  # restored afterwards: the quick demo sets it for its stages
    tasks.demo(dry, quick=True, methods="grpo,kl_cov")
    out = capsys.readouterr().out
    banners = re.findall(r"^=== \[(\d)/(\d)\] (.+?)  \(\+\d+s.*\)$", out, re.M)
    assert [b[2].split(" (")[0] for b in banners] == [
        "prepare", "train grpo, kl_cov", "workers", "judge", "modes", "audit sample", "aggregate",
        "results -> results/tiny/"]
    lines = out.splitlines()
    # each run enqueues its measurements right after its own training
    i = lines.index(f"{LOCAL['train']} -m train --method kl_cov --scale tiny --resume")
    assert lines[i + 1] == f"{LOCAL['infer']} -m infer enqueue --scale tiny --method kl_cov --what all"
    assert "train.max_steps=4" in os.environ["RCEA_OVERRIDES"]  # quick budgets reach every stage
    assert "docker" not in out  # the demo is tiny: it never needs Docker


def test_demo_is_the_tiny_study(capsys, dry, monkeypatch):
    """The demo and `study --scale tiny` run the same commands (they cannot drift apart)."""
    monkeypatch.setenv("RCEA_OVERRIDES", "")
    tasks.demo(dry, methods="grpo,dapo")
    demo_out = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("===")]
    tasks.study(dry, scale="tiny", methods="grpo,dapo")
    study_out = [ln for ln in capsys.readouterr().out.splitlines() if not ln.startswith("===")]
    assert demo_out == study_out and any("-m aggregate" in ln for ln in demo_out)


def test_dry_study_at_7b_carries_7b_into_every_container(capsys, dry, monkeypatch):
    monkeypatch.setattr(study, "host_gpu_count", lambda: None)   # not this machine's: compose.yaml's 8 GPUs
    tasks.study(dry, scale="7b", methods="grpo,kl_cov", num_workers=3)
    out = capsys.readouterr().out
    cmds = [ln for ln in out.splitlines() if ln and not ln.startswith("===")]
    plan, cmds = cmds[0], cmds[1:]   # the resource plan runs first, locally on CPU, before any container
    assert plan == f"{LOCAL['train']} -m train.plan --scale 7b"
    assert cmds and all(re.match(r"(env RCEA_SCALE=7b( \w+=\S+)* )?docker compose ", ln) for ln in cmds)
    for ln in cmds:  # run: --scale 7b (or the 7b data paths); up/stop: RCEA_SCALE=7b
        assert "--scale 7b" in ln or ln.startswith("env RCEA_SCALE=7b ") or "results/7b" in ln, ln
        assert "3b" not in ln and "tiny" not in ln, ln
    expected = [
        "docker compose run --rm train python -m rcea.prepare --scale 7b",
        # in the background through training: the queue held open, the base policy's jobs, workers on GPUs 2..4
        # (the rule: the two runs train on GPUs 0 and 1, side by side; --num-workers 3 caps the workers)
        "docker compose run --rm -T infer-cli python -m infer hold --scale 7b &",
        "docker compose run --rm infer-cli python -m infer enqueue --scale 7b --method base --what all &",
        "env RCEA_SCALE=7b NUM_WORKERS=3 INFER_GPU_0=2 INFER_GPU_1=3 INFER_GPU_2=4 docker compose up -d infer-workers &",
        "docker compose run --rm -T train python -m train --method grpo --scale 7b --resume",
        "docker compose run --rm infer-cli python -m infer enqueue --scale 7b --method grpo --what all",
        "docker compose run --rm -T train python -m train --method kl_cov --scale 7b --resume",
        "docker compose run --rm infer-cli python -m infer enqueue --scale 7b --method kl_cov --what all",
        "env RCEA_SCALE=7b NUM_WORKERS=3 INFER_GPU_0=2 INFER_GPU_1=3 INFER_GPU_2=4 docker compose up "
        "--attach-dependencies --abort-on-container-failure infer-workers",
        "docker compose run --rm infer-cli python -m infer status --scale 7b --check",
        "env RCEA_SCALE=7b docker compose --profile judge up -d --wait judge",
        "docker compose run --rm infer-cli python -m infer.labels validity --scale 7b",
        "docker compose run --rm infer-cli python -m infer.labels modes --scale 7b",
        "env RCEA_SCALE=7b docker compose --profile judge stop judge",
        "docker compose run --rm infer-cli python -m infer.audit sample --scale 7b --if-missing",
        "docker compose run --rm aggregate python -m aggregate --input data/infer/7b/tables "
        "--output data/results/7b --scale 7b --if-changed",
        "docker compose run --rm aggregate python -m rcea.publish data/results/7b results/7b"]
    assert cmds == expected


def test_the_stage_list_is_plain_data_for_other_engines():
    stages = study.study_stages("3b", ["grpo", "dapo"], num_workers=2, host_gpus=8)
    assert [s.key for s in stages] == STAGES
    train = stages[1]
    assert [u.name for u in train.units] == ["grpo", "dapo"] and train.parallel == 2
    assert all(isinstance(a, tuple) and all(isinstance(x, str) for x in a) for u in train.units for a in u.commands)
    # 3b: each run is a work unit too, launched as the train container on a GPU of its own (the rule: 0 and 1)
    assert train.gpus == (0, 1) and [u.work for u in train.units] == [TrainUnit(m, "3b", launcher="compose")
                                                                    for m in ("grpo", "dapo")]
    for u in train.units:   # the container's argv is exactly the dry run's (-T: its output goes to the unit's log)
        argv = TrainUnit.command([u.work], "unused", "/nowhere", "unused")
        assert argv == list(u.commands[0]) and argv[:5] == ["docker", "compose", "run", "--rm", "-T"]
        assert u.work.gpu_env == "TRAIN_GPU"
    tiny = study.study_stages("tiny", ["grpo", "dapo", "gtpo"])
    assert tiny[1].parallel == 2 and tiny[1].gpus == ()   # configs/scales/tiny.toml [launch] slots.train
    for u, m in zip(tiny[1].units, ["grpo", "dapo", "gtpo"]):   # tiny: each run is a work unit of the local engine,
        assert u.work == TrainUnit(m, "tiny")                      # the very command the dry run prints
        assert list(u.commands[0][1:]) == u.work.args(None) and u.commands[0][0] == LOCAL["train"]


def test_engines_local_and_ray(dry, capsys):
    with pytest.raises(Exit) as e:
        tasks.study(dry, scale="tiny", methods="grpo", engine="dask")
    assert e.value.code == 2 and "valid choices: local, ray" in e.value.message
    lines = dry_lines(capsys, tasks.study, dry, scale="tiny", methods="grpo,dapo", engine="ray",
                      address="10.0.0.5:6379")
    # train and workers become Ray work units on the cluster; prepare, judge, ... still run here
    assert ("[ray] 2 training run(s), each followed by its measurements as soon as it has finished, as Ray tasks "
            "on 10.0.0.5:6379") in lines
    assert f"{LOCAL['train']} -m rcea.prepare --scale tiny" in lines
    assert not any("enqueue" in ln or " worker " in ln for ln in lines)


def test_banner_says_the_time_spent_and_no_guess_of_the_time_left():
    """Issue 31: extrapolating fixed stage weights said '~5m 43s left' for a run that took 1 min 25 s in all."""
    stages = study.study_stages("tiny", ["grpo"])
    assert study.banner(1, stages, 0.0) == f"\n=== [1/8] {stages[0].title}  (+0s)"
    assert study.banner(2, stages, 32.0) == f"\n=== [2/8] {stages[1].title}  (+32s)"   # rcea.progress's format


def test_study_overrides_reach_every_stage_through_the_environment(dry, monkeypatch, capsys):
    monkeypatch.setenv("RCEA_OVERRIDES", "probe.k=4")
    tasks.study(dry, scale="tiny", methods="grpo", override=["train.max_steps=2"])
    assert os.environ["RCEA_OVERRIDES"] == "train.max_steps=2;probe.k=4"


def test_cli_dry_flag_prints_the_compose_line():
    """The real `invoke --dry` core flag, end to end, from the tools environment."""
    out = subprocess.run([sys.executable, "-m", "invoke", "--dry", "train", "--method", "kl_cov", "--scale", "3b"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[1:] == [f"{LOCAL['train']} -m train.plan --scale 3b",   # no ANSI
                                            "docker compose run --rm train python -m train --method kl_cov --scale 3b"]


def test_tiny_really_runs_locally_not_in_docker():
    c = MockContext(run={f"{LOCAL['train']} -m train --method gtpo --scale tiny": Result("ok")})
    tasks.train(c, method="gtpo", scale="tiny")  # MockContext raises on any other command
    c.run.assert_called_once()


@pytest.mark.parametrize("name,kwargs,option", [
    ("train", {"method": "ppo", "scale": "3b"}, "method"),
    ("train", {"method": "grpo", "scale": "70b"}, "scale"),
    ("infer", {"scale": "3b", "method": "grpo", "what": "everything"}, "what"),
    ("infer", {"scale": "13b"}, "scale"),
    ("workers", {"scale": "3b", "num_workers": 9}, "num-workers"),
    ("workers", {"scale": "tiny", "lease": -5.0}, "lease"),
    ("status", {"scale": "big"}, "scale"),
    ("judge", {"scale": "1b"}, "scale"),
    ("aggregate", {"scale": "x"}, "scale"),
    ("prepare", {"scale": "x"}, "scale"),
    ("build", {"role": "judge"}, "role"),
    ("lock", {"name": "gpu"}, "name"),
    ("bootstrap", {"role": "nope"}, "role"),
    ("demo", {"methods": "grpo,sft"}, "methods"),
    ("study", {"scale": "13b"}, "scale"),
    ("study", {"methods": "grpo,ppo"}, "methods"),
    ("study", {"scale": "3b", "num_workers": 0.5}, "num-workers"),
    ("codebook", {"scale": "2b"}, "scale"),
    ("audit", {"scale": "x", "report": True}, "scale"),
    ("audit", {"scale": "tiny", "serve": True, "port": 70000}, "port"),
    ("train", {"method": "grpo", "scale": "tiny", "override": ["no-equals-sign"]}, "override"),
    ("workers", {"scale": "3b", "num_workers": "0"}, "num-workers"),
    ("workers", {"scale": "tiny", "num_workers": "9"}, "num-workers"),
    ("study", {"scale": "tiny", "num_workers": "0"}, "num-workers"),
])
def test_invalid_arguments_stop_with_the_valid_choices(name, kwargs, option):
    c = MockContext()  # no command may run
    with pytest.raises(Exit) as e:
        getattr(tasks, name)(c, **kwargs)
    assert e.value.code == 2
    assert f"invalid --{option}" in e.value.message
    if option in ("method", "methods"):
        assert "grpo, dapo, clip_cov, kl_cov, ep_grpo, gtpo, archer" in e.value.message
    if option == "scale":
        assert "valid choices: tiny, 3b, 7b" in e.value.message


@pytest.mark.parametrize("task,kwargs,needle", [
    ("train", {"method": "grpo", "scale": "3b", "override": ["train.lr=abc"]},
     "unknown setting 'train.lr'; valid keys in [train]: "),
    ("train", {"method": "grpo", "scale": "tiny", "override": ["train.learning_rate=-1"]},
     "train.learning_rate must be > 0, got -1.0"),
    ("study", {"scale": "7b", "methods": "grpo", "override": ["train.save_steps=0"]},
     "train.save_steps must be >= 1, got 0"),
    ("study", {"scale": "tiny", "override": ["train.max_steps=-5"]}, "train.max_steps must be -1 or >= 1"),
    ("study", {"scale": "tiny", "override": ["train.use_vllm=maybe"]}, "train.use_vllm must be bool"),
])
def test_overrides_are_checked_before_any_process_or_container(monkeypatch, task, kwargs, needle):
    """Checked by the task itself: no command runs (MockContext) and Docker is never asked for."""
    monkeypatch.setattr(shell, "compose_available", lambda: pytest.fail("Docker probed before the check"))
    monkeypatch.setenv("RCEA_OVERRIDES", "")
    with pytest.raises(Exit) as e:
        getattr(tasks, task)(MockContext(), **kwargs)
    assert e.value.code == 2 and e.value.message.startswith("invalid --override: ")
    assert needle in e.value.message and "\n" not in e.value.message


def test_dry_prints_the_overrides_every_process_applies(dry, monkeypatch, capsys):
    monkeypatch.setenv("RCEA_OVERRIDES", "probe.k=4")
    tasks.study(dry, scale="tiny", methods="grpo", override=["train.max_steps=2"])
    out = capsys.readouterr().out.splitlines()
    assert "# overrides for every process (RCEA_OVERRIDES): train.max_steps=2;probe.k=4" in out
    monkeypatch.setenv("RCEA_OVERRIDES", "")
    tasks.train(dry, method="grpo", scale="tiny")
    assert not any("overrides" in ln for ln in capsys.readouterr().out.splitlines())


def test_tiny_needs_no_worker_count_and_num_workers_zero_is_not_eight(dry, capsys, monkeypatch):
    monkeypatch.setenv("NUM_WORKERS", "twelve")  # read for 3b/7b only
    assert dry_lines(capsys, tasks.workers, dry, scale="tiny") == [
        f"{LOCAL['infer']} -m infer worker --scale tiny --until-empty --processes 2 --progress"]
    assert dry_lines(capsys, tasks.workers, dry, scale="tiny", num_workers="3") == [   # processes, as GPUs at 3b
        f"{LOCAL['infer']} -m infer worker --scale tiny --until-empty --processes 3 --progress"]
    with pytest.raises(Exit, match=r"invalid --num-workers '0'; valid choices: 1..8"):
        tasks.workers(dry, scale="7b", num_workers="0")


def test_aggregate_without_docker_says_it_is_cpu_only(monkeypatch):
    monkeypatch.setattr(shell, "compose_available", lambda: False)
    with pytest.raises(Exit) as e:
        tasks.aggregate(MockContext(), scale="7b")
    assert e.value.code == 3 and "CPU only" in e.value.message and "GPU" not in e.value.message
    # the data folder is the host's (one view of the data): the hint runs on it as it is, no copy out of a volume
    assert "-m aggregate --input data/infer/7b/tables --output data/results/7b --scale 7b" in e.value.message
    assert "volume" not in e.value.message


def test_real_scale_without_docker_says_so_and_what_to_run_instead(monkeypatch):
    monkeypatch.setattr(shell, "compose_available", lambda: False)
    with pytest.raises(Exit) as e:
        tasks.train(MockContext(), method="kl_cov", scale="3b")
    assert e.value.code == 3
    assert "no Docker engine or compose plugin" in e.value.message
    assert "invoke train --method kl_cov --scale tiny" in e.value.message


def test_real_scale_with_docker_writes_uid_gid_then_runs(monkeypatch):
    monkeypatch.setattr(shell, "compose_available", lambda: True)
    monkeypatch.setattr(shell, "engine_available", lambda: True)
    written = {}
    monkeypatch.setattr(shell, "write_env_file", lambda values: written.update(values))
    monkeypatch.setattr(shell, "data_folder", lambda: written.setdefault("data_folder", True))   # not the checkout's
    c = MockContext(run={"docker compose run --rm aggregate python -m aggregate --input data/infer/7b/tables "
                         "--output data/results/7b --scale 7b": Result(""),
                         "docker compose run --rm aggregate python -m rcea.publish data/results/7b results/7b": Result("")})
    tasks.aggregate(c, scale="7b")
    assert c.run.call_count == 2
    uid, gid = shell.container_ids()   # this user, or 1000:1000 for root (test_root_runs_the_containers_as_1000)
    assert written == {"UID": str(uid), "GID": str(gid), "data_folder": True}


def test_write_env_file_merges_and_keeps_other_keys(tmp_path):
    env = tmp_path / ".env"
    env.write_text("NUM_WORKERS=4\nUID=0\n")
    shell.write_env_file({"UID": "1234", "GID": "99"}, env)
    assert env.read_text().splitlines() == ["NUM_WORKERS=4", "UID=1234", "GID=99"]


def test_every_task_and_option_has_help():
    found = {n: t for n, t in vars(tasks).items() if type(t).__name__ == "Task"}
    assert {"train", "infer", "workers", "judge", "aggregate", "status", "build", "lock", "test", "demo",
            "doctor", "prepare", "bootstrap", "study", "codebook", "audit"} <= set(found)
    for name, t in found.items():
        assert (t.__doc__ or "").strip(), f"task {name} has no docstring"
        for arg in t.get_arguments():
            assert arg.help, f"invoke {name} --{arg.name.replace('_', '-')} has no help text"
        first = t.__doc__.strip().splitlines()[0]  # what `invoke --list` shows: a whole sentence
        assert first.endswith((".", ".)")), f"invoke --list cuts the help of {name} mid-sentence: {first!r}"


def test_local_command_runs_each_module_in_its_own_environment():
    assert commands.local_command("rcea.prepare", ["--scale", "tiny"]) == \
        [LOCAL["train"], "-m", "rcea.prepare", "--scale", "tiny"]
    assert commands.local_command("infer.labels", ["all"])[0] == LOCAL["infer"]
    assert commands.local_command("aggregate", [])[0] == LOCAL["aggregate"]
    with pytest.raises(KeyError):
        commands.local_command("torch", [])


def test_tasks_py_imports_no_heavy_or_role_package():
    code = ("import sys, tasks, orchestrate.ops.study, orchestrate.ops.doctor; bad = {'torch', 'train', 'infer', 'aggregate', 'vllm', 'transformers'} "
            "& set(sys.modules); sys.exit(', '.join(sorted(bad)) if bad else 0)")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_workers_default_to_num_workers_from_the_environment(capsys, dry, monkeypatch):
    monkeypatch.setenv("NUM_WORKERS", "2")
    assert dry_lines(capsys, tasks.workers, dry, scale="7b") == [
        "env RCEA_SCALE=7b NUM_WORKERS=2 docker compose up -d infer-workers"]
    monkeypatch.setenv("NUM_WORKERS", "twelve")
    with pytest.raises(Exit, match="valid choices: 1..8"):
        tasks.workers(dry, scale="7b")


def test_tasks_py_stays_a_thin_layer():
    assert len((ROOT / "tasks.py").read_text().splitlines()) < 250
    for module in (ROOT / "orchestrate" / "ops").glob("*.py"):
        assert len(module.read_text().splitlines()) <= 400, module


def test_the_literal_invoke_command_works_after_sourcing_scripts_activate():
    """README set-up: `source scripts/activate`, then `invoke ...` as typed (no `scripts/run`)."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV",)}
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"  # no invoke anywhere before activation
    script = ("command -v invoke >/dev/null && exit 9; source scripts/activate 2>/dev/null && "
              "invoke --dry train --method kl_cov --scale 3b")
    r = subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert re.sub(r"\x1b\[[0-9;]*m", "", r.stdout).strip().splitlines()[-1] == \
        "docker compose run --rm train python -m train --method kl_cov --scale 3b"


def test_scripts_run_bootstraps_quietly_when_environments_are_current():
    """`scripts/run` calls `scripts/bootstrap -q`: nothing printed for a current environment (a plain
    `scripts/bootstrap` still says it is current)."""
    import hashlib

    env = ROOT / ".envs" / "aggregate"
    want = hashlib.sha256((ROOT / "lockfiles" / "aggregate.txt").read_bytes()).hexdigest()
    if not (env / ".lock-sha256").exists() or (env / ".lock-sha256").read_text().strip() != want:
        pytest.skip("the aggregate environment is not built from the current lockfile here")
    quiet = subprocess.run(["scripts/bootstrap", "-q", "aggregate"], cwd=ROOT, capture_output=True, text=True)
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
    loud = subprocess.run(["scripts/bootstrap", "aggregate"], cwd=ROOT, capture_output=True, text=True)
    assert loud.stdout == "bootstrap: aggregate environment is current\n"
    assert '"$ROOT/scripts/bootstrap" -q' in (ROOT / "scripts" / "run").read_text()
    # ... and byte-compiled once (its stamp .bytecode follows the lockfile's): a role process loads .pyc files
    # even where none is ever written (PYTHONDONTWRITEBYTECODE=1), instead of compiling its packages each start
    assert (env / ".bytecode").read_text() == (env / ".lock-sha256").read_text()
    pandas = next((env / "lib" / "python3.11" / "site-packages" / "pandas").glob("__pycache__/__init__.*.pyc"))
    probe = subprocess.run([str(env / "bin" / "python"), "-c", "import importlib.util as u, pandas; "
                            "print(u.cache_from_source(pandas.__file__))"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert probe.stdout.strip() == str(pandas)


def test_root_runs_the_containers_as_1000(monkeypatch):
    """The images refuse UID 0 (and root's are built for 1000:1000): .env gets 1000:1000 for root, else the user."""
    from orchestrate.ops import shell

    monkeypatch.setattr(shell.os, "getuid", lambda: 0)
    monkeypatch.setattr(shell.os, "getgid", lambda: 0)
    assert shell.container_ids() == (1000, 1000)
    monkeypatch.setattr(shell.os, "getuid", lambda: 1234)
    monkeypatch.setattr(shell.os, "getgid", lambda: 99)
    assert shell.container_ids() == (1234, 99)


def test_num_workers_means_the_measurement_workers_under_every_engine(dry, capsys):
    """The study's workers stage and the Ray engine's measurement slots take the same count (the tiny scale ran
    2 processes on the queue path and 1 under Ray, and refused --num-workers)."""
    lines = dry_lines(capsys, tasks.study, dry, scale="tiny", methods="grpo", num_workers="3")
    # 3 processes at most (the rule: one run trains, 2 workers measure from the start, the third on its freed slot)
    assert f"{LOCAL['infer']} -m infer worker --scale tiny --until-empty --processes 2 --progress &" in lines
    assert (f"{LOCAL['infer']} -m infer worker --scale tiny --until-empty &   # once training frees a slot and no run "
            "is left to start") in lines
    ray = study.stage_runner("ray", "tiny", ["grpo"], None, 3)
    assert ray.num_workers == 3 and not ray.gpus
    assert study.stage_runner("ray", "3b", ["grpo"]).num_workers == 8 and study.stage_runner("ray", "3b", ["grpo"]).gpus


def test_no_code_outside_configuration_loading_compares_a_scale_name():
    """What differs between scales is a value of configs/scales/*.toml (rcea.launch), never `scale == "tiny"`."""
    pattern = re.compile(r"""[!=]= ?['"]tiny['"]|tiny = """)
    hits = [f"{path.relative_to(ROOT)}:{i}" for folder in ("orchestrate", "rcea", "train", "infer", "aggregate")
            for path in (ROOT / folder).rglob("*.py") for i, line in enumerate(path.read_text().splitlines(), 1)
            if pattern.search(line)]
    hits += [f"tasks.py:{i}" for i, line in enumerate((ROOT / "tasks.py").read_text().splitlines(), 1)
             if pattern.search(line)]
    assert hits == []
