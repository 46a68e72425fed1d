"""The artifact store: atomic writes, per-artifact manifests, skip-if-complete.

Where each artifact lives under the data folder: rcea/layout.py (the one module of paths).

Every artifact `X` has a manifest `X.manifest.json` written after it; an artifact counts as complete
only when both exist, so a step killed halfway is redone and a finished one is skipped.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

from rcea.integrity import (DAMAGED, MANIFEST_SUFFIX, TEMP_SUFFIX, damage_fix, damaged_files,  # noqa: F401
                            file_record, folder_records, is_temp, manifest_path, read_manifest, verify_checkpoint)
# (the manifest's names and what it records: rcea/integrity.py; re-exported, the store's readers import them here)


def current_umask() -> int:
    """The process umask, read without changing it where Linux reports it (os.umask is set-and-get,
    which would race with threads creating files in between)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def publish(tmp: str | Path, path: str | Path) -> Path:
    """Give a finished temporary file (or folder) the mode a plain `open()` would have, then rename it
    into place. `mkstemp` creates files 0600 whatever the umask; artifacts must stay readable by the
    colleagues the caller's umask admits (0644 under umask 022)."""
    mode = (0o777 if Path(tmp).is_dir() else 0o666) & ~current_umask()
    os.chmod(tmp, mode)
    os.replace(tmp, path)
    return Path(path)


def remove_temps(folder: str | Path) -> list[Path]:
    """Remove the temporary files a killed writer left anywhere under `folder` (call it only where no other
    process writes at the time, e.g. an output folder its one writer is about to fill); returns them."""
    gone = []
    for p in Path(folder).rglob(f".*{TEMP_SUFFIX}"):
        if p.is_file() and is_temp(p):
            p.unlink(missing_ok=True)
            gone.append(p)
    return gone


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Run `write(tmp)` on a temporary path beside `path`, then `publish` it as `path`; on any error the
    temporary file is removed and `path` is left as it was (a full disk: rcea.diskfull.DiskFull, naming the folder,
    the space left and what the write needed). Every artifact of the project goes through here.
    (A kill -9 leaves the temporary file, `is_temp`: readers skip such names, `remove_temps` clears them.)"""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        publish(tmp, path)
    except BaseException as exc:
        written = Path(tmp).stat().st_size if Path(tmp).exists() else 0
        Path(tmp).unlink(missing_ok=True)
        from rcea.diskfull import DiskFull, cause, size

        if isinstance(exc, Exception) and not isinstance(exc, DiskFull) and cause(exc, [path.parent]):
            raise DiskFull(path.parent, f"{path.name} needs more than the {size(written)} written") from exc
        raise
    return path


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    return atomic_write(Path(path), write)


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> Path:
    return atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_manifest(artifact: str | Path, cfg=None, seeds: dict | None = None, files: dict | None = None,
                   **extra: Any) -> Path:
    """Record where an artifact came from, and its size and SHA-256 (a file; `files`: those of a folder's files,
    `folder_records`); written last, so its presence marks completion, and the sizes tell a damaged copy."""
    from rcea.provenance import provenance

    record = {"artifact": Path(artifact).name, **provenance(), "seeds": seeds or {}, **extra}
    if Path(artifact).is_file():
        record.update(file_record(artifact))
    if files is not None:
        record["files"] = files
    if cfg is not None:   # the settings themselves: a reader (the aggregation) uses those the artifact was made with
        record.update(config_hash=cfg.hash(), scale=cfg.scale, method=cfg.method,
                      settings={k: v["value"] for k, v in cfg.to_dict()["settings"].items()})
    return atomic_write_json(manifest_path(artifact), record)


def is_complete(artifact: str | Path) -> bool:
    """The artifact and its manifest exist, and the artifact has the size its manifest records (a manifest
    written before sizes were recorded holds none: then existence is enough)."""
    artifact = Path(artifact)
    if not (artifact.exists() and manifest_path(artifact).exists()):
        return False
    size = (read_manifest(artifact) or {}).get("size")
    return size is None or not artifact.is_file() or artifact.stat().st_size == size


def checkpoint_complete(folder: str | Path) -> bool:
    """The one definition of a complete training checkpoint (training resumes from it, measurements read it):
    the manifest of its trainer state, which the trainer writes after every other file of the checkpoint
    (train/run.py), and its adapter files (or, imported from an outside run, a full model's config.json and
    weights: infer/outside.py) still there."""
    return not why_incomplete(Path(folder))


class DamagedRun(FileNotFoundError):
    """A finished training run lost part of a checkpoint: its measurements would mix checkpoints. (A
    FileNotFoundError, as `python -m infer plan` reports a run with no checkpoints: in one line.)"""


def why_incomplete(folder: Path) -> str:
    """What a checkpoint folder lacks ('' when it is complete: `checkpoint_complete`)."""
    from rcea.layout import TRAINER_STATE

    if not folder.is_dir():
        return "folder missing"
    if not (folder / TRAINER_STATE).exists():
        return f"{TRAINER_STATE} missing"
    if not manifest_path(folder / TRAINER_STATE).exists():
        return f"{manifest_path(folder / TRAINER_STATE).name} missing"
    bad = damaged_files(folder, read_manifest(folder / TRAINER_STATE))
    if bad:
        return DAMAGED + "; ".join(bad)
    adapter = (folder / "adapter_config.json").exists() and any(folder.glob("adapter_model.*"))
    full = (folder / "config.json").exists() and any([*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")])
    if not adapter and not full:
        return "adapter files missing"
    return ""


def _check_finished_run(folder: Path) -> None:
    """A finished run (its summary.json complete) must still hold every checkpoint it ended with, complete; else
    DamagedRun naming the run, the checkpoints and the fix. A checkpoint lost after the run finished would
    otherwise be skipped silently, and the measurements planned from the others mix the old and the new."""
    run = folder.parent
    summary = run / "summary.json"
    if not is_complete(summary):
        return
    try:
        listed = {Path(p).name for p in json.loads(summary.read_text()).get("checkpoints", [])}
    except (OSError, ValueError, AttributeError, TypeError):
        listed = set()
    names = listed | {d.name for d in folder.glob("checkpoint-*") if re.fullmatch(r"checkpoint-\d+", d.name)}
    bad = {n: why_incomplete(folder / n) for n in sorted(names, key=lambda n: int(n.split("-")[1]))}
    bad = {n: why for n, why in bad.items() if why}
    if not bad:
        return
    damaged = [n for n, why in bad.items() if why.startswith(DAMAGED)]
    if damaged:   # a file of the checkpoint differs from its manifest: that checkpoint is remade, and those after it
        first = folder / damaged[0]
        raise DamagedRun(f"{first} is damaged ({bad[damaged[0]][len(DAMAGED):]}): {damage_fix(first)}")
    where = ""
    if run.parent.parent.name == "train":   # the default layout: the run's table parts live under infer/<scale>/
        from rcea.layout import tables_dir

        where = f" and its table parts ({tables_dir(run.parent.name, run.parent.parent.parent)}/*/*-{run.name}-*)"
    raise DamagedRun(f"{run} finished, but " + ", ".join(f"{n} is incomplete ({why})" for n, why in bad.items())
                     + f"; its checkpoints can no longer all be measured: remove {run}{where} and rerun the same "
                     "command (training and its measurements are redone)")


def complete_checkpoints(folder: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint (`checkpoint_complete`) named checkpoint-<step> in a run's
    checkpoints folder, by step; none when the folder does not exist. In a finished run (summary.json complete)
    every checkpoint must be complete: DamagedRun otherwise (never a silently shorter list)."""
    folder = Path(folder)
    _check_finished_run(folder)
    found = []
    for d in folder.glob("checkpoint-*"):
        m = re.fullmatch(r"checkpoint-(\d+)", d.name)
        if m and checkpoint_complete(d):
            found.append((int(m.group(1)), d))
    return sorted(found)


def job_complete(kind: str, payload: dict, root: str | Path | None = None) -> bool:
    """The one definition of a finished measurement job: every table part of its kind is complete
    (rcea.layout.job_parts). The queue's "done" flag and the engines' skip both defer to it."""
    from rcea.layout import job_parts

    return all(is_complete(p) and _made_with(p, payload.get("config_hash")) for p in job_parts(kind, payload, root))


def _made_with(artifact: Path, config_hash: str | None) -> bool:
    """Whether a part was written under the settings of `config_hash` (its manifest's): a part of other
    settings (the quick demo's, another override) is not this job's output. No hash asked: any."""
    if config_hash is None:
        return True
    try:
        return json.loads(manifest_path(artifact).read_text()).get("config_hash") == config_hash
    except (OSError, ValueError):
        return False


def write_parquet(df, path: str | Path, cfg=None, seeds: dict | None = None, **extra: Any) -> Path:
    """Write a DataFrame as Parquet atomically, then its manifest."""
    path = Path(path)
    atomic_write(path, lambda tmp: df.to_parquet(str(tmp), index=False, filesystem=_arrow_local_fs()))
    write_manifest(path, cfg=cfg, seeds=seeds, rows=int(len(df)), **extra)
    return path


def _arrow_local_fs():
    import pyarrow.fs

    return pyarrow.fs.LocalFileSystem()


def read_parquet(path: str | Path, **kwargs):
    """`pandas.read_parquet` of a local file, by path through Arrow's own filesystem.

    Given a plain local path, pandas opens a Python file object and hands it to Arrow, whose I/O
    threads then read through Python; such processes aborted at exit ("terminate called without an
    active exception", SIGABRT) in 5 to 11 runs of 60 on a loaded machine, none when Arrow is
    given the path (scripts/faults/parquet_exit.py). Every project read of Parquet goes through here.
    """
    import pandas as pd

    return pd.read_parquet(str(path), filesystem=_arrow_local_fs(), **kwargs)


def read_table(location: str | Path):
    """A Parquet file, or a folder of Parquet parts (only parts with a manifest when any has one)."""
    import pandas as pd

    location = Path(location)
    if location.is_file():
        return read_parquet(location)
    if not location.is_dir():
        raise FileNotFoundError(f"no table at {location} (expected a .parquet file or a folder of parts)")
    parts = sorted(location.glob("*.parquet"))
    if any(manifest_path(p).exists() for p in parts):
        parts = [p for p in parts if manifest_path(p).exists()]
    if not parts:
        raise FileNotFoundError(f"{location} holds no Parquet parts")
    return pd.concat([read_parquet(p) for p in parts], ignore_index=True)


def run_step(artifact: str | Path, produce: Callable[[Path], None], cfg=None, seeds: dict | None = None,
             **extra: Any) -> bool:
    """Run `produce(tmp_path)` unless `artifact` is complete; returns True when it ran.

    `produce` writes to the temporary path it is given; the result is renamed into place and the
    manifest written after it, so a killed step leaves nothing that looks complete.
    """
    artifact = Path(artifact)
    if is_complete(artifact):
        return False
    atomic_write(artifact, produce)
    write_manifest(artifact, cfg=cfg, seeds=seeds, **extra)
    return True


class FolderBusy(RuntimeError):
    """Another process holds the folder's lock; the message names it."""


class folder_lock:
    """`with folder_lock(folder / RUN_LOCK):` an exclusive lock (flock) on a file, or FolderBusy naming the
    holder (pid, host, command, since when) as it wrote itself into the file. The kernel drops the lock when
    its holder exits or is killed, so a stale file never blocks a rerun. (flock is per host: on a network
    folder shared by several nodes it may not exclude a process on another node.)"""

    def __init__(self, path: str | Path):
        self.path, self.fh = Path(path), None

    def __enter__(self):
        import fcntl
        import socket
        import sys
        import time

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise FolderBusy(f"{self.path.parent} is in use by {holder}") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')} "
                 f"({' '.join(sys.argv)[:300]})\n")
        fh.flush()
        self.fh = fh
        return self

    def __exit__(self, *exc) -> None:
        self.fh.seek(0)
        self.fh.truncate()
        self.fh.close()   # closing drops the lock
        self.fh = None
