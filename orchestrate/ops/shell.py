"""Running commands from the project root: Invoke's dry run, Docker probes, .env."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

from invoke.exceptions import Exit

from orchestrate.ops.interrupt import guard


ROOT = Path(__file__).resolve().parents[2]


def sh(argv) -> str:
    return shlex.join(argv)


def share_overrides(c, overrides) -> None:
    """Overrides reach every process of a pipeline (and, through compose.yaml, every container)."""
    shared = [o for o in os.environ.get("RCEA_OVERRIDES", "").split(";") if o.strip()]
    os.environ["RCEA_OVERRIDES"] = ";".join([*overrides, *shared])
    say_overrides(c)


def say_overrides(c) -> None:
    """Under `--dry`, the overrides every process will apply (they travel in $RCEA_OVERRIDES, not in argv)."""
    if is_dry(c) and os.environ.get("RCEA_OVERRIDES", "").strip(";"):
        print(f"# overrides for every process (RCEA_OVERRIDES): {os.environ['RCEA_OVERRIDES']}")


def is_dry(c) -> bool:
    return bool(c.config.run.dry)


def run_all(c, commands, **kw):
    """Run (or, under ``invoke --dry``, print) each argv from the project root."""
    os.chdir(ROOT)  # commands use project-relative paths, like .envs/train/bin/python
    if is_dry(c) and not sys.stdout.isatty():
        kw.setdefault("echo_format", "{command}")  # Invoke's bold white is for terminals, not for pipes
    # Ctrl-C / SIGTERM: every child ends, one line, exit 130 / 143; an interactive command (a terminal of its
    # own, like the audit page's server) gets Ctrl-C itself and stops as it does
    with nullcontext() if kw.get("pty") else guard():
        return [c.run(sh(argv), **kw) for argv in commands]


def _probe(argv) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def training_gpus() -> set[int] | None:
    """The host GPUs that running training containers of this project name in their GPU requests (Compose's
    labels: project rcea, service train), an empty set for ones that name none; None when no training
    container runs or Docker cannot say (no engine)."""
    def out(argv) -> str:
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return ""
        return res.stdout if res.returncode == 0 else ""

    ids = out(["docker", "ps", "-q", "--filter", "label=com.docker.compose.project=rcea",
               "--filter", "label=com.docker.compose.service=train"]).split()
    if not ids:
        return None
    fmt = "{{range .HostConfig.DeviceRequests}}{{range .DeviceIDs}}{{.}} {{end}}{{end}}"
    return {int(g) for g in out(["docker", "inspect", "--format", fmt, *ids]).split() if g.isdigit()}


def host_gpu_count() -> int | None:
    """GPUs on this host (nvidia-smi -L), None when it cannot say."""
    try:
        res = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return len([ln for ln in res.stdout.splitlines() if ln.startswith("GPU ")]) if res.returncode == 0 else None


def compose_available() -> bool:
    return _probe(["docker", "compose", "version"])


def engine_available() -> bool:
    return _probe(["docker", "info", "--format", "{{.ServerVersion}}"])


def require_compose(c, what: str, tiny_hint: str, gpu: bool = True, state: bool = True):
    """Real scales need Docker with the compose plugin and an engine; say so, and what to run instead.
    `gpu=False`: the step is CPU only; it runs in its role's container, as every command of the scale does.
    `state`: the containers share the host's data folder (made here: `data_folder`)."""
    if is_dry(c):
        return
    if not compose_available() or not engine_available():
        where = "runs in a GPU container" if gpu else "is CPU only; it runs in its role's container at this scale"
        host = "on a GPU host with Docker + the NVIDIA container toolkit" if gpu else "on a host with Docker"
        raise Exit(f"{what} at this scale {where}, but this machine has no Docker engine "
                   f"or compose plugin (`docker compose version` / `docker info` failed).\n"
                   f"  Instead: {tiny_hint}\n"
                   f"  or {host} (check it with `invoke doctor{' --strict' if gpu else ''}`).", code=3)
    uid, gid = container_ids()
    write_env_file({"UID": str(uid), "GID": str(gid)})
    if state:
        data_folder()


def data_folder() -> Path:
    """The host's data folder, which compose.yaml bind-mounts into every container at /workspace/data (one view
    of the data: the driver here reads every output a container writes): $RCEA_DATA, else ./data, with its state
    folder (the study's one state store, rcea.layout.state_path) and the results folder ($RCEA_RESULTS, else
    ./results, the aggregate container's). Made here as this user, so the files stay this user's (the
    containers run as UID:GID, the images' APP_UID:APP_GID); Docker would make a missing one as root. Root: the
    containers run as 1000:1000 (`container_ids`), so whatever root made in the data folder is given to them
    (`give_to_containers`). $RCEA_DATA is made absolute, so Compose reads it as a folder, not a volume's name."""
    from rcea.paths import data_dir

    data = data_dir()   # resolved as the driver resolves it, so both sides name one folder
    if "RCEA_DATA" in os.environ:
        os.environ["RCEA_DATA"] = str(data)
    results = ROOT / os.environ.get("RCEA_RESULTS", "results")
    for folder in (data, data / "state", results):
        bind_source(folder)
        if os.getuid() != 0 and not os.access(folder, os.W_OK):   # e.g. made by Docker as root for a bare `up`
            raise Exit(f"the folder {folder} is not writable by this user, nor by the containers that run as it: "
                       f"sudo chown -R {os.getuid()}:{os.getgid()} {folder}", code=2)
    if os.getuid() == 0:
        give_to_containers(data)
    return data


def give_to_containers(folder: Path) -> int:
    """Root only: every file and folder under `folder` that root owns goes to the containers' user (they write
    anywhere in the data folder: a run folder under train/, made by a tiny study as root, say); returns how
    many. Others' files are left as they are."""
    ids, n = container_ids(), 0
    for path in (folder, *folder.rglob("*")):
        try:
            if path.lstat().st_uid == 0:
                os.lchown(path, *ids)
                n += 1
        except FileNotFoundError:   # removed meanwhile (a unit's temporary file)
            continue
    return n


def bind_source(folder: Path, containers: bool = True) -> Path:
    """A host folder the containers write through a bind mount, made here as this user (Docker would make a
    missing one as root); when this is root and `containers`, given to the containers' user."""
    folder.mkdir(parents=True, exist_ok=True)
    if containers and os.getuid() == 0:
        os.chown(folder, *container_ids())
    return folder


def container_ids() -> tuple[int, int]:
    """Who the containers run as: this user (bind mounts and the volume stay writable for them), or 1000:1000
    for root (the images refuse UID 0; `invoke build` builds root's images for 1000:1000)."""
    uid, gid = os.getuid(), os.getgid()
    return (uid, gid) if uid != 0 else (1000, 1000)


def write_env_file(values: dict, path: Path | None = None) -> Path:
    """Merge ``values`` into .env (read by Compose for `user: ${UID}:${GID}` and the build args)."""
    path = path or ROOT / ".env"
    lines = path.read_text().splitlines() if path.exists() else []
    keep = [ln for ln in lines if ln.split("=", 1)[0].strip() not in values]
    path.write_text("\n".join(keep + [f"{k}={v}" for k, v in values.items()]) + "\n")
    return path
