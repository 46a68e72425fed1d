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
        "RCEA_SCALE", "NUM_WORKERS", "RCEA_OVERRIDES", "INFER_GPU", "JUDGE_GPU", "TRAIN_GPU")}
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
        cmd = ["docker", "compose", *[a for f in files for a in ("-f", f)], *args]
        return subprocess.run(cmd, cwd=ROOT, env=compose_env(**env), capture_output=True, text=True, timeout=120)

    return config


def services_of(out: subprocess.CompletedProcess) -> dict:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["services"]


def gpus(svc) -> list[dict]:
    devices = ((svc.get("deploy") or {}).get("resources") or {}).get("reservations", {}).get("devices") or []
    return [d for d in devices if "gpu" in d.get("capabilities", [])]


def test_up_infer_workers_names_a_service_that_brings_the_eight_workers(compose):
    """`docker compose up infer-workers` (no --profile): naming the group selects it and its eight workers."""
    svcs = services_of(compose("config", "--format", "json", "infer-workers", RCEA_SCALE="3b", NUM_WORKERS="2"))
    assert sorted(svcs) == sorted(["infer-workers", *WORKERS])
    assert set(svcs["infer-workers"]["depends_on"]) == set(WORKERS)
    for i, name in enumerate(WORKERS):
        env = svcs[name]["environment"]
        assert (env["WORKER_RANK"], env["NUM_WORKERS"], env["RCEA_SCALE"]) == (str(i), "2", "3b")
        assert [d["device_ids"] for d in gpus(svcs[name])] == [[str(i)]]
    assert svcs["infer-workers"]["environment"]["NUM_WORKERS"] == "2"


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
        assert full[name]["environment"]["WORKER_RANK"] == base[name]["environment"]["WORKER_RANK"]
    assert "--dtype bfloat16" in full["judge"]["environment"]["JUDGE_ARGS"]
    assert full["judge"]["command"] == base["judge"]["command"] == ["python", "-m", "infer.judge_server"]


def test_a_typo_in_the_override_fails_compose(compose, tmp_path):
    """The check above reads what Compose reads: a misspelt key fails it (so a silent no-op cannot pass)."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("services:\n  judge:\n    healthcheck: {intervall: 5s}\n")
    out = compose("config", "-q", files=("compose.yaml", str(bad)))
    assert out.returncode != 0 and "intervall" in out.stderr
