"""The file checks of `python -m infer.outside` (infer/outside.py): every file a checkpoint of an outside run needs
is whole before anything is imported or queued; the base model given is hashed (weights_sha256) and, when it is
not the scale's base and --base-differs is given, copied into the data folder for the jobs to load (store_base).

- a JSON file (config.json, adapter_config.json, generation_config.json, trainer_state.json, tokenizer.json)
  must parse as a JSON object: a truncated or random one is refused;
- a safetensors file must hold its header (8-byte little-endian length, then a JSON object of tensors with
  their byte ranges) and exactly the bytes that header describes: a half-copied or random file is refused;
- a PyTorch .bin file must be a whole zip archive (torch.save's format; a truncated one lacks its directory);
- a checkpoint still being written: once any `checkpoint-<N>` folder of the run (Transformers' Trainer) holds
  `trainer_state.json`, which the Trainer writes after the weights, one that lacks it is taken as not yet complete.

Standard library only (json, re, struct, zipfile, hashlib)."""

from __future__ import annotations

import hashlib
import json
import re
import struct
import zipfile
from pathlib import Path

from rcea.integrity import hash_into

JSON_FILES = ("config.json", "adapter_config.json", "generation_config.json", "trainer_state.json",
              "tokenizer.json", "tokenizer_config.json")
STATE = "trainer_state.json"   # what Transformers' Trainer writes last into a checkpoint


def json_problem(path: Path) -> str:
    """Why a JSON file is unusable ('' when it holds a JSON object)."""
    try:
        obj = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        return f"{path.name} is not valid JSON ({type(exc).__name__}: {str(exc)[:80]})"
    return "" if isinstance(obj, dict) else f"{path.name} holds a JSON {type(obj).__name__}, not an object"


def safetensors_problem(path: Path) -> str:
    """Why a safetensors file is unusable ('' when its header parses and its size is what the header says)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path.name} is {size} bytes, too short for a safetensors header"
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                return f"{path.name} is not a whole safetensors file (header of {n} bytes in a {size}-byte file)"
            header = json.loads(fh.read(n))
    except (OSError, ValueError) as exc:
        return f"{path.name} is not a safetensors file (unreadable header: {type(exc).__name__})"
    if not isinstance(header, dict):
        return f"{path.name} is not a safetensors file (its header is not an object)"
    ends = [t.get("data_offsets", [0, 0])[1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    want = 8 + n + max(ends, default=0)
    if want != size:
        return f"{path.name} is {size} bytes but its header describes {want}: cut short or still being copied"
    return ""


def bin_problem(path: Path) -> str:
    if path.name.endswith(".bin") and not zipfile.is_zipfile(path):
        return f"{path.name} is not a whole PyTorch weights file (no zip directory: cut short or still being copied)"
    return ""


def _needed(p: Path) -> bool:
    """A file the import copies or checks: the adapter's, a full model's config and weights, the trainer state,
    the tokenizer (compared with the base's). The optimizer's and scheduler's files are not read."""
    return (p.name in JSON_FILES or p.name.startswith("adapter_model") or p.suffix == ".safetensors"
            or p.name.endswith(".index.json") or (p.name.startswith("pytorch_model") and p.name.endswith(".bin")))


def folder_problem(d: Path) -> str:
    """The first unusable file of a checkpoint folder ('' when every file it needs is whole)."""
    for p in sorted(d.iterdir()):
        if not p.is_file() or not _needed(p):
            continue
        why = (json_problem(p) if p.name.endswith(".json")
               else safetensors_problem(p) if p.suffix == ".safetensors" else bin_problem(p))
        if why:
            return why
    return ""


def check_folders(found, error) -> None:
    """Raise `error` (one line) for the first checkpoint with an unusable file, or one still being written."""
    trainer = [f for f in found if re.fullmatch(r"checkpoint-\d+", f.path.name)]   # Transformers' own folders
    with_state = [f for f in trainer if (f.path / STATE).exists()]
    for f in found:
        why = folder_problem(f.path)
        if not why and with_state and f in trainer and not (f.path / STATE).exists():
            why = (f"it has no {STATE}, which the trainer writes last and {with_state[0].path.name} has: it is "
                   "still being written or copied")
        if why:
            raise error(f"checkpoint {f.path} (step {f.step}): {why}; wait until it is complete, copy it again, or "
                        "move that folder out of the run's folder")


def weights_sha256(folder: str | Path) -> str:
    """One SHA-256 over a model folder's weight files (name and bytes, by name): two folders of the same weights,
    saved the same way, give the same hash."""
    folder, digest = Path(folder), hashlib.sha256()
    files = sorted([*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")])
    for p in files:
        digest.update(p.name.encode() + b"\0")
        hash_into(digest, p)
    return digest.hexdigest() if files else ""


def store_base(given: str | Path, sha: str, root=None) -> str:
    """A copy of the base model folder `given` (its top-level files: config, weights, tokenizer) in the data
    folder, where every worker reads, under models/outside-base-<first 12 hex of its weights' SHA-256>; returns
    that folder relative to the data folder (what the jobs' payloads carry: infer.plan). Copied into a temporary
    folder, its weights' hash checked against `sha`, then renamed into place: the folder exists only whole. A
    folder already there (another outside run of the same base) is kept."""
    import os
    import shutil

    from rcea import layout

    name = f"outside-base-{sha[:12]}"
    dst = layout.models_dir(name, root)
    if (dst / "config.json").exists():
        return str(layout.models_dir(name, ""))   # relative to the data folder
    tmp = dst.with_name(f".{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        for p in sorted(Path(given).iterdir()):
            if p.is_file():
                shutil.copy2(p, tmp / p.name)
        if weights_sha256(tmp) != sha:
            raise OSError(f"the copy of {given} in {tmp.parent} holds other weights than {given} (sha256 "
                          f"{weights_sha256(tmp)[:12]} vs {sha[:12]}): it changed while copied")
        try:
            os.replace(tmp, dst)
        except OSError:
            if not (dst / "config.json").exists():   # else another process of the same base renamed its copy first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return str(layout.models_dir(name, ""))   # relative to the data folder
