"""Rebuild the shipped tiny warm start from its recipe and compare it (`scripts/run warm-start`).

Kept apart from rcea.warmstart: building the base model needs rcea.tiny, which itself uses rcea.warmstart to
copy or train the warm start, so one module holding both would import in a circle."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rcea.warmstart import (PREFIX_STEPS, RECORD, SHIPPED_DIR, TOLERANCE, _base_hashes, fingerprint,
                            fingerprints_close, max_abs_diff, sha256, warm_spec, warm_start)


def rebuild(cfg, work: Path, steps: int | None = None) -> tuple[Path, dict]:
    """Build the base model and the warm start (all of it, or its first `steps` steps) under `work`."""
    from rcea.tiny import build_tiny_base, tiny_spec

    base = build_tiny_base(cfg, work / "base")   # what rcea.tiny.ensure_tiny_model builds and records
    (base / "build.json").write_text(json.dumps(tiny_spec(cfg)))
    return warm_start(base, work / "warm", cfg, progress=steps is None, stop_after=steps), _base_hashes(base)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rcea.warmstart_rebuild", description=(
        "Rebuild the tiny warm start from its recipe and compare it with the shipped one (rcea/frozen/)."))
    ap.add_argument("--rebuild", action="store_true", help="retrain in a temporary folder and compare (required)")
    ap.add_argument("--steps", type=int, default=0, help=f"stop after N steps and compare with the recorded "
                    f"{PREFIX_STEPS}-step fingerprint (N must be {PREFIX_STEPS}); 0: the whole warm start")
    ap.add_argument("--write", action="store_true", help="replace the shipped files and record with the rebuild")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE, help="largest weight difference accepted")
    args = ap.parse_args(argv)
    if not args.rebuild or args.steps not in (0, PREFIX_STEPS) or (args.write and args.steps):
        ap.error(f"use --rebuild [--write] or --rebuild --steps {PREFIX_STEPS}")
    from rcea.config import load_config

    cfg = load_config("tiny")
    record_path = SHIPPED_DIR / RECORD
    record = json.loads(record_path.read_text()) if record_path.exists() else None
    with tempfile.TemporaryDirectory(prefix="warm-start-") as tmp:
        t0 = time.time()
        warm, base_sha = rebuild(cfg, Path(tmp), args.steps or None)
        took = time.time() - t0
        if args.steps:
            same = record is not None and sha256(warm / "model.safetensors") == record.get("prefix_sha256")
            ok = same or record is not None and fingerprints_close(fingerprint(warm), record["prefix_fingerprint"])
            print(f"[warm start] {args.steps}-step rebuild in {took:.0f}s: "
                  + ("byte-identical to the recorded one" if same else
                     f"fingerprint {'within the tolerance of' if ok else 'DIFFERS from'} the record"), flush=True)
            return 0 if ok else 1
        if args.write:
            prefix, _ = rebuild(cfg, Path(tmp) / "prefix", PREFIX_STEPS)
            SHIPPED_DIR.mkdir(parents=True, exist_ok=True)
            names = sorted(p.name for p in warm.iterdir() if p.is_file())
            for old in SHIPPED_DIR.iterdir():
                old.unlink()
            for name in names:
                shutil.copyfile(warm / name, SHIPPED_DIR / name)
            new = {"spec": warm_spec(cfg, Path(tmp) / "base"), "base_sha256": base_sha,
                   "files": {n: sha256(SHIPPED_DIR / n) for n in names},
                   "prefix_steps": PREFIX_STEPS, "prefix_fingerprint": fingerprint(prefix),
                   "prefix_sha256": sha256(prefix / "model.safetensors"),
                   "rebuild": "scripts/run warm-start  (python -m rcea.warmstart_rebuild --rebuild)",
                   "build_seconds": round(took)}
            (SHIPPED_DIR / RECORD).write_text(json.dumps(new, indent=1, sort_keys=True) + "\n")
            print(f"[warm start] wrote {len(names)} files to {SHIPPED_DIR} ({took:.0f}s)", flush=True)
            return 0
        if record is None:
            print(f"[warm start] no shipped warm start to compare with ({record_path})", file=sys.stderr)
            return 1
        same = {n: sha256(warm / n) == d for n, d in record["files"].items() if (warm / n).exists()}
        diff = max_abs_diff(warm, SHIPPED_DIR)
        ok = all(same.values()) and len(same) == len(record["files"]) or diff <= args.tolerance
        print(f"[warm start] rebuilt in {took:.0f}s: "
              + ("byte-identical to the shipped files" if all(same.values()) else
                 f"files differing: {[n for n, s in same.items() if not s]}; largest weight difference {diff:.3g} "
                 f"({'within' if diff <= args.tolerance else 'ABOVE'} the tolerance {args.tolerance:g})"), flush=True)
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
