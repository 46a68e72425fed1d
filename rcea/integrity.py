"""Manifests and temporary files by name, and the sizes and SHA-256 of artifacts and checkpoints: what a manifest
records (rcea.store.write_manifest), what the completeness checks compare (sizes), what a measurement verifies
before it loads a checkpoint (hashes), and the one-line fix for a damaged checkpoint. Standard library only."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

MANIFEST_SUFFIX = ".manifest.json"

TEMP_SUFFIX = ".tmp"   # atomic_write's temporary files: .<name>.<random>.tmp beside the target


def is_temp(path: str | Path) -> bool:
    """Whether `path` is named as atomic_write names its temporary files (left behind only by a killed writer)."""
    name = Path(path).name
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def manifest_path(artifact: str | Path) -> Path:
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + MANIFEST_SUFFIX)


def read_manifest(artifact: str | Path) -> dict | None:
    """An artifact's manifest (None: none, or unreadable)."""
    try:
        record = json.loads(manifest_path(artifact).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def hash_into(digest, path: str | Path):
    """`digest` updated with the bytes of one file, read in 1 MiB blocks; returns `digest`."""
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest


def file_record(path: str | Path) -> dict:
    """{"size": bytes, "sha256": hex digest} of one file."""
    return {"size": os.path.getsize(path), "sha256": hash_into(hashlib.sha256(), path).hexdigest()}


def folder_records(folder: str | Path) -> dict[str, dict]:
    """`file_record` of every file below `folder` (relative names), but manifests and temporary files."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): file_record(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.endswith(MANIFEST_SUFFIX) and not is_temp(p)}


TRAINING_ONLY = ("optimizer", "scheduler", "rng_state", "scaler", "training_args", "rcea_trainer_state")
# files of a checkpoint only a resumed training reads (Transformers' and train/trainer.py's): a measurement
# compares their sizes, and hashes only the files it loads


def damaged_files(folder: str | Path, record: dict | None, hashes: bool = False) -> list[str]:
    """What differs from the files a folder's manifest `record` lists ("name: why"), by size, and by SHA-256
    too when `hashes` (not the TRAINING_ONLY files). A record without `files` (written before they were
    recorded) lists nothing to check."""
    folder, bad = Path(folder), []
    for name, want in sorted(((record or {}).get("files") or {}).items()):
        path = folder / name
        if not path.is_file():
            bad.append(f"{name}: missing")
        elif path.stat().st_size != want.get("size"):
            bad.append(f"{name}: {path.stat().st_size} bytes, its manifest says {want.get('size')}")
        elif (hashes and want.get("sha256") and not Path(name).name.startswith(TRAINING_ONLY)
              and file_record(path)["sha256"] != want["sha256"]):
            bad.append(f"{name}: its SHA-256 differs from its manifest's")
    return bad


DAMAGED = "damaged: "   # why_incomplete's reason for a file that differs from the checkpoint's manifest


def damage_fix(ckpt: Path) -> str:
    """The fix for a damaged checkpoint: delete it, the checkpoints after it and the run's summary, and rerun:
    training resumes from the checkpoint before (remaking the same checkpoints: a resumed run is the same run).
    An imported outside run's checkpoint is copied again by `invoke measure-run`."""
    ckpt = Path(ckpt)
    record = read_manifest(ckpt / _trainer_state()) or {}
    if record.get("imported_from"):
        return (f"delete {ckpt} and rerun `invoke measure-run` (it copies the checkpoint again from "
                f"{record['imported_from']})")
    step = _step_of(ckpt)
    steps = sorted(s for s in (_step_of(d) for d in ckpt.parent.glob("checkpoint-*")) if s is not None)
    later = [ckpt.parent / f"checkpoint-{s}" for s in steps if step is not None and s > step]
    summary = ckpt.parent.parent / "summary.json"
    gone = [ckpt, *later, *[p for p in (summary, manifest_path(summary)) if p.exists()]]
    before = [s for s in steps if step is not None and s < step]
    resumes = f"training resumes from checkpoint-{before[-1]}" if before else "training starts again from step 0"
    return f"rm -r {' '.join(map(str, gone))} and rerun the same command ({resumes})"


def _trainer_state() -> str:
    from rcea.layout import TRAINER_STATE

    return TRAINER_STATE


def _step_of(ckpt: Path) -> int | None:
    m = re.fullmatch(r"checkpoint-(\d+)", Path(ckpt).name)
    return int(m.group(1)) if m else None


def verify_checkpoint(ckpt: str | Path) -> str:
    """'' when every file a checkpoint's manifest lists has its recorded size and SHA-256 (what a measurement
    checks before it loads the checkpoint), else one line naming the damaged files and the fix."""
    ckpt = Path(ckpt)
    bad = damaged_files(ckpt, read_manifest(ckpt / _trainer_state()), hashes=True)
    if not bad:
        return ""
    return f"{ckpt} is damaged ({'; '.join(bad)}): {damage_fix(ckpt)}"
