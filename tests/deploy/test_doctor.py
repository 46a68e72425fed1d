"""`invoke doctor`: each failing check names its fix; missing Docker/GPU only fails with --strict."""
from __future__ import annotations

import pytest
from invoke import MockContext
from invoke.exceptions import Exit

import tasks
from orchestrate.ops import doctor

GiB = 2**30
SHIPPED = {"math500": 500, "aime24": 30, "aime25": 30, "amc23": 40, "minerva_math": 272}  # mathdata/PROVENANCE.md
GPU_HOST = {"compose": True, "engine": True, "buildkit": True, "gpus": ["580.65.06"] * 8, "shm_bytes": 64 * GiB,
            "free_bytes": 500 * GiB, "data_writable": True, "benchmarks": dict(SHIPPED)}
NO_GPU_LAPTOP = {"compose": False, "engine": False, "buildkit": None, "gpus": None, "shm_bytes": 8 * GiB,
                 "free_bytes": 50 * GiB, "data_writable": True, "benchmarks": dict(SHIPPED)}


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_ready_gpu_host_passes_everything():
    checks = doctor.evaluate(GPU_HOST, 8, 100, volumes_ok=True)
    assert [c.name for c in checks if c.level != "ok"] == []
    assert {"docker", "driver (train image)", "driver (infer image)", "gpu count", "/dev/shm", "disk",
            "volumes", "benchmarks"} == set(by_name(checks))


def test_driver_older_than_580_fails_the_infer_image_only():
    checks = by_name(doctor.evaluate({**GPU_HOST, "gpus": ["570.124.06"] * 8}, 8, 100, True))
    assert checks["driver (train image)"].level == "ok"
    infer = checks["driver (infer image)"]
    assert infer.level == "fail" and "580" in infer.detail and "upgrade the NVIDIA driver to >= 580" in infer.fix


def test_fewer_gpus_than_workers_says_how_many_to_start():
    gpu_count = by_name(doctor.evaluate({**GPU_HOST, "gpus": ["580.1"] * 4}, 8, 100, True))["gpu count"]
    assert gpu_count.level == "fail"
    assert "invoke workers --num-workers 4" in gpu_count.fix
    assert by_name(doctor.evaluate({**GPU_HOST, "gpus": ["580.1"] * 4}, 4, 100, True))["gpu count"].level == "ok"


def test_an_engine_whose_clients_cannot_use_buildkit_warns_with_the_fix():
    checks = by_name(doctor.evaluate({**GPU_HOST, "buildkit": False}, 8, 100, True))
    assert checks["image builds"].level == "warn" and "buildx" in checks["image builds"].fix
    assert checks["docker"].level == "ok"


def test_small_shm_low_disk_and_unwritable_volumes_fail_with_fixes():
    checks = by_name(doctor.evaluate({**GPU_HOST, "shm_bytes": 64 * 2**20, "free_bytes": 2 * GiB}, 8, 100, False))
    assert checks["/dev/shm"].level == "fail" and "ipc: host" in checks["/dev/shm"].fix
    assert checks["disk"].level == "fail" and "free space" in checks["disk"].fix
    assert checks["volumes"].level == "fail" and "chown" in checks["volumes"].fix


def test_no_docker_no_gpu_is_reported_as_warnings_with_what_to_do():
    checks = by_name(doctor.evaluate(NO_GPU_LAPTOP, 8, 100))
    assert checks["docker"].level == "warn" and "no Docker engine" in checks["docker"].detail
    assert "tiny" in checks["docker"].fix and "scripts/engine" in checks["docker"].fix
    assert "image builds" not in checks  # nothing to say about builds without an engine
    assert checks["gpu"].level == "warn" and "580" in checks["gpu"].fix
    assert checks["disk"].level == "warn"  # enough for tiny, not for 3b/7b
    assert "the containers' view not checked" in checks["volumes"].detail


@pytest.mark.parametrize("strict,raises", [(False, False), (True, True)])
def test_exit_status_semantics(monkeypatch, capsys, strict, raises):
    monkeypatch.setattr(doctor, "gather_facts", lambda: dict(NO_GPU_LAPTOP))
    if raises:
        with pytest.raises(Exit) as e:
            tasks.doctor(MockContext(), strict=True)
        assert e.value.code == 1 and "docker" in e.value.message and "gpu" in e.value.message
    else:
        tasks.doctor(MockContext(), strict=strict)
    out = capsys.readouterr().out
    assert "[WARN] docker: no Docker engine" in out and "fix: " in out


def test_a_real_failure_fails_even_without_strict(monkeypatch):
    monkeypatch.setattr(doctor, "gather_facts", lambda: {**NO_GPU_LAPTOP, "shm_bytes": 32 * 2**20})
    with pytest.raises(Exit) as e:
        tasks.doctor(MockContext())
    assert e.value.code == 1 and "/dev/shm" in e.value.message


def test_gather_facts_on_this_machine_has_every_key():
    facts = doctor.gather_facts()
    assert set(facts) == set(GPU_HOST)
    assert facts["free_bytes"] > 0
    assert facts["benchmarks"] == SHIPPED  # the files of mathdata/ load with their documented counts


def test_a_missing_or_short_benchmark_file_fails_with_the_restore_fix():
    broken = {**SHIPPED, "aime25": 29, "amc23": "missing data file mathdata/benchmarks/amc23.jsonl"}
    check = by_name(doctor.evaluate({**GPU_HOST, "benchmarks": broken}, 8, 100, True))["benchmarks"]
    assert check.level == "fail" and "aime25: 29" in check.detail and "amc23: missing" in check.detail
    assert "math500" not in check.detail and "git checkout -- mathdata" in check.fix
    assert by_name(doctor.evaluate(GPU_HOST, 8, 100, True))["benchmarks"].level == "ok"
