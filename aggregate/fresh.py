"""Whether an aggregation's outputs are still those of its inputs (`python -m aggregate --if-changed`, the study's).

A run records, beside its output folder (`.<output name>.aggregate.json` in the folder above, so that rcea.publish
never copies it), a fingerprint of everything the outputs are made from and the size of every file it wrote.
A later run with `--if-changed` whose fingerprint is the same and whose outputs are all still there keeps them and
says so, without reading a table (a pass over a complete study spends its time importing pandas and matplotlib
and recomputing the bootstrap otherwise). The fingerprint covers:

    the command line and the resolved [aggregate] settings ($RCEA_OVERRIDES and configs/ included)
    the content of every file under the study's infer/<scale>/ (the tables, the labels, the judge calibration,
        the audit), or of the --input folder when it is not a study's; in a part's manifest the times it was
        written and labelled are left out (the judge and modes stages rewrite the same parts on every pass)
    the size and modification time of every file under train/<scale>/ (logs, manifests, checkpoints: complete
        runs are never rewritten) and of the code (aggregate/, rcea/), the configs and the environment
    the content of the seed-noise results in the output folder (seeds-*.json), which the report reads

Any change there (a part added, replaced or removed, a setting, the code) makes the run recompute everything.
Standard library only: it runs before the heavy imports.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path

VERSION = 1
VOLATILE = ("written_at", "at")   # manifest keys that change on a rewrite of the same content


def stamp_path(out: Path) -> Path:
    out = Path(out).resolve()
    return out.parent / f".{out.name}.aggregate.json"


def _files(root: Path):
    from rcea.integrity import is_temp

    if root.is_file():
        yield root
    elif root.is_dir():
        yield from sorted(p for p in root.rglob("*") if p.is_file() and not is_temp(p))


def _strip(x):
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in VOLATILE}
    return [_strip(v) for v in x] if isinstance(x, list) else x


def _content(path: Path) -> str:
    if path.name.endswith(".manifest.json"):
        try:
            return json.dumps(_strip(json.loads(path.read_text())), sort_keys=True)
        except (OSError, ValueError):
            pass
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _study(inputs: Path) -> tuple[Path, str] | None:
    """(data folder, scale) when `inputs` is a study's tables folder (as aggregate.context.study_root)."""
    from rcea import layout

    if len(inputs.parents) < 3:
        return None
    root, scale = inputs.parents[2], inputs.parent.name
    return (root, scale) if layout.tables_dir(scale, root).resolve() == inputs else None


def fingerprint(args, settings, inputs, out) -> str:
    """The hex digest of everything `python -m aggregate` with `args` and `settings` makes its outputs from."""
    from rcea import layout
    from rcea.paths import project_root

    inputs, out = Path(inputs).resolve(), Path(out).resolve()
    h = hashlib.sha256()

    def add(*item) -> None:
        h.update(json.dumps(item, sort_keys=True, default=str).encode())
        h.update(b"\n")

    add(VERSION, {k: v for k, v in vars(args).items() if k != "if_changed"}, asdict(settings),
        os.environ.get("RCEA_OVERRIDES", ""), sys.version, sys.prefix)
    study = _study(inputs)
    content = [layout.infer_dir(study[1], study[0])] if study else [inputs]
    code = Path(__file__).resolve().parents[1]
    stat = [*([layout.run_dir(study[1], "-", study[0]).parent] if study else []), code / "aggregate", code / "rcea",
            project_root() / "configs", Path(sys.prefix) / "pyvenv.cfg"]
    for root in content:
        for p in _files(root):
            add("content", str(p.relative_to(root)) if p != root else p.name, _content(p))
    for p in sorted(out.glob("seeds-*.json")):
        add("seeds", p.name, _content(p))
    for root in stat:
        for p in _files(root):
            if "__pycache__" not in p.parts:
                s = p.stat()
                add("stat", str(p), s.st_size, s.st_mtime_ns)
    return h.hexdigest()


def kept(out, digest: str) -> dict | None:
    """The record of the last run into `out` when it was made from the same inputs (`digest`) and every file it
    wrote is still there, at its size; else None (recompute)."""
    out = Path(out)
    try:
        rec = json.loads(stamp_path(out).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("fingerprint") != digest or "report.md" not in rec.get("outputs", {}):
        return None
    for name, size in rec["outputs"].items():
        p = out / name
        if not p.is_file() or p.stat().st_size != size:
            return None
    return rec


def record(out, digest: str, terminal: str, note: str = "") -> None:
    """After a run: its fingerprint, what it wrote (each file's size) and what it printed, written last. A record
    that cannot be written (a folder above the outputs that is not this user's, a full disk) is left out: the
    next run then recomputes, nothing else changes."""
    from rcea.store import atomic_write

    out = Path(out)
    outputs = {str(p.relative_to(out)): p.stat().st_size for p in _files(out)}
    text = json.dumps({"fingerprint": digest, "outputs": outputs, "terminal": terminal, "note": note}, indent=1)
    try:
        atomic_write(stamp_path(out), lambda tmp: tmp.write_text(text, encoding="utf-8"))
    except OSError:
        pass


def forget(out) -> None:
    """Before a run recomputes: the last run's record goes (a run killed midway leaves none: the next recomputes)."""
    try:
        stamp_path(out).unlink(missing_ok=True)
    except OSError:
        pass
