"""Measure a run this harness did not train (docs/outside-runs.md): find its checkpoints, check them against the
base model, bring them into the store as run `<name>`, and queue the measurement jobs of the study's kinds.

Accepted layouts (TRL, verl's Hugging Face export, OpenRLHF), anywhere below the folder given:
  * a PEFT adapter folder (adapter_config.json + adapter_model.*): measured as a LoRA adapter over the base;
  * a full model folder (config.json + *.safetensors / pytorch_model*.bin; a merged checkpoint, verl's Hugging
    Face export): measured as the model itself (no adapter), with the base's tokenizer and stop set;
with the step in the folder's name or an ancestor's below the given folder (checkpoint-<N>, global_step_<N>,
global_step<N>, step<N>, step_<N>), else `global_step` of the folder's trainer_state.json.

Every checkpoint is checked before anything is written or queued: a full model's config (model_type,
architectures, vocab_size, hidden_size, num_hidden_layers) must equal the base's, and an adapter's LoRA weights
must fit the base's shapes, layer count and vocabulary; a tokenizer.json saved with a checkpoint must equal the
base's. A mismatch ends in one line naming the checkpoint and the fix.

Imported checkpoints live under train/<scale>/<name>/checkpoints/checkpoint-<N>/ (an adapter's files, or a full
model's config, generation config and weights, copied; the completion manifest says where they came from). The
jobs of a full model's checkpoint name it as `model` in their payload (`adapter` None): infer/kinds/common.py. A steps.jsonl in the folder (train/callback.py RCEACallback)
is copied beside them: the aggregation's training-entropy trace and failure-window shares read it. A checkpoint
without a trainer_state.json gets one whose max_steps is the newest step found: the milestones (25/50/75/100%)
are then fractions of the checkpoints the folder holds.

The base: `--base` (default: the scale's base policy) is hashed (its weights' SHA-256). The same weights as the
scale's base: the jobs load the scale's base. Other weights are refused, unless --base-differs: then the base given
is copied into the data folder (models/outside-base-<hash>/), outside.json names it (`base_model`), and the run's
own jobs load it (infer.plan.outside_base, infer.worker.Context); the report names the run (aggregate/outside_bases.py).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

STEP_NAME = re.compile(r"(?:checkpoint|global_step|step)[-_]?(\d+)")
CONFIG_KEYS = ("model_type", "architectures", "vocab_size", "hidden_size", "num_hidden_layers")


class OutsideRunError(ValueError):
    """A folder that cannot be measured as an outside run; the message is one line naming the fix."""


@dataclass(frozen=True)
class Found:
    path: Path
    step: int
    form: str          # "adapter" or "full"
    step_from: str     # "name" or "trainer_state.json"


def _weights(d: Path) -> list[Path]:
    """A full model folder's weight files (not TRL's training_args.bin or optimizer state)."""
    return sorted([*d.glob("*.safetensors"), *d.glob("pytorch_model*.bin")])


def _model_file(p: Path) -> bool:
    """A file of a full model that the engines load: its config, generation config and weights (with their
    index); the tokenizer is the base's."""
    return (p.name in ("config.json", "generation_config.json") or p.suffix == ".safetensors"
            or (p.name.startswith("pytorch_model") and p.name.endswith((".bin", ".bin.index.json")))
            or p.name.endswith(".safetensors.index.json"))


def _step(d: Path, top: Path) -> tuple[int, str] | None:
    for part in [d, *d.parents]:
        if part == top.parent:
            break
        m = STEP_NAME.fullmatch(part.name)
        if m:
            return int(m.group(1)), "name"
    state = d / "trainer_state.json"
    if state.exists():
        try:
            return int(json.loads(state.read_text())["global_step"]), "trainer_state.json"
        except (ValueError, KeyError, TypeError):
            pass
    return None


def find_checkpoints(folder: str | Path) -> list[Found]:
    """Every adapter or full model folder below `folder` (itself included), by step."""
    top = Path(folder).resolve()
    if not top.is_dir():
        raise OutsideRunError(f"{folder}: not a folder; give the folder holding the run's checkpoints")
    found, seen = [], {}
    for d in sorted([top, *(p for p in top.rglob("*") if p.is_dir())]):
        if (d / "adapter_config.json").exists() and any(d.glob("adapter_model.*")):
            form = "adapter"
        elif (d / "config.json").exists() and _weights(d):
            form = "full"
        else:
            continue
        step = _step(d, top)
        if step is None:
            raise OutsideRunError(f"{d}: no step in its name (checkpoint-<N>, global_step_<N>, step<N>) or in a "
                                  "trainer_state.json; rename the folder checkpoint-<N>")
        if step[0] in seen:
            raise OutsideRunError(f"{d}: step {step[0]} again (also {seen[step[0]]}); keep one checkpoint per step")
        seen[step[0]] = d
        found.append(Found(d, step[0], form, step[1]))
    if not found:
        raise OutsideRunError(f"{folder}: no checkpoint found (a PEFT adapter folder with adapter_config.json, or a "
                              "model folder with config.json and weights); point at the run's output folder")
    return sorted(found, key=lambda f: f.step)


def _config(d: Path) -> dict:
    cfg = json.loads((d / "config.json").read_text())   # checked whole first (outside_files.check_folders)
    return {k: cfg.get(k) for k in CONFIG_KEYS}


def _adapter_mismatch(d: Path, base: dict, full: dict) -> str:
    """Why a PEFT adapter does not fit the base ('' when it does): its LoRA weights' shapes and layer indices."""
    from safetensors import safe_open

    files = sorted(d.glob("adapter_model.safetensors"))
    if not files:
        return ""   # a .bin adapter: its shapes are checked when the engine loads it
    dims = {full.get(k) for k in ("hidden_size", "intermediate_size")} - {None}
    heads, kv = full.get("num_attention_heads"), full.get("num_key_value_heads")
    head_dim = full.get("head_dim") or (full["hidden_size"] // heads if heads else None)
    if head_dim:
        dims |= {head_dim * heads, head_dim * (kv or heads)}
    layers = base["num_hidden_layers"]
    with safe_open(str(files[0]), framework="np") as fh:
        for key in fh.keys():
            m = re.search(r"layers\.(\d+)\.", key)
            if m and layers is not None and int(m.group(1)) >= layers:
                return f"has layer {m.group(1)} but the base has {layers} layers"
            shape = fh.get_slice(key).get_shape()
            if key.endswith(("embed_tokens.weight", "lm_head.weight")) and shape[0] != base["vocab_size"]:
                return f"{key} has {shape[0]} token rows but the base's vocabulary has {base['vocab_size']}"
            if "lora_A" in key and shape[-1] not in dims:
                return f"{key} takes inputs of width {shape[-1]}, which no layer of the base has"
            if "lora_B" in key and shape[0] not in dims:
                return f"{key} gives outputs of width {shape[0]}, which no layer of the base has"
    return ""


def _vocab(d: Path) -> dict | None:
    try:
        tok = json.loads((d / "tokenizer.json").read_text())
    except (OSError, ValueError):
        return None
    vocab = dict(tok.get("model", {}).get("vocab") or {})
    vocab.update({t["content"]: t["id"] for t in tok.get("added_tokens", []) if "content" in t and "id" in t})
    return vocab


def _tokenizer_mismatch(d: Path, base_dir: Path) -> str:
    """Why a checkpoint's saved tokenizer is not the base's ('' when equal, or when either saved none)."""
    theirs, ours = _vocab(d), _vocab(base_dir)
    if theirs is None or ours is None or theirs == ours:
        return ""
    return f"its tokenizer.json is not the base's ({len(theirs)} vs {len(ours)} tokens, or other token ids)"


def check_against_base(found: list[Found], base_dir: str | Path) -> None:
    """One clear line (OutsideRunError) for the first checkpoint of another architecture or vocabulary."""
    from infer.outside_files import check_folders, json_problem

    base_dir = Path(base_dir)
    if not (base_dir / "config.json").exists():
        raise OutsideRunError(f"{base_dir}: no config.json; --base must be the base model's folder")
    if json_problem(base_dir / "config.json"):
        raise OutsideRunError(f"{base_dir}: {json_problem(base_dir / 'config.json')}; --base must be the base "
                              "model's folder, whole")
    check_folders(found, OutsideRunError)   # every file needed whole, no checkpoint still being written
    full = json.loads((base_dir / "config.json").read_text())
    base = {k: full.get(k) for k in CONFIG_KEYS}
    for f in found:
        if f.form == "full":
            theirs = _config(f.path)
            diff = [f"{k} {theirs[k]!r} vs {base[k]!r}" for k in CONFIG_KEYS if theirs[k] != base[k]]
            why = "; ".join(diff)
        else:
            try:
                why = _adapter_mismatch(f.path, base, full)
            except Exception as exc:   # noqa: BLE001 (safetensors' own error type): the file is whole but unreadable
                why = f"its adapter_model.safetensors cannot be read ({type(exc).__name__}: {str(exc)[:80]})"
        why = why or _tokenizer_mismatch(f.path, base_dir)
        if why:
            raise OutsideRunError(f"checkpoint {f.path} (step {f.step}) is not of the base model {base_dir}: {why}; "
                                  "pass the --base this run was trained from, or drop that checkpoint")


def table(found: list[Found]) -> str:
    lines = [f"{'step':>8}  {'form':8} {'step from':20} folder"]
    lines += [f"{f.step:>8}  {f.form:8} {f.step_from:20} {f.path}" for f in found]
    return "\n".join(lines)


def base_record(given: str | Path, loaded: str | Path, differs_ok: bool = False) -> dict:
    """What the run is measured over: the `--base` given and the scale's base policy, each with the SHA-256 of its
    weights (infer.outside_files.weights_sha256). The same weights: the jobs load the scale's base. Other weights
    are refused (one line) unless `differs_ok` (--base-differs): then the jobs load the base given (`measured_over`;
    main copies it into the data folder, `base_model`), and the report names the run (aggregate/outside_bases.py)."""
    from infer.outside_files import weights_sha256

    same = Path(given).resolve() == Path(loaded).resolve()
    mine = weights_sha256(given)
    theirs = mine if same else weights_sha256(loaded)
    differs = mine != theirs
    if differs and not differs_ok:
        raise OutsideRunError(f"--base {given} holds other weights than the scale's base policy {loaded}, which the "
                              f"other runs are measured over (weights sha256 {mine[:12] or 'none'} vs "
                              f"{theirs[:12] or 'none'}); pass the base this run was trained from as the scale's base "
                              "(model.name, model.revision), or add --base-differs to measure it over the base given "
                              "(recorded with the run and named in the report)")
    over = (given, mine) if differs else (loaded, theirs)
    return {"base": str(given), "base_weights_sha256": mine, "measured_over": str(over[0]),
            "measured_over_weights_sha256": over[1], "scale_base": str(loaded), "scale_base_weights_sha256": theirs,
            "base_differs": differs}


def same_base_as_before(scale: str, name: str, base: dict, root=None) -> None:
    """Refuse (one line) to measure run `name` again over other weights than its outside.json records: the finished
    jobs and their tables would stay, labelled with the new base."""
    from rcea.layout import run_dir

    try:
        rec = json.loads((run_dir(scale, name, root) / "outside.json").read_text())
    except (OSError, ValueError):
        return
    before = rec.get("measured_over_weights_sha256") if isinstance(rec, dict) else None
    if isinstance(before, str) and before != base["measured_over_weights_sha256"]:
        raise OutsideRunError(f"run {name} was measured over {rec.get('measured_over')} (weights sha256 {before[:12]}), "
                              f"not over {base['measured_over']} ({base['measured_over_weights_sha256'][:12]}), and its "
                              f"tables would mix the two: give this measurement another --name, or remove "
                              f"train/{scale}/{name} and its table parts to measure it again")


def import_run(found: list[Found], source: Path, scale: str, name: str, root=None, base: dict | None = None) -> Path:
    """Copy the checkpoints into the store as run `name` (idempotent: a complete checkpoint is kept) and the run's
    steps.jsonl beside them, with `base` (base_record) in outside.json and each checkpoint's manifest, which lists
    every copied file's size and SHA-256; returns the run folder."""
    from rcea import layout
    from rcea.store import atomic_write_json, atomic_write_text, checkpoint_complete, folder_records, write_manifest

    run = layout.RunFolder(layout.run_dir(scale, name, root))
    last = max(f.step for f in found)
    for f in found:
        dst = run.checkpoint(f.step)
        if checkpoint_complete(dst):
            continue
        dst.mkdir(parents=True, exist_ok=True)
        wanted = (lambda p: p.name.startswith("adapter_")) if f.form == "adapter" else _model_file
        for p in f.path.iterdir():
            if p.is_file() and (wanted(p) or p.name == "trainer_state.json"):
                shutil.copy2(p, dst / p.name)
        if not (dst / "trainer_state.json").exists():   # the run's length (milestones): its newest checkpoint
            atomic_write_text(dst / "trainer_state.json", json.dumps({"global_step": f.step, "max_steps": last}))
        marker = dst / layout.TRAINER_STATE
        atomic_write_text(marker, "imported from an outside run: no trainer state\n")
        write_manifest(marker, step=f.step, imported_from=str(f.path), files=folder_records(dst), **(base or {}))
    logs = sorted(source.rglob("steps.jsonl"))
    if logs:
        atomic_write_text(run.steps_log, logs[0].read_text())
    if base is not None:
        atomic_write_json(run.path / "outside.json", {"source": str(source), **base})
    return run.path


def enqueue(scale: str, name: str, overrides: list[str]) -> list[dict]:
    """The study's jobs of the imported run (infer.plan.plan_jobs), queued like `python -m infer enqueue`."""
    from rcea.config import load_config
    from rcea.layout import state_path
    from rcea.paths import data_dir
    from rcea.store import job_complete

    from infer.plan import plan_jobs
    from infer.queue import Queue

    cfg = load_config(scale, None, overrides)
    jobs = plan_jobs(cfg, scale, name, "all", overrides)
    q = Queue(state_path(scale))
    for job in jobs:
        q.enqueue(job["key"], job["kind"], job["payload"], job["cost"],
                  complete=job_complete(job["kind"], job["payload"], data_dir()))
    return jobs


def main(argv: list[str] | None = None) -> int:
    from rcea.config import BASE_METHOD, METHODS, SCALES

    ap = argparse.ArgumentParser(prog="python -m infer.outside", description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="the outside run's output folder")
    ap.add_argument("--base", default=None, help="the base model's folder the run was trained from (default: the "
                    "scale's base policy, which the other runs are measured over)")
    ap.add_argument("--name", required=True, help="the run's label in the store and the report")
    ap.add_argument("--scale", default="tiny", choices=SCALES)
    ap.add_argument("--override", action="append", default=[], metavar="SECTION.KEY=VALUE")
    ap.add_argument("--check-only", action="store_true", help="find and check the checkpoints; queue nothing")
    ap.add_argument("--base-differs", action="store_true", help="measure over --base although its weights differ "
                    "from the scale's base policy (copied into the data folder, recorded with the run, named in the "
                    "report)")
    args = ap.parse_args(argv)
    try:
        if args.name in (*METHODS, BASE_METHOD) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", args.name):
            raise OutsideRunError(f"--name {args.name!r}: use a label of letters, digits, '-', '_' or '.' that is "
                                  f"not one of the study's methods ({', '.join((*METHODS, BASE_METHOD))})")
        found = find_checkpoints(args.folder)
        from rcea.config import load_config
        from rcea.tiny import model_path

        cfg = load_config(args.scale, None, args.override)   # $RCEA_OVERRIDES too: what its jobs run under
        given = args.base
        if given:   # the checkpoints first: the scale's base may still have to be built (model_path)
            check_against_base(found, given)
        loaded = model_path(cfg)   # what the jobs load
        args.base = given or loaded
        if not given:
            check_against_base(found, args.base)
        base = base_record(args.base, loaded, args.base_differs)
        same_base_as_before(args.scale, args.name, base)
    except (OutsideRunError, OSError) as exc:   # OSError: a file unreadable or gone while checked
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(found))
    print(f"base: {base['base']} (weights sha256 {base['base_weights_sha256'][:12]})" + (
        f"; --base-differs: measured over it, not over the scale's base {loaded} (weights sha256 "
        f"{base['scale_base_weights_sha256'][:12]})" if base["base_differs"] else ""))
    if args.check_only:
        return 0
    if base["base_differs"]:   # where every worker reads it (a container's --base mount is this process's only)
        from infer.outside_files import store_base

        try:
            base["base_model"] = store_base(args.base, base["base_weights_sha256"])
        except OSError as exc:
            print(f"error: copying --base {args.base} into the data folder: {exc}", file=sys.stderr)
            return 2
        print(f"the jobs load the copy of the base given in the data folder: {base['base_model']}")
    run = import_run(found, Path(args.folder), args.scale, args.name,
                     base={**base, "config_hash": cfg.hash(), "base_given": given})
    print(f"imported as {run}" + ("" if (run / "steps.jsonl").exists() else
                                  " (no steps.jsonl: no training-entropy trace or failure-window shares)"))
    jobs = enqueue(args.scale, args.name, args.override)
    print(f"queued {len(jobs)} jobs of run {args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
