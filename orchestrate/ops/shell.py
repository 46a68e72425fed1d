"""Running commands from the project root: Invoke's dry run, side-by-side runs with logs, Docker probes."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from invoke.exceptions import Exit

from rcea.progress import duration

ROOT = Path(__file__).resolve().parents[2]


def sh(argv) -> str:
    return shlex.join(argv)


def is_dry(c) -> bool:
    return bool(c.config.run.dry)


def run_all(c, commands, **kw):
    """Run (or, under ``invoke --dry``, print) each argv from the project root."""
    os.chdir(ROOT)  # commands use project-relative paths, like .envs/train/bin/python
    if is_dry(c) and not sys.stdout.isatty():
        kw.setdefault("echo_format", "{command}")  # Invoke's bold white is for terminals, not for pipes
    return [c.run(sh(argv), **kw) for argv in commands]


def _probe(argv) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def compose_available() -> bool:
    return _probe(["docker", "compose", "version"])


def engine_available() -> bool:
    return _probe(["docker", "info", "--format", "{{.ServerVersion}}"])


def require_compose(c, what: str, tiny_hint: str, gpu: bool = True):
    """Real scales need Docker with the compose plugin and an engine; say so, and what to run instead.
    `gpu=False`: the step is CPU only and runs in a container because the scale's data is in its volume."""
    if is_dry(c):
        return
    if not compose_available() or not engine_available():
        where = ("runs in a GPU container" if gpu else
                 "is CPU only; it runs in its container because this scale's data lives in the Docker volume")
        host = ("on a GPU host with Docker + the NVIDIA container toolkit" if gpu else "on the host holding "
                "the data volume, with Docker")
        raise Exit(f"{what} at this scale {where}, but this machine has no Docker engine "
                   f"or compose plugin (`docker compose version` / `docker info` failed).\n"
                   f"  Instead: {tiny_hint}\n"
                   f"  or {host} (check it with `invoke doctor{' --strict' if gpu else ''}`).", code=3)
    uid, gid = container_ids()
    write_env_file({"UID": str(uid), "GID": str(gid)})


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


def _read_from(path: Path, offset: int) -> str:
    with path.open("rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")


def _log_name(argv) -> str:
    """`train-grpo-tiny` for `python -m train --method grpo --scale tiny`; a plain program: its name."""
    rest = argv[argv.index("-m") + 1:] if "-m" in argv else [os.path.basename(argv[0])]
    return "-".join(a for a in rest if not a.startswith("-"))[:80].replace("/", "_")


class _Slot:
    """One running unit: its commands run one after another, all logging to one file (appended)."""

    def __init__(self, commands, log_dir: Path):
        self.commands, self.t0 = list(commands), time.monotonic()
        self.log = log_dir / f"{_log_name(self.commands[0])}.log"
        self.start_offset, self.proc, self.failed = None, None, None

    def next(self) -> bool:
        """Start the next command; False when none is left."""
        if not self.commands:
            return False
        argv = self.commands.pop(0)
        with self.log.open("ab") as fh:  # appended: a rerun keeps the earlier runs' logs
            fh.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {sh(argv)}\n".encode())
            fh.flush()
            if self.start_offset is None:
                self.start_offset = fh.tell()
            self.proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT)
        self.argv, self.t0 = argv, time.monotonic()
        print(f"  started: {sh(argv)}  (log: {self.log})", flush=True)
        return True


def run_side_by_side(c, units, log_dir: Path, jobs: int = 2) -> None:
    """Run units (each an argv, or a list of argvs run in turn) `jobs` at a time, each logging to its own
    file; a unit stops at its first failing command; at the end, show the first failure's log tail."""
    units = [[u] if u and isinstance(u[0], str) else list(u) for u in units]
    if is_dry(c):
        run_all(c, [argv for u in units for argv in u])
        return
    os.chdir(ROOT)
    log_dir.mkdir(parents=True, exist_ok=True)
    waiting, running, failed = [_Slot(u, log_dir) for u in units], [], []
    while waiting or running:
        while waiting and len(running) < jobs:
            slot = waiting.pop(0)
            slot.next()
            running.append(slot)
        time.sleep(0.2)
        for slot in [s for s in running if s.proc.poll() is not None]:
            code = slot.proc.returncode
            notes = [ln for ln in _read_from(slot.log, slot.start_offset).splitlines() if ln.startswith("[train]")]
            status = "done" if code == 0 else f"FAILED (exit {code})"
            print(f"  {status} in {duration(time.monotonic() - slot.t0)}: {sh(slot.argv)}"
                  + "".join(f"\n    {ln}" for ln in notes[-2:]), flush=True)
            if code != 0:
                failed.append(slot)
            if code != 0 or not slot.next():
                running.remove(slot)
    if failed:
        slot = failed[0]
        lines = _read_from(slot.log, slot.start_offset).splitlines()
        raise Exit("\n".join(lines[-40:]) + f"\n\n{len(failed)} of {len(units)} commands failed; first: "
                   f"{sh(slot.argv)}\nfull log: {slot.log}", code=1)
