"""Issue 38: vLLM's compile cache (torch.compile graphs, Inductor and Triton kernels under VLLM_CACHE_ROOT) outlives
the throwaway containers. Before, it lived in each container's home folder and every engine compiled again.
compose.yaml gives every service that runs vLLM (colocated training, the workers, the judge, the inference device
check) its own folder in the named volume `vllm-cache`; the images create the mount point as the app user, so
the volume is writable."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VLLM_SERVICES = ["train", *[f"infer-worker-{i}" for i in range(8)], "judge", "infer-gpu-check"]


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def test_every_vllm_service_keeps_its_compile_cache_in_the_named_volume(compose):
    assert "vllm-cache" in compose["volumes"]
    roots = {}
    for name in VLLM_SERVICES:
        svc = compose["services"][name]
        mounts = dict(v.rsplit(":", 1) for v in svc["volumes"])
        assert mounts.get("vllm-cache") == "/cache/vllm", name
        roots[name] = svc["environment"]["VLLM_CACHE_ROOT"]
        assert roots[name] == f"/cache/vllm/{name}", name   # a folder of its own: no two engines write one
    assert len(set(roots.values())) == len(VLLM_SERVICES)


@pytest.mark.parametrize("role", ["train", "infer"])
def test_the_images_make_the_cache_mount_point_the_app_users(role):
    """A named volume starts as a copy of the image's folder at its mount point (owner included); without that
    folder Docker makes a root-owned one, which the containers (UID:GID, never root) could not write."""
    text = (ROOT / "docker" / f"{role}.Dockerfile").read_text()
    mkdir = [ln for ln in text.splitlines() if "mkdir -p" in ln and "/cache/hf" in ln]
    assert mkdir and "/cache/vllm" in mkdir[0].split(), mkdir
    assert 'chown -R "${APP_UID}:${APP_GID}" /workspace /cache' in text


def test_compose_resolves_the_cache_volume_for_the_workers():
    """As Compose itself reads the file (skipped without the Compose plugin)."""
    try:
        out = subprocess.run(["docker", "compose", "--env-file", "/dev/null", "-f", "compose.yaml", "--profile", "*",
                              "config", "--format", "json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("no `docker compose` here: run scripts/engine (installs the Compose plugin)")
    if out.returncode != 0 and "is not a docker command" in out.stderr:
        pytest.skip("no `docker compose` here: run scripts/engine (installs the Compose plugin)")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert "vllm-cache" in doc["volumes"]
    for name in VLLM_SERVICES:
        svc = doc["services"][name]
        cache = [(v["type"], v["source"]) for v in svc["volumes"] if v["target"] == "/cache/vllm"]
        assert cache == [("volume", "vllm-cache")], (name, cache)
        assert svc["environment"]["VLLM_CACHE_ROOT"] == f"/cache/vllm/{name}", name
