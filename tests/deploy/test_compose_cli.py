"""compose.yaml and compose.cpu.yaml as the real Compose v2 reads them (`docker compose config`, no daemon needed).

Compose is the plugin `scripts/engine` installs (lockfiles/compose.txt); without it these tests are skipped
with that fix. The containers themselves run in tests/e2e/test_rehearsal.py.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKERS = [f"infer-worker-{i}" for i in range(8)]


def compose_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPOSE_") and k not in (
        "RCEA_SCALE", "NUM_WORKERS", "RCEA_OVERRIDES", "INFER_GPU", "JUDGE_GPU", "TRAIN_GPU", "RCEA_DATA",
        "RCEA_CLUSTER_DATA")}
    return {**env, **extra}


@pytest.fixture(scope="module")
def compose():
    try:
        ok = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        pytest.skip("no `docker compose` here: run scripts/engine (installs the Compose plugin)")

    def config(*args, files=("compose.yaml",), **env) -> subprocess.CompletedProcess:
        # the project's .env (a user's NUM_WORKERS, say) stays out unless a test names an env file
        own = [] if "--env-file" in args else ["--env-file", os.devnull]
        cmd = ["docker", "compose", *own, *[a for f in files for a in ("-f", f)], *args]
        return subprocess.run(cmd, cwd=ROOT, env=compose_env(**env), capture_output=True, text=True, timeout=120)

    return config


def services_of(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["services"]


def gpus(svc) -> list[dict]:
    devices = ((svc.get("deploy") or {}).get("resources") or {}).get("reservations", {}).get("devices") or []
    return [d for d in devices if "gpu" in d.get("capabilities", [])]


def started_by_up(compose, *profile, files=("compose.yaml",), **env) -> dict:
    """The services `docker compose [--profile ...] up infer-workers` would start (Compose's own selection:
    `config` with a service name resolves profiles and dependencies exactly as `up` does)."""
    return services_of(compose(*profile, "config", "--format", "json", "infer-workers", files=files, **env))


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_up_infer_workers_starts_only_the_workers_whose_gpus_exist(compose, n):
    """`docker compose up infer-workers` as typed (and Invoke's `--profile infer up ... infer-workers`) on a host
    of n GPUs, NUM_WORKERS=n: the group and workers 0..n-1 on GPUs 0..n-1, no container for a GPU beyond them
    (Docker refuses to start a container whose GPU index does not exist)."""
    for profile in ((), ("--profile", "infer")):
        svcs = started_by_up(compose, *profile, RCEA_SCALE="3b", NUM_WORKERS=str(n))
        assert sorted(svcs) == sorted(["infer-workers", *WORKERS[:n]]), (profile, sorted(svcs))
        assert set(svcs["infer-workers"]["depends_on"]) == set(WORKERS[:n])
        for i, name in enumerate(WORKERS[:n]):
            env = svcs[name]["environment"]
            assert (env["WORKER_RANK"], env["NUM_WORKERS"], env["RCEA_SCALE"]) == (str(i), str(n), "3b")
            assert [d["device_ids"] for d in gpus(svcs[name])] == [[str(i)]]
        assert svcs["infer-workers"]["environment"]["NUM_WORKERS"] == str(n)


def test_up_infer_workers_defaults_to_eight_and_reads_num_workers_from_the_env_file(compose, tmp_path):
    assert sorted(started_by_up(compose)) == sorted(["infer-workers", *WORKERS])
    (tmp_path / "gpus.env").write_text("NUM_WORKERS=4\n")   # what a user writes into .env on a 4-GPU host
    svcs = started_by_up(compose, "--env-file", str(tmp_path / "gpus.env"))
    assert sorted(svcs) == sorted(["infer-workers", *WORKERS[:4]])


def test_a_worker_count_outside_one_to_eight_is_refused_by_compose(compose):
    for bad in ("0", "9", "four"):
        out = compose("config", "--format", "json", "infer-workers", NUM_WORKERS=bad)
        assert out.returncode != 0 and "infer-worker-0" in out.stderr, (bad, out.stderr)


def test_the_cpu_rehearsal_starts_the_same_workers(compose):
    svcs = started_by_up(compose, files=("compose.yaml", "compose.cpu.yaml"), NUM_WORKERS="2")
    assert sorted(svcs) == ["infer-worker-0", "infer-worker-1", "infer-workers"]
    assert not any(gpus(s) for s in svcs.values())


def test_no_profile_starts_workers_without_the_group_and_teardown_sees_all_eight(compose):
    """`docker compose --profile infer up` (no service named) starts no worker at all: only naming the group
    picks the count. `--profile '*'` (what `down` is run with) still loads every worker."""
    assert services_of(compose("--profile", "infer", "config", "--format", "json", NUM_WORKERS="2")) == {}
    out = compose("--profile", "*", "config", "--services", NUM_WORKERS="2")
    assert out.returncode == 0 and set(WORKERS) <= set(out.stdout.split()), out.stderr


def test_the_doctors_fix_for_a_four_gpu_host_starts_four_workers_both_ways(compose, monkeypatch, tmp_path):
    """`invoke doctor` on a host with 4 GPUs and 8 workers asked for names two fixes; each, followed, gives a
    command that Compose resolves to workers 0..3 on GPUs 0..3, and the doctor then passes."""
    import shlex

    from orchestrate.ops import commands, doctor

    facts = {"compose": True, "engine": True, "gpus": ["580.65.06"] * 4, "shm_bytes": 1 << 36,
             "free_bytes": 1 << 40, "data_writable": True, "benchmarks": {}}
    (fail,) = [c for c in doctor.evaluate(facts, commands.check_workers(None, "3b")) if c.name == "gpu count"]
    assert fail.level == "fail" and fail.fix == ("start fewer workers: invoke workers --num-workers 4 "
                                                 "(or NUM_WORKERS=4 in .env)")
    # 1. invoke workers --num-workers 4: the exact command it runs, read by Compose
    argv = commands.workers_command("3b", commands.check_workers("4", "3b"))
    env = dict(a.split("=", 1) for a in argv[1:argv.index("docker")])
    rest = argv[argv.index("up") + 1:]
    assert argv[argv.index("docker"):argv.index("up")] == ["docker", "compose"] and rest == ["-d", "infer-workers"]
    svcs = services_of(compose("config", "--format", "json", rest[-1], **env))
    assert {n: [d["device_ids"] for d in gpus(s)] for n, s in svcs.items()} == {
        "infer-workers": [], **{w: [[str(i)]] for i, w in enumerate(WORKERS[:4])}}, shlex.join(argv)
    # 2. NUM_WORKERS=4 in .env: Invoke (and the doctor) read it as Compose does
    dotenv = tmp_path / ".env"
    dotenv.write_text("UID=1000\nNUM_WORKERS=4\n")
    monkeypatch.setattr(commands, "ENV_FILE", dotenv)
    monkeypatch.delenv("NUM_WORKERS", raising=False)
    assert commands.check_workers(None, "3b") == 4
    (ok,) = [c for c in doctor.evaluate(facts, commands.check_workers(None, "3b")) if c.name == "gpu count"]
    assert ok.level == "ok"
    assert sorted(started_by_up(compose, "--env-file", str(dotenv))) == sorted(["infer-workers", *WORKERS[:4]])


def test_the_infer_device_check_reserves_one_gpu(compose):
    svcs = services_of(compose("config", "--format", "json", "infer-gpu-check", INFER_GPU="3"))
    (req,) = gpus(svcs["infer-gpu-check"])
    assert req["device_ids"] == ["3"] and req["driver"] == "nvidia"
    assert svcs["infer-gpu-check"]["command"] == ["python", "-m", "infer.gpu_check"]
    cli = services_of(compose("config", "--format", "json", "infer-cli"))["infer-cli"]
    assert not gpus(cli)   # the one-off commands' service: the device check there could not see a GPU


def test_the_cpu_override_drops_every_gpu_reservation_and_uses_the_cpu_images(compose):
    files = ("compose.yaml", "compose.cpu.yaml")
    full = services_of(compose("--profile", "*", "config", "--format", "json", files=files))
    base = services_of(compose("--profile", "*", "config", "--format", "json"))
    assert sorted(full) == sorted(base)
    assert [n for n, s in base.items() if gpus(s)] != []          # the GPU file reserves GPUs ...
    assert [n for n, s in full.items() if gpus(s)] == []          # ... the CPU override none
    assert [n for n, s in base.items() if "memlock" in (s.get("ulimits") or {})] != []
    assert [n for n, s in full.items() if s.get("ulimits")] == []  # a host may refuse unlimited memlock
    for name, svc in full.items():   # invoke build --cpu's tags: <tag>-cpu for train and infer
        cpu = not svc["image"].startswith("rcea/aggregate:")
        assert svc["image"] == base[name]["image"] + "-cpu" * cpu, name
    for name in WORKERS:
        assert full[name]["command"][:4] == ["python", "-m", "infer", "worker"]
        assert "--backend" in full[name]["command"] and "vllm" in full[name]["command"]   # auto = HF on CPU
        assert full[name]["environment"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
        # unbound, one thread: vLLM's default pinned every engine to core 0 of 2 (the other one reserved)
        assert (full[name]["environment"]["VLLM_CPU_OMP_THREADS_BIND"], full[name]["environment"]["OMP_NUM_THREADS"]) \
            == ("nobind", "1")
        assert full[name]["environment"]["TORCHDYNAMO_DISABLE"] == "1"   # no Inductor build of the sampler at start
        assert full[name]["environment"]["WORKER_RANK"] == base[name]["environment"]["WORKER_RANK"]
    assert "--dtype bfloat16" in full["judge"]["environment"]["JUDGE_ARGS"]
    assert full["judge"]["environment"]["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert full["judge"]["environment"]["TORCHDYNAMO_DISABLE"] == "1"
    assert full["judge"]["command"] == base["judge"]["command"] == ["python", "-m", "infer.judge_server"]


def test_a_typo_in_the_override_fails_compose(compose, tmp_path):
    """The check above reads what Compose reads: a misspelt key fails it (so a silent no-op cannot pass)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  judge:\n    healthcheck: {intervall: 5s}\n")
    out = compose("config", "-q", files=("compose.yaml", str(bad)))
    assert out.returncode != 0 and "intervall" in out.stderr


def test_a_study_puts_its_workers_on_the_gpus_that_do_not_train(compose):
    """The study starts its measurement workers while it trains, by rcea.launch's rule: on an 8-GPU host, 7 runs
    train on GPUs 0..6 and worker 0 measures on GPU 7 from the start; workers 1..7 start on GPUs 0..6 as training
    frees them. As Compose reads the study's own commands, worker i holds GPU workers[i], no worker started with
    the study holds a training GPU, and each worker's configuration is the same in the command that starts it
    and in the workers stage's `up infer-workers` (which re-attaches to it instead of recreating it mid-batch).
    --num-workers caps the workers. `invoke workers` alone (no training) keeps workers 0..N-1 on GPUs 0..N-1."""
    from orchestrate.ops import commands
    from rcea.launch import launch

    lc = launch("3b")
    for n, runs, first, workers in ((8, 7, 1, (7, 0, 1, 2, 3, 4, 5, 6)), (3, 2, 3, (2, 3, 4)),
                                    (2, 7, 1, (7, 0))):
        place = lc.placement(runs, n, 8)
        assert (place.first, place.workers, place.train) == (first, workers, tuple(range(runs))), (n, runs)
        group = commands.workers_command("3b", n, detach=False, gpus=place.workers)
        env = dict(a.split("=", 1) for a in group[1:group.index("docker")])
        assert env["NUM_WORKERS"] == str(len(workers))
        final = services_of(compose("config", "--format", "json", "infer-workers", **env))
        held = {w: [d["device_ids"] for d in gpus(s)] for w, s in final.items() if w != "infer-workers"}
        assert held == {WORKERS[i]: [[str(g)]] for i, g in enumerate(workers)}, (n, held)
        starts = [lc.study_worker_argv(workers, range(first))] + [lc.study_worker_argv(workers, (i,))
                                                                   for i in range(first, len(workers))]
        for argv in starts:
            env_i = dict(a.split("=", 1) for a in argv[1:argv.index("docker")])
            names = [a for a in argv[argv.index("-d") + 1:] if a != "infer-workers"] or WORKERS[:first]
            svcs = services_of(compose("config", "--format", "json", *argv[argv.index("-d") + 1:], **env_i))
            for name in names:   # the very configuration the workers stage's `up` reads: no recreation
                assert svcs[name] == final[name], name
        assert not {str(g) for g in workers[:first]} & {str(g) for g in place.train}
    argv = commands.workers_command("3b", 2)   # invoke workers --num-workers 2: defaults, no variable set
    assert not any(a.startswith("INFER_GPU_") for a in argv)


def test_compose_puts_the_hand_started_workers_off_the_training_gpu(compose):
    """Issue 38: `invoke workers` by hand while training runs on GPU 0 (tests/deploy/test_hand_workers.py), read
    by Compose: workers 0..2 hold GPUs 1..3, none holds the training GPU 0."""
    from orchestrate.ops import commands

    argv = commands.workers_command("3b", 3, gpus=commands.hand_worker_gpus("3b", 3, {0}, 8))
    env = dict(a.split("=", 1) for a in argv[1:argv.index("docker")])
    svcs = services_of(compose("config", "--format", "json", "infer-workers", **env))
    held = {w: [d["device_ids"] for d in gpus(s)] for w, s in svcs.items() if w != "infer-workers"}
    assert held == {WORKERS[0]: [["1"]], WORKERS[1]: [["2"]], WORKERS[2]: [["3"]]}, held


@pytest.mark.parametrize("files", [("compose.yaml",), ("compose.yaml", "compose.cpu.yaml")])
def test_every_service_sees_the_hosts_data_folder_as_a_bind_mount(compose, tmp_path, files):
    """As Compose resolves it: $RCEA_DATA (else the project's ./data) bound at /workspace/data in every service, the
    GPU file and its CPU override alike; the only named volumes left are the caches: models and vLLM's compiles."""
    for env, source in (({"RCEA_DATA": str(tmp_path)}, str(tmp_path)), ({}, str(ROOT / "data"))):
        out = compose("--profile", "*", "config", "--format", "json", files=files, **env)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout)
        assert set(doc.get("volumes") or {}) == {"hf-cache", "vllm-cache"}
        for name, svc in doc["services"].items():
            data = [(v["type"], v["source"]) for v in svc["volumes"] if v["target"] == "/workspace/data"]
            assert data == [("bind", source)], (name, data)
