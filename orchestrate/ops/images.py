"""`invoke build`: the image builds (BuildKit), GPU or CPU, on the public bases or scripts/engine's local ones.

One Dockerfile per role; build arguments choose the base (CUDA_IMAGE / PYTHON_IMAGE, UV_IMAGE) and the
lockfile (LOCK). The CPU images install the CPU lockfiles; their tag carries `-cpu`. A proxy's CA bundle goes
in as the BuildKit secret `ca_bundle` (never a layer), a mirror as PYPI_INDEX_URL, and wheels that no index
serves (the CPU torch wheel) through docker/wheels/, copied there from pip's find-links. Pure builders are
tested in tests/deploy/test_images.py; the builds themselves in tests/deploy/test_containers.py.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from invoke.exceptions import Exit

from orchestrate.ops.lockfiles import find_links, read_pins
from orchestrate.ops.shell import ROOT, container_ids, is_dry, run_all

LOCAL_BASE = "rcea/base:bookworm"   # scripts/engine: Debian 12 minbase + python3 (3.11), docker import
LOCAL_UV = "rcea/uv:0.13.9"         # scripts/engine: the uv binary of lockfiles/tools.txt
BASE_ARG = {"train": "CUDA_IMAGE", "infer": "CUDA_IMAGE", "aggregate": "PYTHON_IMAGE"}
GPU_LOCK = {"train": "train", "infer": "infer", "aggregate": "aggregate"}
CPU_LOCK = {"train": "train-cpu", "infer": "infer-vllm-cpu", "aggregate": "aggregate"}
WHEELS = ROOT / "docker" / "wheels"
BUILD_ROLES = ("aggregate", "train", "infer")
BUILD_HELP = {"role": "image to build: train, infer, aggregate or all",
              "cpu": "the CPU images (CI, the Compose rehearsal): same Dockerfiles, the CPU lockfiles, tag <tag>-cpu",
              "base": "auto (scripts/engine's local Debian base where it was built, else the public one), public, "
                      "or local"}


def tag() -> str:
    return os.environ.get("RCEA_TAG") or "0.1.0"


def image_name(role: str, cpu: bool = False) -> str:
    """compose.yaml's names (rcea/<role>:<tag>); a CPU build of train/infer adds `-cpu` to the tag."""
    return f"rcea/{role}:{tag()}" + ("-cpu" if cpu and role != "aggregate" else "")


def lock_of(role: str, cpu: bool) -> str:
    return (CPU_LOCK if cpu else GPU_LOCK)[role]


def ca_bundle() -> str | None:
    """A CA bundle for downloads inside the build: $RCEA_CA_BUNDLE, else $SSL_CERT_FILE, else none."""
    for var in ("RCEA_CA_BUNDLE", "SSL_CERT_FILE"):
        path = os.environ.get(var)
        if path:
            if not Path(path).is_file():
                raise Exit(f"{var}={path} is not a file; point it at a PEM CA bundle or unset it", code=2)
            return path
    return None


def build_argv(role: str, cpu: bool, local_base: bool, commit: str, ids=(1000, 1000),
               ca: str | None = None, index_url: str | None = None, network: str = "host",
               wandb: bool = False) -> list[str]:
    """The `docker build` arguments (after the client) of one image. Pure. `wandb`: the train image's optional
    W&B extra (WITH_WANDB=1, lockfiles/train-wandb.txt)."""
    argv = ["build", "-f", f"docker/{role}.Dockerfile", "-t", image_name(role, cpu),
            "--build-arg", f"LOCK={lock_of(role, cpu)}", "--build-arg", f"RCEA_GIT_COMMIT={commit}",
            "--build-arg", f"APP_UID={ids[0]}", "--build-arg", f"APP_GID={ids[1]}"]
    if wandb and role == "train":
        argv += ["--build-arg", "WITH_WANDB=1"]
    if local_base:
        argv += ["--build-arg", f"{BASE_ARG[role]}={LOCAL_BASE}", "--build-arg", f"UV_IMAGE={LOCAL_UV}"]
    if index_url:
        argv += ["--build-arg", f"PYPI_INDEX_URL={index_url}"]
    if ca:
        argv += ["--secret", f"id=ca_bundle,src={ca}"]
    if network:
        argv += ["--network", network]
    return argv + ["."]


def wheels_for(lock_text: str, dirs) -> list[Path]:
    """Wheels in the find-links folders that the lock pins (name and version, e.g. torch 2.13.0+cpu)."""
    pins = read_pins(lock_text)
    found = []
    for d in dirs:
        for whl in sorted(Path(d).glob("*.whl")) if Path(d).is_dir() else []:
            name, version = whl.name.split("-")[:2]
            if pins.get(re.sub(r"[-_.]+", "-", name).lower()) == version:
                found.append(whl)
    return found


def stage_wheels(lock: str, dirs=None, dest: Path = WHEELS) -> list[str]:
    """Make docker/wheels/ hold exactly the find-links wheels this lock pins (copied once, kept while equal)."""
    wanted = wheels_for((ROOT / "lockfiles" / f"{lock}.txt").read_text(), find_links() if dirs is None else dirs)
    names = {w.name for w in wanted}
    for old in dest.glob("*.whl"):
        if old.name not in names:
            old.unlink()
    for whl in wanted:
        target = dest / whl.name
        if not target.exists() or target.stat().st_size != whl.stat().st_size:
            shutil.copy2(whl, target)
    return sorted(names)


def _version(cli: str) -> str | None:
    try:
        out = subprocess.run([cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def buildkit_client() -> tuple[list[str], dict]:
    """A Docker client that builds with BuildKit (RUN --mount, secrets): `docker` with the buildx plugin,
    else a client older than 23 with BuildKit built in (Debian 12's docker.io, /usr/bin/docker)."""
    if subprocess.run(["docker", "buildx", "version"], capture_output=True).returncode == 0:
        return ["docker"], {}
    for cli in ("docker", "/usr/bin/docker"):
        v = _version(cli)
        if v and v.split(".")[0].isdigit() and int(v.split(".")[0]) < 23:
            return [cli], {"DOCKER_BUILDKIT": "1"}
    raise Exit("no Docker client here builds with BuildKit: install the buildx plugin (Docker's "
               "docker-buildx-plugin) or Debian's docker.io client (scripts/engine does that)", code=3)


def use_local_base(role: str, base: str) -> bool:
    """--base auto: the local base when scripts/engine built it (no registry answered) and the public one is
    not already here."""
    if base != "auto":
        return base == "local"
    public = re.search(rf"ARG {BASE_ARG[role]}=(\S+)", (ROOT / "docker" / f"{role}.Dockerfile").read_text())
    return image_id(LOCAL_BASE) is not None and not (public and image_id(public.group(1)) is not None)


def image_id(ref: str) -> str | None:
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", ref], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 else None


def drop_replaced(old_id: str | None, ref: str) -> None:
    """After a rebuild, remove the image the tag named before if nothing names it now (no dangling images)."""
    if old_id and image_id(ref) != old_id:
        tags = subprocess.run(["docker", "image", "inspect", "-f", "{{len .RepoTags}}", old_id],
                              capture_output=True, text=True).stdout.strip()
        if tags == "0":
            subprocess.run(["docker", "image", "rm", old_id], capture_output=True)


def engine_lock():
    """The host's engine lock (scripts/engine's): one set-up or build at a time, so a test's own build waits for
    scripts/test's background one and then finds every layer cached, instead of building beside it."""
    import fcntl

    path = os.environ.get("RCEA_ENGINE_LOCK") or os.path.join(os.environ.get("TMPDIR") or "/tmp", "rcea-engine.lock")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def build_images(c, roles, cpu: bool, base: str) -> None:
    """`invoke build`: per image, stage the find-links wheels its lock pins, build, drop the replaced image."""
    dry = is_dry(c)
    lock = None if dry else engine_lock()
    try:
        _build_images(c, roles, cpu, base, dry)
    finally:
        if lock is not None:
            os.close(lock)


def _build_images(c, roles, cpu: bool, base: str, dry: bool) -> None:
    from rcea.provenance import git_commit

    client, env = (["docker"], {}) if dry else buildkit_client()
    for r in roles:
        lock, name = lock_of(r, cpu), image_name(r, cpu)
        if not dry:
            print(f"# docker/wheels: {', '.join(stage_wheels(lock)) or 'none needed'} for lockfiles/{lock}.txt")
        local = base == "local" if dry else use_local_base(r, base)
        argv = build_argv(r, cpu, local, git_commit(), container_ids(), ca_bundle(), os.environ.get("RCEA_INDEX_URL"),
                          os.environ.get("RCEA_BUILD_NETWORK", "host"), os.environ.get("WITH_WANDB") == "1")
        old = None if dry else image_id(name)
        run_all(c, [client + argv], env=env)
        if not dry:
            drop_replaced(old, name)
